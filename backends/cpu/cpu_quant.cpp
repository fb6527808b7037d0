// Products with block-quantized weights (cpu_quant.hpp; oslo_backend.h's
// dequantize and matmul_quant).
//
// dequantize: each row decoded block by block in llama.cpp's order of
// operations (this file is compiled with -ffp-contract=off, as core/quant
// is: the values are bit for bit core/quant's reference), rounded once into
// out's dtype; threads split the rows.
//
// matmul_quant, two paths by the number of rows M of a:
//   - M < quant_gemm_rows (decode, batches, short prompts): each row of a is quantized
//     once to 8 bits per block of 32 (f32 scale amax / 127, round to
//     nearest: error at most amax / 254 per value, the bound oslo_backend.h
//     states) and the weight rows are dotted in integer arithmetic
//     (cpu_quant_dot.cpp: AVX2 / AVX-VNNI / AVX512-VNNI, scalar elsewhere).
//     Threads split N into chunks of kChunk rows; within a chunk, tiles of
//     four rows of a go over the chunk's weight rows, so each weight block
//     is read once per four rows (the chunk stays in L2 across tiles).
//   - M >= quant_gemm_rows (prefill): tiles of kTile weight rows are
//     dequantized into f32 and multiplied with oneDNN's sgemm (measured in
//     bench/quant --prefill at two threads on Zen 3: faster from between 256
//     and 512 rows on for q8_0, between 128 and 256 for q4_k; the switch is
//     at 384 and 192).
// Bias, activation and gate are applied per output row into c, from an f32
// scratch (the gate may be c itself).
#include "backends/cpu/cpu_quant.hpp"

#include <dnnl.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/common/dtype.hpp"
#include "core/common/error.hpp"

