// What the CPU backend's row-wise ops share (cpu_ops.cpp, cpu_norm.cpp,
// cpu_gather.cpp): argument checks, views as rows, element access, and
// for_rows with its per-thread scratch rows. Internal to backends/cpu.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>

#include "backends/cpu/cpu_ops.hpp"
#include "core/common/dtype.hpp"
#include "core/common/error.hpp"

namespace oslo {
namespace cpu {

inline bool is_float(oslo_dtype dt) {
  return dt == OSLO_DTYPE_F32 || dt == OSLO_DTYPE_F16 || dt == OSLO_DTYPE_BF16;
}
inline bool is_int(oslo_dtype dt) {
  return dt == OSLO_DTYPE_I32 || dt == OSLO_DTYPE_I64;
}

inline void check_view(const V& v, const char* what) {
  OSLO_CHECK(v.ndim >= 0 && v.ndim <= OSLO_MAX_DIMS, OSLO_ERR_INVALID_ARGUMENT, what, " has ",
             v.ndim, " dimensions");
  OSLO_CHECK(dtype_valid(v.dtype), OSLO_ERR_DTYPE, what, " has unknown dtype ",
             static_cast<int>(v.dtype));
  for (int i = 0; i < v.ndim; ++i)
    OSLO_CHECK(v.shape[i] >= 0, OSLO_ERR_SHAPE, what, " has a negative extent");
  OSLO_CHECK(v.data || numel(v) == 0, OSLO_ERR_INVALID_ARGUMENT, what, " has no data");
}

inline void check_float(const V& v, const char* what) {
  check_view(v, what);
  OSLO_CHECK(is_float(v.dtype), OSLO_ERR_DTYPE, what, " must be f32, f16 or bf16, not ",
             dtype_name(v.dtype));
}

inline void check_ids(const V& v, const char* what) {
  check_view(v, what);
  OSLO_CHECK(is_int(v.dtype), OSLO_ERR_DTYPE, what, " must be i32 or i64, not ",
             dtype_name(v.dtype));
}

// v right-aligned to n dimensions (leading size-1 dimensions prepended).
inline V align(const V& v, int n) {
  V r = v;
  const int pad = n - v.ndim;
  OSLO_CHECK(pad >= 0, OSLO_ERR_SHAPE, "view ", shape_of(v), " has more dimensions than ", n);
  for (int i = n - 1; i >= 0; --i) {
    r.shape[i] = i >= pad ? v.shape[i - pad] : 1;
    r.strides[i] = i >= pad ? v.strides[i - pad] : 0;
  }
  r.ndim = n;
  return r;
}

// x (aligned to out) broadcasts to out: each extent equal or 1.
inline V broadcast_to(const V& out, const V& x, const char* what) {
  V r = align(x, out.ndim);
  for (int i = 0; i < out.ndim; ++i) {
    OSLO_CHECK(r.shape[i] == out.shape[i] || r.shape[i] == 1, OSLO_ERR_SHAPE, what, " ",
               shape_of(x), " does not broadcast to ", shape_of(out));
    if (r.shape[i] != out.shape[i]) r.strides[i] = 0;
  }
  return r;
}

inline int64_t rows_of(const V& v) {
  int64_t r = 1;
  for (int i = 0; i + 1 < v.ndim; ++i) r *= v.shape[i];
  return r;
}
inline int64_t cols_of(const V& v) {
  return v.ndim ? v.shape[v.ndim - 1] : 1;
}
inline int64_t inner_stride(const V& v) {
  return v.ndim ? v.strides[v.ndim - 1] : 1;
}

// Element offset of row r (a flat index over all dimensions but the last of
// `shape_src`) inside v, which has the same number of dimensions.
inline int64_t row_offset(const V& shape_src, const V& v, int64_t r) {
  int64_t off = 0;
  for (int i = shape_src.ndim - 2; i >= 0; --i) {
    const int64_t e = shape_src.shape[i];
    const int64_t idx = e ? r % e : 0;
    r = e ? r / e : 0;
    off += idx * v.strides[i];
  }
  return off;
}

inline size_t esize(oslo_dtype dt) {
  return dtype_size(dt);
}

inline char* at(const V& v, int64_t off) {
  return static_cast<char*>(v.data) + off * static_cast<int64_t>(esize(v.dtype));
}

inline float load1(const V& v, int64_t off) {
  const char* p = at(v, off);
  switch (v.dtype) {
    case OSLO_DTYPE_F32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case OSLO_DTYPE_BF16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return bf16_to_f32(h);
    }
    default: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return f16_to_f32(h);
    }
  }
}

// The i32 or i64 id at p.
inline int64_t id_at_ptr(const char* p, oslo_dtype dt) {
  if (dt == OSLO_DTYPE_I32) {
    int32_t x;
    std::memcpy(&x, p, 4);
    return x;
  }
  int64_t x;
  std::memcpy(&x, p, 8);
  return x;
}

inline int64_t load_id(const V& v, int64_t i) {
  return id_at_ptr(at(v, i * (v.ndim ? v.strides[v.ndim - 1] : 1)), v.dtype);
}

// One scratch row of n floats, allocated when first asked for and never
// zero-filled: most rows are read in place (load_row returns the row
// itself), so a decode step's norms and its argmax over the vocabulary
// allocate nothing (a zero-filled row per call was a memset and fresh
// pages per token).
class ScratchRow {
 public:
  explicit ScratchRow(int64_t n) : n_(std::max<int64_t>(n, 1)) {}
  float* data() {
    if (!p_) p_.reset(new float[static_cast<size_t>(n_)]);
    return p_.get();
  }
  float* begin() { return data(); }

 private:
  int64_t n_;
  std::unique_ptr<float[]> p_;
};

// Per-thread scratch rows.
struct Scratch {
  explicit Scratch(int64_t n) : a(n), b(n), c(n) {}
  ScratchRow a, b, c;
};

// Runs body(r, scratch) for every row r, in parallel over rows.
template <typename Body>
inline void for_rows(int threads, int64_t rows, int64_t cols, Body body) {
  const int nt = rows > 1 && rows * cols > 16384 ? std::max(1, threads) : 1;
#pragma omp parallel num_threads(nt)
  {
    Scratch s(cols);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) body(r, s);
  }
}

// A contiguous view of many elements as [rows, chunk] so that element-wise ops
// on a single long row still use every thread.
inline bool flat(const V& v) {
  int64_t expect = 1;
  for (int i = v.ndim - 1; i >= 0; --i) {
    if (v.shape[i] != 1 && v.strides[i] != expect) return false;
    expect *= v.shape[i];
  }
  return true;
}
inline V as_chunks(const V& v, int64_t n, int64_t chunk) {
  V r = v;
  r.ndim = 2;
  r.shape[0] = n / chunk;
  r.shape[1] = chunk;
  r.strides[0] = chunk;
  r.strides[1] = 1;
  return r;
}

// AVX2 and FMA on this CPU (checked once).
inline bool has_avx2_fma() {
  static const bool v = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return v;
}

}  // namespace cpu
}  // namespace oslo
