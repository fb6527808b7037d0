// Matrix products of the CPU backend (see cpu_matmul.cpp for the paths).
#pragma once

#include <map>
#include <tuple>

#include <dnnl.hpp>

#include "backends/cpu/cpu_ops.hpp"

namespace oslo {
namespace cpu {

class Matmul {
 public:
  Matmul();
  ~Matmul();
  Matmul(const Matmul&) = delete;
  Matmul& operator=(const Matmul&) = delete;

  // An activation (and gate) applied in the product's epilogue: matmul_act.
  struct Activation {
    oslo_bk_unary act;
    const V* gate;  // [M, N] or nullptr; may be c itself
  };
  // c = alpha * a @ b + beta * c (+ bias): the contract of oslo_backend.h;
  // with `activation`, c = act(that) * gate (matmul_act's contract).
  void run(int threads, const V& c, const V& a, const V& b, const V* bias, float alpha, float beta,
           const Activation* activation = nullptr);

 private:
  struct Mat2 {
    char* data;
    int64_t rs, cs;
  };
  // bf16 [M, K] x bf16 [K, N] -> f32 [M, N] (ld N) through a cached primitive.
  // Returns false (and computes nothing) when oneDNN has no bf16 matmul on
  // this CPU (oneDNN 2.6 needs AVX-512 for it; an AVX2-only CPU has none):
  // the caller then widens to f32.
  bool bf16_gemm(int threads, int64_t M, int64_t N, int64_t K, const Mat2& a, const Mat2& b,
                 float* c);

  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;
  struct Entry {
    dnnl::matmul prim;
    dnnl::memory::desc a_md, b_md, c_md;
  };
  dnnl::engine engine_;
  dnnl::stream stream_;
  std::map<Key, Entry> cache_;
  bool bf16_prim_ok_ = true;  // false once oneDNN refused a bf16 matmul
};

}  // namespace cpu
}  // namespace oslo