namespace oslo {
namespace cpu {
namespace {

constexpr int64_t kChunk = 16;  // weight rows per thread work item (integer path)
constexpr int64_t kTile = 256;  // weight rows dequantized per sgemm call

int fmt_index(oslo_dtype dt) {
  switch (dt) {
    case OSLO_DTYPE_Q8_0: return 0;
    case OSLO_DTYPE_Q4_0: return 1;
    case OSLO_DTYPE_Q4_K: return 2;
    case OSLO_DTYPE_Q6_K: return 3;
    default: return -1;
  }
}

float half_at(const uint8_t* p) {
  return f16_to_f32(static_cast<uint16_t>(p[0] | (p[1] << 8)));
}

// --- dequantize: llama.cpp's dequantize_row_* (ggml-quants.c), per block ---

void deq_q8_0(const uint8_t* b, float* y) {
  const float d = half_at(b);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
}
void deq_q4_0(const uint8_t* b, float* y) {
  const float d = half_at(b);
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((b[2 + j] & 0x0F) - 8) * d;
    y[j + 16] = static_cast<float>((b[2 + j] >> 4) - 8) * d;
  }
}
void deq_q4_k(const uint8_t* b, float* y) {
  const float d = half_at(b), dmin = half_at(b + 2);
  const uint8_t* s = b + 4;
  const uint8_t* q = b + 16;
  for (int i = 0; i < 4; ++i, q += 32) {
    float dd[2], mm[2];
    for (int h = 0; h < 2; ++h) {
      const int j = 2 * i + h;
      const int sc = j < 4 ? s[j] & 63 : (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
      const int m = j < 4 ? s[j + 4] & 63 : (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
      dd[h] = d * static_cast<float>(sc);
      mm[h] = dmin * static_cast<float>(m);
    }
    for (int l = 0; l < 32; ++l) *y++ = dd[0] * static_cast<float>(q[l] & 0xF) - mm[0];
    for (int l = 0; l < 32; ++l) *y++ = dd[1] * static_cast<float>(q[l] >> 4) - mm[1];
  }
}
void deq_q6_k(const uint8_t* b, float* y) {
  const float d = half_at(b + 208);
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  for (int n = 0; n < 2; ++n, y += 128, ql += 64, qh += 32, sc += 8)
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
      y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
      y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
      y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
    }
}

// One row of K values (whole blocks) at src into y.
void deq_row(int fmt, const uint8_t* src, float* y, int64_t K) {
  switch (fmt) {
    case 0:
      for (int64_t k = 0; k < K; k += 32, src += 34) deq_q8_0(src, y + k);
      break;
    case 1:
      for (int64_t k = 0; k < K; k += 32, src += 18) deq_q4_0(src, y + k);
      break;
    case 2:
      for (int64_t k = 0; k < K; k += 256, src += 144) deq_q4_k(src, y + k);
      break;
    default:
      for (int64_t k = 0; k < K; k += 256, src += 210) deq_q6_k(src, y + k);
  }
}

// The checks of oslo_backend.h's weight view: w [N, K] block-quantized,
// whole-block rows and row stride, unit column stride. Returns the row
// stride in bytes.
size_t check_weight(const V& w, const char* op, bool data_optional = false) {
  OSLO_CHECK(dtype_is_block(w.dtype), OSLO_ERR_DTYPE, op, ": the weight must be block-quantized ",
             "(q8_0, q4_0, q4_k, q6_k), got ", dtype_name(w.dtype));
  int64_t be, bb;
  dtype_block(w.dtype, &be, &bb);
  OSLO_CHECK(w.ndim == 2, OSLO_ERR_SHAPE, op, ": the weight must be 2-D [N, K], got ", shape_of(w));
  OSLO_CHECK(w.shape[0] >= 0 && w.shape[1] >= 0 && w.shape[1] % be == 0, OSLO_ERR_SHAPE, op,
             ": weight ", shape_of(w), " ", dtype_name(w.dtype), ": K = ", w.shape[1],
             " is not whole blocks of ", be);
  OSLO_CHECK(w.shape[0] <= 1 || (w.strides[0] % be == 0 && w.strides[0] >= w.shape[1]),
             OSLO_ERR_SHAPE, op, ": weight ", shape_of(w), " ", dtype_name(w.dtype),
             ": row stride ", w.strides[0], " is not whole blocks of ", be, " covering the row");
  OSLO_CHECK(w.shape[1] <= 1 || w.strides[1] == 1, OSLO_ERR_SHAPE, op,
             ": a block-quantized weight's column stride must be 1, got ", w.strides[1]);
  OSLO_CHECK(data_optional || w.data || w.shape[0] * w.shape[1] == 0, OSLO_ERR_INVALID_ARGUMENT, op,
             ": the weight has no data");
  const int64_t S = w.shape[0] <= 1 ? w.shape[1] : w.strides[0];
  return static_cast<size_t>(S / be * bb);
}

int threads_for(int threads, int64_t items, double work) {
  if (items <= 1 || work < 65536.0) return 1;
  return static_cast<int>(std::min<int64_t>(std::max(1, threads), items));
}

// Rows of a quantized to 8 bits per block of 32 (cpu_quant.hpp's QuantRow).
struct QuantRows {
  std::vector<int8_t> q;
  std::vector<float> d;
  std::vector<int16_t> s16;
  std::vector<QuantRow> rows;
};

void quantize_rows(int threads, const V& a, int64_t M, int64_t K, QuantRows* out) {
  const int64_t nb = K / 32;
  out->q.resize(static_cast<size_t>(M * K));
  out->d.resize(static_cast<size_t>(M * nb));
  out->s16.resize(static_cast<size_t>(M * nb * 2));
  out->rows.resize(static_cast<size_t>(M));
  const QuantizeBlockFn qb = quant_kernels()->quantize_block;
  const int nt = threads_for(threads, M, static_cast<double>(M) * static_cast<double>(K));
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t m = 0; m < M; ++m) {
    const float* x = reinterpret_cast<const float*>(a.data) + m * a.strides[0];
    int8_t* q = out->q.data() + m * K;
    float* d = out->d.data() + m * nb;
    int16_t* s16 = out->s16.data() + m * nb * 2;
    for (int64_t b = 0; b < nb; ++b) qb(x + 32 * b, q + 32 * b, d + b, s16 + 2 * b);
    out->rows[static_cast<size_t>(m)] = QuantRow{q, d, s16};
  }
}

// matmul_quant's epilogue, o += bias, then act, then * gate, on columns
// [n0, n1) of every row: inside the products' parallel loop, on the columns
// each work item has just written (no pass of its own, no serial step in a
// decode), or after the sgemm path over all columns.
struct Epilogue {
  const float* bias = nullptr;              // [N] f32, contiguous
  const Matmul::Activation* act = nullptr;  // act and gate, or none
  bool any() const { return bias || act; }
  // Rows [m0, m1) of o; gbuf: room for n1 - n0 floats (a strided gate's
  // columns).
  void apply(float* o, int64_t ldo, int64_t m0, int64_t m1, int64_t n0, int64_t n1,
             float* gbuf) const {
    const V* gate = act ? act->gate : nullptr;
    for (int64_t m = m0; m < m1; ++m) {
      float* x = o + m * ldo + n0;
      const int64_t n = n1 - n0;
      if (bias)
        for (int64_t j = 0; j < n; ++j) x[j] += bias[n0 + j];
      if (!act) continue;
      activate(act->act, x, x, n);
      if (gate) {
        const float* g = load_row(*gate, m * gate->strides[0] + n0 * gate->strides[1], n,
                                  gate->strides[1], gbuf);
        for (int64_t j = 0; j < n; ++j) x[j] *= g[j];
      }
    }
  }
};

// o [M, N] (row stride ldo) = a @ w^T by the integer kernels, then the
// epilogue.
void product_int(int threads, int fmt, const V& w, size_t stride, const QuantRows& qa, int64_t M,
                 int64_t N, int64_t K, float* o, int64_t ldo, const Epilogue& epi) {
  const QuantDotFn fn = quant_kernels()->dot[fmt];
  const uint8_t* base = static_cast<const uint8_t*>(w.data);
  const int64_t chunks = (N + kChunk - 1) / kChunk;
  const int nt = threads_for(threads, chunks, static_cast<double>(N) * K * M);
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t ci = 0; ci < chunks; ++ci) {
    const int64_t n0 = ci * kChunk, n1 = std::min(N, n0 + kChunk);
    float part[4];
    for (int64_t m0 = 0; m0 < M; m0 += 4) {
      const int R = static_cast<int>(std::min<int64_t>(4, M - m0));
      for (int64_t n = n0; n < n1; ++n) {
        fn(base + stride * static_cast<size_t>(n), K, qa.rows.data() + m0, R, part);
        for (int r = 0; r < R; ++r) o[(m0 + r) * ldo + n] = part[r];
      }
    }
    float gbuf[kChunk];
    if (epi.any()) epi.apply(o, ldo, 0, M, n0, n1, gbuf);
  }
}

// o [M, N] (row stride ldo) = a @ w^T by the eight-row kernels over the packed
// groups and the row kernels over the plain rows past them (pk's tail), then
// the epilogue.
void product_packed(int threads, int fmt, const QuantPacked& pk, const QuantRows& qa, int64_t M,
                    int64_t N, int64_t K, float* o, int64_t ldo, const Epilogue& epi) {
  const QuantKernels* k = quant_kernels();
  const QuantDot8Fn fn8 = k->dot8[fmt];
  const QuantDotFn fn = k->dot[fmt];
  const uint8_t* tail = pk.tail();
  constexpr int64_t kGroups = kChunk / 8;  // groups per work item
  const int64_t items = (pk.groups + kGroups - 1) / kGroups + (N > 8 * pk.groups ? 1 : 0);
  const int nt = threads_for(threads, items, static_cast<double>(N) * K * M);
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t it = 0; it < items; ++it) {
    const int64_t g0 = it * kGroups;
    float gbuf[kChunk];
    if (g0 >= pk.groups) {  // the rows past the last whole group (fewer than 8)
      float part[4];
      for (int64_t m0 = 0; m0 < M; m0 += 4) {
        const int R = static_cast<int>(std::min<int64_t>(4, M - m0));
        for (int64_t n = 8 * pk.groups; n < N; ++n) {
          fn(tail + pk.row_bytes * static_cast<size_t>(n - 8 * pk.groups), K, qa.rows.data() + m0,
             R, part);
          for (int r = 0; r < R; ++r) o[(m0 + r) * ldo + n] = part[r];
        }
      }
      if (epi.any()) epi.apply(o, ldo, 0, M, 8 * pk.groups, N, gbuf);
      continue;
    }
    const int64_t g1 = std::min(pk.groups, g0 + kGroups);
    float part[32];
    for (int64_t m0 = 0; m0 < M; m0 += 4) {
      const int R = static_cast<int>(std::min<int64_t>(4, M - m0));
      for (int64_t g = g0; g < g1; ++g) {
        fn8(pk.data + pk.group_bytes * static_cast<size_t>(g), K, qa.rows.data() + m0, R, part);
        for (int r = 0; r < R; ++r)
          std::memcpy(o + (m0 + r) * ldo + 8 * g, part + 8 * r, 8 * sizeof(float));
      }
    }
    if (epi.any()) epi.apply(o, ldo, 0, M, 8 * g0, 8 * g1, gbuf);
  }
}

