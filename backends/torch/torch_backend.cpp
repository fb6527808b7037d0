// The libtorch backend plugin: the table, instances, errors, views, memory
// and the queue. Compute is in torch_ops.cpp, communicators in torch_comm.cpp.
#include "torch_backend.hpp"

#include <ATen/Parallel.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include <dlfcn.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <sstream>
#include <thread>

namespace oslo_torch {

// -- errors -----------------------------------------------------------------

bool Messages::translate(const std::string& where, std::string* message, oslo_status* status) {
  try {
    throw;
  } catch (const c10::OutOfMemoryError& e) {
    *message = where + e.what_without_backtrace();
    *status = OSLO_ERR_OUT_OF_MEMORY;
  } catch (const c10::NotImplementedError& e) {
    *message = where + "not supported by this libtorch: " + e.what_without_backtrace();
    *status = OSLO_ERR_NOT_SUPPORTED;
  } catch (const c10::IndexError& e) {
    *message = where + e.what_without_backtrace();
    *status = OSLO_ERR_INVALID_ARGUMENT;
  } catch (const c10::Error& e) {
    // Arguments are checked before ATen sees them, so what ATen still rejects
    // is unexpected (or a device error found at a wait point).
    *message = where + "libtorch failed: " + e.what_without_backtrace();
    *status = OSLO_ERR_INTERNAL;
  } catch (...) {
    return false;
  }
  return true;
}

Scope::Scope(Instance& in) {
  if (!in.is_cpu()) {
    device_guard_.reset_device(in.device);
    if (in.stream) stream_guard_.reset_stream(*in.stream);
  }
  // at::set_num_threads is process-wide for libtorch's own pools, but with the
  // OpenMP backend (Debian's and the pip wheels') the count a parallel region
  // uses is the calling thread's OpenMP setting, so setting it per call gives
  // each instance (each rank's thread) its own count.
  if (in.num_threads > 0 && at::get_num_threads() != in.num_threads)
    at::set_num_threads(in.num_threads);
}

// -- views --------------------------------------------------------------------

at::ScalarType scalar_type_of(oslo_dtype dtype, const char* entry, const char* what) {
  switch (dtype) {
    case OSLO_DTYPE_F32: return at::kFloat;
    case OSLO_DTYPE_F16: return at::kHalf;
    case OSLO_DTYPE_BF16: return at::kBFloat16;
    case OSLO_DTYPE_I32: return at::kInt;
    case OSLO_DTYPE_I64: return at::kLong;
    default:
      fail(OSLO_ERR_DTYPE, std::string(entry) + ": " + what + " has unknown dtype " +
                               std::to_string(static_cast<int>(dtype)));
  }
}

std::string shape_string(const oslo_bk_view* v) {
  std::ostringstream s;
  s << '[';
  for (int i = 0; i < v->ndim; ++i) s << (i ? "," : "") << v->shape[i];
  s << ']';
  return s.str();
}

at::Tensor wrap(const Instance& in, const oslo_bk_view* v, const char* entry, const char* what,
                Role role) {
  const std::string where = std::string(entry) + ": " + what;
  if (v == nullptr) fail(OSLO_ERR_INVALID_ARGUMENT, where + " is NULL");
  if (v->ndim < 0 || v->ndim > OSLO_MAX_DIMS)
    fail(OSLO_ERR_INVALID_ARGUMENT, where + " has ndim " + std::to_string(v->ndim) +
                                        " (must be in [0, " + std::to_string(OSLO_MAX_DIMS) + "])");
  const at::ScalarType st = scalar_type_of(v->dtype, entry, what);
  int64_t numel = 1;
  for (int i = 0; i < v->ndim; ++i) {
    if (v->shape[i] < 0)
      fail(OSLO_ERR_INVALID_ARGUMENT, where + " has a negative extent " + shape_string(v));
    if (v->strides[i] < 0)
      fail(OSLO_ERR_INVALID_ARGUMENT, where + " has a negative stride in dimension " +
                                          std::to_string(i) +
                                          " (libtorch tensors cannot have negative strides)");
    if (role == Role::Output && v->strides[i] == 0 && v->shape[i] > 1)
      fail(OSLO_ERR_INVALID_ARGUMENT, where + " broadcasts (stride 0) in dimension " +
                                          std::to_string(i) + ": only inputs may");
    numel *= v->shape[i];
  }
  const at::IntArrayRef sizes(v->shape, static_cast<size_t>(v->ndim));
  const auto options = at::TensorOptions().dtype(st).device(in.device);
  // An empty view may have any (or no) data pointer: nothing is read or written.
  if (numel == 0) return at::empty(sizes, options);
  if (v->data == nullptr) fail(OSLO_ERR_INVALID_ARGUMENT, where + " has NULL data");
  return at::from_blob(v->data, sizes, at::IntArrayRef(v->strides, static_cast<size_t>(v->ndim)),
                       options);
}

namespace {

// -- instances ----------------------------------------------------------------

void configure(Instance& in, const oslo_backend_options* options) {
  const oslo_backend_glue::Options o = oslo_backend_glue::read_options(options);
  const int local_rank = o.local_rank;
  in.num_threads = o.num_threads > 0 ? o.num_threads : 0;
  const auto cfg = parse_json_object<nlohmann::json>(o.extra_json, "extra_json");
  std::string device = "cpu";
  int device_index = local_rank;
  in.comm_mode = "auto";
  for (auto it = cfg.begin(); it != cfg.end(); ++it) {
    const std::string& key = it.key();
    const auto& value = it.value();
    if (key == "device") {
      if (!value.is_string() || (value != "cpu" && value != "cuda"))
        fail(OSLO_ERR_CONFIG, "extra_json key \"device\" must be \"cpu\" or \"cuda\"");
      device = value.get<std::string>();
    } else if (key == "device_index") {
      if (!value.is_number_integer() || value.get<int64_t>() < 0)
        fail(OSLO_ERR_CONFIG, "extra_json key \"device_index\" must be an integer >= 0");
      device_index = value.get<int>();
    } else if (key == "comm") {
      if (!value.is_string() ||
          (value != "auto" && value != "none" && value != "gloo" && value != "nccl"))
        fail(OSLO_ERR_CONFIG,
             "extra_json key \"comm\" must be \"auto\", \"none\", \"gloo\" or \"nccl\"");
      in.comm_mode = value.get<std::string>();
    } else if (key == "gloo_address") {
      if (!value.is_string())
        fail(OSLO_ERR_CONFIG, "extra_json key \"gloo_address\" must be a string");
      in.gloo_address = value.get<std::string>();
    } else {
      fail(OSLO_ERR_CONFIG, "unknown extra_json key \"" + key +
                                "\" (known: device, device_index, comm, gloo_address)");
    }
  }
  if (device == "cuda") {
    if (!at::hasCUDA())
      fail(OSLO_ERR_BACKEND_UNAVAILABLE,
           "\"device\": \"cuda\" asked, but this libtorch has no CUDA or sees no GPU");
    const auto* impl = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
    const int count = static_cast<int>(impl->deviceCount());
    if (device_index >= count)
      fail(OSLO_ERR_CONFIG, "CUDA device " + std::to_string(device_index) +
                                " asked (local_rank or device_index), but " +
                                std::to_string(count) + " are visible");
    in.device = c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device_index));
    c10::DeviceGuard g(in.device);
    // One ordered queue per instance: a stream from libtorch's pool.
    in.stream = impl->getStreamFromGlobalPool(in.device, false);
  }
}

