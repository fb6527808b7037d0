// GPT-NeoX (model_type "gpt_neox", GPTNeoXForCausalLM: the Pythia family):
// pre-LayerNorm blocks whose attention and MLP run in parallel on the same
// input (use_parallel_residual, the default; sequential when false), rotary
// embedding on the first rotary_pct of each head, q/k/v fused per head in
// query_key_value ([heads, 3, head_dim] along the output), plain GELU MLP
// with biases, an untied head (embed_out).
#include "core/common/error.hpp"
#include "core/model/arch/arch.hpp"

namespace oslo {
namespace arch {

namespace {

constexpr bool T = true, F = false;
constexpr Dim V = Dim::VOCAB, H = Dim::HIDDEN, Q = Dim::Q, QKV = Dim::QKV, I = Dim::INTER;

const std::vector<ShardRule> kRules = {
    {"gpt_neox.embed_in.weight", "wte", {V, H}, Cut::VOCAB, 0, F, F, When::ALWAYS},
    {"gpt_neox.layers.{L}.input_layernorm.weight",
     "ln1_w",
     {H},
     Cut::REPLICATE,
     0,
     F,
     T,
     When::ALWAYS},
    {"gpt_neox.layers.{L}.input_layernorm.bias",
     "ln1_b",
     {H},
     Cut::REPLICATE,
     0,
     F,
     T,
     When::ALWAYS},
    {"gpt_neox.layers.{L}.attention.query_key_value.weight",
     "qkv_w",
     {QKV, H},
     Cut::QKV_PER_HEAD,
     0,
     F,
     F,
     When::ALWAYS},
    {"gpt_neox.layers.{L}.attention.query_key_value.bias",
     "qkv_b",
     {QKV},
     Cut::QKV_PER_HEAD,
     0,
     F,
     T,
     When::QKV_BIAS},
    {"gpt_neox.layers.{L}.attention.dense.weight",
     "o_w",
     {H, Q},
     Cut::Q_HEADS,
     1,
     F,
     F,
     When::ALWAYS},
    {"gpt_neox.layers.{L}.attention.dense.bias", "o_b", {H}, Cut::REPLICATE, 0, F, T, When::O_BIAS},
    {"gpt_neox.layers.{L}.post_attention_layernorm.weight",
     "ln2_w",
     {H},
     Cut::REPLICATE,
     0,
     F,
     T,
     When::ALWAYS},
    {"gpt_neox.layers.{L}.post_attention_layernorm.bias",
     "ln2_b",
     {H},
     Cut::REPLICATE,
     0,
     F,
     T,
     When::ALWAYS},
    {"gpt_neox.layers.{L}.mlp.dense_h_to_4h.weight",
     "up_w",
     {I, H},
     Cut::EVEN,
     0,
     F,
     F,
     When::ALWAYS},
    {"gpt_neox.layers.{L}.mlp.dense_h_to_4h.bias", "up_b", {I}, Cut::EVEN, 0, F, T, When::ALWAYS},
    {"gpt_neox.layers.{L}.mlp.dense_4h_to_h.weight",
     "down_w",
     {H, I},
     Cut::EVEN,
     1,
     F,
     F,
     When::ALWAYS},
    {"gpt_neox.layers.{L}.mlp.dense_4h_to_h.bias",
     "down_b",
     {H},
     Cut::REPLICATE,
     0,
     F,
     T,
     When::ALWAYS},
    {"gpt_neox.final_layer_norm.weight", "norm_w", {H}, Cut::REPLICATE, 0, F, T, When::ALWAYS},
    {"gpt_neox.final_layer_norm.bias", "norm_b", {H}, Cut::REPLICATE, 0, F, T, When::ALWAYS},
    {"embed_out.weight", "lm_head", {V, H}, Cut::VOCAB, 0, F, F, When::UNTIED},
};

// transformers 4.x writes rotary_pct and rotary_emb_base at the top level
// (and rope_scaling); 5.x rope_parameters {rope_theta, partial_rotary_factor,
// rope_type}, which wins when both are there.
void read(const ConfigReader& rd, ModelConfig* c) {
  const std::string& src = rd.src;
  c->hidden_size = rd.positive("hidden_size", 0);
  c->num_layers = rd.positive("num_hidden_layers", 0);
  c->num_heads = rd.positive("num_attention_heads", 0);
  c->intermediate_size = rd.positive("intermediate_size", 0);
  c->max_positions = rd.positive("max_position_embeddings", 2048, false);
  c->norm_eps = rd.number("layer_norm_eps", 1e-5);
  c->act = activation(rd.string("hidden_act", "gelu"), src);
  c->tie_word_embeddings = rd.boolean("tie_word_embeddings", false);
  c->qkv_bias = c->o_bias = rd.boolean("attention_bias", true);
  c->mlp_bias = true;
  BlockTraits& t = c->traits;
  t.causal = true;
  t.norm = NormKind::LAYER_NORM;
  t.parallel_residual = rd.boolean("use_parallel_residual", true);
  t.rotary = true;
  t.embed_padding_idx = false;  // embed_in: nn.Embedding without padding_idx
  t.rotary_fraction = rd.number("rotary_pct", 0.25);
  c->rope.theta = rd.number("rotary_emb_base", 10000.0);
  if (rd.has("rope_scaling")) read_rope(rd.at("rope_scaling"), src, &c->rope, &t.rotary_fraction);
  if (rd.has("rope_parameters"))
    read_rope(rd.at("rope_parameters"), src, &c->rope, &t.rotary_fraction);
}

}  // namespace

extern const Arch kGptNeox = {"gpt_neox", "GPTNeoXForCausalLM", read, &kRules, "gpt_neox."};

}  // namespace arch
}  // namespace oslo
