// A Hugging Face model configuration (config.json) read into what oslo's
// model blocks need. Supported model types: gpt2, bert, llama, mistral,
// qwen2 (the last three share one block wiring: see core/model/sharding.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "oslo.h"

namespace oslo {

enum class Family { GPT2, BERT, LLAMA };
enum class Activation { GELU, GELU_TANH, SILU, RELU };

struct RopeConfig {
  double theta = 10000.0;
  std::string type = "default";  // default | linear | llama3
  double factor = 1.0;
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
  int64_t original_max_positions = 8192;                 // llama3
};

struct ModelConfig {
  std::string model_type;  // as in config.json
  Family family = Family::LLAMA;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t intermediate_size = 0;
  int64_t max_positions = 0;
  int64_t type_vocab_size = 0;  // BERT
  double norm_eps = 1e-5;
  Activation act = Activation::SILU;
  RopeConfig rope;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;  // LLaMA family: q/k/v projections have biases
  bool o_bias = false;
  bool mlp_bias = false;
  int64_t sliding_window = 0;  // 0: none
  std::vector<int64_t> eos_token_ids;
  int64_t bos_token_id = -1, pad_token_id = -1;
  std::string torch_dtype;  // "float32", "bfloat16", ... (empty if absent)
  std::string json_text;    // config.json verbatim

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
