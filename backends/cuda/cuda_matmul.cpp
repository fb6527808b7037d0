// matmul through cuBLASLt: c = alpha * a @ b + beta * c (+ bias), 2-D or
// batched (dimension 0, a shared operand with batch 1 or stride 0), any of
// f32 (TF32 only when the "tf32" option is on), bf16 and f16 with f32
// accumulation. Row-major oslo views map onto cuBLASLt's column-major
// matrices as D^T = B^T A^T, transposes expressed by strides become the
// operation's transpose flags. Output dtypes cuBLASLt cannot write directly
// (f32 inputs into a bf16 c, a strided c, a bias of another dtype) go
// through an f32 result and oslo's epilogue kernel. Plans (descriptors and
// the heuristic's algorithm) are cached per shape.
#include <algorithm>

#include "cuda_backend.hpp"

namespace oslo_cuda {
namespace {

cudaDataType_t cuda_type(oslo_dtype dt) {
  switch (dt) {
    case OSLO_DTYPE_F16: return CUDA_R_16F;
    case OSLO_DTYPE_BF16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}

// One operand as cuBLASLt sees it: a column-major matrix of rows x cols with
// leading dimension ld, transposed or not, with a batch stride.
struct Operand {
  const void* p = nullptr;
  oslo_dtype dt = OSLO_DTYPE_F32;
  bool trans = false;
  int64_t rows = 0, cols = 0, ld = 0, batch_stride = 0;
};

// The transpose of the row-major matrix X [R, C] (strides s0, s1), as a
// column-major C x R matrix (or its transpose). False if the strides fit no
// layout (then the caller copies X).
bool describe(int64_t R, int64_t C, int64_t s0, int64_t s1, Operand* o) {
  if (s1 == 1 || C == 1) {
    const int64_t ld = R == 1 ? std::max<int64_t>(C, 1) : s0;
    if (ld < std::max<int64_t>(C, 1)) return false;
    o->trans = false;
    o->rows = C;
    o->cols = R;
    o->ld = ld;
    return true;
  }
  if (s0 == 1 || R == 1) {
    const int64_t ld = C == 1 ? std::max<int64_t>(R, 1) : s1;
    if (ld < std::max<int64_t>(R, 1)) return false;
    o->trans = true;
    o->rows = R;
    o->cols = C;
    o->ld = ld;
    return true;
  }
  return false;
}

int alignment(const void* p, int64_t ld, int64_t bstride, size_t es) {
  uint64_t bits = reinterpret_cast<uintptr_t>(p) | static_cast<uint64_t>(ld) * es |
                  static_cast<uint64_t>(bstride) * es;
  int a = 1;
  while (a < 256 && (bits & static_cast<uint64_t>(a)) == 0) a <<= 1;
  return a;
}

void set_layout_batch(cublasLtMatrixLayout_t l, int64_t batch, int64_t stride) {
  if (batch <= 1) return;
  int32_t b = static_cast<int32_t>(batch);
  check_cublas(
      cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &b, sizeof b),
      "cublasLtMatrixLayoutSetAttribute");
  check_cublas(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                &stride, sizeof stride),
               "cublasLtMatrixLayoutSetAttribute");
}

// Builds (or finds) the plan for D = alpha * op(A) op(B) + beta * C with C
// and D sharing `lc`. Returns nullptr if cuBLASLt has no algorithm for it.
GemmPlan* plan_for(Instance& in, const Operand& A, const Operand& B, const void* cp, oslo_dtype cdt,
                   int64_t m, int64_t n, int64_t ldc, int64_t cstride, int64_t batch,
                   const void* bias, oslo_dtype bias_dt) {
  const size_t es_ab = dtype_size(A.dt), es_c = dtype_size(cdt);
  const int al_a = alignment(A.p, A.ld, A.batch_stride, es_ab);
  const int al_b = alignment(B.p, B.ld, B.batch_stride, es_ab);
  const int al_c = alignment(cp, ldc, cstride, es_c);
  const bool tf32 = A.dt == OSLO_DTYPE_F32 && in.tf32;
  const PlanKey key = {A.dt,
                       cdt,
                       A.trans,
                       B.trans,
                       A.rows,
                       A.cols,
                       A.ld,
                       A.batch_stride,
                       B.rows,
                       B.cols,
                       B.ld,
                       B.batch_stride,
                       m,
                       n,
                       ldc,
                       cstride,
                       batch,
                       bias != nullptr,
                       al_a,
                       al_b,
                       al_c,
                       tf32,
                       bias ? bias_dt + 1 : 0,
                       0};
  auto it = in.plans.find(key);
  if (it != in.plans.end()) return it->second->ok ? it->second.get() : nullptr;
  auto plan = std::make_unique<GemmPlan>();
  const cublasComputeType_t compute = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  check_cublas(cublasLtMatmulDescCreate(&plan->op, compute, CUDA_R_32F),
               "cublasLtMatmulDescCreate");
  const cublasOperation_t ta = A.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = B.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  check_cublas(
      cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta),
      "cublasLtMatmulDescSetAttribute");
  check_cublas(
      cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb),
      "cublasLtMatmulDescSetAttribute");
  if (bias) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    check_cublas(
        cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi),
        "cublasLtMatmulDescSetAttribute");
    const cudaDataType_t bt = cuda_type(bias_dt);
    check_cublas(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt,
                                                sizeof bt),
                 "cublasLtMatmulDescSetAttribute");
  }
  const cudaDataType_t tab = cuda_type(A.dt);
  check_cublas(cublasLtMatrixLayoutCreate(&plan->la, tab, static_cast<uint64_t>(A.rows),
                                          static_cast<uint64_t>(A.cols), A.ld),
               "cublasLtMatrixLayoutCreate");
  check_cublas(cublasLtMatrixLayoutCreate(&plan->lb, tab, static_cast<uint64_t>(B.rows),
                                          static_cast<uint64_t>(B.cols), B.ld),
               "cublasLtMatrixLayoutCreate");
  check_cublas(cublasLtMatrixLayoutCreate(&plan->lc, cuda_type(cdt), static_cast<uint64_t>(m),
                                          static_cast<uint64_t>(n), ldc),
               "cublasLtMatrixLayoutCreate");
  set_layout_batch(plan->la, batch, A.batch_stride);
  set_layout_batch(plan->lb, batch, B.batch_stride);
  set_layout_batch(plan->lc, batch, cstride);
  cublasLtMatmulPreference_t pref = nullptr;
  check_cublas(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
  const uint64_t ws = in.workspace_bytes;
  const uint32_t a32 = static_cast<uint32_t>(al_a), b32 = static_cast<uint32_t>(al_b),
                 c32 = static_cast<uint32_t>(al_c);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                       sizeof ws);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &a32,
                                       sizeof a32);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &b32,
                                       sizeof b32);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &c32,
                                       sizeof c32);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &c32,
                                       sizeof c32);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(
      in.lt, plan->op, plan->la, plan->lb, plan->lc, plan->lc, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  plan->ok = s == CUBLAS_STATUS_SUCCESS && found > 0;
  if (plan->ok) plan->algo = result.algo;
  GemmPlan* p = plan.get();
  in.plans.emplace(key, std::move(plan));
  return p->ok ? p : nullptr;
}

