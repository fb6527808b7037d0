// The native CUDA backend plugin: the table, instances, options, errors,
// views, the caching allocator and the queue (one CUDA stream per instance).
// Compute is in cuda_ops.cu and cuda_matmul.cpp, NCCL communicators in
// cuda_comm.cpp.
#include "cuda_backend.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <sstream>

namespace oslo_cuda {

// -- errors -------------------------------------------------------------------

void check_cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  (void)cudaGetLastError();  // clear a non-sticky error
  const std::string msg =
      std::string(what) + " failed: " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
  if (e == cudaErrorMemoryAllocation) fail(OSLO_ERR_OUT_OF_MEMORY, msg);
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver || e == cudaErrorInvalidDevice ||
      e == cudaErrorDevicesUnavailable || e == cudaErrorSystemDriverMismatch ||
      e == cudaErrorCompatNotSupportedOnDevice)
    fail(OSLO_ERR_BACKEND_UNAVAILABLE, msg);
  fail(OSLO_ERR_INTERNAL, msg);
}

void check_cublas(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  const std::string msg = std::string(what) + " failed: " + cublasLtGetStatusName(s) + " (" +
                          cublasLtGetStatusString(s) + ")";
  if (s == CUBLAS_STATUS_ALLOC_FAILED) fail(OSLO_ERR_OUT_OF_MEMORY, msg);
  if (s == CUBLAS_STATUS_NOT_SUPPORTED) fail(OSLO_ERR_NOT_SUPPORTED, msg);
  fail(OSLO_ERR_INTERNAL, msg);
}

// -- views --------------------------------------------------------------------

std::string shape_string(const oslo_bk_view& v) {
  std::ostringstream s;
  s << '[';
  for (int i = 0; i < v.ndim; ++i) s << (i ? ", " : "") << v.shape[i];
  s << ']';
  return s.str();
}

int64_t numel(const oslo_bk_view& v) {
  int64_t n = 1;
  for (int i = 0; i < v.ndim; ++i) n *= v.shape[i];
  return n;
}

void check_view(const oslo_bk_view* v, const char* what, bool output) {
  if (v == nullptr) fail(OSLO_ERR_INVALID_ARGUMENT, std::string(what) + " is NULL");
  if (v->ndim < 0 || v->ndim > OSLO_MAX_DIMS)
    fail(OSLO_ERR_INVALID_ARGUMENT,
         std::string(what) + " has " + std::to_string(v->ndim) + " dimensions");
  if (dtype_size(v->dtype) == 0)
    fail(OSLO_ERR_DTYPE,
         std::string(what) + " has unknown dtype " + std::to_string(static_cast<int>(v->dtype)));
  for (int i = 0; i < v->ndim; ++i) {
    if (v->shape[i] < 0)
      fail(OSLO_ERR_SHAPE, std::string(what) + " has a negative extent " + shape_string(*v));
    if (output && v->strides[i] == 0 && v->shape[i] > 1)
      fail(OSLO_ERR_INVALID_ARGUMENT, std::string(what) + " broadcasts (stride 0) in dimension " +
                                          std::to_string(i) + ": only inputs may");
  }
  if (v->data == nullptr && numel(*v) != 0)
    fail(OSLO_ERR_INVALID_ARGUMENT, std::string(what) + " has no data");
}

void check_float(const oslo_bk_view* v, const char* what, bool output) {
  check_view(v, what, output);
  if (!is_float(v->dtype))
    fail(OSLO_ERR_DTYPE,
         std::string(what) + " must be f32, f16 or bf16, not " + dtype_name(v->dtype));
}

// -- the caching allocator ------------------------------------------------------

size_t Allocator::round(size_t bytes) {
  if (bytes == 0) bytes = 1;
  if (bytes <= (size_t{1} << 20)) return (bytes + 511) & ~size_t{511};  // 512 B classes
  if (bytes <= (size_t{64} << 20))
    return (bytes + (size_t{1} << 20) - 1) & ~((size_t{1} << 20) - 1);
  return (bytes + (size_t{2} << 20) - 1) & ~((size_t{2} << 20) - 1);
}

