#include "core/model/stack.hpp"

#include <cmath>

#include "core/common/dtype.hpp"
#include "core/common/error.hpp"
#include "core/common/log.hpp"
#include "core/layers/embedding.hpp"
#include "core/layers/functional.hpp"
#include "core/parallel/mappings.hpp"
#include "core/tensor/view.hpp"

namespace oslo {

BlockStack::BlockStack(Context& c, const ModelConfig& config) : ctx(c), cfg(config) {}

BlockStack::~BlockStack() = default;

void BlockStack::bind(const std::vector<PlacedTensor>& params,
                      const std::vector<std::string>& roles, const std::vector<int>& layer_of) {
  std::vector<int64_t> local_of(static_cast<size_t>(cfg.num_layers), -1);
  for (size_t i = 0; i < global_layer.size(); ++i) {
    local_of[static_cast<size_t>(global_layer[i])] = static_cast<int64_t>(i);
    layers.push_back(std::make_unique<BlockWeights>());
  }
  static const std::map<std::string, Tensor BlockStack::*> top = {
      {"wte", &BlockStack::wte},           {"wpe", &BlockStack::wpe},
      {"type", &BlockStack::type},         {"emb_ln_w", &BlockStack::emb_ln_w},
      {"emb_ln_b", &BlockStack::emb_ln_b}, {"norm_w", &BlockStack::norm_w},
      {"norm_b", &BlockStack::norm_b},     {"lm_head", &BlockStack::lm_head},
      {"pool_w", &BlockStack::pool_w},     {"pool_b", &BlockStack::pool_b}};
  static const std::map<std::string, Tensor BlockWeights::*> per = {
      {"ln1_w", &BlockWeights::ln1_w},
      {"ln1_b", &BlockWeights::ln1_b},
      {"ln2_w", &BlockWeights::ln2_w},
      {"ln2_b", &BlockWeights::ln2_b},
      {"qkv_w", &BlockWeights::qkv_w},
      {"qkv_b", &BlockWeights::qkv_b},
      {"q_w", &BlockWeights::q_w},
      {"q_b", &BlockWeights::q_b},
      {"k_w", &BlockWeights::k_w},
      {"k_b", &BlockWeights::k_b},
      {"v_w", &BlockWeights::v_w},
      {"v_b", &BlockWeights::v_b},
      {"o_w", &BlockWeights::o_w},
      {"o_b", &BlockWeights::o_b},
      {"up_w", &BlockWeights::up_w},
      {"up_b", &BlockWeights::up_b},
      {"gate_w", &BlockWeights::gate_w},
      {"gate_b", &BlockWeights::gate_b},
      {"gate_up_w", &BlockWeights::gate_up_w},
      {"gate_up_b", &BlockWeights::gate_up_b},
      {"down_w", &BlockWeights::down_w},
      {"down_b", &BlockWeights::down_b}};
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string& r = roles[i];
    const Tensor& t = params[i].tensor;
    if (layer_of[i] < 0) {
      auto it = top.find(r);
      OSLO_CHECK(it != top.end(), OSLO_ERR_INTERNAL, "model: unknown role ", r);
      this->*(it->second) = t;
    } else {
      auto it = per.find(r);
      OSLO_CHECK(it != per.end(), OSLO_ERR_INTERNAL, "model: unknown role ", r);
      const int64_t local = local_of[static_cast<size_t>(layer_of[i])];
      OSLO_CHECK(local >= 0, OSLO_ERR_INTERNAL, "model: block ", layer_of[i],
                 " is not this stage's");
      (*layers[static_cast<size_t>(local)]).*(it->second) = t;
    }
  }

