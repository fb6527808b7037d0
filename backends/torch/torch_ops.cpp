// The compute entries of the libtorch backend: views wrapped zero-copy as
// tensors (at::from_blob) and ATen ops, with f32 arithmetic for f16/bf16.
//
// Pattern: when every tensor is f32 the ATen op writes into the output view
// directly (its *_out form); otherwise the inputs are converted to f32, the
// op runs in f32 and the result is rounded once into the output's dtype.
// (CPU ATen 1.13 lacks most f16 kernels; computing in f32 also gives every
// dtype combination one rounding.)
#include <ATen/ExpandUtils.h>
#include <c10/util/irange.h>

#include <cmath>
#include <limits>
#include <string>

#include "torch_backend.hpp"

namespace oslo_torch {
namespace {

std::string sizes_string(const at::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? "," : "") + std::to_string(t.size(i));
  return s + "]";
}

void check_shape(bool ok, const std::string& message) {
  if (!ok) fail(OSLO_ERR_SHAPE, message);
}

// x may be broadcast to out's shape (stride 0 or extent 1).
void check_broadcast(const char* entry, const char* what, const at::Tensor& x,
                     const at::Tensor& out, const char* out_name = "out") {
  check_shape(at::is_expandable_to(x.sizes(), out.sizes()),
              std::string(entry) + ": " + what + " " + sizes_string(x) + " does not broadcast to " +
                  out_name + " " + sizes_string(out));
}

void check_float(const char* entry, const char* what, const oslo_bk_view* v) {
  if (v != nullptr && !is_float(v->dtype))
    fail(OSLO_ERR_DTYPE, std::string(entry) + ": " + what + " must be f32, f16 or bf16, not " +
                             dtype_name(v->dtype));
}

void check_index(const char* entry, const char* what, const oslo_bk_view* v) {
  if (v != nullptr && !is_int(v->dtype))
    fail(OSLO_ERR_DTYPE,
         std::string(entry) + ": " + what + " must be i32 or i64, not " + dtype_name(v->dtype));
}

bool all_f32(std::initializer_list<const at::Tensor*> ts) {
  for (const at::Tensor* t : ts)
    if (t->defined() && t->scalar_type() != at::kFloat) return false;
  return true;
}

// The accumulator of sums: f64 on the CPU (as the ABI asks for SUM), f32 on
// devices.
at::ScalarType sum_type(const Instance& in) {
  return in.is_cpu() ? at::kDouble : at::kFloat;
}

// Checks ids (1-D, integer) against [0, limit) except `ignore` (when
// has_ignore); fails naming the first offending id and its position. On a
// device this reads the ids back (a wait point).
void check_ids(const char* entry, const char* what, const at::Tensor& ids, int64_t limit,
               bool has_ignore, int64_t ignore) {
  if (limit < 0)
    fail(OSLO_ERR_INVALID_ARGUMENT,
         std::string(entry) + ": limit " + std::to_string(limit) + " is negative");
  if (ids.numel() == 0) return;
  at::Tensor i = ids.to(at::kLong);
  at::Tensor bad = (i < 0).logical_or_(i >= limit);
  if (has_ignore) bad.logical_and_(i != ignore);
  if (!bad.any().item<bool>()) return;
  const int64_t pos = bad.nonzero().select(1, 0)[0].item<int64_t>();
  const int64_t id = i[pos].item<int64_t>();
  std::string msg = std::string(entry) + ": " + what + " " + std::to_string(id) + " at position " +
                    std::to_string(pos) + " is outside [0, " + std::to_string(limit) + ")";
  if (has_ignore) msg += " and is not the ignore index " + std::to_string(ignore);
  fail(OSLO_ERR_INVALID_ARGUMENT, msg);
}

// ATen (1.13 and 2.x) runs CPU bf16 GEMMs with m*k*n > 16^3 through oneDNN
// when the CPU supports it (f32 accumulation, one rounding) and otherwise
// through a kernel that rounds partial sums to bf16. GEMMs at least this
// large use ATen's bf16 path when the probe below passes.
constexpr int64_t kLargeGemm = 1 << 16;

// Once per process: does a bf16 GEMM of kLargeGemm size accumulate in f32?
// Row 0 of a (all 1) times column 0 of b (1, then 256 times 2^-9) is 1.5
// with f32 accumulation, 1 with bf16 partial sums.
bool cpu_bf16_gemm_accumulates_in_f32() {
  static const bool yes = [] {
    try {
      const int64_t m = 16, k = 257, n = 16;
      at::Tensor a = at::ones({m, k}, at::TensorOptions().dtype(at::kBFloat16));
      at::Tensor b = at::full({k, n}, 1.0 / 512, at::TensorOptions().dtype(at::kBFloat16));
      b[0].fill_(1.0);
      at::Tensor c = at::mm(a, b);
      return c[0][0].item<float>() == 1.5f;
    } catch (...) {
      return false;
    }
  }();
  return yes;
}

}  // namespace

