// Gemma: model_type "gemma" (GemmaForCausalLM). Pre-RMSNorm scaling by
// (1 + weight) (computed in f32), token embeddings multiplied by
// sqrt(hidden_size), rotary positions, GeGLU (tanh GELU), grouped-query or
// multi-query attention with a head_dim of its own (not hidden / heads), and
// the LM head tied to the embeddings.
#include "core/common/error.hpp"
#include "core/model/arch/arch.hpp"

#include <cmath>

namespace oslo {
namespace arch {

namespace {

// LLaMA's table without MLP biases.
const std::vector<ShardRule> kRules = derive_rules(llama_rules(), {"gate_b", "up_b", "down_b"});

// The MLP activation. transformers 5 reads hidden_act and takes Gemma's
// "gelu" (what the released checkpoints say) for the tanh approximation;
// transformers 4.38-4.46 read hidden_activation (the Hub's configs carry
// "gelu_pytorch_tanh" there). Both spellings agree on every released
// checkpoint; a config where they disagree is refused.
Activation gemma_activation(const ConfigReader& rd) {
  std::string act = rd.string("hidden_act", "gelu_pytorch_tanh");
  if (act == "gelu") act = "gelu_pytorch_tanh";
  const Activation a = activation(act, rd.src);
  if (rd.has("hidden_activation")) {
    const std::string alt = rd.string("hidden_activation", "");
    OSLO_CHECK(activation(alt, rd.src) == a, OSLO_ERR_NOT_SUPPORTED, rd.src, ": hidden_act \"",
               rd.string("hidden_act", ""), "\" and hidden_activation \"", alt,
               "\" disagree (transformers 4.x used hidden_activation, 5.x hidden_act)");
  }
  return a;
}

// LLaMA's reader with Gemma's defaults (8192 positions, a head_dim of 256,
// tied embeddings), its activation, no mlp_bias; then its own traits.
void read_gemma(const ConfigReader& rd, ModelConfig* c) {
  LlamaLike f;
  f.max_positions = 8192;
  f.head_dim = 256;
  f.tied = true;
  f.activation = gemma_activation;
  f.mlp_bias_key = false;
  read_llama_like(rd, f, c);
  OSLO_CHECK(!rd.boolean("use_bidirectional_attention", false), OSLO_ERR_NOT_SUPPORTED, rd.src,
             ": use_bidirectional_attention is not supported (causal attention only)");
  BlockTraits& t = c->traits;
  t.norm_unit_offset = true;
  t.embed_scale = std::sqrt(static_cast<double>(c->hidden_size));
  // embed_padding_idx: GemmaScaledWordEmbedding(..., padding_idx), as LLaMA's
}

}  // namespace

extern const Arch kGemma = {"gemma", "GemmaForCausalLM", read_gemma, &kRules, "model."};

}  // namespace arch
}  // namespace oslo
