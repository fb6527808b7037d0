// The paged attention of the backend seam (oslo_backend.h's
// paged_attention): the backend's own entry when it offers one for the
// dtype, else the composition below, the reference the conformance suite
// checks every backend's entry against. The composition is what the serving
// engine's paged KV cache did before the entry existed: per chunk, its
// sequence's blocks are gathered into one contiguous [Hkv, length, D] buffer
// (gather_rows through the block table, so the ids never travel to the host
// and are checked by gather_rows' limit), then attention() runs over it with
// the chunk's causal offset (the backend's fused attention where it has one).
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "core/backend/backend.hpp"
#include "core/backend/compose_util.hpp"
#include "core/common/dtype.hpp"
#include "core/common/error.hpp"

namespace oslo {
namespace {

using compose::dims;
using compose::is_float;
using compose::Scratch;
using compose::strided;

// The checks of paged_attention(), shared by the fused and composed paths so
// both refuse the same input with the same message. The block ids are device
// data: the entry (or the composition's gather) checks them.
void check_paged(const View& out, const View& q, const View& kp, const View& vp, const View& table,
                 const int64_t* chunks, int64_t C, bool int8 = false) {
  const char* op = int8 ? "paged_attention_kv8" : "paged_attention";
  for (const View* t : {&out, &q})
    OSLO_CHECK(t->ndim == 3 && is_float(t->dtype), OSLO_ERR_SHAPE, op,
               " q and out must be 3-D float views ([tokens, heads, head_dim]), "
               "got ",
               dims(*t), " ", dtype_name(t->dtype));
  for (const View* t : {&kp, &vp})
    OSLO_CHECK(t->ndim == 4, OSLO_ERR_SHAPE, op,
               " pools must be 4-D views ([blocks, kv_heads, block_size, head_dim]), got ",
               dims(*t));
  if (int8)
    OSLO_CHECK(kp.dtype == OSLO_DTYPE_I8 && vp.dtype == OSLO_DTYPE_I8, OSLO_ERR_DTYPE, op,
               " pools must be i8, got ", dtype_name(kp.dtype), " and ", dtype_name(vp.dtype));
  else
    OSLO_CHECK(q.dtype == kp.dtype && q.dtype == vp.dtype, OSLO_ERR_DTYPE, op,
               " q and the pools must share a dtype (", dtype_name(q.dtype), ", ",
               dtype_name(kp.dtype), ", ", dtype_name(vp.dtype), ")");
  for (int i = 0; i < 3; ++i)
    OSLO_CHECK(out.shape[i] == q.shape[i], OSLO_ERR_SHAPE, op, " output ", dims(out),
               " differs from queries ", dims(q));
  for (int i = 0; i < 4; ++i)
    OSLO_CHECK(vp.shape[i] == kp.shape[i], OSLO_ERR_SHAPE, op, " value pool ", dims(vp),
               " differs from the key pool ", dims(kp));
  const int64_t Hkv = kp.shape[1], bs = kp.shape[2], D = kp.shape[3];
  OSLO_CHECK(Hkv > 0 && bs > 0 && D == q.shape[2] && q.shape[1] % Hkv == 0, OSLO_ERR_SHAPE, op,
             " pools ", dims(kp), " do not fit queries ", dims(q),
             " (head_dim equal, query heads a multiple of kv heads, block size > 0)");
  for (const View* t : {&kp, &vp})
    OSLO_CHECK(t->strides[3] == 1 && t->strides[2] == D && t->strides[1] == bs * D, OSLO_ERR_SHAPE,
               op, " pool blocks must be contiguous (strides [*, ", bs * D, ", ", D,
               ", 1]), got strides [", t->strides[0], ", ", t->strides[1], ", ", t->strides[2],
               ", ", t->strides[3], "]");
  OSLO_CHECK(C >= 0 && (C == 0 || chunks != nullptr), OSLO_ERR_INVALID_ARGUMENT, op, ": ", C,
             " chunks", C > 0 ? " and no chunk array" : "");
  OSLO_CHECK(table.dtype == OSLO_DTYPE_I64, OSLO_ERR_DTYPE, op, " block table must be i64, got ",
             dtype_name(table.dtype));
  OSLO_CHECK(table.ndim == 2 && table.shape[0] == C, OSLO_ERR_SHAPE, op, " block table ",
             dims(table), " must be [", C, ", blocks per chunk]");
  const int64_t tokens = q.shape[0], M = table.shape[1];
  std::vector<std::pair<int64_t, int64_t>> rows;  // (first row, end) of each chunk
  for (int64_t c = 0; c < C; ++c) {
    const int64_t row = chunks[3 * c], start = chunks[3 * c + 1], n = chunks[3 * c + 2];
    OSLO_CHECK(row >= 0 && start >= 0 && n >= 0 && row <= tokens - n, OSLO_ERR_INVALID_ARGUMENT, op,
               " chunk ", c, " (row ", row, ", start ", start, ", n ", n, ") does not fit ", tokens,
               " query rows");
    OSLO_CHECK((start + n + bs - 1) / bs <= M, OSLO_ERR_SHAPE, op, " chunk ", c,
               " reaches position ", start + n - 1, ", past its block table of ", M, " blocks of ",
               bs);
    if (n > 0) rows.emplace_back(row, row + n);
  }
  std::sort(rows.begin(), rows.end());
  for (size_t i = 1; i < rows.size(); ++i)
    OSLO_CHECK(rows[i].first >= rows[i - 1].second, OSLO_ERR_INVALID_ARGUMENT, op,
               " chunks overlap at query row ", rows[i].first);
}

// paged_attention_kv8's scales of a pool [NB, Hkv, bs, D]: f32 [NB, Hkv, bs],
// contiguous.
void check_scales(const View& pool, const View& sc, const char* which) {
  OSLO_CHECK(sc.dtype == OSLO_DTYPE_F32, OSLO_ERR_DTYPE, "paged_attention_kv8 ", which,
             " scales must be f32, got ", dtype_name(sc.dtype));
  OSLO_CHECK(sc.ndim == 3 && sc.shape[0] == pool.shape[0] && sc.shape[1] == pool.shape[1] &&
                 sc.shape[2] == pool.shape[2] && sc.strides[2] == 1 &&
                 sc.strides[1] == pool.shape[2] && sc.strides[0] == pool.shape[1] * pool.shape[2],
             OSLO_ERR_SHAPE, "paged_attention_kv8 ", which, " scales ", dims(sc),
             " must be the contiguous [", pool.shape[0], ", ", pool.shape[1], ", ", pool.shape[2],
             "] of their pool ", dims(pool));
}

// The element at byte offset `elems` elements of v's dtype from v.data.
void* at(const View& v, int64_t elems) {
  return static_cast<char*>(v.data) + elems * static_cast<int64_t>(dtype_size(v.dtype));
}

}  // namespace

void Backend::paged_attention(const View& out, const View& q, const View& k_pool,
                              const View& v_pool, const View& block_table, const int64_t* chunks,
                              int64_t num_chunks, float scale) {
  check_paged(out, q, k_pool, v_pool, block_table, chunks, num_chunks);
  if (num_chunks == 0 || q.shape[0] == 0 || q.shape[1] == 0 || q.shape[2] == 0) return;
  if (uses_fused(OSLO_BK_OP_PAGED_ATTENTION, q.dtype))
    return check(t_.paged_attention(self_, &out, &q, &k_pool, &v_pool, &block_table, chunks,
                                    num_chunks, scale),
                 "paged_attention");
  compose_paged_attention(out, q, k_pool, v_pool, block_table, chunks, num_chunks, scale);
}

void Backend::compose_paged_attention(const View& out, const View& q, const View& kp,
                                      const View& vp, const View& table, const int64_t* chunks,
                                      int64_t C, float scale) {
  const int64_t NB = kp.shape[0], Hkv = kp.shape[1], bs = kp.shape[2], D = kp.shape[3];
  const int64_t Hq = q.shape[1], per = Hkv * bs * D;  // elements of one block
  const oslo_dtype dt = kp.dtype;
  for (int64_t c = 0; c < C; ++c) {
    const int64_t row = chunks[3 * c], start = chunks[3 * c + 1], n = chunks[3 * c + 2];
    if (n == 0) continue;
    const int64_t L = start + n, nb = (L + bs - 1) / bs;
    // The chunk's block ids: row c of the table, its first nb entries.
    const View ids =
        strided(at(table, c * table.strides[0]), OSLO_DTYPE_I64, {nb}, {table.strides[1]});
    Scratch blocks(*this, dt, {nb, per});
    Scratch kc(*this, dt, {Hkv, nb * bs, D}), vc(*this, dt, {Hkv, nb * bs, D});
    // Gathered blocks [nb, Hkv, bs, D] -> [Hkv, nb, bs, D]: key t of head kh
    // at kh * nb * bs * D + t * D.
    const View from = strided(blocks.data(), dt, {Hkv, nb, bs, D}, {bs * D, per, D, 1});
    for (const auto& pc : {std::make_pair(&kp, &kc), std::make_pair(&vp, &vc)}) {
      const View& pool = *pc.first;
      try {
        gather_rows(blocks.view(), strided(pool.data, dt, {NB, per}, {pool.strides[0], 1}), ids, 0,
                    NB);
      } catch (const Error& e) {
        fail(e.status(), "paged_attention chunk ", c, "'s block table: ", e.what());
      }
      convert(strided(pc.second->data(), dt, {Hkv, nb, bs, D}, {nb * bs * D, bs * D, D, 1}), from);
    }
    const std::vector<int64_t> kshape = {1, Hkv, L, D},
                               kstr = {Hkv * nb * bs * D, nb * bs * D, D, 1};
    const View qv = strided(at(q, row * q.strides[0]), q.dtype, {1, Hq, n, D},
                            {n * q.strides[0], q.strides[1], q.strides[0], q.strides[2]});
    const View ov = strided(at(out, row * out.strides[0]), out.dtype, {1, Hq, n, D},
                            {n * out.strides[0], out.strides[1], out.strides[0], out.strides[2]});
    attention(ov, qv, strided(kc.data(), dt, kshape, kstr), strided(vc.data(), dt, kshape, kstr),
              nullptr, scale, true, start);
  }
}

void Backend::paged_attention_kv8(const View& out, const View& q, const View& k_pool,
                                  const View& k_scale, const View& v_pool, const View& v_scale,
                                  const View& block_table, const int64_t* chunks,
                                  int64_t num_chunks, float scale) {
  check_paged(out, q, k_pool, v_pool, block_table, chunks, num_chunks, true);
  check_scales(k_pool, k_scale, "key");
  check_scales(v_pool, v_scale, "value");
  if (num_chunks == 0 || q.shape[0] == 0 || q.shape[1] == 0 || q.shape[2] == 0) return;
  if (uses_fused(OSLO_BK_OP_PAGED_ATTENTION_KV8, q.dtype))
    return check(t_.paged_attention_kv8(self_, &out, &q, &k_pool, &k_scale, &v_pool, &v_scale,
                                        &block_table, chunks, num_chunks, scale),
                 "paged_attention_kv8");
  compose_paged_attention_kv8(out, q, k_pool, k_scale, v_pool, v_scale, block_table, chunks,
                              num_chunks, scale);
}

// The blocks the chunks read, each once (a run of consecutive ids per copy),
// copied into compact staging pools, dequantized into q's dtype, and
// paged_attention() over them with the table renumbered: the f32 copy of
// the blocks in use, never of the whole cache.
void Backend::compose_paged_attention_kv8(const View& out, const View& q, const View& kp,
                                          const View& ks, const View& vp, const View& vs,
                                          const View& table, const int64_t* chunks, int64_t C,
                                          float scale) {
  const int64_t NB = kp.shape[0], Hkv = kp.shape[1], bs = kp.shape[2], D = kp.shape[3];
  const int64_t M = table.shape[1], rows = Hkv * bs;  // a block's rows of D
  // The entries the chunks read, on the host, renumbered in first-use order.
  std::vector<int64_t> host(static_cast<size_t>(C * M), 0), place(static_cast<size_t>(NB), -1),
      used;
  for (int64_t c = 0; c < C; ++c) {
    const int64_t nb = (chunks[3 * c + 1] + chunks[3 * c + 2] + bs - 1) / bs;
    if (chunks[3 * c + 2] == 0) continue;
    std::vector<int64_t> ids(static_cast<size_t>(nb));
    if (table.strides[1] == 1 || nb == 1)  // the row's entries in one copy
      copy(ids.data(), at(table, c * table.strides[0]), ids.size() * sizeof(int64_t),
           CopyKind::DeviceToHost);
    else
      for (int64_t j = 0; j < nb; ++j)
        copy(&ids[static_cast<size_t>(j)], at(table, c * table.strides[0] + j * table.strides[1]),
             sizeof(int64_t), CopyKind::DeviceToHost);
    for (int64_t j = 0; j < nb; ++j) {
      const int64_t id = ids[static_cast<size_t>(j)];
      OSLO_CHECK(id >= 0 && id < NB, OSLO_ERR_INVALID_ARGUMENT, "paged_attention_kv8: block id ",
                 id, " (chunk ", c, ", table entry ", j, ") is outside [0, ", NB, ")");
      int64_t& p = place[static_cast<size_t>(id)];
      if (p < 0) {
        p = static_cast<int64_t>(used.size());
        used.push_back(id);
      }
      host[static_cast<size_t>(c * M + j)] = p;
    }
  }
  const int64_t U = static_cast<int64_t>(used.size());
  if (U == 0) return;  // every chunk empty
  const size_t qbytes = static_cast<size_t>(rows * D), sbytes = static_cast<size_t>(rows) * 4;
  Scratch q8(*this, OSLO_DTYPE_I8, {U, rows * D}), sc(*this, OSLO_DTYPE_F32, {U, rows});
  Scratch kf(*this, q.dtype, {U, Hkv, bs, D}), vf(*this, q.dtype, {U, Hkv, bs, D});
  for (int kv = 0; kv < 2; ++kv) {
    const View& pool = kv == 0 ? kp : vp;
    const View& scales = kv == 0 ? ks : vs;
    for (int64_t j = 0; j < U;) {
      int64_t n = 1;
      while (j + n < U && used[static_cast<size_t>(j + n)] == used[static_cast<size_t>(j)] + n) ++n;
      const int64_t b = used[static_cast<size_t>(j)];
      copy(static_cast<char*>(q8.data()) + static_cast<size_t>(j) * qbytes,
           static_cast<const char*>(pool.data) + static_cast<size_t>(b) * qbytes,
           static_cast<size_t>(n) * qbytes, CopyKind::DeviceToDevice);
      copy(static_cast<char*>(sc.data()) + static_cast<size_t>(j) * sbytes,
           static_cast<const char*>(scales.data) + static_cast<size_t>(b) * sbytes,
           static_cast<size_t>(n) * sbytes, CopyKind::DeviceToDevice);
      j += n;
    }
    dequantize_rows(make_view((kv == 0 ? kf : vf).data(), q.dtype, {U * rows, D}),
                    make_view(q8.data(), OSLO_DTYPE_I8, {U * rows, D}),
                    make_view(sc.data(), OSLO_DTYPE_F32, {U * rows}));
  }
  Scratch renum(*this, OSLO_DTYPE_I64, {C, M});
  copy(renum.data(), host.data(), host.size() * sizeof(int64_t), CopyKind::HostToDevice);
  paged_attention(out, q, kf.view(), vf.view(), renum.view(), chunks, C, scale);
}

}  // namespace oslo