// o [M, N] (row stride ldo) = a @ w^T through dequantized tiles of w and
// sgemm; with pk, the tiles' rows come from the packed copy (its groups
// unpacked eight rows at a time, then its tail).
void product_gemm(int threads, int fmt, const V& a, const V& w, size_t stride,
                  const QuantPacked* pk, int64_t M, int64_t N, int64_t K, float* o, int64_t ldo) {
  static_assert(kTile % 8 == 0, "a tile is whole groups");
  const uint8_t* base = static_cast<const uint8_t*>(w.data);
  std::vector<float> tile(static_cast<size_t>(std::min(N, kTile) * K));
  for (int64_t n0 = 0; n0 < N; n0 += kTile) {
    const int64_t nt_rows = std::min(kTile, N - n0);
    if (pk) {
      // Work items: the tile's whole groups, then its tail rows one by one.
      const int64_t g0 = n0 / 8, g1 = std::min(pk->groups, (n0 + nt_rows) / 8);
      const int64_t items = (g1 - g0) + (n0 + nt_rows - 8 * g1);
      const int nt = threads_for(threads, items, static_cast<double>(nt_rows) * K);
#pragma omp parallel num_threads(nt)
      {
        std::vector<uint8_t> plain(8 * pk->row_bytes);
#pragma omp for schedule(static)
        for (int64_t it = 0; it < items; ++it) {
          if (it < g1 - g0) {
            const int64_t g = g0 + it;
            uint8_t* rows[8];
            for (int i = 0; i < 8; ++i) rows[i] = plain.data() + pk->row_bytes * i;
            unpack_group(fmt, pk->data + pk->group_bytes * static_cast<size_t>(g), K, rows);
            for (int i = 0; i < 8; ++i)
              deq_row(fmt, rows[i], tile.data() + (8 * g + i - n0) * K, K);
          } else {
            const int64_t n = 8 * g1 + (it - (g1 - g0));
            deq_row(fmt, pk->tail() + pk->row_bytes * static_cast<size_t>(n - 8 * pk->groups),
                    tile.data() + (n - n0) * K, K);
          }
        }
      }
    } else {
      const int nt = threads_for(threads, nt_rows, static_cast<double>(nt_rows) * K);
#pragma omp parallel for num_threads(nt) schedule(static)
      for (int64_t i = 0; i < nt_rows; ++i)
        deq_row(fmt, base + stride * static_cast<size_t>(n0 + i), tile.data() + i * K, K);
    }
    omp_set_num_threads(std::max(1, threads));
    const dnnl_status_t st =
        dnnl_sgemm('N', 'T', M, nt_rows, K, 1.f, reinterpret_cast<const float*>(a.data),
                   a.strides[0], tile.data(), K, 0.f, o + n0, ldo);
    OSLO_CHECK(st == dnnl_success, OSLO_ERR_INTERNAL,
               "matmul_quant: dnnl_sgemm failed with status ", static_cast<int>(st), " for m=", M,
               " n=", nt_rows, " k=", K);
  }
}

}  // namespace