oslo_status create(void** self, const oslo_backend_options* options, const char** error) {
  return oslo_backend_glue::create_instance<Messages, Instance>(
      self, error, [&](Instance& in) { configure(in, options); });
}

void destroy(void* self) {
  Instance* in = static_cast<Instance*>(self);
  if (in == nullptr) return;
  try {
    if (in->stream) in->stream->synchronize();
  } catch (...) {
  }
  delete in;
}

const char* last_error(void* self) {
  if (self == nullptr) return "torch: no instance";
  return static_cast<Instance*>(self)->error.c_str();
}

int32_t device_type(void* self) {
  const Instance* in = static_cast<Instance*>(self);
  return in != nullptr && in->device.is_cuda() ? 2 /* kDLCUDA */ : 1 /* kDLCPU */;
}

int32_t device_id(void* self) {
  const Instance* in = static_cast<Instance*>(self);
  return in != nullptr && !in->is_cpu() ? in->device.index() : 0;
}

int host_accessible(void* self) {
  const Instance* in = static_cast<Instance*>(self);
  return in == nullptr || in->is_cpu() ? 1 : 0;
}

// -- memory and queue -----------------------------------------------------------

oslo_status alloc(void* self, size_t bytes, void** out) {
  return guard(self, "alloc", [&](Instance& in) {
    if (out == nullptr) fail(OSLO_ERR_INVALID_ARGUMENT, "alloc: out is NULL");
    *out = nullptr;
    // At least one byte, so every block has its own non-NULL address.
    const size_t n = bytes > 0 ? bytes : 1;
    if (in.is_cpu()) {
      // c10's CPU allocator aligns to 64 bytes (c10::gAlignment).
      c10::DataPtr p = c10::GetCPUAllocator()->allocate(n);
      void* ptr = p.get();
      if (ptr == nullptr)
        fail(OSLO_ERR_OUT_OF_MEMORY, "alloc: " + std::to_string(bytes) + " bytes");
      if (reinterpret_cast<uintptr_t>(ptr) % 64 != 0)
        fail(OSLO_ERR_INTERNAL, "alloc: c10's CPU allocator returned memory not 64-byte aligned");
      std::lock_guard<std::mutex> lock(in.mem_mutex);
      in.host_blocks.emplace(ptr, std::move(p));
      *out = ptr;
    } else {
      // The device's caching allocator, on the instance's stream (Scope made
      // it current), so the block's reuse is ordered on that stream.
      at::Tensor t = at::empty({static_cast<int64_t>(n)},
                               at::TensorOptions().dtype(at::kByte).device(in.device));
      void* ptr = t.data_ptr();
      std::lock_guard<std::mutex> lock(in.mem_mutex);
      in.device_blocks.emplace(ptr, std::move(t));
      *out = ptr;
    }
  });
}

