// Internals of the native CUDA backend plugin (liboslo_backend_cuda.so). From
// oslo it includes only the public header and the backend ABI header; it never
// links liboslo. Everything here has hidden visibility: the plugin exports
// oslo_backend_plugin_v2 and oslo_backend_plugin_v1 alone (see plugin.map).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "oslo.h"
#include "oslo_backend.h"

namespace oslo_cuda {

// A failure with an oslo status; thrown inside the plugin only, caught by
// guard() before any entry returns.
class Failure : public std::exception {
 public:
  Failure(oslo_status status, std::string message)
      : status_(status), message_(std::move(message)) {}
  const char* what() const noexcept override { return message_.c_str(); }
  oslo_status status() const { return status_; }

 private:
  oslo_status status_;
  std::string message_;
};

[[noreturn]] void fail(oslo_status status, const std::string& message);

// Throws a Failure naming `what` if a CUDA runtime call failed (out of
// memory becomes OSLO_ERR_OUT_OF_MEMORY, anything else OSLO_ERR_INTERNAL).
void check_cuda(cudaError_t e, const char* what);
void check_cublas(cublasStatus_t s, const char* what);

// The caching allocator of one instance: per-size free lists of device
// blocks. A freed block goes back to its list and is handed out again by a
// later alloc on the same (single) stream, so its reuse is ordered after
// every op that used it. free() may run on any thread.
class Allocator {
 public:
  explicit Allocator(int device) : device_(device) {}
  ~Allocator();
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;
  void* allocate(size_t bytes, cudaStream_t stream);
  void release(void* ptr);
  // Returns every cached block to the driver (the stream must be idle).
  void trim();
  size_t cached_bytes() const;

 private:
  static size_t round(size_t bytes);
  int device_;
  mutable std::mutex mutex_;
  std::unordered_map<void*, size_t> live_;     // block -> its rounded size
  std::map<size_t, std::vector<void*>> free_;  // rounded size -> blocks
  size_t cached_ = 0;
};

// A cached cuBLASLt plan for one matmul shape.
struct GemmPlan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool ok = false;
  ~GemmPlan();
};

