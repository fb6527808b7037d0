#include "core/model/model.hpp"
#include "core/model/model_internal.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <map>
#include <type_traits>

#include "core/checkpoint/fs_util.hpp"
#include "core/checkpoint/model_checkpoint.hpp"
#include "core/checkpoint/weight_source.hpp"
#include "core/common/dtype.hpp"
#include "core/common/error.hpp"
#include "core/layers/embedding.hpp"
#include "core/parallel/mappings.hpp"
#include "core/pipeline/schedule.hpp"
#include "core/tensor/view.hpp"

namespace oslo {

using model_detail::at;
using model_detail::linear;
using model_detail::rows_bcast;
using model_detail::strided;

namespace {

std::string join_path(const std::string& a, const std::string& b) {
  return a.empty() ? b : a + "/" + b;
}

oslo_dtype dtype_from_torch(const std::string& s) {
  if (s == "bfloat16") return OSLO_DTYPE_BF16;
  if (s == "float16") return OSLO_DTYPE_F16;
  return OSLO_DTYPE_F32;
}

}  // namespace

Model::Model(Context& ctx, ModelConfig cfg, oslo_dtype dtype)
    : ctx_(ctx), cfg_(std::move(cfg)), dtype_(dtype) {}

Model::~Model() = default;

std::unique_ptr<Model> Model::load(Context& ctx, const std::string& path,
                                   const ModelLoadOptions& o) {
  std::unique_ptr<Model> m;
  std::vector<PlannedTensor> plan;
  // Everything a rank can fail on (files, config, shapes) happens inside one
  // agreement over the world group: all ranks return the same status.
  run_agreed(ctx.control(OSLO_GROUP_WORLD), "model load from \"" + path + "\"", [&] {
    WeightSource src(path);
    OSLO_CHECK(!src.config_json().empty(), OSLO_ERR_FORMAT, path,
               ": no model config (config.json, or model_config in the checkpoint manifest)");
    ModelConfig cfg = ModelConfig::parse(src.config_json(), path + "/config.json");
    oslo_dtype dt = dtype_from_torch(cfg.torch_dtype);
    if (o.dtype >= 0) {
      OSLO_CHECK(dtype_valid(static_cast<oslo_dtype>(o.dtype)) &&
                     dtype_is_float(static_cast<oslo_dtype>(o.dtype)),
                 OSLO_ERR_DTYPE, "model: dtype must be f32, f16 or bf16, got ", o.dtype);
      dt = static_cast<oslo_dtype>(o.dtype);
    }
    m.reset(new Model(ctx, std::move(cfg), dt));
    m->source_ = path;
    m->tp_ = ctx.topology().tp_size();
    m->rank_ = ctx.topology().tp_rank();
    m->pp_ = ctx.topology().pp_size();
    m->pp_rank_ = ctx.topology().pp_rank();
    for (const std::string& f : src.extra_files())
      m->extra_files_.push_back(join_path(src.folder(), f));
    plan = plan_model(m->cfg_, m->tp_, m->rank_);
    // This stage's blocks, chunk by chunk (the caller's counts, or
    // Colossal-AI's uniform partition over pp x virtual stages) and, on the
    // first and last stage, the embeddings and the head: no rank reads or
    // holds another stage's weights.
    const int L = static_cast<int>(m->cfg_.num_layers);
    OSLO_CHECK(o.virtual_stages >= 1 && o.virtual_stages <= L, OSLO_ERR_INVALID_ARGUMENT,
               "model: virtual_stages ", o.virtual_stages, " must lie in [1, ", L,
               "] (the model's blocks)");
    m->vstages_ = o.virtual_stages;
    std::vector<std::pair<int64_t, int64_t>> ranges;
    if (m->pp_ > 1 || m->vstages_ > 1 || !o.pipeline_layers.empty()) {
      const PipelinePartition part =
          o.pipeline_layers.empty() ? partition_uniform(L, m->pp_, m->vstages_)
                                    : partition_counts(L, m->pp_, m->vstages_, o.pipeline_layers);
      for (int c = 0; c < m->vstages_; ++c) {
        const LayerRange r = part.at(m->pp_rank_, c);
        ranges.emplace_back(r.begin, r.end);
      }
      // Products per token of each virtual stage's blocks: their
      // projections and MLP (the same on every rank: TP divides them all
      // alike). run_pipeline adds the head.
      const ModelConfig& c = m->cfg_;
      const double H = static_cast<double>(c.hidden_size), D = static_cast<double>(c.head_dim);
      const double block =
          H * D * static_cast<double>(2 * c.num_heads + 2 * c.num_kv_heads) +
          H * static_cast<double>(c.intermediate_size) * (c.traits.gated_mlp ? 3.0 : 2.0);
      for (const LayerRange& r : part.stages)
        m->stage_cost_.push_back(std::max(block * (r.end - r.begin), 1.0));
    } else {
      ranges.emplace_back(0, L);
    }
    if (m->pp_ > 1)
      plan = plan_stage(plan, m->cfg_, ranges, m->pp_rank_ == 0, m->pp_rank_ == m->pp_ - 1);
    for (const auto& r : ranges) {
      m->chunks_.emplace_back(m->global_layer_.size(),
                              m->global_layer_.size() + (r.second - r.first));
      for (int64_t l = r.first; l < r.second; ++l) m->global_layer_.push_back(l);
    }
    auto be = ctx.backend_ptr();
    resolve_names(src, plan);
    for (auto& pt : plan) {
      const Placement& p = pt.placement;
      PlacedTensor t;
      t.placement = p;
      t.tensor = Tensor::zeros(be, pt.f32 ? OSLO_DTYPE_F32 : dt, t.placement.local_shape());
      m->params_.push_back(std::move(t));
    }
    load_placed(src, m->params_, *be);
    // Small tensors held in f32 are saved back in the dtype they came in.
    for (const PlacedTensor& t : m->params_) {
      oslo_dtype dt = t.tensor.dtype();
      const SourceTensor* st = src.find(t.placement.name);
      if (st && !safetensors::to_oslo(st->dtype, &dt)) dt = t.tensor.dtype();
      m->stored_dtype_.push_back(dt);
    }
  });
  std::vector<std::string> roles;
  std::vector<int> layers;
  for (auto& pt : plan) {
    roles.push_back(pt.role);
    layers.push_back(pt.layer);
  }
  // Slots.
  std::vector<int64_t> local_of(static_cast<size_t>(m->cfg_.num_layers), -1);
  for (size_t i = 0; i < m->global_layer_.size(); ++i) {
    local_of[static_cast<size_t>(m->global_layer_[i])] = static_cast<int64_t>(i);
    m->layers_.push_back(std::make_unique<Layer>());
  }
  for (size_t i = 0; i < plan.size(); ++i) {
    const std::string& r = roles[i];
    const Tensor& t = m->params_[i].tensor;
    if (layers[i] < 0) {
      static const std::map<std::string, Tensor Model::*> top = {
          {"wte", &Model::wte_},           {"wpe", &Model::wpe_},
          {"type", &Model::type_},         {"emb_ln_w", &Model::emb_ln_w_},
          {"emb_ln_b", &Model::emb_ln_b_}, {"norm_w", &Model::norm_w_},
          {"norm_b", &Model::norm_b_},     {"lm_head", &Model::lm_head_},
          {"pool_w", &Model::pool_w_},     {"pool_b", &Model::pool_b_}};
      auto it = top.find(r);
      OSLO_CHECK(it != top.end(), OSLO_ERR_INTERNAL, "model: unknown role ", r);
      (*m).*(it->second) = t;
    } else {
      static const std::map<std::string, Tensor Layer::*> per = {{"ln1_w", &Layer::ln1_w},
                                                                 {"ln1_b", &Layer::ln1_b},
                                                                 {"ln2_w", &Layer::ln2_w},
                                                                 {"ln2_b", &Layer::ln2_b},
                                                                 {"qkv_w", &Layer::qkv_w},
                                                                 {"qkv_b", &Layer::qkv_b},
                                                                 {"q_w", &Layer::q_w},
                                                                 {"q_b", &Layer::q_b},
                                                                 {"k_w", &Layer::k_w},
                                                                 {"k_b", &Layer::k_b},
                                                                 {"v_w", &Layer::v_w},
                                                                 {"v_b", &Layer::v_b},
                                                                 {"o_w", &Layer::o_w},
                                                                 {"o_b", &Layer::o_b},
                                                                 {"up_w", &Layer::up_w},
                                                                 {"up_b", &Layer::up_b},
                                                                 {"gate_w", &Layer::gate_w},
                                                                 {"gate_b", &Layer::gate_b},
                                                                 {"gate_up_w", &Layer::gate_up_w},
                                                                 {"gate_up_b", &Layer::gate_up_b},
                                                                 {"down_w", &Layer::down_w},
                                                                 {"down_b", &Layer::down_b}};
      auto it = per.find(r);
      OSLO_CHECK(it != per.end(), OSLO_ERR_INTERNAL, "model: unknown role ", r);
      const int64_t local = local_of[static_cast<size_t>(layers[i])];
      OSLO_CHECK(local >= 0, OSLO_ERR_INTERNAL, "model: block ", layers[i], " is not this stage's");
      (*m->layers_[static_cast<size_t>(local)]).*(it->second) = t;
    }
  }
  m->bind();
  // Packed weight copies (the backend's layout for its products) are made
  // once here; parameters_changed() drops them and the next run makes them
  // again.
  m->make_packs();
  return m;
}

void Model::bind() {
  const int64_t nh = cfg_.num_heads, nkv = cfg_.num_kv_heads;
  nhl_ = nh / tp_;
  nkvl_ = nkv % tp_ == 0 ? nkv / tp_ : 1;
  const VocabPartition vp = vocab_partition(cfg_.vocab_size, tp_, rank_);
  vocab_start_ = vp.start;
  vocab_local_ = vp.local;
  vocab_valid_ = vp.valid;
  // The head (the last stage's, under pipeline parallelism).
  if (last_stage() && (cfg_.tie_word_embeddings || !lm_head_.defined())) lm_head_ = wte_;
  const BlockTraits& tr = cfg_.traits;
  for (const auto& L : layers_) {
    OSLO_CHECK((L->q_w.defined() && L->k_w.defined() && L->v_w.defined()) || L->qkv_w.defined(),
               OSLO_ERR_INTERNAL, cfg_.model_type, ": the rules fill no q/k/v projections");
    OSLO_CHECK((L->up_w.defined() || L->gate_up_w.defined()) && L->down_w.defined(),
               OSLO_ERR_INTERNAL, cfg_.model_type, ": the rules fill no MLP projections");
    OSLO_CHECK(!tr.gated_mlp || L->gate_w.defined() || L->gate_up_w.defined(), OSLO_ERR_INTERNAL,
               cfg_.model_type, ": a gated MLP without a gate projection");
  }
  for (size_t i = 0; i < params_.size(); ++i) param_of_[params_[i].tensor.storage().get()] = i;
  if (tr.norm_unit_offset) {
    // The norms scale by (1 + weight): hold the shifted copy for compute;
    // params_ keeps the stored weight for saving.
    auto shifted = [&](Tensor& w) {
      if (!w.defined()) return;
      std::vector<float> host(static_cast<size_t>(w.numel()));
      OSLO_CHECK(w.dtype() == OSLO_DTYPE_F32, OSLO_ERR_INTERNAL, "norm weights are held in f32");
      ctx_.backend().copy(host.data(), w.data(), w.nbytes(), CopyKind::DeviceToHost);
      for (float& v : host) v += 1.0f;
      Tensor c = Tensor::empty_like_shape(ctx_.backend_ptr(), OSLO_DTYPE_F32, w.shape());
      ctx_.backend().copy(c.data(), host.data(), c.nbytes(), CopyKind::HostToDevice);
      auto it = param_of_.find(w.storage().get());
      if (it != param_of_.end()) {
        param_of_[c.storage().get()] = it->second;
        derived_.emplace_back(c, it->second);
      }
      w = c;
    };
    for (auto& L : layers_) {
      shifted(L->ln1_w);
      shifted(L->ln2_w);
    }
    shifted(norm_w_);
  }
  if (tr.rotary) {
    // Hugging Face's rotary frequencies over the rotated dimensions, in f32
    // as it computes them.
    const int64_t R = cfg_.rotary_dims();
    const RopeConfig& r = cfg_.rope;
    inv_freq_.resize(static_cast<size_t>(R / 2));
    for (int64_t i = 0; i < R / 2; ++i) {
      float f = 1.0f / std::pow(static_cast<float>(r.theta),
                                static_cast<float>(2 * i) / static_cast<float>(R));
      if (r.scaling == RopeScaling::LINEAR) f /= static_cast<float>(r.factor);
      if (r.scaling == RopeScaling::WAVELENGTH_BANDS) {
        const double old = static_cast<double>(r.original_max_positions);
        const double low_wl = old / r.low_freq_factor, high_wl = old / r.high_freq_factor;
        const double wl = 2 * M_PI / f;
        double g = f;
        if (wl > low_wl) g = f / r.factor;
        if (!(wl < high_wl) && !(wl > low_wl)) {
          const double s =
              (old / wl - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
          g = (1 - s) * f / r.factor + s * f;
        }
        f = static_cast<float>(g);
      }
      inv_freq_[static_cast<size_t>(i)] = f;
    }
  }
}

namespace {

// y = x W^T (+ b): products in W's dtype (x converted if needed), f32 accumulation.
}  // namespace

void Model::attention(Layer& L, const View& q, const View& k, const View& v, const Tensor& out,
                      const Tensor& mask, int64_t B, int64_t S, bool use_cache) {
  Backend& be = ctx_.backend();
  const auto& bp = ctx_.backend_ptr();
  const int64_t D = cfg_.head_dim, nkvl = nkvl_, nhl = nhl_;
  const int64_t P = use_cache ? past_ : 0;
  const int64_t T = P + S;
  Tensor kc = L.k_cache, vc = L.v_cache;
  int64_t Tmax = max_len_;
  if (!use_cache) {
    kc = scratch(bp, OSLO_DTYPE_F32, {B, nkvl, S, D});
    vc = scratch(bp, OSLO_DTYPE_F32, {B, nkvl, S, D});
    Tmax = S;
  }
  // New keys and values into the cache at positions [P, P + S).
  const int64_t rk = k.strides[0], rv = v.strides[0], rq = q.strides[0];
  // With the cache: rows [row0_, row0_ + B) of it (a micro-batch of rows).
  const int64_t r0 = use_cache ? row0_ * nkvl * Tmax * D : 0;
  auto cache_at = [&](const Tensor& c) {
    return strided(at(view(c), r0 + P * D), OSLO_DTYPE_F32, {B, nkvl, S, D},
                   {nkvl * Tmax * D, Tmax * D, D, 1});
  };
  be.convert(cache_at(kc), strided(k.data, k.dtype, {B, nkvl, S, D}, {S * rk, D, rk, 1}));
  be.convert(cache_at(vc), strided(v.data, v.dtype, {B, nkvl, S, D}, {S * rv, D, rv, 1}));
  // Every query head over the cache [0, T) in one call (the backend's fused
  // attention, or its composition from products and a softmax).
  const View qv = strided(q.data, q.dtype, {B, nhl, S, D}, {S * rq, D, rq, 1});
  const View kv =
      strided(at(view(kc), r0), OSLO_DTYPE_F32, {B, nkvl, T, D}, {nkvl * Tmax * D, Tmax * D, D, 1});
  const View vv =
      strided(at(view(vc), r0), OSLO_DTYPE_F32, {B, nkvl, T, D}, {nkvl * Tmax * D, Tmax * D, D, 1});
  const View ov = strided(out.data(), out.dtype(), {B, nhl, S, D}, {S * nhl * D, D, nhl * D, 1});
  const View mv = strided(mask.data(), OSLO_DTYPE_F32, {B, T}, {T, 1});
  be.attention(ov, qv, kv, vv, &mv, 1.0f / std::sqrt(static_cast<float>(D)), causal(), P);
}

void Model::rope_tables(const std::vector<int64_t>& positions, Tensor* cos_t, Tensor* sin_t) {
  const int64_t BS = static_cast<int64_t>(positions.size()), R = cfg_.rotary_dims();
  std::vector<float> c(static_cast<size_t>(BS * R / 2)), s(c.size());
  for (int64_t r = 0; r < BS; ++r)
    for (int64_t i = 0; i < R / 2; ++i) {
      const float a =
          static_cast<float>(positions[static_cast<size_t>(r)]) * inv_freq_[static_cast<size_t>(i)];
      c[static_cast<size_t>(r * R / 2 + i)] = std::cos(a);
      s[static_cast<size_t>(r * R / 2 + i)] = std::sin(a);
    }
  Backend& be = ctx_.backend();
  *cos_t = scratch(ctx_.backend_ptr(), OSLO_DTYPE_F32, {BS, R / 2});
  *sin_t = scratch(ctx_.backend_ptr(), OSLO_DTYPE_F32, {BS, R / 2});
  be.copy(cos_t->data(), c.data(), cos_t->nbytes(), CopyKind::HostToDevice);
  be.copy(sin_t->data(), s.data(), sin_t->nbytes(), CopyKind::HostToDevice);
}

void Model::make_packs() {
  packs_.clear();
  packs_made_ = true;
  const auto& bp = ctx_.backend_ptr();
  for (const auto& L : layers_)
    for (const Tensor* w : {&L->qkv_w, &L->q_w, &L->k_w, &L->v_w, &L->o_w, &L->gate_up_w, &L->up_w,
                            &L->gate_w, &L->down_w}) {
      if (!w->defined() || w->ndim() != 2 || packs_.count(w->data())) continue;
      std::unique_ptr<PackedWeight> p = Backend::pack_weight(bp, transposed(view(*w)));
      if (!p) return;  // the backend packs none of this dtype: stop asking
      packs_.emplace(w->data(), std::move(p));
    }
}

const PackedWeight* Model::pack_of(const Tensor& w) const {
  auto it = packs_.find(w.data());
  return it == packs_.end() ? nullptr : it->second.get();
}

Tensor Model::run(const std::vector<int64_t>& ids, const std::vector<int64_t>& positions,
                  const std::vector<int64_t>& token_types, const std::vector<float>& key_mask,
                  int64_t B, int64_t S, bool use_cache) {
  // Micro-batches of rows through the stages: up to 2 x stages, each of at
  // least pipeline_micro_tokens_ tokens.
  int64_t M = 1;
  if (pp_ > 1 && B > 1)
    M = std::max<int64_t>(
        1, std::min<int64_t>({B, 2 * static_cast<int64_t>(pp_),
                              B * S / std::max<int64_t>(1, pipeline_micro_tokens_)}));
  if (M == 1) return run_rows(ids, positions, token_types, key_mask, B, S, use_cache, 0, true);
  check_whole("inference");
  const int64_t H = cfg_.hidden_size, T = (use_cache ? past_ : 0) + S;
  Tensor all = scratch(ctx_.backend_ptr(), OSLO_DTYPE_F32, {B * S, H});
  for (int64_t j = 0, r0 = 0; j < M; ++j) {
    const int64_t b = B / M + (j < B % M ? 1 : 0);
    auto rows_of = [&](const auto& v, int64_t per) {
      using V = std::decay_t<decltype(v)>;
      if (v.empty()) return V();
      return V(v.begin() + r0 * per, v.begin() + (r0 + b) * per);
    };
    const Tensor h = run_rows(rows_of(ids, S), rows_of(positions, S), rows_of(token_types, S),
                              rows_of(key_mask, T), b, S, use_cache, r0, false);
    if (last_stage())
      ctx_.backend().copy(static_cast<char*>(all.data()) + r0 * S * H * sizeof(float), h.data(),
                          h.nbytes(), CopyKind::DeviceToDevice);
    r0 += b;
  }
  from_last_stage(all);
  return all;
}

Tensor Model::run_rows(const std::vector<int64_t>& ids, const std::vector<int64_t>& positions,
                       const std::vector<int64_t>& token_types, const std::vector<float>& key_mask,
                       int64_t B, int64_t S, bool use_cache, int64_t row0, bool broadcast) {
  check_whole("inference");
  if (!packs_made_) make_packs();
  struct RowGuard {
    int64_t& slot;
    ~RowGuard() { slot = 0; }
  } row_guard{row0_};
  row0_ = row0;
  Backend& be = ctx_.backend();
  const auto& bp = ctx_.backend_ptr();
  be.set_num_threads(ctx_.num_threads());
  const int64_t BS = B * S, H = cfg_.hidden_size, D = cfg_.head_dim;
  const int64_t T = (use_cache ? past_ : 0) + S;
  OSLO_CHECK(cfg_.sliding_window == 0 || T <= cfg_.sliding_window, OSLO_ERR_NOT_SUPPORTED,
             cfg_.model_type, ": sequences longer than the sliding window (", cfg_.sliding_window,
             ") are not supported");
  auto upload = [&](const void* src, oslo_dtype dt, std::vector<int64_t> shape) {
    Tensor t = scratch(bp, dt, shape);
    be.copy(t.data(), src, t.nbytes(), CopyKind::HostToDevice);
    return t;
  };
  Tensor ids_t = upload(ids.data(), OSLO_DTYPE_I64, {BS});
  Tensor pos_t = upload(positions.data(), OSLO_DTYPE_I64, {BS});
  Tensor mask_t = upload(key_mask.data(), OSLO_DTYPE_F32, {B, T});
  const float eps = static_cast<float>(cfg_.norm_eps);

  // Embeddings (first stage), or the previous stage's output.
  Tensor x = scratch(bp, OSLO_DTYPE_F32, {BS, H});
  Tensor tmp = scratch(bp, OSLO_DTYPE_F32, {BS, H});
  if (!first_stage()) {
    recv(ctx_, OSLO_GROUP_PIPELINE, x.data(), x.nbytes(), pp_rank_ - 1);
  } else {
    be.gather_rows(view(x), view(wte_), view(ids_t), vocab_start_, cfg_.vocab_size);
    reduce_sum(ctx_, OSLO_GROUP_TENSOR, view(x));
    if (cfg_.traits.embed_scale != 1.0) {
      // As transformers: an f32 scalar cast to the embedding table's dtype.
      float s = static_cast<float>(cfg_.traits.embed_scale);
      if (wte_.dtype() == OSLO_DTYPE_BF16) s = bf16_to_f32(f32_to_bf16(s));
      if (wte_.dtype() == OSLO_DTYPE_F16) s = f16_to_f32(f32_to_f16(s));
      be.unary(OSLO_BK_SCALE, view(x), view(x), s);
    }
    if (wpe_.defined()) {
      be.gather_rows(view(tmp), view(wpe_), view(pos_t), 0, cfg_.max_positions);
      be.binary(OSLO_BK_ADD, view(x), view(x), view(tmp));
    }
    if (type_.defined()) {
      Tensor tt = upload(token_types.data(), OSLO_DTYPE_I64, {BS});
      be.gather_rows(view(tmp), view(type_), view(tt), 0, cfg_.type_vocab_size);
      be.binary(OSLO_BK_ADD, view(x), view(x), view(tmp));
    }
    if (emb_ln_w_.defined()) {
      View gw = view(emb_ln_w_), gb = view(emb_ln_b_);
      be.norm(view(x), view(x), &gw, &gb, eps, false);
    }
  }

  // Rotary tables [BS, R/2] (R: the rotated dimensions of a head).
  const BlockTraits& tr = cfg_.traits;
  Tensor cos_t, sin_t;
  if (tr.rotary) rope_tables(positions, &cos_t, &sin_t);
  // On the first R dimensions of each head, in place: x * cos +
  // rotate_half(x) * sin; the others pass.
  auto rope = [&](const View& t, int64_t heads) {
    be.rope(strided(t.data, t.dtype, {BS, heads, D}, {t.strides[0], D, 1}), view(cos_t),
            view(sin_t));
  };
  auto add_bias = [&](const View& y, const Tensor& b) {
    if (b.defined()) be.binary(OSLO_BK_ADD, y, y, rows_bcast(b, y.shape[0]));
  };
  const oslo_bk_unary act_op = model_detail::act_op(cfg_.act);
  auto act = [&](const View& y) { be.unary(act_op, y, y); };

  const bool rms = tr.norm == NormKind::RMS_NORM, post_ln = tr.post_norm,
             parallel = tr.parallel_residual;
  auto norm = [&](const View& out, const View& in, const Tensor& w, const Tensor& b) {
    View wv = view(w), bv;
    if (b.defined()) bv = view(b);
    be.norm(out, in, &wv, rms ? nullptr : &bv, eps, rms);
  };
  // A residual branch's output not yet added to x: x += y (+ bias). Pre-norm
  // blocks add it in the same pass as the next norm reads x
  // (residual_norm); post-norm blocks add it at once.
  View pend_y;
  const Tensor* pend_b = nullptr;
  bool pending = false;
  auto defer = [&](const View& y, const Tensor* b) {
    pend_y = y;
    pend_b = b && b->defined() ? b : nullptr;
    pending = true;
  };
  // out = norm(x) after the pending residual.
  auto norm_x = [&](const View& out, const Tensor& w, const Tensor& b) {
    if (!pending) return norm(out, view(x), w, b);
    View wv = view(w), bv, biasv;
    if (b.defined()) bv = view(b);
    if (pend_b) biasv = view(*pend_b);
    be.residual_norm(out, view(x), &pend_y, pend_b ? &biasv : nullptr, &wv, rms ? nullptr : &bv,
                     eps, rms);
    pending = false;
  };
  // x += the pending residual (no norm follows).
  auto flush = [&]() {
    if (!pending) return;
    add_bias(pend_y, pend_b ? *pend_b : Tensor());
    be.binary(OSLO_BK_ADD, view(x), view(x), pend_y);
    pending = false;
  };
  const int64_t qw = nhl_ * D, kw = nkvl_ * D;
  // A block's linear, through the weight's packed copy when there is one.
  auto lin = [&](const View& y, const View& x_in, const Tensor& w, const Tensor* b,
                 const oslo_bk_unary* a = nullptr,
                 const View* g = nullptr) { linear(be, bp, y, x_in, w, b, a, g, pack_of(w)); };
  Tensor h = scratch(bp, OSLO_DTYPE_F32, {BS, H});
  Tensor att = scratch(bp, OSLO_DTYPE_F32, {BS, qw});
  // tmp holds the attention branch's output, mlp_out the MLP's; each stays
  // pending (unadded to x) until the next norm reads x.
  Tensor mlp_out = scratch(bp, OSLO_DTYPE_F32, {BS, H});
  for (size_t li = 0; li < layers_.size(); ++li) {
    // Virtual stages: between two of this rank's chunks the residual stream
    // goes round the other ranks (to the next rank, back from the previous).
    if (pp_ > 1 && li > 0) {
      bool boundary = false;
      for (const auto& ch : chunks_) boundary = boundary || ch.first == li;
      if (boundary) {
        flush();
        send(ctx_, OSLO_GROUP_PIPELINE, x.data(), x.nbytes(), (pp_rank_ + 1) % pp_);
        recv(ctx_, OSLO_GROUP_PIPELINE, x.data(), x.nbytes(), (pp_rank_ + pp_ - 1) % pp_);
      }
    }
    Layer& L = *layers_[li];
    // Attention.
    const View ain = post_ln ? view(x) : view(h);
    if (!post_ln) norm_x(view(h), L.ln1_w, L.ln1_b);
    Tensor qkv, qt, kt, vt;
    View q, k, v;
    if (L.qkv_w.defined()) {
      qkv = scratch(bp, OSLO_DTYPE_F32, {BS, qw + 2 * kw});
      lin(view(qkv), ain, L.qkv_w, &L.qkv_b);
      q = columns(view(qkv), 0, qw);
      k = columns(view(qkv), qw, kw);
      v = columns(view(qkv), qw + kw, kw);
    } else {
      qt = scratch(bp, OSLO_DTYPE_F32, {BS, qw});
      kt = scratch(bp, OSLO_DTYPE_F32, {BS, kw});
      vt = scratch(bp, OSLO_DTYPE_F32, {BS, kw});
      lin(view(qt), ain, L.q_w, &L.q_b);
      lin(view(kt), ain, L.k_w, &L.k_b);
      lin(view(vt), ain, L.v_w, &L.v_b);
      q = view(qt);
      k = view(kt);
      v = view(vt);
    }
    if (tr.rotary) {
      rope(q, nhl_);
      rope(k, nkvl_);
    }
    attention(L, q, k, v, att, mask_t, B, S, use_cache);
    lin(view(tmp), view(att), L.o_w, nullptr);
    if (!parallel) {
      reduce_sum(ctx_, OSLO_GROUP_TENSOR, view(tmp));
      defer(view(tmp), &L.o_b);
      if (post_ln) {
        flush();
        norm(view(x), view(x), L.ln1_w, L.ln1_b);
      }
    }
    // MLP (with a parallel residual, on the block's input x).
    const View min = post_ln ? view(x) : view(h);
    if (!post_ln) norm_x(view(h), L.ln2_w, L.ln2_b);
    const View mo = view(mlp_out);
    Tensor up;
    View act_out;
    if (L.gate_up_w.defined()) {  // fused [gate | up], local [gate_r | up_r]
      const int64_t il = L.gate_up_w.dim(0) / 2;
      up = scratch(bp, OSLO_DTYPE_F32, {BS, 2 * il});
      lin(view(up), min, L.gate_up_w, &L.gate_up_b);
      const View g = columns(view(up), 0, il), u = columns(view(up), il, il);
      act(g);
      be.binary(OSLO_BK_MUL, u, u, g);
      act_out = u;
    } else {
      const int64_t il = L.up_w.dim(0);
      up = scratch(bp, OSLO_DTYPE_F32, {BS, il});
      if (tr.gated_mlp) {
        // up = x W_up^T, then up = act(x W_gate^T) * up in the gate
        // product's epilogue.
        lin(view(up), min, L.up_w, &L.up_b);
        const View uv = view(up);
        lin(uv, min, L.gate_w, &L.gate_b, &act_op, &uv);
      } else {
        lin(view(up), min, L.up_w, &L.up_b, &act_op);
      }
      act_out = view(up);
    }
    lin(mo, act_out, L.down_w, nullptr);
    if (parallel) {
      // x + attn + mlp: the two row-parallel partial sums share one all-reduce.
      be.binary(OSLO_BK_ADD, view(tmp), view(tmp), mo);
      reduce_sum(ctx_, OSLO_GROUP_TENSOR, view(tmp));
      add_bias(view(tmp), L.o_b);
      defer(view(tmp), &L.down_b);
    } else {
      reduce_sum(ctx_, OSLO_GROUP_TENSOR, mo);
      defer(mo, &L.down_b);
      if (post_ln) {
        flush();
        norm(view(x), view(x), L.ln2_w, L.ln2_b);
      }
    }
  }
  if (!last_stage()) {
    // The residual stream goes on to the next stage; the final hidden
    // states come back from the last.
    flush();
    send(ctx_, OSLO_GROUP_PIPELINE, x.data(), x.nbytes(), pp_rank_ + 1);
    if (broadcast) from_last_stage(h);
    return h;
  }
  if (norm_w_.defined() && !post_ln) {
    norm_x(view(h), norm_w_, norm_b_);
  } else {
    flush();
    if (norm_w_.defined()) norm(view(x), view(x), norm_w_, norm_b_);
    h = x;
  }
  if (pp_ > 1 && broadcast) from_last_stage(h);
  return h;
}

void Model::from_last_stage(const Tensor& t) {
  if (pp_ == 1) return;
  broadcast(ctx_, OSLO_GROUP_PIPELINE, t.data(), static_cast<size_t>(t.numel()), t.dtype(),
            pp_ - 1);
}

Tensor Model::head_local(const View& hidden, int64_t r) {
  OSLO_CHECK(lm_head_.defined() && causal(), OSLO_ERR_NOT_SUPPORTED, cfg_.model_type,
             ": this model has no language-model head");
  Tensor local = scratch(ctx_.backend_ptr(), OSLO_DTYPE_F32, {r, vocab_local_});
  linear(ctx_.backend(), ctx_.backend_ptr(), view(local), hidden, lm_head_, nullptr);
  return local;
}

std::vector<float> Model::logits_of(const View& hidden, int64_t r) {
  if (pp_ > 1) {
    // The head is the last stage's: its logits to every stage.
    Tensor all = scratch(ctx_.backend_ptr(), OSLO_DTYPE_F32, {r, cfg_.vocab_size});
    std::vector<float> out;
    if (last_stage()) {
      out = head_logits(hidden, r);
      ctx_.backend().copy(all.data(), out.data(), all.nbytes(), CopyKind::HostToDevice);
    }
    from_last_stage(all);
    out.resize(static_cast<size_t>(all.numel()));
    ctx_.backend().copy(out.data(), all.data(), all.nbytes(), CopyKind::DeviceToHost);
    return out;
  }
  return head_logits(hidden, r);
}

std::vector<float> Model::head_logits(const View& hidden, int64_t r) {
  Backend& be = ctx_.backend();
  const auto& bp = ctx_.backend_ptr();
  Tensor local = head_local(hidden, r);
  Tensor full = local;
  if (tp_ > 1) {
    full = scratch(bp, OSLO_DTYPE_F32, {r, vocab_local_ * tp_});
    gather_last_dim(ctx_, OSLO_GROUP_TENSOR, view(local), view(full));
  }
  std::vector<float> host(static_cast<size_t>(full.numel()));
  be.copy(host.data(), full.data(), full.nbytes(), CopyKind::DeviceToHost);
  const int64_t V = cfg_.vocab_size;
  std::vector<float> out(static_cast<size_t>(r * V));
  for (int q = 0; q < tp_; ++q) {
    const VocabPartition vp = vocab_partition(V, tp_, q);
    for (int64_t i = 0; i < r; ++i)
      std::copy_n(host.begin() + (i * vocab_local_ * tp_ + q * vocab_local_), vp.valid,
                  out.begin() + (i * V + vp.start));
  }
  return out;
}

std::vector<CausalLM::Choice> Model::argmax_of(const View& hidden, int64_t r) {
  if (pp_ > 1) {
    // The last stage's choices (token, logit) to every stage.
    Tensor tok = scratch(ctx_.backend_ptr(), OSLO_DTYPE_I64, {r});
    Tensor val = scratch(ctx_.backend_ptr(), OSLO_DTYPE_F32, {r});
    std::vector<int64_t> ht(static_cast<size_t>(r));
    std::vector<float> hv(static_cast<size_t>(r));
    if (last_stage()) {
      const std::vector<Choice> c = head_argmax(hidden, r);
      for (size_t i = 0; i < c.size(); ++i) {
        ht[i] = c[i].token;
        hv[i] = c[i].logit;
      }
      ctx_.backend().copy(tok.data(), ht.data(), tok.nbytes(), CopyKind::HostToDevice);
      ctx_.backend().copy(val.data(), hv.data(), val.nbytes(), CopyKind::HostToDevice);
    }
    from_last_stage(tok);
    from_last_stage(val);
    ctx_.backend().copy(ht.data(), tok.data(), tok.nbytes(), CopyKind::DeviceToHost);
    ctx_.backend().copy(hv.data(), val.data(), val.nbytes(), CopyKind::DeviceToHost);
    std::vector<Choice> out(static_cast<size_t>(r));
    for (size_t i = 0; i < out.size(); ++i) out[i] = Choice{ht[i], hv[i]};
    return out;
  }
  return head_argmax(hidden, r);
}

std::vector<CausalLM::Choice> Model::head_argmax(const View& hidden, int64_t r) {
  Backend& be = ctx_.backend();
  const auto& bp = ctx_.backend_ptr();
  Tensor local = head_local(hidden, r);
  const int64_t V = cfg_.vocab_size;
  // Each rank's choice over the real rows of its slice (padding excluded).
  Tensor idx = scratch(bp, OSLO_DTYPE_I64, {r}), val = scratch(bp, OSLO_DTYPE_F32, {r});
  be.argmax(view(idx), view(val), view(local), vocab_partition(V, tp_, rank_).valid);
  Tensor all_idx = idx, all_val = val;
  if (tp_ > 1) {
    all_idx = scratch(bp, OSLO_DTYPE_I64, {tp_, r});
    all_val = scratch(bp, OSLO_DTYPE_F32, {tp_, r});
    gather_first_dim(ctx_, OSLO_GROUP_TENSOR, view(idx), view(all_idx));
    gather_first_dim(ctx_, OSLO_GROUP_TENSOR, view(val), view(all_val));
  }
  std::vector<int64_t> hi(static_cast<size_t>(tp_ * r));
  std::vector<float> hv(hi.size());
  be.copy(hi.data(), all_idx.data(), all_idx.nbytes(), CopyKind::DeviceToHost);
  be.copy(hv.data(), all_val.data(), all_val.nbytes(), CopyKind::DeviceToHost);
  // Slices in rank order cover the vocabulary in order: a strictly larger
  // logit or the first NaN replaces the choice, so ties keep the lowest token.
  std::vector<Choice> out(static_cast<size_t>(r), Choice{-1, 0.f});
  for (int64_t i = 0; i < r; ++i) {
    Choice& c = out[static_cast<size_t>(i)];
    for (int q = 0; q < tp_; ++q) {
      const int64_t j = hi[static_cast<size_t>(q * r + i)];
      const float v = hv[static_cast<size_t>(q * r + i)];
      if (j < 0) continue;  // a slice without real rows
      if (c.token < 0 || (c.logit == c.logit && (v > c.logit || v != v)))
        c = Choice{vocab_partition(V, tp_, q).start + j, v};
    }
    OSLO_CHECK(c.token >= 0, OSLO_ERR_INTERNAL, "argmax: no vocabulary slice has a token");
  }
  return out;
}

namespace {

// Positions from a [rows, len] 0/1 mask: cumulative count of real tokens - 1
// (0 for leading padding), for the last n columns.
std::vector<int64_t> positions_of(const std::vector<int64_t>& mask, int64_t rows, int64_t len,
                                  int64_t n) {
  std::vector<int64_t> pos(static_cast<size_t>(rows * n));
  for (int64_t b = 0; b < rows; ++b) {
    int64_t count = 0;
    for (int64_t t = 0; t < len; ++t) {
      count += mask[static_cast<size_t>(b * len + t)] != 0;
      if (t >= len - n)
        pos[static_cast<size_t>(b * n + t - (len - n))] = std::max<int64_t>(0, count - 1);
    }
  }
  return pos;
}

std::vector<float> additive(const std::vector<int64_t>& mask) {
  std::vector<float> m(mask.size());
  for (size_t i = 0; i < mask.size(); ++i) m[i] = mask[i] ? 0.f : -FLT_MAX;
  return m;
}

}  // namespace

void Model::forward(const std::vector<int64_t>& ids, const std::vector<int64_t>& mask0,
                    const std::vector<int64_t>& token_types, int64_t B, int64_t S, bool want_logits,
                    std::vector<float>* out) {
  OSLO_CHECK(B > 0 && S > 0, OSLO_ERR_INVALID_ARGUMENT, "model forward: batch (", B,
             ") and sequence length (", S, ") must be positive");
  const size_t n = static_cast<size_t>(B * S);
  OSLO_CHECK(ids.size() == n, OSLO_ERR_SHAPE, "model forward: ", ids.size(), " ids for [", B, ", ",
             S, "]");
  std::vector<int64_t> mask = mask0.empty() ? std::vector<int64_t>(n, 1) : mask0;
  OSLO_CHECK(mask.size() == n, OSLO_ERR_SHAPE, "model forward: attention mask has ", mask.size(),
             " entries for [", B, ", ", S, "]");
  std::vector<int64_t> tt = token_types.empty() ? std::vector<int64_t>(n, 0) : token_types;
  OSLO_CHECK(tt.size() == n, OSLO_ERR_SHAPE, "model forward: token types have ", tt.size(),
             " entries for [", B, ", ", S, "]");
  Tensor h = run(ids, positions_of(mask, B, S, S), tt, additive(mask), B, S, false);
  if (want_logits) {
    *out = logits_of(view(h), B * S);
  } else {
    out->resize(static_cast<size_t>(h.numel()));
    ctx_.backend().copy(out->data(), h.data(), h.nbytes(), CopyKind::DeviceToHost);
  }
}

void Model::embed(const std::vector<int64_t>& ids, const std::vector<int64_t>& mask0, int64_t B,
                  int64_t S, bool normalize, std::vector<float>* out) {
  std::vector<float> h;
  const size_t n = static_cast<size_t>(B * S);
  std::vector<int64_t> mask = mask0.empty() ? std::vector<int64_t>(n, 1) : mask0;
  forward(ids, mask, {}, B, S, false, &h);
  const int64_t H = cfg_.hidden_size;
  out->assign(static_cast<size_t>(B * H), 0.f);
  for (int64_t b = 0; b < B; ++b) {
    std::vector<double> acc(static_cast<size_t>(H), 0.0);
    double count = 0;
    for (int64_t s = 0; s < S; ++s) {
      if (!mask[static_cast<size_t>(b * S + s)]) continue;
      count += 1;
      for (int64_t i = 0; i < H; ++i)
        acc[static_cast<size_t>(i)] += h[static_cast<size_t>((b * S + s) * H + i)];
    }
    count = std::max(count, 1e-9);
    double norm = 0;
    for (auto& a : acc) {
      a /= count;
      norm += a * a;
    }
    norm = normalize ? std::max(std::sqrt(norm), 1e-12) : 1.0;
    for (int64_t i = 0; i < H; ++i)
      (*out)[static_cast<size_t>(b * H + i)] =
          static_cast<float>(acc[static_cast<size_t>(i)] / norm);
  }
}

void Model::check_whole(const char* what) const {
  OSLO_CHECK(!partitioned_, OSLO_ERR_NOT_SUPPORTED, "model: ", what,
             " needs whole parameters, but a ZeRO-3 optimizer holds them partitioned over the "
             "data-parallel group; save a training checkpoint and load it for ",
             what);
}

void Model::save(const std::string& dir) {
  check_whole("Model::save");
  const Topology& t = ctx_.topology();
  const CheckpointLayout layout = layout_of(t);
  // Tensors held in f32 for precision (norms, biases) go back in their
  // stored dtype (exact: they were widened from it).
  std::vector<PlacedTensor> out = params_;
  for (size_t i = 0; i < out.size(); ++i) {
    const oslo_dtype dt = stored_dtype_[i];
    if (out[i].tensor.dtype() == OSLO_DTYPE_F32 && dt != OSLO_DTYPE_F32 && dtype_is_float(dt)) {
      Tensor c = Tensor::empty_like_shape(ctx_.backend_ptr(), dt, out[i].tensor.shape());
      ctx_.backend().convert(view(c), view(out[i].tensor));
      out[i].tensor = c;
    }
  }
  save_placed(dir, out, cfg_.json_text, extra_files_, layout, ctx_.control(OSLO_GROUP_WORLD));
}

void Model::reset(int64_t rows, int64_t max_len) {
  OSLO_CHECK(causal(), OSLO_ERR_NOT_SUPPORTED, cfg_.model_type, " cannot generate text");
  OSLO_CHECK(rows > 0 && max_len > 0, OSLO_ERR_INVALID_ARGUMENT,
             "model: rows and max length must be positive");
  const auto& bp = ctx_.backend_ptr();
  for (auto& L : layers_) {
    L->k_cache = Tensor();
    L->v_cache = Tensor();
  }
  for (auto& L : layers_) {
    L->k_cache = scratch(bp, OSLO_DTYPE_F32, {rows, nkvl_, max_len, cfg_.head_dim});
    L->v_cache = scratch(bp, OSLO_DTYPE_F32, {rows, nkvl_, max_len, cfg_.head_dim});
  }
  rows_ = rows;
  max_len_ = max_len;
  past_ = 0;
}

View Model::append_hidden(const std::vector<int64_t>& tokens, int64_t n,
                          const std::vector<uint8_t>& mask8, Tensor* keep) {
  OSLO_CHECK(rows_ > 0, OSLO_ERR_INVALID_ARGUMENT, "model: append before reset");
  OSLO_CHECK(n > 0 && past_ + n <= max_len_, OSLO_ERR_INVALID_ARGUMENT, "model: appending ", n,
             " tokens to ", past_, " exceeds the cache length ", max_len_);
  const int64_t T = past_ + n;
  OSLO_CHECK(tokens.size() == static_cast<size_t>(rows_ * n) &&
                 mask8.size() == static_cast<size_t>(rows_ * T),
             OSLO_ERR_SHAPE, "model: append needs ", rows_ * n, " tokens and ", rows_ * T,
             " mask entries");
  std::vector<int64_t> mask(mask8.begin(), mask8.end());
  *keep = run(tokens, positions_of(mask, rows_, T, n), {}, additive(mask), rows_, n, true);
  past_ += n;
  const int64_t H = cfg_.hidden_size;
  return strided(at(view(*keep), (n - 1) * H), OSLO_DTYPE_F32, {rows_, H}, {n * H, 1});
}

std::vector<float> Model::append(const std::vector<int64_t>& tokens, int64_t n,
                                 const std::vector<uint8_t>& mask) {
  Tensor h;
  const View last = append_hidden(tokens, n, mask, &h);
  return logits_of(last, rows_);
}

std::vector<CausalLM::Choice> Model::append_argmax(const std::vector<int64_t>& tokens, int64_t n,
                                                   const std::vector<uint8_t>& mask) {
  Backend& be = ctx_.backend();
  // A decode step (one token a row) at TP = PP = 1 on a backend that records
  // work (the CUDA plugin's graphs): the step's ops are recorded and run as
  // one launch; only the choices come back. The ids are checked here, since
  // the device-side check cannot read its result back while recording.
  const bool recordable = n == 1 && tp_ == 1 && pp_ == 1 && rows_ > 0 &&
                          tokens.size() == static_cast<size_t>(rows_) &&
                          std::all_of(tokens.begin(), tokens.end(),
                                      [&](int64_t t) { return t >= 0 && t < cfg_.vocab_size; });
  if (!recordable || !be.graph_begin()) {
    Tensor h;
    const View last = append_hidden(tokens, n, mask, &h);
    return argmax_of(last, rows_);
  }
  const auto& bp = ctx_.backend_ptr();
  Tensor idx = scratch(bp, OSLO_DTYPE_I64, {rows_}), val = scratch(bp, OSLO_DTYPE_F32, {rows_});
  {
    bool recording = true;
    try {
      Tensor h;
      const View last = append_hidden(tokens, n, mask, &h);
      Tensor local = head_local(last, rows_);
      be.argmax(view(idx), view(val), view(local), cfg_.vocab_size);
      recording = false;
      be.graph_end(true);
    } catch (...) {
      if (recording) try {
          be.graph_end(false);
        } catch (...) {
        }
      throw;
    }
  }
  std::vector<int64_t> hi(static_cast<size_t>(rows_));
  std::vector<float> hv(hi.size());
  be.copy(hi.data(), idx.data(), idx.nbytes(), CopyKind::DeviceToHost);
  be.copy(hv.data(), val.data(), val.nbytes(), CopyKind::DeviceToHost);
  std::vector<Choice> out(hi.size());
  for (size_t i = 0; i < out.size(); ++i) {
    OSLO_CHECK(hi[i] >= 0, OSLO_ERR_INTERNAL, "argmax: no token chosen");
    out[i] = Choice{hi[i], hv[i]};
  }
  return out;
}

void Model::reorder(const std::vector<int64_t>& src) {
  OSLO_CHECK(src.size() == static_cast<size_t>(rows_), OSLO_ERR_SHAPE, "model: reorder of ",
             src.size(), " rows, the cache has ", rows_);
  Backend& be = ctx_.backend();
  const auto& bp = ctx_.backend_ptr();
  Tensor idx = scratch(bp, OSLO_DTYPE_I64, {rows_});
  be.copy(idx.data(), src.data(), idx.nbytes(), CopyKind::HostToDevice);
  const int64_t per = nkvl_ * max_len_ * cfg_.head_dim;
  for (auto& L : layers_) {
    for (Tensor* c : {&L->k_cache, &L->v_cache}) {
      Tensor n = scratch(bp, OSLO_DTYPE_F32, c->shape());
      be.gather_rows(make_view(n.data(), OSLO_DTYPE_F32, {rows_, per}),
                     make_view(c->data(), OSLO_DTYPE_F32, {rows_, per}), view(idx), 0, rows_);
      *c = n;
    }
  }
}

}  // namespace oslo