void free_(void* self, void* ptr, size_t /*bytes*/) {
  if (self == nullptr || ptr == nullptr) return;
  Instance& in = *static_cast<Instance*>(self);
  try {
    c10::DataPtr host;
    at::Tensor dev;
    {
      std::lock_guard<std::mutex> lock(in.mem_mutex);
      auto h = in.host_blocks.find(ptr);
      if (h != in.host_blocks.end()) {
        host = std::move(h->second);
        in.host_blocks.erase(h);
      } else {
        auto d = in.device_blocks.find(ptr);
        if (d != in.device_blocks.end()) {
          dev = std::move(d->second);
          in.device_blocks.erase(d);
        }
      }
    }
    // Released here, outside the lock (an unknown pointer is ignored).
  } catch (...) {
  }
}

// Copies `bytes` between the ends `kind` names, on the instance's stream
// (Scope); an asynchronous copy returns once it is enqueued. Host <-> device
// copies are otherwise blocking: they return when dst holds the data or src
// may be reused. Device to device is always enqueued.
oslo_status copy_bytes(void* self, const char* entry, void* dst, const void* src, size_t bytes,
                       oslo_bk_copy_kind kind_arg, bool async) {
  const int kind = enum_value(kind_arg);
  return guard(self, entry, [&](Instance& in) {
    if (!oslo_backend_glue::check_copy(std::string(entry) + ": ", kind_arg, dst, src, bytes))
      return;
    if (in.is_cpu()) {
      std::memmove(dst, src, bytes);
      return;
    }
    const int64_t n = static_cast<int64_t>(bytes);
    const auto on = [&](bool device) {
      return at::TensorOptions().dtype(at::kByte).device(device ? in.device
                                                                : c10::Device(c10::kCPU));
    };
    at::Tensor d = at::from_blob(dst, {n}, on(kind != OSLO_BK_DEVICE_TO_HOST));
    at::Tensor s = at::from_blob(const_cast<void*>(src), {n}, on(kind != OSLO_BK_HOST_TO_DEVICE));
    const bool enqueue = async || kind == OSLO_BK_DEVICE_TO_DEVICE;
    d.copy_(s, /*non_blocking=*/enqueue);
    if (!enqueue && in.stream) in.stream->synchronize();
  });
}

oslo_status copy(void* self, void* dst, const void* src, size_t bytes, oslo_bk_copy_kind kind) {
  return copy_bytes(self, "copy", dst, src, bytes, kind, false);
}

oslo_status synchronize(void* self) {
  return guard(self, "synchronize", [&](Instance& in) {
    if (in.stream) in.stream->synchronize();
  });
}

oslo_status set_num_threads(void* self, int n) {
  return guard(self, "set_num_threads", [&](Instance& in) {
    if (n <= 0)
      fail(OSLO_ERR_INVALID_ARGUMENT, "set_num_threads: " + std::to_string(n) + " (must be > 0)");
    in.num_threads = n;
    if (at::get_num_threads() != n) at::set_num_threads(n);
  });
}

