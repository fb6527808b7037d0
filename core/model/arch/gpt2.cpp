// GPT-2 (model_type "gpt2", GPT2LMHeadModel): learned positions, pre-LayerNorm
// blocks, fused c_attn, plain GELU (tanh) MLP, LM head tied to wte. HF keeps
// its projections as Conv1D ([in, out]); oslo holds them transposed.
#include "core/common/error.hpp"
#include "core/model/arch/arch.hpp"

namespace oslo {
namespace arch {

namespace {

constexpr bool T = true, F = false;
constexpr Dim V = Dim::VOCAB, H = Dim::HIDDEN, P = Dim::POSITIONS, Q = Dim::Q, QKV = Dim::QKV,
              I = Dim::INTER;

// Conv1D weights are [in, out]: column cuts are along dim 1 and the local
// copy is transposed to [out, in].
const std::vector<ShardRule> kRules = {
    {"transformer.wte.weight", "wte", {V, H}, Cut::VOCAB, 0, F, F, When::ALWAYS},
    {"transformer.wpe.weight", "wpe", {P, H}, Cut::REPLICATE, 0, F, T, When::ALWAYS},
    {"transformer.h.{L}.ln_1.weight", "ln1_w", {H}, Cut::REPLICATE, 0, F, T, When::ALWAYS},
    {"transformer.h.{L}.ln_1.bias", "ln1_b", {H}, Cut::REPLICATE, 0, F, T, When::ALWAYS},
    {"transformer.h.{L}.attn.c_attn.weight",
     "qkv_w",
     {QKV, H},
     Cut::QKV_HEADS,
     1,
     T,
     F,
     When::ALWAYS},
    {"transformer.h.{L}.attn.c_attn.bias", "qkv_b", {QKV}, Cut::QKV_HEADS, 0, F, T, When::ALWAYS},
    {"transformer.h.{L}.attn.c_proj.weight", "o_w", {H, Q}, Cut::Q_HEADS, 0, T, F, When::ALWAYS},
    {"transformer.h.{L}.attn.c_proj.bias", "o_b", {H}, Cut::REPLICATE, 0, F, T, When::ALWAYS},
    {"transformer.h.{L}.ln_2.weight", "ln2_w", {H}, Cut::REPLICATE, 0, F, T, When::ALWAYS},
    {"transformer.h.{L}.ln_2.bias", "ln2_b", {H}, Cut::REPLICATE, 0, F, T, When::ALWAYS},
    {"transformer.h.{L}.mlp.c_fc.weight", "up_w", {I, H}, Cut::EVEN, 1, T, F, When::ALWAYS},
    {"transformer.h.{L}.mlp.c_fc.bias", "up_b", {I}, Cut::EVEN, 0, F, T, When::ALWAYS},
    {"transformer.h.{L}.mlp.c_proj.weight", "down_w", {H, I}, Cut::EVEN, 0, T, F, When::ALWAYS},
    {"transformer.h.{L}.mlp.c_proj.bias", "down_b", {H}, Cut::REPLICATE, 0, F, T, When::ALWAYS},
    {"transformer.ln_f.weight", "norm_w", {H}, Cut::REPLICATE, 0, F, T, When::ALWAYS},
    {"transformer.ln_f.bias", "norm_b", {H}, Cut::REPLICATE, 0, F, T, When::ALWAYS},
};

void read(const ConfigReader& rd, ModelConfig* c) {
  const std::string& src = rd.src;
  c->hidden_size = rd.positive("n_embd", 0);
  c->num_layers = rd.positive("n_layer", 0);
  c->num_heads = rd.positive("n_head", 0);
  c->max_positions = rd.positive("n_positions", 1024, false);
  c->intermediate_size = rd.has("n_inner") ? rd.positive("n_inner", 0) : 4 * c->hidden_size;
  c->norm_eps = rd.number("layer_norm_epsilon", 1e-5);
  c->act = activation(rd.string("activation_function", "gelu_new"), src);
  c->tie_word_embeddings = rd.boolean("tie_word_embeddings", true);
  OSLO_CHECK(!rd.boolean("scale_attn_by_inverse_layer_idx", false), OSLO_ERR_NOT_SUPPORTED, src,
             ": scale_attn_by_inverse_layer_idx is not supported");
  OSLO_CHECK(rd.boolean("scale_attn_weights", true), OSLO_ERR_NOT_SUPPORTED, src,
             ": scale_attn_weights = false is not supported");
  OSLO_CHECK(c->tie_word_embeddings, OSLO_ERR_NOT_SUPPORTED, src,
             ": GPT-2 with an untied lm_head is not supported");
  c->qkv_bias = c->o_bias = c->mlp_bias = true;
  BlockTraits& t = c->traits;
  t.causal = true;
  t.norm = NormKind::LAYER_NORM;
  t.embed_padding_idx = false;  // wte: nn.Embedding without padding_idx
}

}  // namespace

extern const Arch kGpt2 = {"gpt2", "GPT2LMHeadModel", read, &kRules, "transformer."};

}  // namespace arch
}  // namespace oslo