std::unique_ptr<QuantPacked> pack_quant(int threads, const V& w, const QuantMemory* mem) {
  const size_t stride = check_weight(w, "pack_weight");
  const int fmt = fmt_index(w.dtype);
  if (!quant_packs(w.dtype) || w.shape[0] < 8 || w.shape[1] == 0) return nullptr;
  auto pk = std::make_unique<QuantPacked>();
  pk->dtype = w.dtype;
  pk->N = w.shape[0];
  pk->K = w.shape[1];
  pk->groups = pk->N / 8;
  pk->group_bytes = packed_group_bytes(fmt, pk->K);
  pk->row_bytes = dtype_bytes(w.dtype, pk->K);
  const size_t bytes = (pk->bytes() + 63) / 64 * 64;
  if (mem && mem->alloc) {
    pk->data = static_cast<uint8_t*>(mem->alloc(mem->ctx, bytes));
    pk->mem = *mem;
  } else {
    pk->data = static_cast<uint8_t*>(std::aligned_alloc(64, bytes));
  }
  OSLO_CHECK(pk->data, OSLO_ERR_OUT_OF_MEMORY, "pack_weight: ", bytes,
             " bytes for the packed copy of ", dtype_name(w.dtype), " ", shape_of(w));
  pk->alloc_bytes = bytes;
  const uint8_t* base = static_cast<const uint8_t*>(w.data);
  const int nt = threads_for(threads, pk->groups, static_cast<double>(pk->N) * pk->K);
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t g = 0; g < pk->groups; ++g) {
    const uint8_t* rows[8];
    for (int i = 0; i < 8; ++i) rows[i] = base + stride * static_cast<size_t>(8 * g + i);
    pack_group(fmt, rows, pk->K, pk->data + pk->group_bytes * static_cast<size_t>(g));
  }
  uint8_t* tail = pk->data + pk->group_bytes * static_cast<size_t>(pk->groups);
  for (int64_t n = 8 * pk->groups; n < pk->N; ++n, tail += pk->row_bytes)
    std::memcpy(tail, base + stride * static_cast<size_t>(n), pk->row_bytes);
  return pk;
}