// -- ABI v2 ----------------------------------------------------------------------
// On the CPU every ATen op has finished when it returns (as in oslo's CPU
// backend): asynchronous copies are plain copies and events are complete once
// recorded. On a device, copies and events are c10's on the instance's stream.

oslo_status copy_async(void* self, void* dst, const void* src, size_t bytes,
                       oslo_bk_copy_kind kind) {
  return copy_bytes(self, "copy_async", dst, src, bytes, kind, true);
}

// The host waits for a c10 event: synchronize() where this libtorch has it
// (2.x), else polling query() (libtorch 1.13).
template <class E>
auto host_wait(const E& e, int) -> decltype(e.synchronize()) {
  e.synchronize();
}
template <class E>
void host_wait(const E& e, long) {
  while (!e.query()) std::this_thread::yield();
}

// An event: c10's on a device, a flag on the CPU.
struct TorchEvent {
  std::optional<c10::Event> ev;
};

oslo_status event_create(void* self, void** event) {
  return guard(self, "event_create", [&](Instance& in) {
    if (event == nullptr) fail(OSLO_ERR_INVALID_ARGUMENT, "event_create: event is NULL");
    auto e = std::make_unique<TorchEvent>();
    if (!in.is_cpu()) e->ev.emplace(in.device.type());
    *event = e.release();
  });
}
void event_destroy(void*, void* event) {
  try {
    delete static_cast<TorchEvent*>(event);
  } catch (...) {
  }
}
TorchEvent& event_of(void* event, const char* entry) {
  if (event == nullptr) fail(OSLO_ERR_INVALID_ARGUMENT, std::string(entry) + ": event is NULL");
  return *static_cast<TorchEvent*>(event);
}
oslo_status event_record(void* self, void* event) {
  return guard(self, "event_record", [&](Instance& in) {
    TorchEvent& e = event_of(event, "event_record");
    if (e.ev && in.stream) e.ev->record(*in.stream);
  });
}
oslo_status event_wait(void* self, void* event) {
  return guard(self, "event_wait", [&](Instance& in) {
    TorchEvent& e = event_of(event, "event_wait");
    if (e.ev && in.stream) e.ev->block(*in.stream);
  });
}
oslo_status event_synchronize(void* self, void* event) {
  return guard(self, "event_synchronize", [&](Instance&) {
    TorchEvent& e = event_of(event, "event_synchronize");
    if (e.ev) host_wait(*e.ev, 0);
  });
}

// alloc() already takes blocks from the caching allocator on the instance's
// stream, whose reuse is ordered on that stream: the stream-ordered entries
// are the same.
oslo_status alloc_async(void* self, size_t bytes, void** out) {
  return alloc(self, bytes, out);
}
void free_async(void* self, void* ptr, size_t bytes) {
  free_(self, ptr, bytes);
}

// The CUDA driver, if the process already loaded it (libtorch did, for a
// CUDA device): the device's name and memory without linking CUDA.
void* cuda_driver_symbol(const char* name) {
  static void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  return lib ? dlsym(lib, name) : nullptr;
}

const char* device_name(void* self) {
  if (self == nullptr) return "torch";
  Instance& in = *static_cast<Instance*>(self);
  if (!in.device_name.empty()) return in.device_name.c_str();
  in.device_name = "torch " + in.device.str();
  if (in.device.is_cuda()) {
    using GetFn = int (*)(int*, int);
    using NameFn = int (*)(char*, int, int);
    auto get = reinterpret_cast<GetFn>(cuda_driver_symbol("cuDeviceGet"));
    auto name = reinterpret_cast<NameFn>(cuda_driver_symbol("cuDeviceGetName"));
    int dev = 0;
    char buf[256] = {0};
    if (get && name && get(&dev, in.device.index()) == 0 && name(buf, sizeof buf - 1, dev) == 0 &&
        buf[0])
      in.device_name = buf;
  } else if (FILE* f = std::fopen("/proc/cpuinfo", "r")) {
    char line[512];
    while (std::fgets(line, sizeof line, f)) {
      if (std::strncmp(line, "model name", 10) != 0) continue;
      if (const char* colon = std::strchr(line, ':')) {
        std::string v = colon + 1;
        while (!v.empty() && v.front() == ' ') v.erase(v.begin());
        while (!v.empty() && (v.back() == '\n' || v.back() == ' ')) v.pop_back();
        if (!v.empty()) in.device_name = v;
      }
      break;
    }
    std::fclose(f);
  }
  return in.device_name.c_str();
}

