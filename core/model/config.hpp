// A Hugging Face model configuration (config.json) read into what oslo's
// model blocks need. Which model types exist, how each reads its config and
// how its blocks are wired is the architecture registry's business
// (core/model/arch/); this struct is what every family fills in.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "oslo.h"

namespace oslo {

enum class Activation { GELU, GELU_TANH, SILU, RELU };
enum class NormKind { LAYER_NORM, RMS_NORM };

// Frequency scaling of the rotary embedding (config.json's rope_type).
enum class RopeScaling {
  NONE,    // "default"
  LINEAR,  // "linear": every frequency divided by factor
  // "llama3": wavelengths beyond original_max_positions / low_freq_factor
  // divided by factor, those under original_max_positions / high_freq_factor
  // kept, the band between interpolated.
  WAVELENGTH_BANDS,
};

struct RopeConfig {
  double theta = 10000.0;
  RopeScaling scaling = RopeScaling::NONE;
  double factor = 1.0;
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // WAVELENGTH_BANDS
  int64_t original_max_positions = 8192;                 // WAVELENGTH_BANDS
};

// How a family's blocks are wired: everything Model builds its blocks from
// besides the tensors themselves (which slots exist, fused or not, biases or
// not, is in the family's sharding rules). Set by the family's config reader
// (core/model/arch/<family>.cpp); Model never asks which family it runs.
struct BlockTraits {
  // A decoder (causal attention, an LM head, generation) or an encoder
  // (bidirectional attention, hidden states and embeddings only).
  bool causal = true;
  NormKind norm = NormKind::LAYER_NORM;
  // RMSNorm scales by (1 + weight) instead of weight (the checkpoint stores
  // the offset-free weight).
  bool norm_unit_offset = false;
  // Norms after each residual add (x = norm(x + f(x)), the original
  // Transformer and BERT) instead of before each sub-block
  // (x = x + f(norm(x))).
  bool post_norm = false;
  // Attention and MLP read the same input and add to the same residual:
  // x = x + attn(norm1(x)) + mlp(norm2(x)) (GPT-NeoX's use_parallel_residual).
  bool parallel_residual = false;
  // Rotary position embedding on q and k (the `rope` settings), applied to
  // the first rotary_fraction * head_dim dimensions of each head (rounded
  // down to an even count), the rest pass unrotated.
  bool rotary = false;
  double rotary_fraction = 1.0;
  // MLP: act(gate) * up (SwiGLU, GeGLU) when true, else act(up).
  bool gated_mlp = false;
  // The token embeddings are multiplied by this (Gemma: sqrt(hidden)),
  // rounded to the embedding table's dtype as transformers does.
  double embed_scale = 1.0;
  // The model takes token_type_ids (BERT's segment embeddings).
  bool token_types = false;
  // transformers builds the token table as nn.Embedding(vocab, hidden,
  // padding_idx=config.pad_token_id): the pad row gets no gradient from the
  // lookup (a tied head's gradient still reaches it; weight decay still
  // moves it). LLaMA, Mistral, Qwen2, Phi-3, Gemma, BERT; not GPT-2 or
  // GPT-NeoX. ModelConfig::embed_pad_row is the row.
  bool embed_padding_idx = false;
};

struct ModelConfig {
  std::string model_type;  // as in config.json
  BlockTraits traits;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t intermediate_size = 0;
  int64_t max_positions = 0;
  int64_t type_vocab_size = 0;  // token types (traits.token_types)
  double norm_eps = 1e-5;
  Activation act = Activation::SILU;
  RopeConfig rope;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;  // separate or fused q/k/v projections have biases
  bool o_bias = false;    // attention output projection has a bias
  bool mlp_bias = false;
  int64_t sliding_window = 0;  // 0: none
  std::vector<int64_t> eos_token_ids;
  int64_t bos_token_id = -1, pad_token_id = -1;
  // The token table's row that gets no gradient from the lookup
  // (traits.embed_padding_idx and a pad_token_id in config.json, negative
  // ids counted from the end as torch does), -1 if none.
  int64_t embed_pad_row = -1;
  std::string torch_dtype;  // "float32", "bfloat16", ... (empty if absent)
  std::string json_text;    // config.json verbatim

  // Dimensions of each head the rotary embedding turns (0 without rotary).
  int64_t rotary_dims() const;

  // Parses config.json text. `source` names the file in error messages.
  // Errors: OSLO_ERR_FORMAT (invalid JSON, wrong types, missing or
  // non-positive sizes, heads that do not divide the hidden size),
  // OSLO_ERR_NOT_SUPPORTED (a model type or option oslo does not implement,
  // named).
  static ModelConfig parse(const std::string& text, const std::string& source);
  // Reads DIR/config.json (OSLO_ERR_IO if missing) and parses it.
  static ModelConfig read(const std::string& dir);
};

}  // namespace oslo