void unpack_quant(int threads, const QuantPacked& pk, const V& w) {
  const size_t stride = check_weight(w, "unpack_weight");
  OSLO_CHECK(w.dtype == pk.dtype, OSLO_ERR_DTYPE, "unpack_weight: the packed copy is of a ",
             dtype_name(pk.dtype), " weight, w is ", dtype_name(w.dtype));
  OSLO_CHECK(w.shape[0] == pk.N && w.shape[1] == pk.K, OSLO_ERR_SHAPE, "unpack_weight: w ",
             shape_of(w), " is not the [", pk.N, ", ", pk.K,
             "] weight the packed copy was made from");
  const int fmt = fmt_index(w.dtype);
  uint8_t* base = static_cast<uint8_t*>(w.data);
  const int nt = threads_for(threads, pk.groups, static_cast<double>(pk.N) * pk.K);
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t g = 0; g < pk.groups; ++g) {
    uint8_t* rows[8];
    for (int i = 0; i < 8; ++i) rows[i] = base + stride * static_cast<size_t>(8 * g + i);
    unpack_group(fmt, pk.data + pk.group_bytes * static_cast<size_t>(g), pk.K, rows);
  }
  const uint8_t* tail = pk.tail();
  for (int64_t n = 8 * pk.groups; n < pk.N; ++n, tail += pk.row_bytes)
    std::memcpy(base + stride * static_cast<size_t>(n), tail, pk.row_bytes);
}