oslo_status memory_info(void* self, size_t* free_bytes, size_t* total_bytes) {
  return guard(self, "memory_info", [&](Instance& in) {
    if (free_bytes == nullptr || total_bytes == nullptr)
      fail(OSLO_ERR_INVALID_ARGUMENT, "memory_info: NULL output");
    if (in.is_cpu()) {
      const long page = sysconf(_SC_PAGESIZE), total = sysconf(_SC_PHYS_PAGES),
                 avail = sysconf(_SC_AVPHYS_PAGES);
      if (page <= 0 || total <= 0 || avail < 0)
        fail(OSLO_ERR_NOT_SUPPORTED, "memory_info: the host's memory size is unknown");
      *free_bytes = static_cast<size_t>(avail) * static_cast<size_t>(page);
      *total_bytes = static_cast<size_t>(total) * static_cast<size_t>(page);
      return;
    }
    // Scope made the device current; its primary context is current once
    // libtorch used it.
    using InfoFn = int (*)(size_t*, size_t*);
    auto info = reinterpret_cast<InfoFn>(cuda_driver_symbol("cuMemGetInfo_v2"));
    if (!in.device.is_cuda() || info == nullptr || info(free_bytes, total_bytes) != 0)
      fail(OSLO_ERR_NOT_SUPPORTED,
           "memory_info: the memory of " + in.device.str() + " cannot be queried here");
  });
}

// Every required op (ATen has each in every dtype oslo uses); no fused op.
int op_supported(void*, oslo_bk_op op, oslo_dtype) {
  const int id = enum_value(op);
  return id >= OSLO_BK_OP_CONVERT && id < OSLO_BK_OP_FUSED_FIRST ? 1 : 0;
}

// c10::Stream::native_handle() where this libtorch has it (2.x), else none.
template <class S>
auto native_handle_of(const S& s, int) -> decltype(s.native_handle()) {
  return s.native_handle();
}
template <class S>
void* native_handle_of(const S&, long) {
  return nullptr;
}

// DLPack's value for the instance's stream: the cudaStream_t (1 for the
// legacy default stream, NULL); 0 on the CPU or when this libtorch cannot
// tell the handle.
int64_t stream_value(Instance& in) {
  if (!in.stream || !in.device.is_cuda()) return 0;
  void* h = native_handle_of(*in.stream, 0);
  if (h == nullptr) return in.stream->id() == 0 ? 1 : 0;
  return static_cast<int64_t>(reinterpret_cast<intptr_t>(h));
}

int64_t native_stream(void* self) {
  if (self == nullptr) return 0;
  Instance& in = *static_cast<Instance*>(self);
  try {
    Scope scope(in);
    return stream_value(in);
  } catch (...) {
    return 0;
  }
}

// The consumer's stream waits for the event on the device when it is one
// c10 can name from here (the instance's own stream, or the legacy default
// stream, 1, which is libtorch's default stream); any other stream (a foreign
// handle) is served by the host waiting for the event, which orders every
// stream after it.
oslo_status stream_wait_event(void* self, int64_t stream, void* event) {
  return guard(self, "stream_wait_event", [&](Instance& in) {
    TorchEvent& e = event_of(event, "stream_wait_event");
    if (!e.ev) return;  // CPU: the work has finished
    const int64_t own = stream_value(in);
    if (own != 0 && stream == own) {
      e.ev->block(*in.stream);
    } else if (stream == 1 && in.device.is_cuda()) {
      const auto* impl = c10::impl::getDeviceGuardImpl(in.device.type());
      e.ev->block(impl->getDefaultStream(in.device));
    } else {
      host_wait(*e.ev, 0);
    }
  });
}

// The table: the v1 entries (with c10d communicators) and the v2 queue
// entries; no fused op.
struct Plugin {
  static constexpr const char* name = "torch";
  OSLO_BACKEND_ENTRIES(REQUIRED, op_)
  OSLO_BACKEND_ENTRIES(COMM, )
  OSLO_BACKEND_ENTRIES(V2_QUEUE, )
};

}  // namespace
}  // namespace oslo_torch

OSLO_BACKEND_PLUGIN(oslo_torch::Plugin)