oslo_status op_convert(void* self, const oslo_bk_view* out, const oslo_bk_view* x) {
  return guard(self, "convert", [&](Instance& in) {
    at::Tensor o = wrap(in, out, "convert", "out", Role::Output);
    at::Tensor s = wrap(in, x, "convert", "x", Role::Input);
    if (is_float(out->dtype) != is_float(x->dtype))
      fail(OSLO_ERR_DTYPE, std::string("convert: cannot convert ") + dtype_name(x->dtype) + " to " +
                               dtype_name(out->dtype) + " (float <-> float and int <-> int only)");
    check_broadcast("convert", "x", s, o);
    o.copy_(s);
  });
}

oslo_status op_fill(void* self, const oslo_bk_view* out, double value) {
  return guard(self, "fill", [&](Instance& in) {
    at::Tensor o = wrap(in, out, "fill", "out", Role::Output);
    if (is_int(out->dtype)) {
      const double lo = out->dtype == OSLO_DTYPE_I32 ? -2147483648.0 : -9223372036854775808.0;
      const double hi = out->dtype == OSLO_DTYPE_I32 ? 2147483647.0 : 9223372036854775807.0;
      if (!(value >= lo && value <= hi))
        fail(OSLO_ERR_INVALID_ARGUMENT,
             "fill: " + std::to_string(value) + " does not fit in " + dtype_name(out->dtype));
    }
    // Through copy_ (unchecked conversion: 1e10 fills f16 with inf, as a cast).
    o.copy_(at::scalar_tensor(value, at::TensorOptions().dtype(at::kDouble)));
  });
}