  const int64_t nh = cfg.num_heads, nkv = cfg.num_kv_heads;
  nhl = nh / tp;
  nkvl = nkv % tp == 0 ? nkv / tp : 1;
  const VocabPartition vp = vocab_partition(cfg.vocab_size, tp, rank);
  vocab_start = vp.start;
  vocab_local = vp.local;
  vocab_valid = vp.valid;
  // The head (the last stage's, under pipeline parallelism).
  if (last_stage() && (cfg.tie_word_embeddings || !lm_head.defined())) lm_head = wte;
  const BlockTraits& tr = cfg.traits;
  for (const auto& L : layers) {
    OSLO_CHECK((L->q_w.defined() && L->k_w.defined() && L->v_w.defined()) || L->qkv_w.defined(),
               OSLO_ERR_INTERNAL, cfg.model_type, ": the rules fill no q/k/v projections");
    OSLO_CHECK((L->up_w.defined() || L->gate_up_w.defined()) && L->down_w.defined(),
               OSLO_ERR_INTERNAL, cfg.model_type, ": the rules fill no MLP projections");
    OSLO_CHECK(!tr.gated_mlp || L->gate_w.defined() || L->gate_up_w.defined(), OSLO_ERR_INTERNAL,
               cfg.model_type, ": a gated MLP without a gate projection");
  }
  for (size_t i = 0; i < params.size(); ++i) param_of_[params[i].tensor.storage().get()] = i;
  if (tr.norm_unit_offset) {
    // The norms scale by (1 + weight): hold the shifted copy for compute;
    // the parameters keep the stored weight for saving.
    auto shifted = [&](Tensor& w) {
      if (!w.defined()) return;
      std::vector<float> host(static_cast<size_t>(w.numel()));
      OSLO_CHECK(w.dtype() == OSLO_DTYPE_F32, OSLO_ERR_INTERNAL, "norm weights are held in f32");
      ctx.backend().copy(host.data(), w.data(), w.nbytes(), CopyKind::DeviceToHost);
      for (float& v : host) v += 1.0f;
      Tensor c = Tensor::empty_like_shape(ctx.backend_ptr(), OSLO_DTYPE_F32, w.shape());
      ctx.backend().copy(c.data(), host.data(), c.nbytes(), CopyKind::HostToDevice);
      auto it = param_of_.find(w.storage().get());
      if (it != param_of_.end()) {
        param_of_[c.storage().get()] = it->second;
        derived_.emplace_back(c, it->second);
      }
      w = c;
    };
    for (auto& L : layers) {
      shifted(L->ln1_w);
      shifted(L->ln2_w);
    }
    shifted(norm_w);
  }
  if (tr.rotary) {
    // Hugging Face's rotary frequencies over the rotated dimensions, in f32
    // as it computes them.
    const int64_t R = cfg.rotary_dims();
    const RopeConfig& r = cfg.rope;
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

void BlockStack::parameters_changed(const std::vector<PlacedTensor>& params) {
  restore_plain();
  packs_.clear();
  packs_made_ = false;
  if (derived_.empty()) return;
  Backend& be = ctx.backend();
  Tensor one = scratch(ctx.backend_ptr(), OSLO_DTYPE_F32, {1});
  be.fill(view(one), 1.0);
  for (auto& d : derived_) {
    const Tensor& src = params[d.second].tensor;
    View o = make_view(one.data(), OSLO_DTYPE_F32, {src.numel()});
    o.strides[0] = 0;
    be.binary(OSLO_BK_ADD, view(d.first), view(src), o);
  }
}

int64_t BlockStack::param_index(const Tensor& t) const {
  if (!t.defined()) return -1;
  auto it = param_of_.find(t.storage().get());
  return it == param_of_.end() ? -1 : static_cast<int64_t>(it->second);
}

BlockEnv BlockStack::env(int64_t B, int64_t S) const {
  BlockEnv e;
  e.ctx = &ctx;
  e.cfg = &cfg;
  e.tp = tp;
  e.rank = rank;
  e.nhl = nhl;
  e.nkvl = nkvl;
  e.B = B;
  e.S = S;
  return e;
}

void BlockStack::rope_tables(const std::vector<int64_t>& positions, Tensor* cos_t,
                             Tensor* sin_t) const {
  const int64_t BS = static_cast<int64_t>(positions.size()), R = cfg.rotary_dims();
  std::vector<float> c(static_cast<size_t>(BS * R / 2)), s(c.size());
  for (int64_t r = 0; r < BS; ++r)
    for (int64_t i = 0; i < R / 2; ++i) {
      const float a =
          static_cast<float>(positions[static_cast<size_t>(r)]) * inv_freq_[static_cast<size_t>(i)];
      c[static_cast<size_t>(r * R / 2 + i)] = std::cos(a);
      s[static_cast<size_t>(r * R / 2 + i)] = std::sin(a);
    }
  Backend& be = ctx.backend();
  *cos_t = scratch(ctx.backend_ptr(), OSLO_DTYPE_F32, {BS, R / 2});
  *sin_t = scratch(ctx.backend_ptr(), OSLO_DTYPE_F32, {BS, R / 2});
  be.copy(cos_t->data(), c.data(), cos_t->nbytes(), CopyKind::HostToDevice);
  be.copy(sin_t->data(), s.data(), sin_t->nbytes(), CopyKind::HostToDevice);
}

float BlockStack::embed_scale() const {
  // As transformers: an f32 scalar cast to the embedding table's dtype.
  float s = static_cast<float>(cfg.traits.embed_scale);
  if (wte.dtype() == OSLO_DTYPE_BF16) s = bf16_to_f32(f32_to_bf16(s));
  if (wte.dtype() == OSLO_DTYPE_F16) s = f16_to_f32(f32_to_f16(s));
  return s;
}

void BlockStack::gather_quantized(const Tensor& ids, const std::vector<int64_t>* host_ids,
                                  const Tensor& x) const {
  Backend& be = ctx.backend();
  const int64_t BS = x.dim(0), H = x.dim(1), V = cfg.vocab_size, rows = wte.dim(0);
  std::vector<int64_t> copied;
  const int64_t* id = nullptr;
  if (host_ids) {
    OSLO_CHECK(static_cast<int64_t>(host_ids->size()) == BS, OSLO_ERR_INTERNAL,
               "embedding: ", host_ids->size(), " host ids for ", BS, " rows");
    id = host_ids->data();
  } else {
    OSLO_CHECK(ids.dtype() == OSLO_DTYPE_I64 && ids.numel() == BS, OSLO_ERR_INTERNAL,
               "embedding: ids must be i64 [", BS, "]");
    copied.resize(static_cast<size_t>(BS));
    be.copy(copied.data(), ids.data(), ids.nbytes(), CopyKind::DeviceToHost);
    id = copied.data();
  }
  for (int64_t i = 0; i < BS; ++i)
    OSLO_CHECK(id[i] >= 0 && id[i] < V, OSLO_ERR_INVALID_ARGUMENT, "id ", id[i], " at position ", i,
               " is outside [0, ", V, ")");
  const size_t rb = dtype_bytes(wte.dtype(), H);
  auto mine = [&](int64_t t) { return t - vocab_start >= 0 && t - vocab_start < rows; };
  float* out = static_cast<float*>(x.data());
  for (int64_t i = 0, n = 1; i < BS; i += n) {
    n = 1;
    if (mine(id[i])) {
      // A run of consecutive ids is one run of rows of the table.
      while (i + n < BS && id[i + n] == id[i] + n && mine(id[i + n])) ++n;
      const char* w = static_cast<const char*>(wte.data()) + (id[i] - vocab_start) * rb;
      be.dequantize(make_view(out + i * H, OSLO_DTYPE_F32, {n, H}),
                    make_view(const_cast<char*>(w), wte.dtype(), {n, H}));
    } else {
      while (i + n < BS && !mine(id[i + n])) ++n;
      be.fill(make_view(out + i * H, OSLO_DTYPE_F32, {n, H}), 0.0);
    }
  }
}

void BlockStack::embed(const Tensor& ids, const Tensor& pos, const Tensor* types, const Tensor& x,
                       Tensor* norm_in, const std::vector<int64_t>* host_ids) const {
  Backend& be = ctx.backend();
  const auto& bp = ctx.backend_ptr();
  const int64_t BS = x.dim(0), H = cfg.hidden_size;
  if (dtype_is_block(wte.dtype()))
    gather_quantized(ids, host_ids, x);
  else
    be.gather_rows(view(x), view(wte), view(ids), vocab_start, cfg.vocab_size);
  reduce_sum(ctx, OSLO_GROUP_TENSOR, view(x));
  if (cfg.traits.embed_scale != 1.0) be.unary(OSLO_BK_SCALE, view(x), view(x), embed_scale());
  if (wpe.defined() || (type.defined() && types)) {
    Tensor tmp = scratch(bp, OSLO_DTYPE_F32, {BS, H});
    if (wpe.defined()) {
      be.gather_rows(view(tmp), view(wpe), view(pos), 0, cfg.max_positions);
      be.binary(OSLO_BK_ADD, view(x), view(x), view(tmp));
    }
    if (type.defined() && types) {
      be.gather_rows(view(tmp), view(type), view(*types), 0, cfg.type_vocab_size);
      be.binary(OSLO_BK_ADD, view(x), view(x), view(tmp));
    }
  }
  if (emb_ln_w.defined()) {
    const bool rms = cfg.traits.norm == NormKind::RMS_NORM;
    View bv;
    if (emb_ln_b.defined()) bv = view(emb_ln_b);
    const float eps = static_cast<float>(cfg.norm_eps);
    if (norm_in) {
      *norm_in = scratch(bp, OSLO_DTYPE_F32, {BS, H});
      be.convert(view(*norm_in), view(x));
      norm_forward(be, view(x), view(*norm_in), view(emb_ln_w), emb_ln_b.defined() ? &bv : nullptr,
                   eps, rms);
    } else {
      norm_forward(be, view(x), view(x), view(emb_ln_w), emb_ln_b.defined() ? &bv : nullptr, eps,
                   rms);
    }
  }
}

void BlockStack::make_packs() {
  restore_plain();
  packs_.clear();
  packs_made_ = true;
  const auto& bp = ctx.backend_ptr();
  // A block-quantized weight is packed as matmul_quant takes it ([N, K]),
  // a float one as the b operand of a @ w^T.
  std::vector<const Tensor*> ws;
  for (const auto& L : layers)
    for (const Tensor* w : {&L->qkv_w, &L->q_w, &L->k_w, &L->v_w, &L->o_w, &L->gate_up_w, &L->up_w,
                            &L->gate_w, &L->down_w})
      ws.push_back(w);
  // The head only when block-quantized (its float products are not packed).
  if (lm_head.defined() && dtype_is_block(lm_head.dtype())) ws.push_back(&lm_head);
  bool refused[2] = {false, false};  // [block]: the backend packed none of a kind
  for (const Tensor* w : ws) {
    if (!w->defined() || w->ndim() != 2 || packs_.count(w->storage().get())) continue;
    const bool block = dtype_is_block(w->dtype());
    if (refused[block]) continue;
    std::unique_ptr<PackedWeight> p =
        Backend::pack_weight(bp, block ? view(*w) : transposed(view(*w)));
    if (!p) {
      // A float dtype the backend does not pack: stop asking for float ones.
      // A block weight may be declined for its shape (fewer than 8 rows) or
      // format alone: go on with the others.
      if (!block) refused[0] = true;
      continue;
    }
    // Released one by one: the peak is the plain weights and one copy.
    release(packs_.emplace(w->storage().get(), Pack{*w, std::move(p)}).first->second);
  }
  release_pending_ = false;
  if (!packs_.empty() && ctx.log().enabled(LogLevel::Info)) {
    size_t bytes = 0;
    for (const auto& kv : packs_) bytes += kv.second.copy->bytes();
    ctx.log().log(LogLevel::Info, "model: packed copies of ", packs_.size(), " weights, ",
                  bytes / 1024, " KiB, replacing ", plain_released_bytes() / 1024,
                  " KiB of plain weights (config \"prepack\": \"none\" or OSLO_PREPACK=0 keeps "
                  "none)");
  }
}

void BlockStack::release_plain() {
  // Once per restore: nothing else changes what release() would free, and
  // every inference run calls this.
  if (keep_plain_ || !release_pending_) return;
  for (auto& kv : packs_) release(kv.second);
  release_pending_ = false;
}

void BlockStack::release(Pack& pk) {
  Storage& st = *pk.w.storage();
  // Only whole memory the model owns, and not the token table a tied head
  // shares (the embeddings' lookup reads it).
  if (keep_plain_ || pk.released || !pk.copy->whole() || !st.owned || !st.data || st.release ||
      st.bytes != pk.w.nbytes() || (wte.defined() && wte.storage() == pk.w.storage()))
    return;
  pk.copy->plain_released();
  storage_discard(st);
  pk.released = released_ = true;
}

void BlockStack::restore_plain() {
  if (!released_) return;
  for (auto& kv : packs_) {
    Pack& pk = kv.second;
    if (!pk.released) continue;
    Storage& st = *pk.w.storage();
    storage_reallocate(st);
    pk.copy->restore_plain(st.data);
    pk.released = false;
  }
  released_ = false;
  release_pending_ = true;
}

void BlockStack::keep_plain() {
  restore_plain();
  keep_plain_ = true;
}

size_t BlockStack::plain_released_bytes() const {
  size_t n = 0;
  for (const auto& kv : packs_)
    if (kv.second.released) n += kv.second.w.nbytes();
  return n;
}

const PackedWeight* BlockStack::pack_of(const Tensor& w) const {
  auto it = packs_.find(w.storage().get());
  return it == packs_.end() ? nullptr : it->second.copy.get();
}

void BlockStack::check_whole(const char* what) const {
  OSLO_CHECK(!partitioned, OSLO_ERR_NOT_SUPPORTED, "model: ", what,
             " needs whole parameters, but a ZeRO-3 optimizer holds them partitioned over the "
             "data-parallel group; save a training checkpoint and load it for ",
             what);
}

}  // namespace oslo