void* Allocator::allocate(size_t bytes, cudaStream_t stream) {
  const size_t n = round(bytes);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = free_.find(n);
    if (it != free_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      cached_ -= n;
      live_.emplace(p, n);
      return p;
    }
  }
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, n);
  if (e == cudaErrorMemoryAllocation) {
    // Give the cached blocks back and try once more.
    (void)cudaGetLastError();
    check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    trim();
    e = cudaMalloc(&p, n);
  }
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    fail(OSLO_ERR_OUT_OF_MEMORY, "alloc: " + std::to_string(bytes) + " bytes on CUDA device " +
                                     std::to_string(device_) + ": out of device memory");
  }
  check_cuda(e, "cudaMalloc");
  std::lock_guard<std::mutex> lock(mutex_);
  live_.emplace(p, n);
  return p;
}

void Allocator::release(void* ptr) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(ptr);
  if (it == live_.end()) return;  // not ours: ignored
  free_[it->second].push_back(ptr);
  cached_ += it->second;
  live_.erase(it);
}

void Allocator::trim() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& kv : free_)
    for (void* p : kv.second) (void)cudaFree(p);
  free_.clear();
  cached_ = 0;
}

size_t Allocator::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cached_;
}

Allocator::~Allocator() {
  int prev = -1;
  (void)cudaGetDevice(&prev);
  (void)cudaSetDevice(device_);
  for (auto& kv : free_)
    for (void* p : kv.second) (void)cudaFree(p);
  for (auto& kv : live_) (void)cudaFree(kv.first);
  if (prev >= 0) (void)cudaSetDevice(prev);
}

GemmPlan::~GemmPlan() {
  if (op) cublasLtMatmulDescDestroy(op);
  if (la) cublasLtMatrixLayoutDestroy(la);
  if (lb) cublasLtMatrixLayoutDestroy(lb);
  if (lc) cublasLtMatrixLayoutDestroy(lc);
}