oslo_status op_matmul(void* self, const oslo_bk_view* c, const oslo_bk_view* a,
                      const oslo_bk_view* b, const oslo_bk_view* bias, float alpha, float beta) {
  return guard(self, "matmul", [&](Instance& in) {
    at::Tensor C = wrap(in, c, "matmul", "c", Role::Output);
    at::Tensor A = wrap(in, a, "matmul", "a", Role::Input);
    at::Tensor B = wrap(in, b, "matmul", "b", Role::Input);
    at::Tensor Bias =
        bias != nullptr ? wrap(in, bias, "matmul", "bias", Role::Input) : at::Tensor();
    check_float("matmul", "a", a);
    check_float("matmul", "c", c);
    check_float("matmul", "bias", bias);
    if (a->dtype != b->dtype)
      fail(OSLO_ERR_DTYPE, std::string("matmul: a is ") + dtype_name(a->dtype) + " but b is " +
                               dtype_name(b->dtype) + " (they must share one dtype)");
    const int64_t nd = A.dim();
    const std::string shapes =
        "a " + sizes_string(A) + ", b " + sizes_string(B) + ", c " + sizes_string(C);
    check_shape((nd == 2 || nd == 3) && B.dim() == nd && C.dim() == nd,
                "matmul: a, b and c must all be 2-D or all 3-D (" + shapes + ")");
    const int64_t M = A.size(nd - 2), K = A.size(nd - 1), N = B.size(nd - 1);
    check_shape(B.size(nd - 2) == K && C.size(nd - 2) == M && C.size(nd - 1) == N,
                "matmul: shapes do not match (" + shapes + ")");
    if (nd == 3) {
      // An operand with batch 1 is shared by every batch (as a stride of 0).
      check_shape(
          (A.size(0) == C.size(0) || A.size(0) == 1) && (B.size(0) == C.size(0) || B.size(0) == 1),
          "matmul: batch sizes differ (" + shapes + ")");
      if (A.size(0) != C.size(0)) A = A.expand({C.size(0), M, K});
      if (B.size(0) != C.size(0)) B = B.expand({C.size(0), K, N});
    }
    if (Bias.defined())
      check_shape(Bias.dim() == 1 && Bias.size(0) == N,
                  "matmul: bias " + sizes_string(Bias) + " must be [" + std::to_string(N) + "]");
    if (C.numel() == 0) return;

    // Native path, with one dtype everywhere: f32; any dtype on a device (its
    // BLAS accumulates f16/bf16 in f32); bf16 on the CPU for GEMMs large
    // enough for ATen to hand them to oneDNN, if this libtorch on this CPU
    // is seen to accumulate in f32 there. ATen's addmm/baddbmm with beta == 0
    // ignore c's previous contents, NaN included.
    const bool same = a->dtype == c->dtype && (bias == nullptr || bias->dtype == c->dtype);
    bool native = same && (a->dtype == OSLO_DTYPE_F32 || !in.is_cpu());
    if (same && a->dtype == OSLO_DTYPE_BF16 && in.is_cpu() && M * K * N >= kLargeGemm)
      native = cpu_bf16_gemm_accumulates_in_f32();
    if (native && nd == 2 && alpha == 1.f && beta == 0.f && B.t().is_contiguous() &&
        C.is_contiguous() && (!Bias.defined() || Bias.is_contiguous())) {
      // y = x W^T + b with W [N, K] as nn.Linear stores it: at::linear, the
      // kernel torch itself uses for this (oneDNN for bf16 on the CPU).
      at::linear_out(
          C, A, B.t(),
          Bias.defined() ? c10::optional<at::Tensor>(Bias) : c10::optional<at::Tensor>());
      return;
    }
    if (native) {
      float b_ = beta;
      if (Bias.defined() && beta == 0.f) {
        C.copy_(Bias.expand_as(C));
        b_ = 1.f;
      }
      // baddbmm_ on the CPU was seen to let NaN in uninitialised c through
      // with beta == 0 for small batches (conformance "attention ... off
      // -2"): c is cleared first.
      if (b_ == 0.f) C.zero_();
      if (nd == 2)
        C.addmm_(A, B, b_, alpha);
      else
        C.baddbmm_(A, B, b_, alpha);
      if (Bias.defined() && beta != 0.f) C.add_(Bias);
      return;
    }
    // f32 path: products and sums in f32, one rounding into c.
    at::Tensor A32 = f32(A), B32 = f32(B);
    at::Tensor T = nd == 2 ? at::mm(A32, B32) : at::bmm(A32, B32);
    if (alpha != 1.f) T.mul_(alpha);
    if (beta != 0.f) T.add_(f32(C), beta);
    if (Bias.defined()) T.add_(f32(Bias));
    C.copy_(T);
  });
}

oslo_status op_binary(void* self, oslo_bk_binary op_arg, const oslo_bk_view* out,
                      const oslo_bk_view* a, const oslo_bk_view* b) {
  const int op = enum_value(op_arg);
  return guard(self, "binary", [&](Instance& in) {
    if (op < OSLO_BK_ADD || op > OSLO_BK_MINIMUM)
      fail(OSLO_ERR_INVALID_ARGUMENT, "binary: unknown op " + std::to_string(op));
    at::Tensor O = wrap(in, out, "binary", "out", Role::Output);
    at::Tensor A = wrap(in, a, "binary", "a", Role::Input);
    at::Tensor B = wrap(in, b, "binary", "b", Role::Input);
    const bool fl = is_float(out->dtype);
    if (is_float(a->dtype) != fl || is_float(b->dtype) != fl)
      fail(OSLO_ERR_DTYPE, std::string("binary: out, a and b must all be float or all be "
                                       "integer (") +
                               dtype_name(out->dtype) + ", " + dtype_name(a->dtype) + ", " +
                               dtype_name(b->dtype) + ")");
    if (!fl && op == OSLO_BK_DIV) fail(OSLO_ERR_DTYPE, "binary: DIV needs float tensors");
    check_broadcast("binary", "a", A, O);
    check_broadcast("binary", "b", B, O);
    // Integer tensors of one dtype and f32 write into out directly.
    const bool direct =
        a->dtype == out->dtype && b->dtype == out->dtype && (out->dtype == OSLO_DTYPE_F32 || !fl);
    at::Tensor x = direct ? A : (fl ? f32(A) : A.to(at::kLong));
    at::Tensor y = direct ? B : (fl ? f32(B) : B.to(at::kLong));
    at::Tensor r = direct ? O : at::empty(O.sizes(), x.options());
    switch (op) {
      case OSLO_BK_ADD: at::add_out(r, x, y); break;
      case OSLO_BK_SUB: at::sub_out(r, x, y); break;
      case OSLO_BK_MUL: at::mul_out(r, x, y); break;
      case OSLO_BK_DIV: at::div_out(r, x, y); break;
      case OSLO_BK_MAXIMUM: at::maximum_out(r, x, y); break;  // NaN propagates
      case OSLO_BK_MINIMUM: at::minimum_out(r, x, y); break;
    }
    store(O, r);
  });
}

