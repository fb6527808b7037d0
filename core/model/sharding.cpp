#include "core/model/sharding.hpp"

#include <map>

#include "core/checkpoint/weight_source.hpp"
#include "core/common/error.hpp"
#include "core/layers/embedding.hpp"

namespace oslo {

namespace {

constexpr bool T = true, F = false;

// GPT2LMHeadModel. Conv1D weights are [in, out]: column cuts are along dim 1
// and the local copy is transposed to [out, in]. lm_head is tied to wte.
const std::vector<ShardRule> kGpt2 = {
    {"transformer.wte.weight", "wte", Cut::VOCAB, 0, F, F, When::ALWAYS},
    {"transformer.wpe.weight", "wpe", Cut::REPLICATE, 0, F, T, When::ALWAYS},
    {"transformer.h.{L}.ln_1.weight", "ln1_w", Cut::REPLICATE, 0, F, T, When::ALWAYS},
    {"transformer.h.{L}.ln_1.bias", "ln1_b", Cut::REPLICATE, 0, F, T, When::ALWAYS},
    {"transformer.h.{L}.attn.c_attn.weight", "qkv_w", Cut::QKV_HEADS, 1, T, F, When::ALWAYS},
    {"transformer.h.{L}.attn.c_attn.bias", "qkv_b", Cut::QKV_HEADS, 0, F, T, When::ALWAYS},
    {"transformer.h.{L}.attn.c_proj.weight", "o_w", Cut::Q_HEADS, 0, T, F, When::ALWAYS},
    {"transformer.h.{L}.attn.c_proj.bias", "o_b", Cut::REPLICATE, 0, F, T, When::ALWAYS},
    {"transformer.h.{L}.ln_2.weight", "ln2_w", Cut::REPLICATE, 0, F, T, When::ALWAYS},
    {"transformer.h.{L}.ln_2.bias", "ln2_b", Cut::REPLICATE, 0, F, T, When::ALWAYS},
    {"transformer.h.{L}.mlp.c_fc.weight", "up_w", Cut::EVEN, 1, T, F, When::ALWAYS},
    {"transformer.h.{L}.mlp.c_fc.bias", "up_b", Cut::EVEN, 0, F, T, When::ALWAYS},
    {"transformer.h.{L}.mlp.c_proj.weight", "down_w", Cut::EVEN, 0, T, F, When::ALWAYS},
    {"transformer.h.{L}.mlp.c_proj.bias", "down_b", Cut::REPLICATE, 0, F, T, When::ALWAYS},
    {"transformer.ln_f.weight", "norm_w", Cut::REPLICATE, 0, F, T, When::ALWAYS},
    {"transformer.ln_f.bias", "norm_b", Cut::REPLICATE, 0, F, T, When::ALWAYS},
};

// BertModel (post-layer-norm encoder; ln1 = attention.output.LayerNorm, ln2 =
// output.LayerNorm). The word embeddings are split by vocabulary.
const std::vector<ShardRule> kBert = {
    {"embeddings.word_embeddings.weight", "wte", Cut::VOCAB, 0, F, F, When::ALWAYS},
    {"embeddings.position_embeddings.weight", "wpe", Cut::REPLICATE, 0, F, T, When::ALWAYS},
    {"embeddings.token_type_embeddings.weight", "type", Cut::REPLICATE, 0, F, T, When::ALWAYS},
    {"embeddings.LayerNorm.weight", "emb_ln_w", Cut::REPLICATE, 0, F, T, When::ALWAYS},
    {"embeddings.LayerNorm.bias", "emb_ln_b", Cut::REPLICATE, 0, F, T, When::ALWAYS},
    {"encoder.layer.{L}.attention.self.query.weight", "q_w", Cut::Q_HEADS, 0, F, F, When::ALWAYS},
    {"encoder.layer.{L}.attention.self.query.bias", "q_b", Cut::Q_HEADS, 0, F, T, When::ALWAYS},
    {"encoder.layer.{L}.attention.self.key.weight", "k_w", Cut::KV_HEADS, 0, F, F, When::ALWAYS},
    {"encoder.layer.{L}.attention.self.key.bias", "k_b", Cut::KV_HEADS, 0, F, T, When::ALWAYS},
    {"encoder.layer.{L}.attention.self.value.weight", "v_w", Cut::KV_HEADS, 0, F, F, When::ALWAYS},
    {"encoder.layer.{L}.attention.self.value.bias", "v_b", Cut::KV_HEADS, 0, F, T, When::ALWAYS},
    {"encoder.layer.{L}.attention.output.dense.weight", "o_w", Cut::Q_HEADS, 1, F, F, When::ALWAYS},
    {"encoder.layer.{L}.attention.output.dense.bias", "o_b", Cut::REPLICATE, 0, F, T, When::ALWAYS},
    {"encoder.layer.{L}.attention.output.LayerNorm.weight", "ln1_w", Cut::REPLICATE, 0, F, T,
     When::ALWAYS},
    {"encoder.layer.{L}.attention.output.LayerNorm.bias", "ln1_b", Cut::REPLICATE, 0, F, T,
     When::ALWAYS},
    {"encoder.layer.{L}.intermediate.dense.weight", "up_w", Cut::EVEN, 0, F, F, When::ALWAYS},
    {"encoder.layer.{L}.intermediate.dense.bias", "up_b", Cut::EVEN, 0, F, T, When::ALWAYS},
    {"encoder.layer.{L}.output.dense.weight", "down_w", Cut::EVEN, 1, F, F, When::ALWAYS},
    {"encoder.layer.{L}.output.dense.bias", "down_b", Cut::REPLICATE, 0, F, T, When::ALWAYS},
    {"encoder.layer.{L}.output.LayerNorm.weight", "ln2_w", Cut::REPLICATE, 0, F, T, When::ALWAYS},
    {"encoder.layer.{L}.output.LayerNorm.bias", "ln2_b", Cut::REPLICATE, 0, F, T, When::ALWAYS},
    {"pooler.dense.weight", "pool_w", Cut::REPLICATE, 0, F, F, When::ALWAYS},
    {"pooler.dense.bias", "pool_b", Cut::REPLICATE, 0, F, T, When::ALWAYS},
};

// LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM: pre-RMSNorm,
// rotary positions, SwiGLU, grouped-query attention.
const std::vector<ShardRule> kLlama = {
    {"model.embed_tokens.weight", "wte", Cut::VOCAB, 0, F, F, When::ALWAYS},
    {"model.layers.{L}.input_layernorm.weight", "ln1_w", Cut::REPLICATE, 0, F, T, When::ALWAYS},
    {"model.layers.{L}.self_attn.q_proj.weight", "q_w", Cut::Q_HEADS, 0, F, F, When::ALWAYS},
    {"model.layers.{L}.self_attn.q_proj.bias", "q_b", Cut::Q_HEADS, 0, F, T, When::QKV_BIAS},
    {"model.layers.{L}.self_attn.k_proj.weight", "k_w", Cut::KV_HEADS, 0, F, F, When::ALWAYS},
    {"model.layers.{L}.self_attn.k_proj.bias", "k_b", Cut::KV_HEADS, 0, F, T, When::QKV_BIAS},
    {"model.layers.{L}.self_attn.v_proj.weight", "v_w", Cut::KV_HEADS, 0, F, F, When::ALWAYS},
    {"model.layers.{L}.self_attn.v_proj.bias", "v_b", Cut::KV_HEADS, 0, F, T, When::QKV_BIAS},
    {"model.layers.{L}.self_attn.o_proj.weight", "o_w", Cut::Q_HEADS, 1, F, F, When::ALWAYS},
    {"model.layers.{L}.self_attn.o_proj.bias", "o_b", Cut::REPLICATE, 0, F, T, When::O_BIAS},
    {"model.layers.{L}.post_attention_layernorm.weight", "ln2_w", Cut::REPLICATE, 0, F, T,
     When::ALWAYS},
    {"model.layers.{L}.mlp.gate_proj.weight", "gate_w", Cut::EVEN, 0, F, F, When::ALWAYS},
    {"model.layers.{L}.mlp.gate_proj.bias", "gate_b", Cut::EVEN, 0, F, T, When::MLP_BIAS},
    {"model.layers.{L}.mlp.up_proj.weight", "up_w", Cut::EVEN, 0, F, F, When::ALWAYS},
    {"model.layers.{L}.mlp.up_proj.bias", "up_b", Cut::EVEN, 0, F, T, When::MLP_BIAS},
    {"model.layers.{L}.mlp.down_proj.weight", "down_w", Cut::EVEN, 1, F, F, When::ALWAYS},
    {"model.layers.{L}.mlp.down_proj.bias", "down_b", Cut::REPLICATE, 0, F, T, When::MLP_BIAS},
    {"model.norm.weight", "norm_w", Cut::REPLICATE, 0, F, T, When::ALWAYS},
    {"lm_head.weight", "lm_head", Cut::VOCAB, 0, F, F, When::UNTIED},
};

bool applies(When w, const ModelConfig& c) {
  switch (w) {
    case When::ALWAYS: return true;
    case When::QKV_BIAS: return c.qkv_bias;
    case When::O_BIAS: return c.o_bias;
    case When::MLP_BIAS: return c.mlp_bias;
    case When::UNTIED: return !c.tie_word_embeddings;
  }
  return false;
}

std::string expand(const char* pattern, int layer) {
  std::string s = pattern;
  const size_t at = s.find("{L}");
  if (at != std::string::npos) s.replace(at, 3, std::to_string(layer));
  return s;
}

// Segments of a head-structured extent: heads [h0, h0 + n) of d indices each,
// starting at `base` in the global dimension.
Segment heads(int64_t base, int64_t h0, int64_t n, int64_t d, int64_t local, bool owner) {
  return Segment{base + h0 * d, n * d, local, owner};
}

}  // namespace

const std::vector<ShardRule>& shard_rules(const std::string& model_type) {
  if (model_type == "gpt2") return kGpt2;
  if (model_type == "bert") return kBert;
  if (model_type == "llama" || model_type == "mistral" || model_type == "qwen2") return kLlama;
  throw Error(OSLO_ERR_NOT_SUPPORTED, str("no sharding rules for model_type \"", model_type, "\""));
}

std::vector<int64_t> global_shape_of(const ModelConfig& c, const std::string& role) {
  const int64_t H = c.hidden_size, D = c.head_dim, I = c.intermediate_size;
  const int64_t q = c.num_heads * D, kv = c.num_kv_heads * D;
  static const std::map<std::string, int> kind = {
      {"wte", 0},   {"lm_head", 0}, {"wpe", 1},     {"type", 2},   {"qkv_w", 3},
      {"qkv_b", 4}, {"q_w", 5},     {"q_b", 6},     {"k_w", 7},    {"v_w", 7},
      {"k_b", 8},   {"v_b", 8},     {"o_w", 9},     {"up_w", 10},  {"gate_w", 10},
      {"up_b", 11}, {"gate_b", 11}, {"down_w", 12}, {"pool_w", 13}};
  auto it = kind.find(role);
  if (it == kind.end()) return {H};  // norms and the biases of [H] outputs
  switch (it->second) {
    case 0: return {c.vocab_size, H};
    case 1: return {c.max_positions, H};
    case 2: return {c.type_vocab_size, H};
    case 3: return {q + 2 * kv, H};
    case 4: return {q + 2 * kv};
    case 5: return {q, H};
    case 6: return {q};
    case 7: return {kv, H};
    case 8: return {kv};
    case 9: return {H, q};
    case 10: return {I, H};
    case 11: return {I};
    case 12: return {H, I};
    default: return {H, H};
  }
}

std::vector<PlannedTensor> plan_model(const ModelConfig& c, int tp, int rank) {
  OSLO_CHECK(tp >= 1 && rank >= 0 && rank < tp, OSLO_ERR_INVALID_ARGUMENT, "plan_model: rank ",
             rank, " outside tensor-parallel size ", tp);
  const int64_t nh = c.num_heads, nkv = c.num_kv_heads, D = c.head_dim;
  OSLO_CHECK(nh % tp == 0, OSLO_ERR_NOT_SUPPORTED, c.model_type, ": ", nh,
             " attention heads cannot be split over tensor_parallel_size ", tp,
             " (heads are never split; choose a size dividing ", nh, ")");
  OSLO_CHECK(nkv % tp == 0 || tp % nkv == 0, OSLO_ERR_NOT_SUPPORTED, c.model_type, ": ", nkv,
             " key/value heads can be neither split nor replicated over tensor_parallel_size ", tp);
  const int64_t nhl = nh / tp;
  // KV heads held by this rank: a contiguous range, or one replicated head.
  int64_t kv0, nkvl;
  bool kv_owner = true;
  if (nkv % tp == 0) {
    nkvl = nkv / tp;
    kv0 = rank * nkvl;
  } else {
    const int64_t copies = tp / nkv;
    nkvl = 1;
    kv0 = rank / copies;
    kv_owner = rank % copies == 0;
  }
  std::vector<PlannedTensor> out;
  const auto& rules = shard_rules(c.model_type);
  for (int64_t layer = -1; layer < c.num_layers; ++layer) {
    for (const ShardRule& r : rules) {
      const bool per_layer = std::string(r.pattern).find("{L}") != std::string::npos;
      if (per_layer != (layer >= 0) || !applies(r.when, c)) continue;
      PlannedTensor pt;
      pt.role = r.role;
      pt.layer = static_cast<int>(layer);
      pt.f32 = r.f32;
      Placement& p = pt.placement;
      p.name = expand(r.pattern, static_cast<int>(layer));
      std::vector<int64_t> shape = global_shape_of(c, r.role);
      if (r.transpose) std::swap(shape[0], shape[1]);  // HF keeps Conv1D as [in, out]
      p.global_shape = shape;
      p.transpose = r.transpose;
      if (r.cut == Cut::REPLICATE) {
        p.split_dim = -1;
        p.replica_owner = rank == 0;
        out.push_back(std::move(pt));
        continue;
      }
      p.split_dim = r.dim;
      const int64_t extent = shape[static_cast<size_t>(r.dim)];
      switch (r.cut) {
        case Cut::VOCAB: {
          const VocabPartition vp = vocab_partition(extent, tp, rank);
          if (vp.valid > 0) p.segments.push_back(Segment{vp.start, vp.valid, 0, true});
          p.local_extent = vp.local;
          break;
        }
        case Cut::EVEN:
          OSLO_CHECK(extent % tp == 0, OSLO_ERR_NOT_SUPPORTED, p.name, ": dimension ", r.dim,
                     " of size ", extent, " is not divisible by tensor_parallel_size ", tp);
          p.segments.push_back(Segment{rank * (extent / tp), extent / tp, 0, true});
          break;
        case Cut::Q_HEADS: p.segments.push_back(heads(0, rank * nhl, nhl, D, 0, true)); break;
        case Cut::KV_HEADS: p.segments.push_back(heads(0, kv0, nkvl, D, 0, kv_owner)); break;
        case Cut::QKV_HEADS:
          p.segments.push_back(heads(0, rank * nhl, nhl, D, 0, true));
          p.segments.push_back(heads(nh * D, kv0, nkvl, D, nhl * D, kv_owner));
          p.segments.push_back(heads((nh + nkv) * D, kv0, nkvl, D, (nhl + nkvl) * D, kv_owner));
          break;
        case Cut::REPLICATE: break;
      }
      if (p.local_extent == 0)
        for (const Segment& s : p.segments) p.local_extent += s.length;
      out.push_back(std::move(pt));
    }
  }
  return out;
}

void resolve_names(const WeightSource& src, std::vector<PlannedTensor>& plan) {
  for (PlannedTensor& pt : plan) {
    std::string& n = pt.placement.name;
    if (src.find(n)) continue;
    for (const char* pre : {"transformer.", "bert.", "model."}) {
      const std::string pf = pre;
      if (n.rfind(pf, 0) == 0 && src.find(n.substr(pf.size()))) {
        n = n.substr(pf.size());
        break;
      }
      if (src.find(pf + n)) {
        n = pf + n;
        break;
      }
    }
  }
}

std::function<std::vector<Placement>(int, int)> model_planner(const std::string& path) {
  WeightSource src(path);
  OSLO_CHECK(!src.config_json().empty(), OSLO_ERR_FORMAT, path,
             ": no model config (config.json, or model_config in the checkpoint manifest)");
  const ModelConfig cfg = ModelConfig::parse(src.config_json(), path + "/config.json");
  // Names as the source stores them (same for every size).
  std::vector<PlannedTensor> probe = plan_model(cfg, 1, 0);
  resolve_names(src, probe);
  std::map<std::string, std::string> rename;
  const std::vector<PlannedTensor> canonical = plan_model(cfg, 1, 0);
  for (size_t i = 0; i < probe.size(); ++i)
    rename[canonical[i].placement.name] = probe[i].placement.name;
  return [cfg, rename](int tp, int rank) {
    std::vector<Placement> out;
    for (PlannedTensor& pt : plan_model(cfg, tp, rank)) {
      auto it = rename.find(pt.placement.name);
      if (it != rename.end()) pt.placement.name = it->second;
      out.push_back(std::move(pt.placement));
    }
    return out;
  };
}

}  // namespace oslo