Instance::~Instance() {
  if (profile && !prof.empty()) {
    std::vector<std::pair<std::string, ProfileEntry>> v(prof.begin(), prof.end());
    std::sort(v.begin(), v.end(),
              [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
    std::fprintf(stderr, "cuda plugin profile (OSLO_CUDA_PROFILE=%d, %s):\n", profile,
                 profile > 1 ? "host + device per call" : "host time per call");
    for (const auto& e : v)
      std::fprintf(stderr, "  %-18s %10lld calls %10.3f ms %8.2f us/call\n", e.first.c_str(),
                   static_cast<long long>(e.second.calls), e.second.seconds * 1e3,
                   e.second.seconds * 1e6 / static_cast<double>(e.second.calls));
  }
  (void)cudaSetDevice(device);
  if (stream) (void)cudaStreamSynchronize(stream);
  plans.clear();
  if (lt) cublasLtDestroy(lt);
  if (workspace) (void)cudaFree(workspace);
  if (flag) (void)cudaFree(flag);
  if (host_flag) (void)cudaFreeHost(host_flag);
  for (cudaEvent_t e : stage_done)
    if (e) (void)cudaEventDestroy(e);
  if (stage) (void)cudaFreeHost(stage);
  if (capturing) {
    cudaGraph_t g = nullptr;
    (void)cudaStreamEndCapture(stream, &g);
    if (g) (void)cudaGraphDestroy(g);
  }
  if (graph_exec) (void)cudaGraphExecDestroy(graph_exec);
  if (graph_done) (void)cudaEventDestroy(graph_done);
  if (graph_stage) (void)cudaFreeHost(graph_stage);
  mem.reset();
  if (stream) (void)cudaStreamDestroy(stream);
}

namespace {

// -- instances ----------------------------------------------------------------

// Parses the options; returns the device index asked for (*by_rank: none
// was, the index is the local rank's).
int configure(Instance& in, const oslo_backend_options* options, bool* by_rank) {
  const oslo_backend_glue::Options o = oslo_backend_glue::read_options(options);
  const int local_rank = o.local_rank > 0 ? o.local_rank : 0;
  const auto cfg = parse_json_object<nlohmann::json>(o.extra_json, "\"backend_options\"");
  int device = local_rank;
  *by_rank = true;
  for (auto it = cfg.begin(); it != cfg.end(); ++it) {
    const std::string& key = it.key();
    const auto& value = it.value();
    if (key == "device") {
      // An index, or "cuda" / "cuda:N" as on the command line.
      if (value.is_number_integer() && value.get<int64_t>() >= 0 && value.get<int64_t>() < 1024) {
        device = value.get<int>();
        *by_rank = false;
      } else if (value.is_string() && value.get<std::string>() == "cuda") {
        // the local rank's device
      } else if (value.is_string() && value.get<std::string>().rfind("cuda:", 0) == 0 &&
                 value.get<std::string>().size() > 5 && value.get<std::string>().size() < 10 &&
                 value.get<std::string>().find_first_not_of("0123456789", 5) == std::string::npos) {
        device = std::stoi(value.get<std::string>().substr(5));
        *by_rank = false;
      } else {
        fail(OSLO_ERR_CONFIG,
             "backend option \"device\" must be a device index >= 0, \"cuda\" or \"cuda:N\", "
             "got " +
                 value.dump());
      }
    } else if (key == "tf32") {
      if (!value.is_boolean())
        fail(OSLO_ERR_CONFIG, "backend option \"tf32\" must be true or false");
      in.tf32 = value.get<bool>();
    } else {
      fail(OSLO_ERR_CONFIG, "unknown backend option \"" + key + "\" (known: device, tf32)");
    }
  }
  return device;
}

void start(Instance& in, int device, bool by_rank) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    fail(OSLO_ERR_BACKEND_UNAVAILABLE,
         std::string("no usable CUDA GPU: cudaGetDeviceCount failed: ") + cudaGetErrorName(e) +
             " (" + cudaGetErrorString(e) + ")");
  }
  if (count == 0) fail(OSLO_ERR_BACKEND_UNAVAILABLE, "no usable CUDA GPU: none is visible");
  // More local ranks than GPUs and no "device" asked: ranks share them
  // round-robin (local rank r on GPU r mod count). The host communicators
  // ("communicator": "host") run such ranks; NCCL refuses two ranks of a
  // group on one GPU by name.
  if (by_rank) device %= count;
  if (device >= count)
    fail(OSLO_ERR_CONFIG, "CUDA device " + std::to_string(device) +
                              " asked (local_rank or the \"device\" option), but " +
                              std::to_string(count) + " are visible");
  cudaDeviceProp prop;
  check_cuda(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  if (prop.major < 9)
    fail(OSLO_ERR_BACKEND_UNAVAILABLE,
         "CUDA device " + std::to_string(device) + " (" + prop.name + ") has compute capability " +
             std::to_string(prop.major) + "." + std::to_string(prop.minor) +
             "; this build of the plugin runs on 9.0 (Hopper) or newer");
  in.device = device;
  in.device_name = prop.name;
  if (const char* p = std::getenv("OSLO_CUDA_PROFILE")) in.profile = std::atoi(p);
  // OSLO_CUDA_SKINNY=0: decode's products through cuBLASLt instead of the
  // skinny kernel (for benchmarks that compare the two).
  if (const char* p = std::getenv("OSLO_CUDA_SKINNY")) in.skinny = std::atoi(p) != 0;
  // OSLO_CUDA_GRAPHS=1: decode steps recorded and run as one graph (off by
  // default: on the H200 measured, updating the executable every step cost
  // more host time than launching the step's kernels one by one).
  if (const char* p = std::getenv("OSLO_CUDA_GRAPHS")) in.graphs = std::atoi(p) != 0;
  check_cuda(cudaSetDevice(device), "cudaSetDevice");
  check_cuda(cudaStreamCreateWithFlags(&in.stream, cudaStreamNonBlocking), "cudaStreamCreate");
  in.mem = std::make_unique<Allocator>(device);
  check_cublas(cublasLtCreate(&in.lt), "cublasLtCreate");
  in.workspace_bytes = size_t{32} << 20;
  check_cuda(cudaMalloc(&in.workspace, in.workspace_bytes), "cudaMalloc (cuBLASLt workspace)");
  check_cuda(cudaMalloc(reinterpret_cast<void**>(&in.flag), sizeof(int)), "cudaMalloc (flag)");
  check_cuda(cudaMallocHost(reinterpret_cast<void**>(&in.host_flag), sizeof(int)),
             "cudaMallocHost (flag)");
  check_cuda(cudaMallocHost(reinterpret_cast<void**>(&in.stage),
                            Instance::kStageSlots * Instance::kStageBytes),
             "cudaMallocHost (staging)");
  for (cudaEvent_t& e : in.stage_done)
    check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
}

oslo_status create(void** self, const oslo_backend_options* options, const char** error) {
  return oslo_backend_glue::create_instance<Messages, Instance>(self, error, [&](Instance& in) {
    bool by_rank = true;
    const int device = configure(in, options, &by_rank);
    start(in, device, by_rank);
  });
}

void destroy(void* self) {
  delete static_cast<Instance*>(self);
}

const char* last_error(void* self) {
  if (self == nullptr) return "cuda: no instance";
  return static_cast<Instance*>(self)->error.c_str();
}

int32_t device_type(void*) {
  return 2;  // kDLCUDA
}

int32_t device_id(void* self) {
  const Instance* in = static_cast<Instance*>(self);
  return in != nullptr ? in->device : 0;
}

int host_accessible(void*) {
  return 0;
}

// -- memory and queue -----------------------------------------------------------

oslo_status alloc(void* self, size_t bytes, void** out) {
  return guard(self, "alloc", [&](Instance& in) {
    if (out == nullptr) fail(OSLO_ERR_INVALID_ARGUMENT, "alloc: out is NULL");
    *out = nullptr;
    *out = in.mem->allocate(bytes, in.stream);
  });
}

void free_(void* self, void* ptr, size_t /*bytes*/) {
  if (self == nullptr || ptr == nullptr) return;
  try {
    static_cast<Instance*>(self)->mem->release(ptr);
  } catch (...) {
  }
}

oslo_status copy(void* self, void* dst, const void* src, size_t bytes, oslo_bk_copy_kind kind_arg) {
  const int kind = enum_value(kind_arg);
  return guard(self, "copy", [&](Instance& in) {
    if (!oslo_backend_glue::check_copy("", kind_arg, dst, src, bytes)) return;
    if (in.capturing) {
      // Recording: an upload's bytes go to the recording's staging now (the
      // captured copy reads them when the graph runs); nothing may wait.
      if (kind == OSLO_BK_DEVICE_TO_HOST)
        refuse_while_capturing(in, "a copy to the host (it waits for the device)");
      const cudaMemcpyKind k =
          kind == OSLO_BK_HOST_TO_DEVICE ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToDevice;
      const void* from = src;
      if (kind == OSLO_BK_HOST_TO_DEVICE) {
        const size_t at = (in.graph_stage_used + 255) & ~size_t{255};
        if (at + bytes > Instance::kGraphStageBytes)
          fail(OSLO_ERR_NOT_SUPPORTED, "uploads of over " +
                                           std::to_string(Instance::kGraphStageBytes) +
                                           " bytes in one recorded step (unset OSLO_CUDA_GRAPHS)");
        std::memcpy(in.graph_stage + at, src, bytes);
        in.graph_stage_used = at + bytes;
        from = in.graph_stage + at;
      }
      check_cuda(cudaMemcpyAsync(dst, from, bytes, k, in.stream), "cudaMemcpyAsync");
      return;
    }
    if (kind == OSLO_BK_HOST_TO_DEVICE && bytes <= Instance::kStageBytes) {
      // Small uploads (token ids, positions, masks) through pinned staging:
      // src may be reused as soon as it is copied there.
      const int slot = in.stage_next;
      in.stage_next = (slot + 1) % Instance::kStageSlots;
      check_cuda(cudaEventSynchronize(in.stage_done[slot]), "cudaEventSynchronize");
      char* buf = in.stage + static_cast<size_t>(slot) * Instance::kStageBytes;
      std::memcpy(buf, src, bytes);
      check_cuda(cudaMemcpyAsync(dst, buf, bytes, cudaMemcpyHostToDevice, in.stream),
                 "cudaMemcpyAsync");
      check_cuda(cudaEventRecord(in.stage_done[slot], in.stream), "cudaEventRecord");
      return;
    }
    const cudaMemcpyKind k = kind == OSLO_BK_HOST_TO_DEVICE   ? cudaMemcpyHostToDevice
                             : kind == OSLO_BK_DEVICE_TO_HOST ? cudaMemcpyDeviceToHost
                                                              : cudaMemcpyDeviceToDevice;
    check_cuda(cudaMemcpyAsync(dst, src, bytes, k, in.stream), "cudaMemcpyAsync");
    // Host <-> device copies return when dst holds the data or src may be
    // reused; device to device is enqueued.
    if (kind != OSLO_BK_DEVICE_TO_DEVICE)
      check_cuda(cudaStreamSynchronize(in.stream), "cudaStreamSynchronize");
  });
}

// -- staging for host communicators ("communicator": "host") -------------------

// Every buffer a staged host communicator is handed must be this device's
// memory: host memory (pageable or pinned) or another device's is refused,
// naming what it is, before the communicator copies a byte.
oslo_status check_memory(void* self, const void* ptr, size_t bytes) {
  return guard(self, "check_memory", [&](Instance& in) {
    if (bytes == 0) return;
    if (ptr == nullptr)
      fail(OSLO_ERR_INVALID_ARGUMENT, "NULL pointer for " + std::to_string(bytes) + " bytes");
    const char* ends[2] = {static_cast<const char*>(ptr),
                           static_cast<const char*>(ptr) + bytes - 1};
    for (const char* p : ends) {
      cudaPointerAttributes a{};
      const cudaError_t e = cudaPointerGetAttributes(&a, p);
      if (e != cudaSuccess) {
        (void)cudaGetLastError();  // not sticky: clear it
        fail(OSLO_ERR_INVALID_ARGUMENT, std::string("cudaPointerGetAttributes failed (") +
                                            cudaGetErrorString(e) + "): not CUDA memory");
      }
      const char* what = a.type == cudaMemoryTypeHost           ? "pinned host memory"
                         : a.type == cudaMemoryTypeUnregistered ? "pageable host memory"
                         : a.type == cudaMemoryTypeManaged      ? nullptr
                         : a.type == cudaMemoryTypeDevice       ? nullptr
                                                                : "memory of an unknown kind";
      if (what)
        fail(OSLO_ERR_INVALID_ARGUMENT, std::string("it is ") + what + ", not device memory");
      if (a.device != in.device)
        fail(OSLO_ERR_INVALID_ARGUMENT, "it is memory of device " + std::to_string(a.device) +
                                            ", not of this instance's device " +
                                            std::to_string(in.device));
    }
  });
}

oslo_status host_alloc(void* self, size_t bytes, void** out) {
  return guard(self, "host_alloc", [&](Instance&) {
    if (out == nullptr) fail(OSLO_ERR_INVALID_ARGUMENT, "host_alloc: out is NULL");
    *out = nullptr;
    void* p = nullptr;
    const cudaError_t e = cudaMallocHost(&p, bytes == 0 ? 64 : bytes);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      fail(OSLO_ERR_OUT_OF_MEMORY,
           "cudaMallocHost of " + std::to_string(bytes) + " bytes: " + cudaGetErrorString(e));
    }
    *out = p;
  });
}

void host_free(void*, void* ptr) {
  if (ptr) (void)cudaFreeHost(ptr);
}

oslo_status synchronize(void* self) {
  return guard(self, "synchronize", [&](Instance& in) {
    refuse_while_capturing(in, "synchronize");
    check_cuda(cudaStreamSynchronize(in.stream), "cudaStreamSynchronize");
  });
}

oslo_status set_num_threads(void* self, int n) {
  return guard(self, "set_num_threads", [&](Instance&) {
    if (n <= 0) fail(OSLO_ERR_INVALID_ARGUMENT, std::to_string(n) + " (must be > 0)");
    // Host threads do no compute here: nothing to change.
  });
}

// The table: every entry but the prepacked weights and attention_backward
// (both composed by the core).
struct Plugin {
  static constexpr const char* name = "cuda";
  OSLO_BACKEND_ENTRIES(REQUIRED, op_)
  OSLO_BACKEND_ENTRIES(COMM, )
  OSLO_BACKEND_ENTRIES(V2_QUEUE, )
  OSLO_BACKEND_ENTRIES(FUSED, fused_)
  OSLO_BACKEND_ENTRIES(SERVE, fused_)
  OSLO_BACKEND_ENTRIES(QUANT, fused_)
  OSLO_BACKEND_ENTRIES(KV8, fused_)
  OSLO_BACKEND_ENTRIES(GRAPHS, )
  OSLO_BACKEND_ENTRIES(STAGING, )
};

}  // namespace
}  // namespace oslo_cuda

OSLO_BACKEND_PLUGIN(oslo_cuda::Plugin)