oslo_status op_unary(void* self, oslo_bk_unary op_arg, const oslo_bk_view* out,
                     const oslo_bk_view* x, float alpha) {
  const int op = enum_value(op_arg);
  return guard(self, "unary", [&](Instance& in) {
    if (op < OSLO_BK_SCALE || op > OSLO_BK_RSQRT)
      fail(OSLO_ERR_INVALID_ARGUMENT, "unary: unknown op " + std::to_string(op));
    at::Tensor O = wrap(in, out, "unary", "out", Role::Output);
    at::Tensor X = wrap(in, x, "unary", "x", Role::Input);
    check_float("unary", "out", out);
    check_float("unary", "x", x);
    check_broadcast("unary", "x", X, O);
    const bool direct = all_f32({&O, &X});
    at::Tensor s = direct ? X.expand(O.sizes()) : f32(X).expand(O.sizes());
    at::Tensor r = direct ? O : at::empty(O.sizes(), s.options());
    switch (op) {
      case OSLO_BK_SCALE:
        at::mul_out(r, s, at::scalar_tensor(alpha, at::TensorOptions().dtype(at::kFloat)));
        break;
      case OSLO_BK_EXP: at::exp_out(r, s); break;
      case OSLO_BK_GELU: at::gelu_out(r, s, "none"); break;
      case OSLO_BK_GELU_TANH: at::gelu_out(r, s, "tanh"); break;
      case OSLO_BK_SILU: at::silu_out(r, s); break;
      case OSLO_BK_RELU: at::clamp_min_out(r, s, 0); break;
      case OSLO_BK_TANH: at::tanh_out(r, s); break;
      case OSLO_BK_SQUARE: at::mul_out(r, s, s); break;
      case OSLO_BK_ABS_POW: at::pow_out(r, s.abs(), static_cast<double>(alpha)); break;
      case OSLO_BK_ABS: at::abs_out(r, s); break;
      case OSLO_BK_LOG: at::log_out(r, s); break;
      case OSLO_BK_RSQRT: at::rsqrt_out(r, s); break;
    }
    store(O, r);
  });
}

oslo_status op_unary_backward(void* self, oslo_bk_unary op_arg, const oslo_bk_view* grad_x,
                              const oslo_bk_view* x, const oslo_bk_view* grad_out, float alpha) {
  const int op = enum_value(op_arg);
  return guard(self, "unary_backward", [&](Instance& in) {
    at::Tensor GX = wrap(in, grad_x, "unary_backward", "grad_x", Role::Output);
    at::Tensor X = wrap(in, x, "unary_backward", "x", Role::Input);
    at::Tensor G = wrap(in, grad_out, "unary_backward", "grad_out", Role::Input);
    check_float("unary_backward", "grad_x", grad_x);
    check_float("unary_backward", "x", x);
    check_float("unary_backward", "grad_out", grad_out);
    check_broadcast("unary_backward", "x", X, GX, "grad_x");
    check_broadcast("unary_backward", "grad_out", G, GX, "grad_x");
    at::Tensor x32 = f32(X).expand(GX.sizes()), g32 = f32(G).expand(GX.sizes());
    at::Tensor r;
    switch (op) {
      case OSLO_BK_GELU: r = at::gelu_backward(g32, x32, "none"); break;
      case OSLO_BK_GELU_TANH: r = at::gelu_backward(g32, x32, "tanh"); break;
      case OSLO_BK_SILU: r = at::silu_backward(g32, x32); break;
      case OSLO_BK_RELU: r = at::threshold_backward(g32, x32, 0); break;  // 0 at x == 0
      case OSLO_BK_TANH: r = at::tanh_backward(g32, at::tanh(x32)); break;
      case OSLO_BK_SCALE: r = g32 * static_cast<double>(alpha); break;
      default:
        fail(OSLO_ERR_INVALID_ARGUMENT,
             "unary_backward: op " + std::to_string(op) +
                 " has no backward here (GELU, GELU_TANH, SILU, RELU, TANH and SCALE do)");
    }
    store(GX, r);
  });
}

