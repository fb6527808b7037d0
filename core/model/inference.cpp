#include "core/model/inference.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <type_traits>

#include "core/common/error.hpp"
#include "core/layers/embedding.hpp"
#include "core/layers/functional.hpp"
#include "core/parallel/mappings.hpp"
#include "core/tensor/view.hpp"
#include "core/tensor/view_util.hpp"

namespace oslo {

using views::at;
using views::strided;

InferenceRunner::InferenceRunner(BlockStack& stack) : s_(stack) {}

void InferenceRunner::attention(size_t li, const View& q, const View& k, const View& v,
                                const View& out, const Tensor& mask, int64_t B, int64_t S,
                                bool use_cache, int64_t row0) {
  Backend& be = s_.ctx.backend();
  const auto& bp = s_.ctx.backend_ptr();
  const int64_t D = s_.cfg.head_dim, nkvl = s_.nkvl, nhl = s_.nhl;
  const int64_t P = use_cache ? past_ : 0;
  const int64_t T = P + S;
  Tensor kc, vc;
  int64_t Tmax = max_len_;
  if (use_cache) {
    kc = k_cache_[li];
    vc = v_cache_[li];
  } else {
    kc = scratch(bp, OSLO_DTYPE_F32, {B, nkvl, S, D});
    vc = scratch(bp, OSLO_DTYPE_F32, {B, nkvl, S, D});
    Tmax = S;
  }
  // New keys and values into the cache at positions [P, P + S).
  const int64_t rk = k.strides[0], rv = v.strides[0], rq = q.strides[0];
  // With the cache: rows [row0, row0 + B) of it (a micro-batch of rows).
  const int64_t r0 = use_cache ? row0 * nkvl * Tmax * D : 0;
  const bool int8 = use_cache && kv_dtype_ == OSLO_DTYPE_I8;
  const oslo_dtype cdt = int8 ? OSLO_DTYPE_I8 : OSLO_DTYPE_F32;
  auto cache_at = [&](const Tensor& c, int64_t p0, int64_t n) {
    return strided(at(view(c), r0 + p0 * D), cdt, {B, nkvl, n, D},
                   {nkvl * Tmax * D, Tmax * D, D, 1});
  };
  const View knew = strided(k.data, k.dtype, {B, nkvl, S, D}, {S * rk, D, rk, 1});
  const View vnew = strided(v.data, v.dtype, {B, nkvl, S, D}, {S * rv, D, rv, 1});
  const View qv = strided(q.data, q.dtype, {B, nhl, S, D}, {S * rq, D, rq, 1});
  const View ov = strided(out.data, out.dtype, {B, nhl, S, D}, {S * nhl * D, D, nhl * D, 1});
  const View mv = strided(mask.data(), OSLO_DTYPE_F32, {B, T}, {T, 1});
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  if (int8) {
    // One f32 scale per token and KV head: [rows, nkvl, Tmax]. The new rows
    // are quantized into the cache, then every query head attends over the
    // int8 rows [0, T) (the backend's attention_kv8 reads them as they are,
    // or the core dequantizes them first).
    auto scale_at = [&](const Tensor& sc, int64_t p0, int64_t n) {
      return strided(at(view(sc), row0 * nkvl * Tmax + p0), OSLO_DTYPE_F32, {B, nkvl, n},
                     {nkvl * Tmax, Tmax, 1});
    };
    be.quantize_rows(cache_at(kc, P, S), scale_at(k_scale_[li], P, S), knew);
    be.quantize_rows(cache_at(vc, P, S), scale_at(v_scale_[li], P, S), vnew);
    be.attention_kv8(ov, qv, cache_at(kc, 0, T), scale_at(k_scale_[li], 0, T), cache_at(vc, 0, T),
                     scale_at(v_scale_[li], 0, T), &mv, scale, s_.cfg.traits.causal, P);
    return;
  }
  be.convert(cache_at(kc, P, S), knew);
  be.convert(cache_at(vc, P, S), vnew);
  // Every query head over the cache [0, T) in one call (the backend's fused
  // attention, or its composition from products and a softmax).
  be.attention(ov, qv, cache_at(kc, 0, T), cache_at(vc, 0, T), &mv, scale, s_.cfg.traits.causal, P);
}

Tensor InferenceRunner::run(const std::vector<int64_t>& ids, const std::vector<int64_t>& positions,
                            const std::vector<int64_t>& token_types,
                            const std::vector<float>& key_mask, int64_t B, int64_t S,
                            bool use_cache) {
  // Micro-batches of rows through the stages: up to 2 x stages, each of at
  // least pipeline_micro_tokens_ tokens.
  int64_t M = 1;
  if (s_.pp > 1 && B > 1)
    M = std::max<int64_t>(
        1, std::min<int64_t>({B, 2 * static_cast<int64_t>(s_.pp),
                              B * S / std::max<int64_t>(1, pipeline_micro_tokens_)}));
  if (M == 1) return run_rows(ids, positions, token_types, key_mask, B, S, use_cache, 0, true);
  s_.check_whole("inference");
  const int64_t H = s_.cfg.hidden_size, T = (use_cache ? past_ : 0) + S;
  Tensor all = scratch(s_.ctx.backend_ptr(), OSLO_DTYPE_F32, {B * S, H});
  for (int64_t j = 0, r0 = 0; j < M; ++j) {
    const int64_t b = B / M + (j < B % M ? 1 : 0);
    auto rows_of = [&](const auto& v, int64_t per) {
      using V = std::decay_t<decltype(v)>;
      if (v.empty()) return V();
      return V(v.begin() + r0 * per, v.begin() + (r0 + b) * per);
    };
    const Tensor h = run_rows(rows_of(ids, S), rows_of(positions, S), rows_of(token_types, S),
                              rows_of(key_mask, T), b, S, use_cache, r0, false);
    if (s_.last_stage())
      s_.ctx.backend().copy(static_cast<char*>(all.data()) + r0 * S * H * sizeof(float), h.data(),
                            h.nbytes(), CopyKind::DeviceToDevice);
    r0 += b;
  }
  from_last_stage(all);
  return all;
}

Tensor InferenceRunner::run_rows(const std::vector<int64_t>& ids,
                                 const std::vector<int64_t>& positions,
                                 const std::vector<int64_t>& token_types,
                                 const std::vector<float>& key_mask, int64_t B, int64_t S,
                                 bool use_cache, int64_t row0, bool broadcast) {
  const int64_t T = (use_cache ? past_ : 0) + S;
  OSLO_CHECK(s_.cfg.sliding_window == 0 || T <= s_.cfg.sliding_window, OSLO_ERR_NOT_SUPPORTED,
             s_.cfg.model_type, ": sequences longer than the sliding window (",
             s_.cfg.sliding_window, ") are not supported");
  Tensor mask_t = scratch(s_.ctx.backend_ptr(), OSLO_DTYPE_F32, {B, T});
  s_.ctx.backend().copy(mask_t.data(), key_mask.data(), mask_t.nbytes(), CopyKind::HostToDevice);
  return run_stack(
      ids, positions, token_types, B, S,
      [&](size_t li, const View& q, const View& k, const View& v, const View& out) {
        attention(li, q, k, v, out, mask_t, B, S, use_cache, row0);
      },
      broadcast);
}

Tensor InferenceRunner::run_stack(const std::vector<int64_t>& ids,
                                  const std::vector<int64_t>& positions,
                                  const std::vector<int64_t>& token_types, int64_t B, int64_t S,
                                  const Attend& attend, bool broadcast) {
  s_.check_whole("inference");
  if (!s_.packs_made()) s_.make_packs();
  s_.release_plain();  // again, after a save wrote them back
  Context& ctx = s_.ctx;
  const ModelConfig& cfg = s_.cfg;
  Backend& be = ctx.backend();
  const auto& bp = ctx.backend_ptr();
  be.set_num_threads(ctx.num_threads());
  const int64_t BS = B * S, H = cfg.hidden_size;
  auto upload = [&](const void* src, oslo_dtype dt, std::vector<int64_t> shape) {
    Tensor t = scratch(bp, dt, shape);
    be.copy(t.data(), src, t.nbytes(), CopyKind::HostToDevice);
    return t;
  };

  // Embeddings (first stage), or the previous stage's output.
  Residual r;
  r.x = scratch(bp, OSLO_DTYPE_F32, {BS, H});
  if (!s_.first_stage()) {
    recv(ctx, OSLO_GROUP_PIPELINE, r.x.data(), r.x.nbytes(), s_.pp_rank - 1);
  } else {
    Tensor ids_t = upload(ids.data(), OSLO_DTYPE_I64, {BS});
    Tensor pos_t = upload(positions.data(), OSLO_DTYPE_I64, {BS});
    Tensor types_t;
    if (s_.type.defined()) types_t = upload(token_types.data(), OSLO_DTYPE_I64, {BS});
    s_.embed(ids_t, pos_t, s_.type.defined() ? &types_t : nullptr, r.x, nullptr, &ids);
  }

  // The blocks, each with its attention over the cache (or this call's keys
  // and values), through the packed weight copies.
  BlockEnv env = s_.env(B, S);
  Tensor cos_t, sin_t;
  if (cfg.traits.rotary) {
    s_.rope_tables(positions, &cos_t, &sin_t);
    env.cos = view(cos_t);
    env.sin = view(sin_t);
  }
  size_t cur = 0;
  env.attend = [&](const View& q, const View& k, const View& v, const View& out) {
    attend(cur, q, k, v, out);
  };
  env.pack = [this](const Tensor& w) { return s_.pack_of(w); };
  const Block block(env);
  BlockBuffers buf;
  buf.h = scratch(bp, OSLO_DTYPE_F32, {BS, H});
  for (size_t li = 0; li < s_.layers.size(); ++li) {
    // Virtual stages: between two of this rank's chunks the residual stream
    // goes round the other ranks (to the next rank, back from the previous).
    if (s_.pp > 1 && li > 0) {
      bool boundary = false;
      for (const auto& ch : s_.chunks) boundary = boundary || ch.first == li;
      if (boundary) {
        r.flush(be);
        send(ctx, OSLO_GROUP_PIPELINE, r.x.data(), r.x.nbytes(), (s_.pp_rank + 1) % s_.pp);
        recv(ctx, OSLO_GROUP_PIPELINE, r.x.data(), r.x.nbytes(), (s_.pp_rank + s_.pp - 1) % s_.pp);
      }
    }
    cur = li;
    block.forward(*s_.layers[li], r, &buf, nullptr);
  }
  Tensor h = buf.h;
  if (!s_.last_stage()) {
    // The residual stream goes on to the next stage; the final hidden
    // states come back from the last.
    r.flush(be);
    send(ctx, OSLO_GROUP_PIPELINE, r.x.data(), r.x.nbytes(), s_.pp_rank + 1);
    if (broadcast) from_last_stage(h);
    return h;
  }
  if (s_.norm_w.defined() && !cfg.traits.post_norm) {
    block.norm_x(r, view(h), s_.norm_w, s_.norm_b);
  } else {
    r.flush(be);
    if (s_.norm_w.defined()) block.norm(view(r.x), view(r.x), s_.norm_w, s_.norm_b);
    h = r.x;
  }
  if (s_.pp > 1 && broadcast) from_last_stage(h);
  return h;
}

void InferenceRunner::from_last_stage(const Tensor& t) {
  if (s_.pp == 1) return;
  broadcast(s_.ctx, OSLO_GROUP_PIPELINE, t.data(), static_cast<size_t>(t.numel()), t.dtype(),
            s_.pp - 1);
}

Tensor InferenceRunner::head_local(const View& hidden, int64_t r) {
  OSLO_CHECK(s_.lm_head.defined() && s_.cfg.traits.causal, OSLO_ERR_NOT_SUPPORTED,
             s_.cfg.model_type, ": this model has no language-model head");
  Tensor local = scratch(s_.ctx.backend_ptr(), OSLO_DTYPE_F32, {r, s_.vocab_local});
  linear_forward(s_.ctx.backend(), s_.ctx.backend_ptr(), view(local), hidden, view(s_.lm_head),
                 nullptr, nullptr, nullptr, s_.pack_of(s_.lm_head));
  return local;
}

std::vector<float> InferenceRunner::logits_of(const View& hidden, int64_t r) {
  if (s_.pp > 1) {
    // The head is the last stage's: its logits to every stage.
    Tensor all = scratch(s_.ctx.backend_ptr(), OSLO_DTYPE_F32, {r, s_.cfg.vocab_size});
    std::vector<float> out;
    if (s_.last_stage()) {
      out = head_logits(hidden, r);
      s_.ctx.backend().copy(all.data(), out.data(), all.nbytes(), CopyKind::HostToDevice);
    }
    from_last_stage(all);
    out.resize(static_cast<size_t>(all.numel()));
    s_.ctx.backend().copy(out.data(), all.data(), all.nbytes(), CopyKind::DeviceToHost);
    return out;
  }
  return head_logits(hidden, r);
}

std::vector<float> InferenceRunner::head_logits(const View& hidden, int64_t r) {
  Backend& be = s_.ctx.backend();
  const auto& bp = s_.ctx.backend_ptr();
  const int tp = s_.tp;
  const int64_t vl = s_.vocab_local;
  Tensor local = head_local(hidden, r);
  Tensor full = local;
  if (tp > 1) {
    full = scratch(bp, OSLO_DTYPE_F32, {r, vl * tp});
    gather_last_dim(s_.ctx, OSLO_GROUP_TENSOR, view(local), view(full));
  }
  std::vector<float> host(static_cast<size_t>(full.numel()));
  be.copy(host.data(), full.data(), full.nbytes(), CopyKind::DeviceToHost);
  const int64_t V = s_.cfg.vocab_size;
  std::vector<float> out(static_cast<size_t>(r * V));
  for (int q = 0; q < tp; ++q) {
    const VocabPartition vp = vocab_partition(V, tp, q);
    for (int64_t i = 0; i < r; ++i)
      std::copy_n(host.begin() + (i * vl * tp + q * vl), vp.valid,
                  out.begin() + (i * V + vp.start));
  }
  return out;
}

std::vector<CausalLM::Choice> InferenceRunner::argmax_of(const View& hidden, int64_t r) {
  if (s_.pp > 1) {
    // The last stage's choices (token, logit) to every stage.
    Backend& be = s_.ctx.backend();
    Tensor tok = scratch(s_.ctx.backend_ptr(), OSLO_DTYPE_I64, {r});
    Tensor val = scratch(s_.ctx.backend_ptr(), OSLO_DTYPE_F32, {r});
    std::vector<int64_t> ht(static_cast<size_t>(r));
    std::vector<float> hv(static_cast<size_t>(r));
    if (s_.last_stage()) {
      const std::vector<Choice> c = head_argmax(hidden, r);
      for (size_t i = 0; i < c.size(); ++i) {
        ht[i] = c[i].token;
        hv[i] = c[i].logit;
      }
      be.copy(tok.data(), ht.data(), tok.nbytes(), CopyKind::HostToDevice);
      be.copy(val.data(), hv.data(), val.nbytes(), CopyKind::HostToDevice);
    }
    from_last_stage(tok);
    from_last_stage(val);
    be.copy(ht.data(), tok.data(), tok.nbytes(), CopyKind::DeviceToHost);
    be.copy(hv.data(), val.data(), val.nbytes(), CopyKind::DeviceToHost);
    std::vector<Choice> out(static_cast<size_t>(r));
    for (size_t i = 0; i < out.size(); ++i) out[i] = Choice{ht[i], hv[i]};
    return out;
  }
  return head_argmax(hidden, r);
}

std::vector<CausalLM::Choice> InferenceRunner::head_argmax(const View& hidden, int64_t r) {
  Backend& be = s_.ctx.backend();
  const auto& bp = s_.ctx.backend_ptr();
  const int tp = s_.tp;
  Tensor local = head_local(hidden, r);
  const int64_t V = s_.cfg.vocab_size;
  // Each rank's choice over the real rows of its slice (padding excluded).
  Tensor idx = scratch(bp, OSLO_DTYPE_I64, {r}), val = scratch(bp, OSLO_DTYPE_F32, {r});
  be.argmax(view(idx), view(val), view(local), vocab_partition(V, tp, s_.rank).valid);
  Tensor all_idx = idx, all_val = val;
  if (tp > 1) {
    all_idx = scratch(bp, OSLO_DTYPE_I64, {tp, r});
    all_val = scratch(bp, OSLO_DTYPE_F32, {tp, r});
    gather_first_dim(s_.ctx, OSLO_GROUP_TENSOR, view(idx), view(all_idx));
    gather_first_dim(s_.ctx, OSLO_GROUP_TENSOR, view(val), view(all_val));
  }
  std::vector<int64_t> hi(static_cast<size_t>(tp * r));
  std::vector<float> hv(hi.size());
  be.copy(hi.data(), all_idx.data(), all_idx.nbytes(), CopyKind::DeviceToHost);
  be.copy(hv.data(), all_val.data(), all_val.nbytes(), CopyKind::DeviceToHost);
  // Slices in rank order cover the vocabulary in order: a strictly larger
  // logit or the first NaN replaces the choice, so ties keep the lowest token.
  std::vector<Choice> out(static_cast<size_t>(r), Choice{-1, 0.f});
  for (int64_t i = 0; i < r; ++i) {
    Choice& c = out[static_cast<size_t>(i)];
    for (int q = 0; q < tp; ++q) {
      const int64_t j = hi[static_cast<size_t>(q * r + i)];
      const float v = hv[static_cast<size_t>(q * r + i)];
      if (j < 0) continue;  // a slice without real rows
      if (c.token < 0 || (c.logit == c.logit && (v > c.logit || v != v)))
        c = Choice{vocab_partition(V, tp, q).start + j, v};
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

void InferenceRunner::forward(const std::vector<int64_t>& ids, const std::vector<int64_t>& mask0,
                              const std::vector<int64_t>& token_types, int64_t B, int64_t S,
                              bool want_logits, std::vector<float>* out) {
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
    s_.ctx.backend().copy(out->data(), h.data(), h.nbytes(), CopyKind::DeviceToHost);
  }
}

void InferenceRunner::embed(const std::vector<int64_t>& ids, const std::vector<int64_t>& mask0,
                            int64_t B, int64_t S, bool normalize, std::vector<float>* out) {
  std::vector<float> h;
  const size_t n = static_cast<size_t>(B * S);
  std::vector<int64_t> mask = mask0.empty() ? std::vector<int64_t>(n, 1) : mask0;
  forward(ids, mask, {}, B, S, false, &h);
  const int64_t H = s_.cfg.hidden_size;
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

void InferenceRunner::set_kv_dtype(oslo_dtype dt) {
  OSLO_CHECK(dt == OSLO_DTYPE_F32 || dt == OSLO_DTYPE_I8, OSLO_ERR_DTYPE,
             "model: the KV cache is f32 or i8 (int8), not ", dtype_name(dt));
  kv_dtype_ = dt;
}

void InferenceRunner::reset(int64_t rows, int64_t max_len) {
  OSLO_CHECK(s_.cfg.traits.causal, OSLO_ERR_NOT_SUPPORTED, s_.cfg.model_type,
             " cannot generate text");
  OSLO_CHECK(rows > 0 && max_len > 0, OSLO_ERR_INVALID_ARGUMENT,
             "model: rows and max length must be positive");
  const auto& bp = s_.ctx.backend_ptr();
  k_cache_.clear();
  v_cache_.clear();
  k_scale_.clear();
  v_scale_.clear();
  for (size_t i = 0; i < s_.layers.size(); ++i) {
    k_cache_.push_back(scratch(bp, kv_dtype_, {rows, s_.nkvl, max_len, s_.cfg.head_dim}));
    v_cache_.push_back(scratch(bp, kv_dtype_, {rows, s_.nkvl, max_len, s_.cfg.head_dim}));
    if (kv_dtype_ == OSLO_DTYPE_I8) {
      k_scale_.push_back(scratch(bp, OSLO_DTYPE_F32, {rows, s_.nkvl, max_len}));
      v_scale_.push_back(scratch(bp, OSLO_DTYPE_F32, {rows, s_.nkvl, max_len}));
    }
  }
  rows_ = rows;
  max_len_ = max_len;
  past_ = 0;
}

View InferenceRunner::append_hidden(const std::vector<int64_t>& tokens, int64_t n,
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
  const int64_t H = s_.cfg.hidden_size;
  return strided(at(view(*keep), (n - 1) * H), OSLO_DTYPE_F32, {rows_, H}, {n * H, 1});
}

std::vector<float> InferenceRunner::append(const std::vector<int64_t>& tokens, int64_t n,
                                           const std::vector<uint8_t>& mask) {
  Tensor h;
  const View last = append_hidden(tokens, n, mask, &h);
  return logits_of(last, rows_);
}

std::vector<CausalLM::Choice> InferenceRunner::append_argmax(const std::vector<int64_t>& tokens,
                                                             int64_t n,
                                                             const std::vector<uint8_t>& mask) {
  Backend& be = s_.ctx.backend();
  // A decode step (one token a row) at TP = PP = 1 on a backend that records
  // work (the CUDA plugin's graphs): the step's ops are recorded and run as
  // one launch; only the choices come back. The ids are checked here, since
  // the device-side check cannot read its result back while recording.
  const bool recordable = n == 1 && s_.tp == 1 && s_.pp == 1 && rows_ > 0 &&
                          tokens.size() == static_cast<size_t>(rows_) &&
                          std::all_of(tokens.begin(), tokens.end(),
                                      [&](int64_t t) { return t >= 0 && t < s_.cfg.vocab_size; });
  if (!recordable || !be.graph_begin()) {
    Tensor h;
    const View last = append_hidden(tokens, n, mask, &h);
    return argmax_of(last, rows_);
  }
  const auto& bp = s_.ctx.backend_ptr();
  Tensor idx = scratch(bp, OSLO_DTYPE_I64, {rows_}), val = scratch(bp, OSLO_DTYPE_F32, {rows_});
  {
    bool recording = true;
    try {
      Tensor h;
      const View last = append_hidden(tokens, n, mask, &h);
      Tensor local = head_local(last, rows_);
      be.argmax(view(idx), view(val), view(local), s_.cfg.vocab_size);
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

void InferenceRunner::reorder(const std::vector<int64_t>& src) {
  OSLO_CHECK(src.size() == static_cast<size_t>(rows_), OSLO_ERR_SHAPE, "model: reorder of ",
             src.size(), " rows, the cache has ", rows_);
  Backend& be = s_.ctx.backend();
  const auto& bp = s_.ctx.backend_ptr();
  for (int64_t s : src)
    OSLO_CHECK(s >= 0 && s < rows_, OSLO_ERR_INVALID_ARGUMENT, "model: reorder names row ", s,
               " of ", rows_);
  if (kv_dtype_ == OSLO_DTYPE_I8) {
    // Whole rows copied in the backend's memory (int8 rows and their scales).
    for (std::vector<Tensor>* caches : {&k_cache_, &v_cache_, &k_scale_, &v_scale_})
      for (Tensor& c : *caches) {
        Tensor n = scratch(bp, c.dtype(), c.shape());
        const size_t row = c.nbytes() / static_cast<size_t>(rows_);
        for (int64_t i = 0; i < rows_; ++i)
          be.copy(static_cast<char*>(n.data()) + row * static_cast<size_t>(i),
                  static_cast<const char*>(c.data()) + row * static_cast<size_t>(src[i]), row,
                  CopyKind::DeviceToDevice);
        c = n;
      }
    return;
  }
  Tensor idx = scratch(bp, OSLO_DTYPE_I64, {rows_});
  be.copy(idx.data(), src.data(), idx.nbytes(), CopyKind::HostToDevice);
  const int64_t per = s_.nkvl * max_len_ * s_.cfg.head_dim;
  for (std::vector<Tensor>* caches : {&k_cache_, &v_cache_})
    for (Tensor& c : *caches) {
      Tensor n = scratch(bp, OSLO_DTYPE_F32, c.shape());
      be.gather_rows(make_view(n.data(), OSLO_DTYPE_F32, {rows_, per}),
                     make_view(c.data(), OSLO_DTYPE_F32, {rows_, per}), view(idx), 0, rows_);
      c = n;
    }
}

}  // namespace oslo