// A contiguous copy of a view (same dtype), for operands no layout fits.
Instance::Temp contiguous(Instance& in, const oslo_bk_view& v, oslo_bk_view* out) {
  Instance::Temp t(&in, static_cast<size_t>(numel(v)) * dtype_size(v.dtype));
  *out = v;
  out->data = t.p;
  int64_t s = 1;
  for (int i = v.ndim - 1; i >= 0; --i) {
    out->strides[i] = s;
    s *= v.shape[i];
  }
  const oslo_status st = op_convert(&in, out, &v);
  if (st != OSLO_OK) fail(st, in.error);
  return t;
}

bool direct_output(oslo_dtype ab, oslo_dtype c) {
  if (ab == OSLO_DTYPE_F32) return c == OSLO_DTYPE_F32;
  return c == ab || c == OSLO_DTYPE_F32;
}

}  // namespace

oslo_status op_matmul(void* self, const oslo_bk_view* c, const oslo_bk_view* a,
                      const oslo_bk_view* b, const oslo_bk_view* bias, float alpha, float beta) {
  return guard(self, "matmul", [&](Instance& in) {
    check_float(c, "matmul c", true);
    check_float(a, "matmul a", false);
    check_float(b, "matmul b", false);
    if (bias) check_float(bias, "matmul bias", false);
    // f32 a with a 16-bit b (OSLO_BK_OP_MATMUL_MIXED): as if a were
    // converted to b's dtype first.
    const bool mixed =
        a->dtype == OSLO_DTYPE_F32 && (b->dtype == OSLO_DTYPE_BF16 || b->dtype == OSLO_DTYPE_F16);
    if (a->dtype != b->dtype && !mixed)
      fail(OSLO_ERR_DTYPE, std::string("matmul a is ") + dtype_name(a->dtype) + " but b is " +
                               dtype_name(b->dtype) +
                               " (they must share one dtype, or a is f32 and b 16-bit)");
    if (c->ndim != 2 && c->ndim != 3)
      fail(OSLO_ERR_SHAPE, "matmul c must be 2-D or 3-D, got " + shape_string(*c));
    const int64_t batch = c->ndim == 3 ? c->shape[0] : 1;
    for (const oslo_bk_view* v : {a, b}) {
      if (v->ndim != 2 && v->ndim != c->ndim)
        fail(OSLO_ERR_SHAPE,
             "matmul operand " + shape_string(*v) + " does not fit c " + shape_string(*c));
      if (v->ndim == 3 && v->shape[0] != batch && v->shape[0] != 1)
        fail(OSLO_ERR_SHAPE, "matmul operand " + shape_string(*v) + " has batch " +
                                 std::to_string(v->shape[0]) + ", c has " + std::to_string(batch));
    }
    const int64_t M = c->shape[c->ndim - 2], N = c->shape[c->ndim - 1];
    const int64_t K = a->shape[a->ndim - 1];
    if (a->shape[a->ndim - 2] != M || b->shape[b->ndim - 2] != K || b->shape[b->ndim - 1] != N)
      fail(OSLO_ERR_SHAPE, "matmul shapes do not fit: a " + shape_string(*a) + " @ b " +
                               shape_string(*b) + " -> c " + shape_string(*c));
    if (bias && numel(*bias) != N)
      fail(OSLO_ERR_SHAPE,
           "matmul bias " + shape_string(*bias) + " needs " + std::to_string(N) + " elements");
    if (batch * M * N == 0) return;
    // Up to 8 rows against a weight (decode): oslo's own kernel, which reads
    // the weight once at memory speed and costs one launch, where cuBLASLt's
    // call costs several times a launch of host time. It takes a mixed a as
    // it is (rounding each element to b's dtype as it loads it).
    if (batch == 1 && in.skinny && K > 0 && skinny_matmul(in, *c, *a, *b, bias, alpha, beta))
      return;
    // Any other mixed product: a converted to b's dtype, then as usual.
    Instance::Temp a_conv;
    oslo_bk_view a_view;
    if (mixed) {
      a_conv = Instance::Temp(&in, static_cast<size_t>(numel(*a)) * dtype_size(b->dtype));
      a_view = *a;
      a_view.dtype = b->dtype;
      a_view.data = a_conv.p;
      int64_t s = 1;
      for (int i = a->ndim - 1; i >= 0; --i) {
        a_view.strides[i] = s;
        s *= a->shape[i];
      }
      const oslo_status st = op_convert(&in, &a_view, a);
      if (st != OSLO_OK) fail(st, in.error);
      a = &a_view;
    }
    // K == 0, and small batched products (decode attention: a few query
    // rows against a cache whose length changes every step): oslo's own
    // kernel, so no cuBLASLt plan (a heuristic query) per new length.
    if (K == 0 || (batch > 1 && M <= 16 && batch * M * N * K <= (int64_t{1} << 24))) {
      naive_gemm(in, *c, *a, *b, bias, alpha, beta);
      return;
    }

    // Operands: cuBLASLt's A is b^T (N x K), its B is a^T (K x M).
    oslo_bk_view av = *a, bv = *b;
    Instance::Temp ta, tb;
    Operand A, B;
    auto inner = [](const oslo_bk_view& v, int64_t* s0, int64_t* s1, int64_t* sb) {
      *s0 = v.strides[v.ndim - 2];
      *s1 = v.strides[v.ndim - 1];
      *sb = v.ndim == 3 && v.shape[0] != 1 ? v.strides[0] : 0;
    };
    int64_t s0, s1, sb;
    inner(bv, &s0, &s1, &sb);
    if (!describe(K, N, s0, s1, &A)) {
      tb = contiguous(in, *b, &bv);
      inner(bv, &s0, &s1, &sb);
      describe(K, N, s0, s1, &A);
    }
    A.p = bv.data;
    A.dt = bv.dtype;
    A.batch_stride = sb;
    inner(av, &s0, &s1, &sb);
    if (!describe(M, K, s0, s1, &B)) {
      ta = contiguous(in, *a, &av);
      inner(av, &s0, &s1, &sb);
      describe(M, K, s0, s1, &B);
    }
    B.p = av.data;
    B.dt = av.dtype;
    B.batch_stride = sb;

    // Written straight into c when cuBLASLt can.
    const int64_t cs0 = c->strides[c->ndim - 2], cs1 = c->strides[c->ndim - 1];
    const int64_t csb = c->ndim == 3 ? c->strides[0] : 0;
    const bool c_ok = (cs1 == 1 || N == 1) && (M == 1 || cs0 >= N) && (batch == 1 || csb != 0) &&
                      direct_output(a->dtype, c->dtype);
    // The bias epilogue: a contiguous bias of c's dtype, or of the operands'
    // 16-bit dtype on an f32 c (cuBLASLt's BIAS_DATA_TYPE; if it has no
    // algorithm for that, the f32 path below adds the bias).
    const bool bias_direct =
        bias == nullptr ||
        ((bias->dtype == c->dtype || (c->dtype == OSLO_DTYPE_F32 && bias->dtype == a->dtype)) &&
         batch == 1 && (bias->ndim == 0 || bias->strides[bias->ndim - 1] == 1 || N == 1));
    if (c_ok && bias_direct) {
      const int64_t ldc = M == 1 ? std::max<int64_t>(N, cs0 > 0 ? cs0 : N) : cs0;
      GemmPlan* p = plan_for(in, A, B, c->data, c->dtype, N, M, std::max<int64_t>(ldc, N), csb,
                             batch, bias ? bias->data : nullptr, bias ? bias->dtype : c->dtype);
      if (p) {
        if (bias) {
          const void* bp = bias->data;
          check_cublas(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp,
                                                      sizeof bp),
                       "cublasLtMatmulDescSetAttribute");
        }
        const cublasStatus_t st =
            cublasLtMatmul(in.lt, p->op, &alpha, A.p, p->la, B.p, p->lb, &beta, c->data, p->lc,
                           c->data, p->lc, &p->algo, in.workspace, in.workspace_bytes, in.stream);
        if (st == CUBLAS_STATUS_SUCCESS) return;
        if (st != CUBLAS_STATUS_NOT_SUPPORTED) check_cublas(st, "cublasLtMatmul");
        p->ok = false;  // not for this combination after all: the f32 path below
      }
    }
    // An f32 result [batch, M, N], then c = result + beta * c + bias.
    Instance::Temp acc(&in, static_cast<size_t>(batch * M * N) * sizeof(float));
    const float zero = 0.f;
    GemmPlan* p = plan_for(in, A, B, acc.p, OSLO_DTYPE_F32, N, M, N, batch > 1 ? M * N : 0, batch,
                           nullptr, OSLO_DTYPE_F32);
    if (!p) {
      naive_gemm(in, *c, *a, *b, bias, alpha, beta);
      return;
    }
    check_cublas(
        cublasLtMatmul(in.lt, p->op, &alpha, A.p, p->la, B.p, p->lb, &zero, acc.p, p->lc, acc.p,
                       p->lc, &p->algo, in.workspace, in.workspace_bytes, in.stream),
        "cublasLtMatmul");
    epilogue(in, *c, static_cast<const float*>(acc.p), bias, beta);
  });
}

}  // namespace oslo_cuda