oslo_status op_reduce(void* self, oslo_bk_reduce op_arg, const oslo_bk_view* out,
                      const oslo_bk_view* x, const oslo_bk_view* shift, int64_t valid,
                      int accumulate) {
  const int op = enum_value(op_arg);
  return guard(self, "reduce", [&](Instance& in) {
    if (op < OSLO_BK_REDUCE_SUM || op > OSLO_BK_REDUCE_MAX_ABS)
      fail(OSLO_ERR_INVALID_ARGUMENT, "reduce: unknown op " + std::to_string(op));
    at::Tensor O = wrap(in, out, "reduce", "out", Role::Output);
    at::Tensor X = wrap(in, x, "reduce", "x", Role::Input);
    check_float("reduce", "out", out);
    check_float("reduce", "x", x);
    check_shape(X.dim() >= 1 && O.sizes() == X.sizes().slice(0, X.dim() - 1),
                "reduce: out " + sizes_string(O) + " must be x " + sizes_string(X) +
                    " without its last dimension");
    const int64_t cols = X.size(-1);
    if (valid < 0) valid = cols;
    if (valid > cols)
      fail(OSLO_ERR_INVALID_ARGUMENT, "reduce: valid " + std::to_string(valid) + " exceeds the " +
                                          std::to_string(cols) + " columns of x");
    at::Tensor S;
    if (op == OSLO_BK_REDUCE_SUM_EXP) {
      if (shift == nullptr) fail(OSLO_ERR_INVALID_ARGUMENT, "reduce: SUM_EXP needs shift");
      S = wrap(in, shift, "reduce", "shift", Role::Input);
      check_float("reduce", "shift", shift);
      check_broadcast("reduce", "shift", S, O);
    }
    if (O.numel() == 0) return;
    at::Tensor xv = X.narrow(-1, 0, valid);
    at::Tensor r;
    switch (op) {
      case OSLO_BK_REDUCE_SUM: r = at::sum(xv, {-1}, false, sum_type(in)); break;
      case OSLO_BK_REDUCE_SUM_EXP:
        r = at::sum(at::exp(f32(xv) - f32(S).expand(O.sizes()).unsqueeze(-1)), {-1}, false,
                    at::kFloat);
        break;
      case OSLO_BK_REDUCE_MAX:
        // amax propagates NaN; an empty row is -inf.
        r = valid == 0 ? at::full(O.sizes(), -std::numeric_limits<float>::infinity(),
                                  O.options().dtype(at::kFloat))
                       : at::amax(f32(xv), {-1});
        break;
      case OSLO_BK_REDUCE_MAX_ABS:
        r = valid == 0 ? at::zeros(O.sizes(), O.options().dtype(at::kFloat))
                       : at::amax(f32(xv).abs(), {-1});
        break;
    }
    if (accumulate) {
      // Combined with out by the op's own combiner: + for sums, max (NaN
      // wins) for the maxima.
      at::Tensor prev = O.to(r.scalar_type());
      const bool is_max = op == OSLO_BK_REDUCE_MAX || op == OSLO_BK_REDUCE_MAX_ABS;
      r = is_max ? at::maximum(r, prev) : r + prev;
    }
    store(O, r);
  });
}

