// BERT (model_type "bert", BertModel with its pooler): an encoder with
// learned positions and token types, an embedding LayerNorm, post-LayerNorm
// blocks (ln1 = attention.output.LayerNorm, ln2 = output.LayerNorm) and a
// plain GELU MLP. No LM head: hidden states and sentence embeddings.
#include "core/common/error.hpp"
#include "core/model/arch/arch.hpp"

namespace oslo {
namespace arch {

namespace {

constexpr bool T = true, F = false;
constexpr Dim V = Dim::VOCAB, H = Dim::HIDDEN, P = Dim::POSITIONS, TY = Dim::TYPES, Q = Dim::Q,
              KV = Dim::KV, I = Dim::INTER;

// The word embeddings are split by vocabulary.
const std::vector<ShardRule> kRules = {
    {"embeddings.word_embeddings.weight", "wte", {V, H}, Cut::VOCAB, 0, F, F, When::ALWAYS},
    {"embeddings.position_embeddings.weight", "wpe", {P, H}, Cut::REPLICATE, 0, F, T, When::ALWAYS},
    {"embeddings.token_type_embeddings.weight",
     "type",
     {TY, H},
     Cut::REPLICATE,
     0,
     F,
     T,
     When::ALWAYS},
    {"embeddings.LayerNorm.weight", "emb_ln_w", {H}, Cut::REPLICATE, 0, F, T, When::ALWAYS},
    {"embeddings.LayerNorm.bias", "emb_ln_b", {H}, Cut::REPLICATE, 0, F, T, When::ALWAYS},
    {"encoder.layer.{L}.attention.self.query.weight",
     "q_w",
     {Q, H},
     Cut::Q_HEADS,
     0,
     F,
     F,
     When::ALWAYS},
    {"encoder.layer.{L}.attention.self.query.bias",
     "q_b",
     {Q},
     Cut::Q_HEADS,
     0,
     F,
     T,
     When::ALWAYS},
    {"encoder.layer.{L}.attention.self.key.weight",
     "k_w",
     {KV, H},
     Cut::KV_HEADS,
     0,
     F,
     F,
     When::ALWAYS},
    {"encoder.layer.{L}.attention.self.key.bias",
     "k_b",
     {KV},
     Cut::KV_HEADS,
     0,
     F,
     T,
     When::ALWAYS},
    {"encoder.layer.{L}.attention.self.value.weight",
     "v_w",
     {KV, H},
     Cut::KV_HEADS,
     0,
     F,
     F,
     When::ALWAYS},
    {"encoder.layer.{L}.attention.self.value.bias",
     "v_b",
     {KV},
     Cut::KV_HEADS,
     0,
     F,
     T,
     When::ALWAYS},
    {"encoder.layer.{L}.attention.output.dense.weight",
     "o_w",
     {H, Q},
     Cut::Q_HEADS,
     1,
     F,
     F,
     When::ALWAYS},
    {"encoder.layer.{L}.attention.output.dense.bias",
     "o_b",
     {H},
     Cut::REPLICATE,
     0,
     F,
     T,
     When::ALWAYS},
    {"encoder.layer.{L}.attention.output.LayerNorm.weight",
     "ln1_w",
     {H},
     Cut::REPLICATE,
     0,
     F,
     T,
     When::ALWAYS},
    {"encoder.layer.{L}.attention.output.LayerNorm.bias",
     "ln1_b",
     {H},
     Cut::REPLICATE,
     0,
     F,
     T,
     When::ALWAYS},
    {"encoder.layer.{L}.intermediate.dense.weight",
     "up_w",
     {I, H},
     Cut::EVEN,
     0,
     F,
     F,
     When::ALWAYS},
    {"encoder.layer.{L}.intermediate.dense.bias", "up_b", {I}, Cut::EVEN, 0, F, T, When::ALWAYS},
    {"encoder.layer.{L}.output.dense.weight", "down_w", {H, I}, Cut::EVEN, 1, F, F, When::ALWAYS},
    {"encoder.layer.{L}.output.dense.bias", "down_b", {H}, Cut::REPLICATE, 0, F, T, When::ALWAYS},
    {"encoder.layer.{L}.output.LayerNorm.weight",
     "ln2_w",
     {H},
     Cut::REPLICATE,
     0,
     F,
     T,
     When::ALWAYS},
    {"encoder.layer.{L}.output.LayerNorm.bias",
     "ln2_b",
     {H},
     Cut::REPLICATE,
     0,
     F,
     T,
     When::ALWAYS},
    {"pooler.dense.weight", "pool_w", {H, H}, Cut::REPLICATE, 0, F, F, When::ALWAYS},
    {"pooler.dense.bias", "pool_b", {H}, Cut::REPLICATE, 0, F, T, When::ALWAYS},
};

void read(const ConfigReader& rd, ModelConfig* c) {
  const std::string& src = rd.src;
  c->hidden_size = rd.positive("hidden_size", 0);
  c->num_layers = rd.positive("num_hidden_layers", 0);
  c->num_heads = rd.positive("num_attention_heads", 0);
  c->intermediate_size = rd.positive("intermediate_size", 0);
  c->max_positions = rd.positive("max_position_embeddings", 512, false);
  c->type_vocab_size = rd.positive("type_vocab_size", 2, false);
  c->norm_eps = rd.number("layer_norm_eps", 1e-12);
  c->act = activation(rd.string("hidden_act", "gelu"), src);
  const std::string pe = rd.string("position_embedding_type", "absolute");
  OSLO_CHECK(pe == "absolute", OSLO_ERR_NOT_SUPPORTED, src, ": position_embedding_type \"", pe,
             "\" is not supported (absolute)");
  c->qkv_bias = c->o_bias = c->mlp_bias = true;
  BlockTraits& t = c->traits;
  t.causal = false;
  t.norm = NormKind::LAYER_NORM;
  t.post_norm = true;
  t.token_types = true;
  t.embed_padding_idx = true;  // word_embeddings: padding_idx=config.pad_token_id
}

}  // namespace

extern const Arch kBert = {"bert", "BertModel", read, &kRules, "bert."};

}  // namespace arch
}  // namespace oslo
