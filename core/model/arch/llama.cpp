// LLaMA and the families that share its blocks: model_type "llama"
// (LlamaForCausalLM), "mistral" (MistralForCausalLM: a sliding window) and
// "qwen2" (Qwen2ForCausalLM: q/k/v biases). Pre-RMSNorm, rotary positions,
// SwiGLU, grouped-query attention, separate q/k/v projections.
#include "core/common/error.hpp"
#include "core/model/arch/arch.hpp"

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
    {"model.layers.{L}.mlp.gate_proj.bias", "gate_b", {I}, Cut::EVEN, 0, F, T, When::MLP_BIAS},
    {"model.layers.{L}.mlp.up_proj.weight", "up_w", {I, H}, Cut::EVEN, 0, F, F, When::ALWAYS},
    {"model.layers.{L}.mlp.up_proj.bias", "up_b", {I}, Cut::EVEN, 0, F, T, When::MLP_BIAS},
    {"model.layers.{L}.mlp.down_proj.weight", "down_w", {H, I}, Cut::EVEN, 1, F, F, When::ALWAYS},
    {"model.layers.{L}.mlp.down_proj.bias", "down_b", {H}, Cut::REPLICATE, 0, F, T, When::MLP_BIAS},
    {"model.norm.weight", "norm_w", {H}, Cut::REPLICATE, 0, F, T, When::ALWAYS},
    {"lm_head.weight", "lm_head", {V, H}, Cut::VOCAB, 0, F, F, When::UNTIED},
};

// What the three share: sizes, RMSNorm, rope (4.x rope_theta + rope_scaling,
// 5.x rope_parameters), SwiGLU.
void read_common(const ConfigReader& rd, ModelConfig* c) {
  c->hidden_size = rd.positive("hidden_size", 0);
  c->num_layers = rd.positive("num_hidden_layers", 0);
  c->num_heads = rd.positive("num_attention_heads", 0);
  c->num_kv_heads = rd.positive("num_key_value_heads", c->num_heads, false);
  c->intermediate_size = rd.positive("intermediate_size", 0);
  c->max_positions = rd.positive("max_position_embeddings", 2048, false);
  c->norm_eps = rd.number("rms_norm_eps", 1e-6);
  c->act = activation(rd.string("hidden_act", "silu"), rd.src);
  c->tie_word_embeddings = rd.boolean("tie_word_embeddings", false);
  if (rd.has("head_dim")) c->head_dim = rd.positive("head_dim", 0);
  c->rope.theta = rd.number("rope_theta", 10000.0);
  if (rd.has("rope_scaling")) read_rope(rd.at("rope_scaling"), rd.src, &c->rope);
  if (rd.has("rope_parameters")) read_rope(rd.at("rope_parameters"), rd.src, &c->rope);
  BlockTraits& t = c->traits;
  t.causal = true;
  t.norm = NormKind::RMS_NORM;
  t.rotary = true;
  t.gated_mlp = true;
  t.embed_padding_idx = true;  // embed_tokens: padding_idx=config.pad_token_id
}

void read_llama(const ConfigReader& rd, ModelConfig* c) {
  read_common(rd, c);
  c->qkv_bias = c->o_bias = rd.boolean("attention_bias", false);
  c->mlp_bias = rd.boolean("mlp_bias", false);
}

void read_mistral(const ConfigReader& rd, ModelConfig* c) {
  read_llama(rd, c);
  c->sliding_window = rd.has("sliding_window") ? rd.positive("sliding_window", 0) : 0;
}

void read_qwen2(const ConfigReader& rd, ModelConfig* c) {
  read_common(rd, c);
  c->qkv_bias = true;
  if (rd.boolean("use_sliding_window", false))
    c->sliding_window = rd.has("sliding_window") ? rd.positive("sliding_window", 0) : 0;
}

}  // namespace

extern const Arch kLlama = {"llama", "LlamaForCausalLM", read_llama, &kRules, "model."};
extern const Arch kMistral = {"mistral", "MistralForCausalLM", read_mistral, &kRules, "model."};
extern const Arch kQwen2 = {"qwen2", "Qwen2ForCausalLM", read_qwen2, &kRules, "model."};

}  // namespace arch
}  // namespace oslo