oslo_status op_sum_rows(void* self, const oslo_bk_view* out, const oslo_bk_view* x,
                        int accumulate) {
  return guard(self, "sum_rows", [&](Instance& in) {
    at::Tensor O = wrap(in, out, "sum_rows", "out", Role::Output);
    at::Tensor X = wrap(in, x, "sum_rows", "x", Role::Input);
    check_float("sum_rows", "out", out);
    check_float("sum_rows", "x", x);
    check_shape(X.dim() == 2 && O.dim() == 1 && O.size(0) == X.size(1),
                "sum_rows: x " + sizes_string(X) + " must be 2-D and out " + sizes_string(O) +
                    " its column count");
    if (O.numel() == 0) return;
    at::Tensor r = at::sum(X, {0}, false, sum_type(in));
    if (accumulate) r = r + O.to(r.scalar_type());
    store(O, r);
  });
}

oslo_status op_softmax(void* self, const oslo_bk_view* out, const oslo_bk_view* x,
                       const oslo_bk_view* mask, float scale, int causal, int64_t causal_offset) {
  return guard(self, "softmax", [&](Instance& in) {
    at::Tensor O = wrap(in, out, "softmax", "out", Role::Output);
    at::Tensor X = wrap(in, x, "softmax", "x", Role::Input);
    at::Tensor M = mask != nullptr ? wrap(in, mask, "softmax", "mask", Role::Input) : at::Tensor();
    check_float("softmax", "out", out);
    check_float("softmax", "x", x);
    check_float("softmax", "mask", mask);
    check_shape(X.dim() >= 1 && O.sizes() == X.sizes(), "softmax: out " + sizes_string(O) +
                                                            " and x " + sizes_string(X) +
                                                            " must have one shape (at least 1-D)");
    if (M.defined()) check_broadcast("softmax", "mask", M, X, "x");
    if (causal) check_shape(X.dim() >= 2, "softmax: causal needs x of at least 2 dimensions");
    if (O.numel() == 0) return;
    at::Tensor z = f32(X).mul(static_cast<double>(scale));  // a new tensor
    if (M.defined()) z.add_(f32(M));
    if (causal) {
      const int64_t sq = X.size(-2), sk = X.size(-1);
      // masked where j > i + offset, i.e. j - i >= offset + 1
      at::Tensor masked = at::ones({sq, sk}, z.options().dtype(at::kBool)).triu(causal_offset + 1);
      z.masked_fill_(masked, -std::numeric_limits<float>::infinity());
    }
    // A row with nothing left (all masked) is 0, as the contract says
    // (at::softmax would give NaN).
    at::Tensor y = at::softmax(z, -1);
    y.masked_fill_(z.amax(-1, true).eq(-std::numeric_limits<float>::infinity()), 0.0);
    store(O, y);
  });
}

oslo_status op_softmax_backward(void* self, const oslo_bk_view* grad_x, const oslo_bk_view* y,
                                const oslo_bk_view* grad_y, float scale) {
  return guard(self, "softmax_backward", [&](Instance& in) {
    at::Tensor GX = wrap(in, grad_x, "softmax_backward", "grad_x", Role::Output);
    at::Tensor Y = wrap(in, y, "softmax_backward", "y", Role::Input);
    at::Tensor GY = wrap(in, grad_y, "softmax_backward", "grad_y", Role::Input);
    check_float("softmax_backward", "grad_x", grad_x);
    check_float("softmax_backward", "y", y);
    check_float("softmax_backward", "grad_y", grad_y);
    check_shape(GX.dim() >= 1 && Y.sizes() == GX.sizes() && GY.sizes() == GX.sizes(),
                "softmax_backward: grad_x " + sizes_string(GX) + ", y " + sizes_string(Y) +
                    " and grad_y " + sizes_string(GY) + " must have one shape");
    if (GX.numel() == 0) return;
    at::Tensor y32 = f32(Y), g32 = f32(GY);
    at::Tensor dot = (g32 * y32).sum(-1, true);
    store(GX, (g32 - dot).mul_(y32).mul_(static_cast<double>(scale)));
  });
}