bool quant_supported(oslo_dtype dtype) {
  return fmt_index(dtype) >= 0;
}

int64_t quant_gemm_rows(oslo_dtype dtype) {
  return dtype == OSLO_DTYPE_Q4_K || dtype == OSLO_DTYPE_Q6_K ? 192 : 384;
}

void dequantize(int threads, const V& out, const V& w) {
  const size_t stride = check_weight(w, "dequantize");
  OSLO_CHECK(
      out.dtype == OSLO_DTYPE_F32 || out.dtype == OSLO_DTYPE_F16 || out.dtype == OSLO_DTYPE_BF16,
      OSLO_ERR_DTYPE, "dequantize: the output must be f32, f16 or bf16, got ",
      dtype_name(out.dtype));
  OSLO_CHECK(out.ndim == 2 && out.shape[0] == w.shape[0] && out.shape[1] == w.shape[1],
             OSLO_ERR_SHAPE, "dequantize: output ", shape_of(out), " differs from weight ",
             shape_of(w));
  const int64_t N = w.shape[0], K = w.shape[1];
  if (N == 0 || K == 0) return;
  OSLO_CHECK(out.data, OSLO_ERR_INVALID_ARGUMENT, "dequantize: the output has no data");
  const int fmt = fmt_index(w.dtype);
  const uint8_t* base = static_cast<const uint8_t*>(w.data);
  const int nt = threads_for(threads, N, static_cast<double>(N) * K);
#pragma omp parallel num_threads(nt)
  {
    std::vector<float> row(static_cast<size_t>(K));
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      deq_row(fmt, base + stride * static_cast<size_t>(n), row.data(), K);
      store_row(out, n * out.strides[0], K, out.strides[1], row.data());
    }
  }
}

