// Matrix products of the CPU backend (see cpu_matmul.cpp for the paths).
#pragma once

#include <map>
#include <memory>
#include <tuple>
#include <vector>

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
  // A weight b [K, N] in the layout oneDNN's bf16 matmul picks for it
  // (format_tag::any: blocked, pairs of K interleaved for AVX512_BF16/AMX),
  // reordered once (oslo_backend.h's pack_weight).
  struct Packed {
    dnnl::memory::desc md;
    dnnl::memory mem;  // owns the packed bytes
    int64_t K, N;
  };
  // Whether pack() can pack weights of dtype on this CPU (bf16 with a
  // oneDNN bf16 matmul: AVX512_BF16 or AMX).
  bool can_pack(oslo_dtype dtype);
  // The packed copy of w, or nullptr when can_pack() says no.
  std::unique_ptr<Packed> pack(int threads, const V& w);

  // c = alpha * a @ b + beta * c (+ bias): the contract of oslo_backend.h;
  // with `activation`, c = act(that) * gate (matmul_act's contract). With
  // `packed` (made from b) products of more than a few rows read it instead
  // of b.
  void run(int threads, const V& c, const V& a, const V& b, const V* bias, float alpha, float beta,
           const Activation* activation = nullptr, const Packed* packed = nullptr);

 private:
  struct Mat2 {
    char* data;
    int64_t rs, cs;
  };
  // bf16 [M, K] x bf16 [K, N] -> f32 [M, N] (ld ldc) through a cached primitive.
  // Returns false (and computes nothing) when oneDNN has no bf16 matmul on
  // this CPU (oneDNN 2.6 needs AVX-512 for it; an AVX2-only CPU has none):
  // the caller then widens to f32.
  // With `packed`, b is read from the packed copy instead.
  bool bf16_gemm(int threads, int64_t M, int64_t N, int64_t K, const Mat2& a, const Mat2& b,
                 float* c, int64_t ldc, const Packed* packed = nullptr);

  // M, N, K, a's strides, b's strides (0, 0 for a packed b), c's ld.
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;
  struct Entry {
    dnnl::matmul prim;
    dnnl::memory::desc a_md, b_md, c_md;
  };
  dnnl::engine engine_;
  dnnl::stream stream_;
  std::map<Key, Entry> cache_;
  bool bf16_prim_ok_ = true;       // false once oneDNN refused a bf16 matmul
  int pack_ok_ = -1;               // can_pack's answer for bf16 (-1: not asked yet)
  std::vector<uint16_t> a_round_;  // f32 activations rounded to 16 bits (mixed products)
};

}  // namespace cpu
}  // namespace oslo