oslo_status op_norm(void* self, const oslo_bk_view* out, const oslo_bk_view* x,
                    const oslo_bk_view* gamma, const oslo_bk_view* beta, float eps, int rms) {
  return guard(self, "norm", [&](Instance& in) {
    at::Tensor O = wrap(in, out, "norm", "out", Role::Output);
    at::Tensor X = wrap(in, x, "norm", "x", Role::Input);
    at::Tensor Gm = gamma != nullptr ? wrap(in, gamma, "norm", "gamma", Role::Input) : at::Tensor();
    at::Tensor Bt =
        beta != nullptr && !rms ? wrap(in, beta, "norm", "beta", Role::Input) : at::Tensor();
    check_float("norm", "out", out);
    check_float("norm", "x", x);
    check_float("norm", "gamma", gamma);
    if (!rms) check_float("norm", "beta", beta);
    check_shape(X.dim() >= 1 && O.sizes() == X.sizes(), "norm: out " + sizes_string(O) + " and x " +
                                                            sizes_string(X) +
                                                            " must have one shape (at least 1-D)");
    const int64_t H = X.size(-1);
    for (const at::Tensor* p : {&Gm, &Bt})
      if (p->defined())
        check_shape(p->dim() == 1 && p->size(0) == H, "norm: gamma/beta " + sizes_string(*p) +
                                                          " must be [" + std::to_string(H) + "]");
    if (O.numel() == 0) return;
    at::Tensor x32 = f32(X);
    c10::optional<at::Tensor> g32, b32;
    if (Gm.defined()) g32 = f32(Gm);
    if (Bt.defined()) b32 = f32(Bt);
    at::Tensor r;
    if (rms) {
      r = x32 * at::rsqrt(x32.square().mean(-1, true).add_(static_cast<double>(eps)));
      if (g32) r.mul_(*g32);
    } else {
      r = at::layer_norm(x32, {H}, g32, b32, static_cast<double>(eps));
    }
    store(O, r);
  });
}

oslo_status op_gather_rows(void* self, const oslo_bk_view* out, const oslo_bk_view* table,
                           const oslo_bk_view* ids, int64_t offset, int64_t limit) {
  return guard(self, "gather_rows", [&](Instance& in) {
    at::Tensor O = wrap(in, out, "gather_rows", "out", Role::Output);
    at::Tensor T = wrap(in, table, "gather_rows", "table", Role::Input);
    at::Tensor I = wrap(in, ids, "gather_rows", "ids", Role::Input);
    check_index("gather_rows", "ids", ids);
    if (is_float(out->dtype) != is_float(table->dtype))
      fail(OSLO_ERR_DTYPE, std::string("gather_rows: out is ") + dtype_name(out->dtype) +
                               " but table is " + dtype_name(table->dtype));
    check_shape(I.dim() == 1 && T.dim() == 2 && O.dim() == 2 && O.size(0) == I.size(0) &&
                    O.size(1) == T.size(1),
                "gather_rows: needs ids [n], table [rows, h], out [n, h]; got ids " +
                    sizes_string(I) + ", table " + sizes_string(T) + ", out " + sizes_string(O));
    check_ids("gather_rows", "id", I, limit, false, 0);
    if (O.numel() == 0) return;
    at::Tensor local = I.to(at::kLong) - offset;
    at::Tensor outside = (local < 0).logical_or_(local >= T.size(0));
    if (T.size(0) == 0) {
      O.zero_();
      return;
    }
    at::Tensor r = T.index_select(0, local.masked_fill(outside, 0));
    r.masked_fill_(outside.unsqueeze(1), 0);
    store(O, r);
  });
}

