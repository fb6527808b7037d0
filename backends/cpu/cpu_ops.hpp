// The CPU backend's ops (contracts in core/backend/oslo_backend.h). Each
// throws oslo::Error naming the problem; cpu_backend.cpp turns that into the
// table's status + message. f16 and bf16 are read into f32 a row at a time and
// rounded once on the way out; reductions accumulate in f64 (sums) so results
// are deterministic for a given input whatever the thread count.
#pragma once

#include <cstdint>
#include <string>

#include "core/backend/oslo_backend.h"

namespace oslo {
namespace cpu {

using V = oslo_bk_view;

void convert(int threads, const V& out, const V& x);
void fill(int threads, const V& out, double value);
void binary(int threads, oslo_bk_binary op, const V& out, const V& a, const V& b);
void unary(int threads, oslo_bk_unary op, const V& out, const V& x, float alpha);
void unary_backward(int threads, oslo_bk_unary op, const V& gx, const V& x, const V& gy,
                    float alpha);
void reduce(int threads, oslo_bk_reduce op, const V& out, const V& x, const V* shift, int64_t valid,
            bool accumulate);
void sum_rows(int threads, const V& out, const V& x, bool accumulate);
void softmax(int threads, const V& out, const V& x, const V* mask, float scale, bool causal,
             int64_t offset);
void softmax_backward(int threads, const V& gx, const V& y, const V& gy, float scale);
void norm(int threads, const V& out, const V& x, const V* gamma, const V* beta, float eps,
          bool rms);
// Fused ops (oslo_backend.h's contracts; cpu_fused.cpp has attention).
void residual_norm(int threads, const V& out, const V& x, const V* y, const V* bias, const V* gamma,
                   const V* beta, float eps, bool rms);
void rope(int threads, const V& x, const V& cos, const V& sin);
void argmax(int threads, const V& index, const V& value, const V& x, int64_t valid);
void adamw(int threads, const V& p, const V& g, const V& m, const V& v, float decay, float beta1,
           float beta2, float step_size, float bc2_sqrt, float eps);
void norm_backward(int threads, const V& grad_x, const V* grad_gamma, const V* grad_beta,
                   const V& x, const V* gamma, const V& dy, float eps, bool rms);
void attention(int threads, const V& out, const V& q, const V& k, const V& v, const V* mask,
               float scale, bool causal, int64_t causal_offset);
// attention() over an int8 cache (oslo_backend.h's attention_kv8): the
// decode path reads the int8 rows and their scales as they are; prefill
// tiles dequantize them to f32 first.
void attention_kv8(int threads, const V& out, const V& q, const V& k, const V& k_scale, const V& v,
                   const V& v_scale, const V* mask, float scale, bool causal,
                   int64_t causal_offset);
// The int8 KV cache's rows (cpu_kv8.cpp; oslo_backend.h's quantize_rows and
// dequantize_rows): the reference's bytes (core/backend/fused_kv8.cpp).
void quantize_rows(int threads, const V& q, const V& scale, const V& x);
void dequantize_rows(int threads, const V& out, const V& q, const V& scale);
// rows rows of D int8 codes (contiguous) times their f32 scales into out
// (rows x D f32): dequantize_rows' values (one f32 rounding each).
void int8_rows_to_f32(const int8_t* q, const float* scales, int64_t rows, int64_t D, float* out);
// paged_attention() over int8 pools and their scales (oslo_backend.h's
// paged_attention_kv8): each block converted to f32 as it is read
// (cpu_paged_attention.cpp).
void paged_attention_kv8(int threads, const V& out, const V& q, const V& kp, const V& ks,
                         const V& vp, const V& vs, const V& table, const int64_t* chunks, int64_t C,
                         float scale);
// The gradients of attention() (cpu_attention_bw.cpp).
void attention_backward(int threads, const V& dq, const V& dk, const V& dv, const V& q, const V& k,
                        const V& v, const V& dout, const V* mask, float scale, bool causal,
                        int64_t causal_offset);
// One serving step's attention through block tables (cpu_paged_attention.cpp).
void paged_attention(int threads, const V& out, const V& q, const V& k_pool, const V& v_pool,
                     const V& block_table, const int64_t* chunks, int64_t num_chunks, float scale);
void gather_rows(int threads, const V& out, const V& table, const V& ids, int64_t offset,
                 int64_t limit);
void scatter_add_rows(int threads, const V& table, const V& ids, const V& src, int64_t offset);
void gather_cols(int threads, const V& out, const V& x, const V& idx, int64_t offset, int64_t limit,
                 int64_t ignore);
void scatter_add_cols(int threads, const V& x, const V& idx, int64_t offset, int64_t ignore,
                      float value);

// Row kernels shared by the ops (cpu_ops.cpp): AVX2 + FMA code picked at run
// time, scalar code elsewhere.
// f64 sum of a[0..n) over 16 interleaved lanes combined in a fixed order:
// the same bits on every CPU and thread count.
double sum_f64(const float* a, int64_t n);
// sum of (a[i] - m)^2 in f64 over the same 16 lanes and fixed order.
double sq_dev_sum_f64(const float* a, int64_t n, double m);
// o[i] = exp(a[i] - shift) in f32 (o may be a, or null: not stored); returns
// the f64 sum of those f32 values (as sum_f64 adds them) when `sum` is set.
double exp_sum_f64(float* o, const float* a, int64_t n, float shift, bool sum);
// o[i] = exp(a[i]) (o may be a): within 2 ulp of std::exp, inf above
// ln(FLT_MAX), through the denormals to 0 below, NaN stays NaN.
void exp_f32(float* o, const float* a, int64_t n);

// Attention's row kernels (cpu_fused.cpp; AVX2 + FMA when the CPU has them,
// picked once), over n rows of length D at base + j * stride:
//   dots:  s[j] = q . row[j]          axpys: acc[d] += sum_j p[j] row[j][d]
struct AttentionRowKernels {
  void (*dots)(const float* q, const float* base, int64_t stride, int64_t n, int64_t D, float* s);
  void (*axpys)(const float* p, const float* base, int64_t stride, int64_t n, int64_t D,
                float* acc);
};
const AttentionRowKernels& attention_row_kernels();

// Matmul state (cached oneDNN primitives) lives in the instance.
class Matmul;

// Shared helpers for cpu_matmul.cpp and cpu_fused.cpp.
// "[d0, d1, ...]" of a view, for messages.
std::string shape_of(const V& v);
int64_t numel(const V& v);
// Loads n elements of a row starting at element offset off with inner stride
// s into buf as f32; returns buf, or the row itself when it is f32 with stride 1.
const float* load_row(const V& v, int64_t off, int64_t n, int64_t s, float* buf);
void store_row(const V& v, int64_t off, int64_t n, int64_t s, const float* src);
// o[i] = act(a[i]) for i < n (o may be a): the element-wise kernel unary()
// runs for GELU, GELU_TANH, SILU, RELU and TANH (the matmul epilogue's
// activations; any other op throws OSLO_ERR_INVALID_ARGUMENT).
void activate(oslo_bk_unary act, float* o, const float* a, int64_t n);

}  // namespace cpu
}  // namespace oslo
