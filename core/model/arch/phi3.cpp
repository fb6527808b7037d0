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

constexpr bool F = false;
constexpr Dim H = Dim::HIDDEN, QKV = Dim::QKV, I2 = Dim::INTER2;

// LLaMA's table with q/k/v fused into qkv_proj, gate/up into gate_up_proj,
// and no biases.
const std::vector<ShardRule> kRules = derive_rules(
    llama_rules(), {"q_b", "k_w", "k_b", "v_w", "v_b", "o_b", "gate_b", "up_w", "up_b", "down_b"},
    {{"q_w",
      {"model.layers.{L}.self_attn.qkv_proj.weight",
       "qkv_w",
       {QKV, H},
       Cut::QKV_HEADS,
       0,
       F,
       F,
       When::ALWAYS}},
     {"gate_w",
      {"model.layers.{L}.mlp.gate_up_proj.weight",
       "gate_up_w",
       {I2, H},
       Cut::HALVES_EVEN,
       0,
       F,
       F,
       When::ALWAYS}}});

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

// LLaMA's reader with Phi-3's defaults (4096 positions, eps 1e-5), no
// biases, partial_rotary_factor (Phi-4-mini) and the long-context scaling
// refused. transformers 4.x: top-level rope_theta, partial_rotary_factor and
// rope_scaling (null, or the long-context scaling); 5.x: rope_parameters
// {rope_theta, rope_type, partial_rotary_factor}, which wins when both are
// there. sliding_window (Phi-3-mini-4k: 2047) limits the sequence length as
// for Mistral.
void read_phi3(const ConfigReader& rd, ModelConfig* c) {
  LlamaLike f;
  f.max_positions = 4096;
  f.norm_eps = 1e-5;
  f.attention_bias_key = f.mlp_bias_key = false;
  f.sliding_window = SlidingWindow::WHEN_SET;
  f.partial_rotary = true;
  f.check_rope = refuse_long_rope;
  read_llama_like(rd, f, c);
}

}  // namespace

extern const Arch kPhi3 = {"phi3", "Phi3ForCausalLM", read_phi3, &kRules, "model."};

}  // namespace arch
}  // namespace oslo
