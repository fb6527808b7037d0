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

constexpr bool T = true, F = false;
constexpr Dim V = Dim::VOCAB, H = Dim::HIDDEN, Q = Dim::Q, KV = Dim::KV, I = Dim::INTER;

const std::vector<ShardRule> kRules = {
    {"model.embed_tokens.weight", "wte", {V, H}, Cut::VOCAB, 0, F, F, When::ALWAYS},
    {"model.layers.{L}.input_layernorm.weight",
     "ln1_w",
     {H},
     Cut::REPLICATE,
     0,
     F,
     T,
     When::ALWAYS},
    {"model.layers.{L}.self_attn.q_proj.weight",
     "q_w",
     {Q, H},
     Cut::Q_HEADS,
     0,
     F,
     F,
     When::ALWAYS},
    {"model.layers.{L}.self_attn.q_proj.bias", "q_b", {Q}, Cut::Q_HEADS, 0, F, T, When::QKV_BIAS},
    {"model.layers.{L}.self_attn.k_proj.weight",
     "k_w",
     {KV, H},
     Cut::KV_HEADS,
     0,
     F,
     F,
     When::ALWAYS},
    {"model.layers.{L}.self_attn.k_proj.bias", "k_b", {KV}, Cut::KV_HEADS, 0, F, T, When::QKV_BIAS},
    {"model.layers.{L}.self_attn.v_proj.weight",
     "v_w",
     {KV, H},
     Cut::KV_HEADS,
     0,
     F,
     F,
     When::ALWAYS},
    {"model.layers.{L}.self_attn.v_proj.bias", "v_b", {KV}, Cut::KV_HEADS, 0, F, T, When::QKV_BIAS},
    {"model.layers.{L}.self_attn.o_proj.weight",
     "o_w",
     {H, Q},
     Cut::Q_HEADS,
     1,
     F,
     F,
     When::ALWAYS},
    {"model.layers.{L}.self_attn.o_proj.bias", "o_b", {H}, Cut::REPLICATE, 0, F, T, When::O_BIAS},
    {"model.layers.{L}.post_attention_layernorm.weight",
     "ln2_w",
     {H},
     Cut::REPLICATE,
     0,
     F,
     T,
     When::ALWAYS},
    {"model.layers.{L}.mlp.gate_proj.weight", "gate_w", {I, H}, Cut::EVEN, 0, F, F, When::ALWAYS},
    {"model.layers.{L}.mlp.up_proj.weight", "up_w", {I, H}, Cut::EVEN, 0, F, F, When::ALWAYS},
    {"model.layers.{L}.mlp.down_proj.weight", "down_w", {H, I}, Cut::EVEN, 1, F, F, When::ALWAYS},
    {"model.norm.weight", "norm_w", {H}, Cut::REPLICATE, 0, F, T, When::ALWAYS},
    {"lm_head.weight", "lm_head", {V, H}, Cut::VOCAB, 0, F, F, When::UNTIED},
};

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

void read_gemma(const ConfigReader& rd, ModelConfig* c) {
  c->hidden_size = rd.positive("hidden_size", 0);
  c->num_layers = rd.positive("num_hidden_layers", 0);
  c->num_heads = rd.positive("num_attention_heads", 0);
  c->num_kv_heads = rd.positive("num_key_value_heads", c->num_heads, false);
  c->head_dim = rd.positive("head_dim", 256, false);
  c->intermediate_size = rd.positive("intermediate_size", 0);
  c->max_positions = rd.positive("max_position_embeddings", 8192, false);
  c->norm_eps = rd.number("rms_norm_eps", 1e-6);
  c->act = gemma_activation(rd);
  c->tie_word_embeddings = rd.boolean("tie_word_embeddings", true);
  c->qkv_bias = c->o_bias = rd.boolean("attention_bias", false);
  OSLO_CHECK(!rd.boolean("use_bidirectional_attention", false), OSLO_ERR_NOT_SUPPORTED, rd.src,
             ": use_bidirectional_attention is not supported (causal attention only)");
  c->rope.theta = rd.number("rope_theta", 10000.0);
  if (rd.has("rope_scaling")) read_rope(rd.at("rope_scaling"), rd.src, &c->rope);
  if (rd.has("rope_parameters")) read_rope(rd.at("rope_parameters"), rd.src, &c->rope);
  BlockTraits& t = c->traits;
  t.causal = true;
  t.norm = NormKind::RMS_NORM;
  t.norm_unit_offset = true;
  t.rotary = true;
  t.gated_mlp = true;
  t.embed_scale = std::sqrt(static_cast<double>(c->hidden_size));
  t.embed_padding_idx = true;  // GemmaScaledWordEmbedding(..., padding_idx)
}

}  // namespace

extern const Arch kGemma = {"gemma", "GemmaForCausalLM", read_gemma, &kRules, "model."};

}  // namespace arch
}  // namespace oslo
