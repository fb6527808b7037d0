// Phi-3: model_type "phi3" (Phi3ForCausalLM). Pre-RMSNorm, rotary positions
// (on the first partial_rotary_factor of each head when the config has one),
// SwiGLU, grouped-query attention, like LLaMA, with two fused projections:
// qkv_proj = [q heads | k heads | v heads] (rows) and gate_up_proj =
// [gate | up] (rows). Rank r holds its q heads, its key/value heads' k and v
// rows (three segments) and its slice of gate and the same slice of up (two
// segments), never contiguous pieces of the fused tensors. No biases.
#include "core/common/error.hpp"
#include "core/model/arch/arch.hpp"

namespace oslo {
namespace arch {

namespace {

constexpr bool T = true, F = false;
constexpr Dim V = Dim::VOCAB, H = Dim::HIDDEN, Q = Dim::Q, QKV = Dim::QKV, I = Dim::INTER,
              I2 = Dim::INTER2;

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
    {"model.layers.{L}.self_attn.qkv_proj.weight",
     "qkv_w",
     {QKV, H},
     Cut::QKV_HEADS,
     0,
     F,
     F,
     When::ALWAYS},
    {"model.layers.{L}.self_attn.o_proj.weight",
     "o_w",
     {H, Q},
     Cut::Q_HEADS,
     1,
     F,
     F,
     When::ALWAYS},
    {"model.layers.{L}.post_attention_layernorm.weight",
     "ln2_w",
     {H},
     Cut::REPLICATE,
     0,
     F,
     T,
     When::ALWAYS},
    {"model.layers.{L}.mlp.gate_up_proj.weight",
     "gate_up_w",
     {I2, H},
     Cut::HALVES_EVEN,
     0,
     F,
     F,
     When::ALWAYS},
    {"model.layers.{L}.mlp.down_proj.weight", "down_w", {H, I}, Cut::EVEN, 1, F, F, When::ALWAYS},
    {"model.norm.weight", "norm_w", {H}, Cut::REPLICATE, 0, F, T, When::ALWAYS},
    {"lm_head.weight", "lm_head", {V, H}, Cut::VOCAB, 0, F, F, When::UNTIED},
};

// The rope object's scaling type, as transformers spells it (4.x "type",
// 5.x "rope_type"). Phi-3's long-context checkpoints (128k) use "su",
// "yarn" (both read as "longrope" by transformers) or "longrope": per-
// frequency short/long factors switched on the sequence length, which oslo
// does not implement: refused by name rather than run with wrong positions.
void refuse_long_rope(const ConfigReader& rd, const char* key) {
  if (!rd.has(key)) return;
  const nlohmann::json& o = rd.at(key);
  if (!o.is_object()) return;  // read_rope reports the format error
  const ConfigReader obj{o, rd.src};
  const std::string type = obj.string("rope_type", obj.string("type", "default"));
  OSLO_CHECK(type != "longrope" && type != "su" && type != "yarn", OSLO_ERR_NOT_SUPPORTED, rd.src,
             ": ", key, " type \"", type,
             "\" (Phi-3's long-context rotary scaling, short_factor/long_factor) is not supported");
  OSLO_CHECK(type == "default", OSLO_ERR_NOT_SUPPORTED, rd.src, ": ", key, " type \"", type,
             "\" is not supported for phi3 (transformers' Phi3 takes default or longrope; oslo "
             "default)");
}

// transformers 4.x: top-level rope_theta, partial_rotary_factor (Phi-4-mini)
// and rope_scaling (null, or the long-context scaling: refused); 5.x:
// rope_parameters {rope_theta, rope_type, partial_rotary_factor}, which wins
// when both are there. sliding_window (Phi-3-mini-4k: 2047) limits the
// sequence length as for Mistral.
void read_phi3(const ConfigReader& rd, ModelConfig* c) {
  c->hidden_size = rd.positive("hidden_size", 0);
  c->num_layers = rd.positive("num_hidden_layers", 0);
  c->num_heads = rd.positive("num_attention_heads", 0);
  c->num_kv_heads = rd.positive("num_key_value_heads", c->num_heads, false);
  c->intermediate_size = rd.positive("intermediate_size", 0);
  c->max_positions = rd.positive("max_position_embeddings", 4096, false);
  c->norm_eps = rd.number("rms_norm_eps", 1e-5);
  c->act = activation(rd.string("hidden_act", "silu"), rd.src);
  c->tie_word_embeddings = rd.boolean("tie_word_embeddings", false);
  if (rd.has("head_dim")) c->head_dim = rd.positive("head_dim", 0);
  BlockTraits& t = c->traits;
  t.causal = true;
  t.norm = NormKind::RMS_NORM;
  t.rotary = true;
  t.gated_mlp = true;
  t.embed_padding_idx = true;  // embed_tokens: padding_idx=config.pad_token_id
  t.rotary_fraction = rd.number("partial_rotary_factor", 1.0);
  c->rope.theta = rd.number("rope_theta", 10000.0);
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    refuse_long_rope(rd, key);
    if (rd.has(key)) read_rope(rd.at(key), rd.src, &c->rope, &t.rotary_fraction);
  }
  c->sliding_window = rd.has("sliding_window") ? rd.positive("sliding_window", 0) : 0;
}

}  // namespace

extern const Arch kPhi3 = {"phi3", "Phi3ForCausalLM", read_phi3, &kRules, "model."};

}  // namespace arch
}  // namespace oslo