oslo_status op_scatter_add_rows(void* self, const oslo_bk_view* table, const oslo_bk_view* ids,
                                const oslo_bk_view* src, int64_t offset) {
  return guard(self, "scatter_add_rows", [&](Instance& in) {
    at::Tensor T = wrap(in, table, "scatter_add_rows", "table", Role::Output);
    at::Tensor I = wrap(in, ids, "scatter_add_rows", "ids", Role::Input);
    at::Tensor S = wrap(in, src, "scatter_add_rows", "src", Role::Input);
    check_index("scatter_add_rows", "ids", ids);
    check_float("scatter_add_rows", "table", table);
    check_float("scatter_add_rows", "src", src);
    check_shape(I.dim() == 1 && T.dim() == 2 && S.dim() == 2 && S.size(0) == I.size(0) &&
                    S.size(1) == T.size(1),
                "scatter_add_rows: needs table [rows, h], ids [n], src [n, h]; got table " +
                    sizes_string(T) + ", ids " + sizes_string(I) + ", src " + sizes_string(S));
    if (I.numel() == 0 || T.numel() == 0) return;
    at::Tensor local = I.to(at::kLong) - offset;
    at::Tensor sel = ((local >= 0).logical_and_(local < T.size(0))).nonzero().select(1, 0);
    if (sel.numel() == 0) return;
    at::Tensor idx = local.index_select(0, sel);
    at::Tensor s = S.index_select(0, sel);
    if (table->dtype == src->dtype) {
      // index_add_ adds the rows one after another in t order on the CPU.
      T.index_add_(0, idx, s);
      return;
    }
    // Mixed dtypes: the touched rows in f32, rounded once.
    auto uniq = at::_unique(idx, /*sorted=*/true, /*return_inverse=*/true);
    const at::Tensor& rows = std::get<0>(uniq);
    at::Tensor acc = f32(T.index_select(0, rows));
    acc.index_add_(0, std::get<1>(uniq), f32(s));
    T.index_copy_(0, rows, acc.to(T.scalar_type()));
  });
}

oslo_status op_gather_cols(void* self, const oslo_bk_view* out, const oslo_bk_view* x,
                           const oslo_bk_view* idx, int64_t offset, int64_t limit, int64_t ignore) {
  return guard(self, "gather_cols", [&](Instance& in) {
    at::Tensor O = wrap(in, out, "gather_cols", "out", Role::Output);
    at::Tensor X = wrap(in, x, "gather_cols", "x", Role::Input);
    at::Tensor I = wrap(in, idx, "gather_cols", "idx", Role::Input);
    check_index("gather_cols", "idx", idx);
    check_float("gather_cols", "out", out);
    check_float("gather_cols", "x", x);
    check_shape(X.dim() == 2 && I.dim() == 1 && O.dim() == 1 && I.size(0) == X.size(0) &&
                    O.size(0) == X.size(0),
                "gather_cols: needs x [t, cols], idx [t], out [t]; got x " + sizes_string(X) +
                    ", idx " + sizes_string(I) + ", out " + sizes_string(O));
    check_ids("gather_cols", "index", I, limit, true, ignore);
    if (O.numel() == 0) return;
    at::Tensor i64 = I.to(at::kLong);
    at::Tensor local = i64 - offset;
    at::Tensor skip = (local < 0).logical_or_(local >= X.size(1)).logical_or_(i64 == ignore);
    if (X.size(1) == 0) {
      O.zero_();
      return;
    }
    at::Tensor r = X.gather(1, local.masked_fill(skip, 0).unsqueeze(1)).squeeze(1);
    store(O, r.masked_fill_(skip, 0));
  });
}

oslo_status op_scatter_add_cols(void* self, const oslo_bk_view* x, const oslo_bk_view* idx,
                                int64_t offset, int64_t ignore, float value) {
  return guard(self, "scatter_add_cols", [&](Instance& in) {
    at::Tensor X = wrap(in, x, "scatter_add_cols", "x", Role::Output);
    at::Tensor I = wrap(in, idx, "scatter_add_cols", "idx", Role::Input);
    check_index("scatter_add_cols", "idx", idx);
    check_float("scatter_add_cols", "x", x);
    check_shape(X.dim() == 2 && I.dim() == 1 && I.size(0) == X.size(0),
                "scatter_add_cols: needs x [t, cols] and idx [t]; got x " + sizes_string(X) +
                    ", idx " + sizes_string(I));
    if (X.numel() == 0) return;
    at::Tensor i64 = I.to(at::kLong);
    at::Tensor local = i64 - offset;
    at::Tensor take = (local >= 0).logical_and_(local < X.size(1)).logical_and_(i64 != ignore);
    at::Tensor col = local.masked_fill(take.logical_not(), 0).unsqueeze(1);
    at::Tensor old = X.gather(1, col);
    // Rows that take nothing write their column 0 back unchanged.
    X.scatter_(1, col, at::where(take.unsqueeze(1), old + static_cast<double>(value), old));
  });
}

}  // namespace oslo_torch
