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
#include "oslo_backend_glue.hpp"

namespace oslo_cuda {

// The glue every backend shares (backends/common/oslo_backend_glue.hpp):
// failures thrown inside the plugin, caught by guard() before any entry
// returns; enum and dtype helpers.
using namespace oslo_backend_glue;  // NOLINT: the plugin's own namespace

// Messages read "cuda: <entry>: <text>".
struct Messages : oslo_backend_glue::Messages {
  static constexpr const char* kPrefix = "cuda: ";
  static constexpr const char* kOutOfMemory = "out of host memory";
};

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

// Converts whatever an entry throws into a status and a message (*message).
inline oslo_status status_of_current_exception(std::string* message, const char* entry) {
  return oslo_backend_glue::status_of_current_exception<Messages>(message, entry);
}

// Makes the instance's device current for the calling thread (and restores
// the caller's afterwards), runs body, turns exceptions into a status kept
// for last_error().
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
  return oslo_backend_glue::guarded<Messages>(&in.error, entry, [&] {
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
  });
}

// -- views ------------------------------------------------------------------

std::string shape_string(const oslo_bk_view& v);
int64_t numel(const oslo_bk_view& v);
// Checks a view (rank, extents, data, dtype); `role` output forbids stride-0
// broadcasting of extents > 1.
void check_view(const oslo_bk_view* v, const char* what, bool output);
void check_float(const oslo_bk_view* v, const char* what, bool output);

// -- the table's entries ----------------------------------------------------

// The table's entries, with oslo_backend.h's signatures (the glue's
// OSLO_BACKEND_DECLARE): the compute entries op_<entry> (cuda_ops.cu, the
// matmul in cuda_matmul.cpp), the fused ones fused_<entry> (cuda_fused.cu;
// fused_paged_attention in cuda_paged.cu),
// the ABI v2 queue entries and graph_begin/graph_end (cuda_v2.cpp), the
// communicators (cuda_comm.cpp); the rest are in cuda_backend.cpp.
OSLO_BACKEND_DECLARE(COMPUTE, op_)
OSLO_BACKEND_DECLARE(FUSED, fused_)
OSLO_BACKEND_DECLARE(SERVE, fused_)
OSLO_BACKEND_DECLARE(QUANT, fused_)  // cuda_quant.cu
OSLO_BACKEND_DECLARE(KV8, fused_)    // cuda_kv8.cu
OSLO_BACKEND_DECLARE(V2_QUEUE, )
OSLO_BACKEND_DECLARE(GRAPHS, )
OSLO_BACKEND_DECLARE(COMM, )

// Whether dequantize / matmul_quant take weights of this dtype (cuda_quant.cu:
// q8_0, q4_0, q4_k, q6_k).
bool quant_dtype(oslo_dtype dt);

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

// The flag protocol of the checking kernels (cuda_ops.cu): flag_reset()
// sets the instance's device flag to "none" before a check kernel, which
// atomicMin()s the first failing position into it; flag_read() reads it back
// (a wait point; refused while recording) and returns that position or -1.
void flag_reset(Instance& in);
int64_t flag_read(Instance& in);

// Fails naming `what` when the instance is recording (it would wait for work
// that has not run).
void refuse_while_capturing(const Instance& in, const char* what);

}  // namespace oslo_cuda