void matmul_quant(int threads, const V& c, const V& a, const V& w, const V* bias,
                  const Matmul::Activation* activation, int64_t gemm_rows,
                  const QuantPacked* packed) {
  const size_t stride = check_weight(w, packed ? "matmul_packed" : "matmul_quant", packed);
  const int64_t N = w.shape[0], K = w.shape[1];
  if (packed)
    OSLO_CHECK(packed->dtype == w.dtype && packed->N == N && packed->K == K,
               OSLO_ERR_INVALID_ARGUMENT, "matmul_packed: weight ", dtype_name(w.dtype), " ",
               shape_of(w), " is not the ", dtype_name(packed->dtype), " [", packed->N, ", ",
               packed->K, "] the packed copy was made from");
  OSLO_CHECK(a.dtype == OSLO_DTYPE_F32 && c.dtype == OSLO_DTYPE_F32, OSLO_ERR_DTYPE,
             "matmul_quant: a and c must be f32, got ", dtype_name(a.dtype), " and ",
             dtype_name(c.dtype));
  OSLO_CHECK(a.ndim == 2 && a.shape[1] == K && (K <= 1 || a.strides[1] == 1), OSLO_ERR_SHAPE,
             "matmul_quant: a ", shape_of(a), " must be [M, ", K, "] with unit column stride");
  const int64_t M = a.shape[0];
  OSLO_CHECK(c.ndim == 2 && c.shape[0] == M && c.shape[1] == N && (N <= 1 || c.strides[1] == 1),
             OSLO_ERR_SHAPE, "matmul_quant: c ", shape_of(c), " must be [", M, ", ", N,
             "] with unit column stride");
  if (bias)
    OSLO_CHECK(bias->dtype == OSLO_DTYPE_F32 && bias->ndim == 1 && bias->shape[0] == N,
               OSLO_ERR_SHAPE, "matmul_quant: bias ", shape_of(*bias), " ", dtype_name(bias->dtype),
               " must be f32 [", N, "]");
  const V* gate = activation ? activation->gate : nullptr;
  if (gate)
    OSLO_CHECK(gate->dtype == OSLO_DTYPE_F32 && gate->ndim == 2 && gate->shape[0] == M &&
                   gate->shape[1] == N,
               OSLO_ERR_SHAPE, "matmul_quant: gate ", shape_of(*gate), " ", dtype_name(gate->dtype),
               " must be f32 [", M, ", ", N, "]");
  if (M == 0 || N == 0) return;
  OSLO_CHECK(c.data && (a.data || K == 0), OSLO_ERR_INVALID_ARGUMENT,
             "matmul_quant: a or c has no data");
  const char* cb = static_cast<const char*>(c.data);
  const char* ab = static_cast<const char*>(a.data);
  const size_t cbytes = static_cast<size_t>((M - 1) * c.strides[0] + N) * 4;
  const size_t abytes = static_cast<size_t>((M - 1) * a.strides[0] + K) * 4;
  OSLO_CHECK(K == 0 || cb + cbytes <= ab || ab + abytes <= cb, OSLO_ERR_INVALID_ARGUMENT,
             "matmul_quant: c overlaps a");
  const int fmt = fmt_index(w.dtype);
  // The product goes straight into c unless a gate overlapping c is read
  // after it (then through a scratch, copied in at the end).
  bool direct = M == 1 || c.strides[0] >= N;
  if (gate && direct && (gate->strides[0] < 0 || gate->strides[1] < 0)) direct = false;
  if (gate && direct) {
    const char* gb = static_cast<const char*>(gate->data);
    const size_t gbytes =
        static_cast<size_t>((M - 1) * gate->strides[0] + (N - 1) * gate->strides[1] + 1) * 4;
    direct = gb + gbytes <= cb || cb + cbytes <= gb;
  }
  std::vector<float> scratch(direct ? 0 : static_cast<size_t>(M * N));
  float* o = direct ? static_cast<float*>(c.data) : scratch.data();
  const int64_t ldo = direct ? c.strides[0] : N;
  std::vector<float> bb;
  Epilogue epi;
  if (bias) {
    bb.resize(static_cast<size_t>(N));
    epi.bias = load_row(*bias, 0, N, bias->strides[0], bb.data());
  }
  epi.act = activation;
  bool epilogue_done = false;
  if (K == 0) {
    for (int64_t m = 0; m < M; ++m) std::fill(o + m * ldo, o + m * ldo + N, 0.f);
  } else if (M >= (gemm_rows >= 0 ? gemm_rows : quant_gemm_rows(w.dtype)) && a.strides[0] >= K) {
    product_gemm(threads, fmt, a, w, stride, packed, M, N, K, o, ldo);
  } else {
    QuantRows qa;
    quantize_rows(threads, a, M, K, &qa);
    OSLO_CHECK(!packed || quant_kernels()->dot8[fmt], OSLO_ERR_INTERNAL,
               "matmul_packed: no eight-row kernel for ", dtype_name(w.dtype));
    if (packed)
      product_packed(threads, fmt, *packed, qa, M, N, K, o, ldo, epi);
    else
      product_int(threads, fmt, w, stride, qa, M, N, K, o, ldo, epi);
    epilogue_done = true;
  }
  // The epilogue of the other paths: every column of each row, rows split
  // over the threads.
  if (epi.any() && !epilogue_done) {
    const int nt = threads_for(threads, M, static_cast<double>(M) * N * 8);
#pragma omp parallel num_threads(nt)
    {
      std::vector<float> gbuf(static_cast<size_t>(N));
#pragma omp for schedule(static)
      for (int64_t m = 0; m < M; ++m) epi.apply(o, ldo, m, m + 1, 0, N, gbuf.data());
    }
  }
  // After every gate row was read (the gate may be c).
  if (!direct)
    for (int64_t m = 0; m < M; ++m)
      std::memcpy(static_cast<float*>(c.data) + m * c.strides[0], o + m * N,
                  static_cast<size_t>(N) * sizeof(float));
}

}  // namespace cpu
}  // namespace oslo