// The key of a cached GEMM plan: dtypes, transposes, extents, leading
// dimensions, batch strides, bias, alignments, TF32.
using PlanKey = std::array<int64_t, 24>;
struct PlanKeyHash {
  size_t operator()(const PlanKey& k) const {
    uint64_t h = 1469598103934665603ull;
    for (int64_t v : k) h = (h ^ static_cast<uint64_t>(v)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

// Per-entry counters of OSLO_CUDA_PROFILE (1: host time per call; 2: also
// waits for the stream after each call, so the time includes the device's).
struct ProfileEntry {
  int64_t calls = 0;
  double seconds = 0;
};

// One backend instance: a device, its stream, its memory and its last error.
struct Instance {
  int device = 0;
  int sms = 0;
  bool tile_smem_set = false;  // the tiled attention kernel may use > 48 KiB of shared memory  //
                               // multiprocessors, read when a kernel first sizes its grid by them
  bool tf32 = false;
  cudaStream_t stream = nullptr;
  cublasLtHandle_t lt = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  int* flag = nullptr;       // device: first failing position (+1) of a check kernel
  int* host_flag = nullptr;  // pinned host copy of it
  // Pinned staging for small host-to-device copies: the source is copied
  // here and the transfer enqueued, so copy() returns without waiting for
  // the device. kStageSlots slots of kStageBytes, each reused once the event
  // recorded after its last transfer completed.
  static constexpr int kStageSlots = 8;
  static constexpr size_t kStageBytes = size_t{1} << 20;
  char* stage = nullptr;
  cudaEvent_t stage_done[kStageSlots] = {};
  int stage_next = 0;
  std::unique_ptr<Allocator> mem;
  std::unordered_map<PlanKey, std::unique_ptr<GemmPlan>, PlanKeyHash> plans;
  int profile = 0;
  bool skinny = true;  // skinny_matmul for products of <= 8 rows
  // Recorded work (graph_begin/graph_end): stream capture into a graph,
  // replayed through one executable updated in place while only arguments
  // change. While capturing, uploads go through graph_stage (pinned, bump
  // allocated, reset at each graph_begin), which the captured copies read
  // when the graph runs; graph_done marks the last launch's end.
  bool graphs = false;  // OSLO_CUDA_GRAPHS=1 switches recording on
  bool capturing = false;
  cudaGraphExec_t graph_exec = nullptr;
  cudaEvent_t graph_done = nullptr;
  static constexpr size_t kGraphStageBytes = size_t{8} << 20;
  char* graph_stage = nullptr;
  size_t graph_stage_used = 0;
  std::map<std::string, ProfileEntry> prof;
  std::string device_name;
  std::string error = "no error";

  ~Instance();
  // Temporary device memory for one op, freed when the holder goes (ordered
  // on the stream like any block).
  struct Temp {
    Instance* in = nullptr;
    void* p = nullptr;
    Temp() = default;
    Temp(Instance* i, size_t bytes) : in(i), p(i->mem->allocate(bytes, i->stream)) {}
    Temp(Temp&& o) noexcept : in(o.in), p(o.p) { o.p = nullptr; }
    Temp& operator=(Temp&& o) noexcept {
      std::swap(in, o.in);
      std::swap(p, o.p);
      return *this;
    }
    ~Temp() {
      if (p) in->mem->release(p);
    }
  };
};

// Makes the instance's device current for the calling thread (and restores
// the caller's afterwards), runs body, turns exceptions into a status kept
// for last_error().
oslo_status status_of_current_exception(std::string* message, const char* entry);

template <class F>
oslo_status guard(void* self, const char* entry, F&& body) {
  if (self == nullptr) return OSLO_ERR_INVALID_ARGUMENT;
  Instance& in = *static_cast<Instance*>(self);
  // The caller's current device comes back when the entry returns.
  struct Restore {
    int device = -1;
    ~Restore() {
      if (device >= 0) (void)cudaSetDevice(device);
    }
  } restore;
  try {
    int current = -1;
    if (cudaGetDevice(&current) != cudaSuccess || current != in.device) {
      check_cuda(cudaSetDevice(in.device), "cudaSetDevice");
      restore.device = current;
    }
    if (in.profile == 0) {
      body(in);
    } else {
      const auto t0 = std::chrono::steady_clock::now();
      body(in);
      if (in.profile > 1 && in.stream && !in.capturing)
        check_cuda(cudaStreamSynchronize(in.stream), entry);
      ProfileEntry& e = in.prof[entry];
      ++e.calls;
      e.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    return OSLO_OK;
  } catch (...) {
    return status_of_current_exception(&in.error, entry);
  }
}

// The int value of an enum argument, read without loading the enum type.
template <class E>
int enum_value(const E& e) {
  static_assert(sizeof(E) == sizeof(int), "C enums are int-sized here");
  int v;
  std::memcpy(&v, &e, sizeof v);
  return v;
}

// -- views ------------------------------------------------------------------

const char* dtype_name(oslo_dtype dtype);
bool is_float(oslo_dtype dtype);
bool is_int(oslo_dtype dtype);
size_t dtype_size(oslo_dtype dtype);
std::string shape_string(const oslo_bk_view& v);
int64_t numel(const oslo_bk_view& v);
// Checks a view (rank, extents, data, dtype); `role` output forbids stride-0
// broadcasting of extents > 1.
void check_view(const oslo_bk_view* v, const char* what, bool output);
void check_float(const oslo_bk_view* v, const char* what, bool output);

// -- the table's entries, grouped by file -----------------------------------

// cuda_ops.cu
oslo_status op_convert(void* self, const oslo_bk_view* out, const oslo_bk_view* x);
oslo_status op_fill(void* self, const oslo_bk_view* out, double value);
oslo_status op_binary(void* self, oslo_bk_binary op, const oslo_bk_view* out, const oslo_bk_view* a,
                      const oslo_bk_view* b);
oslo_status op_unary(void* self, oslo_bk_unary op, const oslo_bk_view* out, const oslo_bk_view* x,
                     float alpha);
oslo_status op_unary_backward(void* self, oslo_bk_unary op, const oslo_bk_view* grad_x,
                              const oslo_bk_view* x, const oslo_bk_view* grad_out, float alpha);
oslo_status op_reduce(void* self, oslo_bk_reduce op, const oslo_bk_view* out, const oslo_bk_view* x,
                      const oslo_bk_view* shift, int64_t valid, int accumulate);
oslo_status op_sum_rows(void* self, const oslo_bk_view* out, const oslo_bk_view* x, int accumulate);
oslo_status op_softmax(void* self, const oslo_bk_view* out, const oslo_bk_view* x,
                       const oslo_bk_view* mask, float scale, int causal, int64_t causal_offset);
oslo_status op_softmax_backward(void* self, const oslo_bk_view* grad_x, const oslo_bk_view* y,
                                const oslo_bk_view* grad_y, float scale);
oslo_status op_norm(void* self, const oslo_bk_view* out, const oslo_bk_view* x,
                    const oslo_bk_view* gamma, const oslo_bk_view* beta, float eps, int rms);
oslo_status op_gather_rows(void* self, const oslo_bk_view* out, const oslo_bk_view* table,
                           const oslo_bk_view* ids, int64_t offset, int64_t limit);
oslo_status op_scatter_add_rows(void* self, const oslo_bk_view* table, const oslo_bk_view* ids,
                                const oslo_bk_view* src, int64_t offset);
oslo_status op_gather_cols(void* self, const oslo_bk_view* out, const oslo_bk_view* x,
                           const oslo_bk_view* idx, int64_t offset, int64_t limit, int64_t ignore);
oslo_status op_scatter_add_cols(void* self, const oslo_bk_view* x, const oslo_bk_view* idx,
                                int64_t offset, int64_t ignore, float value);

// Kernels used by the matmul (cuda_ops.cu): c = acc + beta * c + bias
// (acc f32 [batch, M, N] contiguous), and a plain strided GEMM for the cases
// cuBLASLt has no plan for.
void epilogue(Instance& in, const oslo_bk_view& c, const float* acc, const oslo_bk_view* bias,
              float beta);
void naive_gemm(Instance& in, const oslo_bk_view& c, const oslo_bk_view& a, const oslo_bk_view& b,
                const oslo_bk_view* bias, float alpha, float beta);

// cuda_fused.cu: products with at most 8 rows of a against b = W^T of a
// row-major W (decode's linears), one warp per output column reading W's
// row once; false (nothing launched) when the operands do not have that
// layout.
bool skinny_matmul(Instance& in, const oslo_bk_view& c, const oslo_bk_view& a,
                   const oslo_bk_view& b, const oslo_bk_view* bias, float alpha, float beta);

// cuda_matmul.cpp
oslo_status op_matmul(void* self, const oslo_bk_view* c, const oslo_bk_view* a,
                      const oslo_bk_view* b, const oslo_bk_view* bias, float alpha, float beta);

// cuda_fused.cu: the fused entries of ABI v2 (oslo_backend.h)
oslo_status fused_attention(void* self, const oslo_bk_view* out, const oslo_bk_view* q,
                            const oslo_bk_view* k, const oslo_bk_view* v, const oslo_bk_view* mask,
                            float scale, int causal, int64_t causal_offset);
oslo_status fused_residual_norm(void* self, const oslo_bk_view* out, const oslo_bk_view* x,
                                const oslo_bk_view* y, const oslo_bk_view* bias,
                                const oslo_bk_view* gamma, const oslo_bk_view* beta, float eps,
                                int rms);
oslo_status fused_rope(void* self, const oslo_bk_view* x, const oslo_bk_view* cos,
                       const oslo_bk_view* sin);
oslo_status fused_matmul_act(void* self, const oslo_bk_view* c, const oslo_bk_view* a,
                             const oslo_bk_view* b, const oslo_bk_view* bias, oslo_bk_unary act,
                             const oslo_bk_view* gate);
oslo_status fused_argmax(void* self, const oslo_bk_view* index, const oslo_bk_view* value,
                         const oslo_bk_view* x, int64_t valid);
oslo_status fused_norm_backward(void* self, const oslo_bk_view* grad_x,
                                const oslo_bk_view* grad_gamma, const oslo_bk_view* grad_beta,
                                const oslo_bk_view* x, const oslo_bk_view* gamma,
                                const oslo_bk_view* dy, float eps, int rms);
oslo_status fused_adamw(void* self, const oslo_bk_view* p, const oslo_bk_view* g,
                        const oslo_bk_view* m, const oslo_bk_view* v, float decay, float beta1,
                        float beta2, float step_size, float bc2_sqrt, float eps);

// cuda_v2.cpp: the ABI v2 entries
oslo_status copy_async(void* self, void* dst, const void* src, size_t bytes,
                       oslo_bk_copy_kind kind);
oslo_status event_create(void* self, void** event);
void event_destroy(void* self, void* event);
oslo_status event_record(void* self, void* event);
oslo_status event_wait(void* self, void* event);
oslo_status event_synchronize(void* self, void* event);
oslo_status alloc_async(void* self, size_t bytes, void** out);
void free_async(void* self, void* ptr, size_t bytes);
const char* device_name(void* self);
oslo_status memory_info(void* self, size_t* free_bytes, size_t* total_bytes);
int op_supported(void* self, oslo_bk_op op, oslo_dtype dtype);
int64_t native_stream(void* self);
oslo_status stream_wait_event(void* self, int64_t stream, void* event);
oslo_status graph_begin(void* self);
oslo_status graph_end(void* self, int launch);
// Fails naming `what` when the instance is recording (it would wait for work
// that has not run).
void refuse_while_capturing(const Instance& in, const char* what);

// cuda_comm.cpp
oslo_status comm_create(void* self, void** comm, const oslo_bk_group* group,
                        const oslo_bk_store* store);
void comm_destroy(void* comm);
const char* comm_name(void* comm);
const char* comm_last_error(void* comm);
oslo_status comm_all_reduce(void* comm, const void* in, void* out, size_t count, oslo_dtype dtype,
                            oslo_reduce_op op);
oslo_status comm_all_gather(void* comm, const void* in, void* out, size_t count, oslo_dtype dtype);
oslo_status comm_reduce_scatter(void* comm, const void* in, void* out, size_t count,
                                oslo_dtype dtype, oslo_reduce_op op);
oslo_status comm_broadcast(void* comm, void* buf, size_t count, oslo_dtype dtype, int root);
oslo_status comm_send(void* comm, const void* buf, size_t bytes, int peer);
oslo_status comm_recv(void* comm, void* buf, size_t bytes, int peer);
oslo_status comm_barrier(void* comm);
void comm_abort(void* comm);

}  // namespace oslo_cuda
