#include "core/model/sharding.hpp"

#include <map>

#include "core/checkpoint/weight_source.hpp"
#include "core/common/error.hpp"
#include "core/layers/embedding.hpp"
#include "core/model/arch/arch.hpp"

namespace oslo {

namespace {

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
  return *arch::find(model_type, "").rules;
}

std::vector<int64_t> global_shape_of(const ModelConfig& c, const std::string& role) {
  const int64_t D = c.head_dim;
  auto extent = [&](Dim d) -> int64_t {
    switch (d) {
      case Dim::NONE: break;
      case Dim::VOCAB: return c.vocab_size;
      case Dim::HIDDEN: return c.hidden_size;
      case Dim::POSITIONS: return c.max_positions;
      case Dim::TYPES: return c.type_vocab_size;
      case Dim::Q: return c.num_heads * D;
      case Dim::KV: return c.num_kv_heads * D;
      case Dim::QKV: return (c.num_heads + 2 * c.num_kv_heads) * D;
      case Dim::INTER: return c.intermediate_size;
      case Dim::INTER2: return 2 * c.intermediate_size;
    }
    return 0;
  };
  for (const ShardRule& r : shard_rules(c.model_type)) {
    if (role != r.role) continue;
    std::vector<int64_t> shape;
    for (Dim d : r.shape)
      if (d != Dim::NONE) shape.push_back(extent(d));
    return shape;
  }
  throw Error(OSLO_ERR_INTERNAL, str(c.model_type, ": no sharding rule fills role ", role));
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
        case Cut::QKV_PER_HEAD:
          OSLO_CHECK(nkv == nh, OSLO_ERR_NOT_SUPPORTED, p.name,
                     ": q, k and v fused per head need as many key/value heads as heads (", nkv,
                     " vs ", nh, ")");
          // Global head h holds q, k, v at [3h, 3h + 1, 3h + 2] * D; local
          // order is [q of my heads | k of my heads | v of my heads].
          for (int64_t part = 0; part < 3; ++part)
            for (int64_t j = 0; j < nhl; ++j)
              p.segments.push_back(
                  Segment{((rank * nhl + j) * 3 + part) * D, D, (part * nhl + j) * D, true});
          break;
        case Cut::HALVES_EVEN: {
          OSLO_CHECK(extent % (2 * tp) == 0, OSLO_ERR_NOT_SUPPORTED, p.name, ": dimension ", r.dim,
                     " of size ", extent, " (two fused halves) is not divisible by 2 x ",
                     "tensor_parallel_size ", tp);
          const int64_t half = extent / 2, piece = half / tp;
          p.segments.push_back(Segment{rank * piece, piece, 0, true});
          p.segments.push_back(Segment{half + rank * piece, piece, piece, true});
          break;
        }
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
    for (const arch::Arch* a : arch::all()) {
      const std::string pf = a->base_prefix;
      if (pf.empty()) continue;
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

std::vector<PlannedTensor> plan_stage(const std::vector<PlannedTensor>& plan, const ModelConfig& c,
                                      const std::vector<std::pair<int64_t, int64_t>>& ranges,
                                      bool first, bool last) {
  static const char* const kEmbeddings[] = {"wte", "wpe", "type", "emb_ln_w", "emb_ln_b"};
  static const char* const kHead[] = {"norm_w", "norm_b", "lm_head", "pool_w", "pool_b"};
  auto in = [](const std::string& role, const char* const* roles, size_t n) {
    for (size_t i = 0; i < n; ++i)
      if (role == roles[i]) return true;
    return false;
  };
  std::vector<PlannedTensor> out;
  for (const PlannedTensor& pt : plan) {
    if (pt.layer >= 0) {
      for (const auto& r : ranges)
        if (pt.layer >= r.first && pt.layer < r.second) out.push_back(pt);
      continue;
    }
    const bool emb = in(pt.role, kEmbeddings, 5), head = in(pt.role, kHead, 5);
    OSLO_CHECK(emb || head, OSLO_ERR_INTERNAL, "pipeline: no stage for role ", pt.role);
    if ((emb && first) || (head && last)) {
      out.push_back(pt);
    } else if (last && pt.role == "wte" && c.tie_word_embeddings) {
      PlannedTensor copy = pt;  // the tied head's weight; saved by the first stage
      copy.placement.replica_owner = false;
      for (Segment& s : copy.placement.segments) s.owner = false;
      out.push_back(std::move(copy));
    }
  }
  return out;
}

}  // namespace oslo
