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
}  // namespace

std::vector<ShardRule> llama_rules() {
  return {
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
      {"model.layers.{L}.self_attn.k_proj.bias",
       "k_b",
       {KV},
       Cut::KV_HEADS,
       0,
       F,
       T,
       When::QKV_BIAS},
      {"model.layers.{L}.self_attn.v_proj.weight",
       "v_w",
       {KV, H},
       Cut::KV_HEADS,
       0,
       F,
       F,
       When::ALWAYS},
      {"model.layers.{L}.self_attn.v_proj.bias",
       "v_b",
       {KV},
       Cut::KV_HEADS,
       0,
       F,
       T,
       When::QKV_BIAS},
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
      {"model.layers.{L}.mlp.down_proj.bias",
       "down_b",
       {H},
       Cut::REPLICATE,
       0,
       F,
       T,
       When::MLP_BIAS},
      {"model.norm.weight", "norm_w", {H}, Cut::REPLICATE, 0, F, T, When::ALWAYS},
      {"lm_head.weight", "lm_head", {V, H}, Cut::VOCAB, 0, F, F, When::UNTIED},
  };
}

std::vector<ShardRule> derive_rules(std::vector<ShardRule> base,
                                    const std::vector<std::string>& drop,
                                    const std::vector<std::pair<std::string, ShardRule>>& replace) {
  const auto row = [&base](const std::string& role) {
    for (size_t i = 0; i < base.size(); ++i)
      if (role == base[i].role) return i;
    throw Error(OSLO_ERR_INTERNAL, str("derive_rules: the base table has no role \"", role, "\""));
  };
  for (const auto& r : replace) base[row(r.first)] = r.second;
  for (const std::string& role : drop) base.erase(base.begin() + static_cast<ptrdiff_t>(row(role)));
  return base;
}

void read_llama_like(const ConfigReader& rd, const LlamaLike& f, ModelConfig* c) {
  c->hidden_size = rd.positive("hidden_size", 0);
  c->num_layers = rd.positive("num_hidden_layers", 0);
  c->num_heads = rd.positive("num_attention_heads", 0);
  c->num_kv_heads = rd.positive("num_key_value_heads", c->num_heads, false);
  c->intermediate_size = rd.positive("intermediate_size", 0);
  c->max_positions = rd.positive("max_position_embeddings", f.max_positions, false);
  c->norm_eps = rd.number("rms_norm_eps", f.norm_eps);
  c->act = f.activation ? f.activation(rd) : activation(rd.string("hidden_act", "silu"), rd.src);
  c->tie_word_embeddings = rd.boolean("tie_word_embeddings", f.tied);
  if (f.head_dim > 0)
    c->head_dim = rd.positive("head_dim", f.head_dim, false);
  else if (rd.has("head_dim"))
    c->head_dim = rd.positive("head_dim", 0);
  if (f.attention_bias_key) c->qkv_bias = c->o_bias = rd.boolean("attention_bias", false);
  if (f.qkv_bias) c->qkv_bias = true;
  if (f.mlp_bias_key) c->mlp_bias = rd.boolean("mlp_bias", false);
  BlockTraits& t = c->traits;
  t.causal = true;
  t.norm = NormKind::RMS_NORM;
  t.rotary = true;
  t.gated_mlp = true;
  t.embed_padding_idx = true;  // embed_tokens: padding_idx=config.pad_token_id
  if (f.partial_rotary) t.rotary_fraction = rd.number("partial_rotary_factor", 1.0);
  c->rope.theta = rd.number("rope_theta", 10000.0);
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    if (f.check_rope) f.check_rope(rd, key);
    if (rd.has(key))
      read_rope(rd.at(key), rd.src, &c->rope, f.partial_rotary ? &t.rotary_fraction : nullptr);
  }
  const bool window =
      f.sliding_window == SlidingWindow::WHEN_SET ||
      (f.sliding_window == SlidingWindow::WHEN_ENABLED && rd.boolean("use_sliding_window", false));
  if (window) c->sliding_window = rd.has("sliding_window") ? rd.positive("sliding_window", 0) : 0;
}

namespace {

const std::vector<ShardRule> kRules = llama_rules();

// LLaMA: the defaults (attention_bias for q, k, v and o; mlp_bias).
void read_llama(const ConfigReader& rd, ModelConfig* c) {
  read_llama_like(rd, LlamaLike{}, c);
}

// Mistral: LLaMA's and a sliding window when the config sets one.
void read_mistral(const ConfigReader& rd, ModelConfig* c) {
  LlamaLike f;
  f.sliding_window = SlidingWindow::WHEN_SET;
  read_llama_like(rd, f, c);
}

// Qwen2: q/k/v biases always (no attention_bias, mlp_bias keys), a window
// only with use_sliding_window.
void read_qwen2(const ConfigReader& rd, ModelConfig* c) {
  LlamaLike f;
  f.attention_bias_key = f.mlp_bias_key = false;
  f.qkv_bias = true;
  f.sliding_window = SlidingWindow::WHEN_ENABLED;
  read_llama_like(rd, f, c);
}

}  // namespace

extern const Arch kLlama = {"llama", "LlamaForCausalLM", read_llama, &kRules, "model."};
extern const Arch kMistral = {"mistral", "MistralForCausalLM", read_mistral, &kRules, "model."};
extern const Arch kQwen2 = {"qwen2", "Qwen2ForCausalLM", read_qwen2, &kRules, "model."};

}  // namespace arch
}  // namespace oslo
