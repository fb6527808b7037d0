// The "guard" test backend: memory the host must not touch. It computes with
// the CPU backend's code, but reports itself as a device backend (DLPack
// device type kDLCUDA, host_accessible 0) and keeps all its memory in one
// arena of pages mapped PROT_NONE, made readable and writable only while one
// of its own entries runs. Any host dereference of tensor memory by the core
// (a memmove in a communicator, a read of ids or logits) is then a SIGSEGV,
// which is what the tests running on it (collectives, layers, a model
// forward) check for. Every pointer handed to it as device memory (views,
// copy ends) must lie in its arena, and every pointer handed as host memory
// must not: the core passing host memory where device memory belongs (or the
// reverse) fails with OSLO_ERR_INVALID_ARGUMENT.
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <string>

#include <nlohmann/json.hpp>

#include "backends/common/oslo_backend_glue.hpp"

namespace oslo {
const oslo_backend_iface* cpu_backend_table();
}

namespace {

const oslo_backend_iface& cpu() {
  return *oslo::cpu_backend_table();
}

constexpr size_t kArena = size_t(8) << 30;  // address space only (MAP_NORESERVE)
constexpr size_t kAlign = 64;

// One arena per process (all instances are on the same "device", so, as the
// ABI allows, memory of one instance may be used by another's ops). It is
// accessible while at least one entry of any instance runs, never else.
struct Arena {
  char* base = nullptr;
  std::mutex mu;  // everything below (free() may run on any thread)
  size_t used = 0;
  std::multimap<size_t, size_t> free_blocks;  // size -> offset
  std::map<size_t, size_t> live;              // offset -> size
  int open = 0;                               // entries running now
  size_t open_bytes = 0;                      // bytes made accessible
};

Arena& arena() {
  static Arena* a = [] {
    auto* r = new Arena;
    void* base =
        mmap(nullptr, kArena, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    r->base = base == MAP_FAILED ? nullptr : static_cast<char*>(base);
    return r;
  }();
  return *a;
}

struct Instance {
  void* inner = nullptr;  // the CPU backend's instance
  int device = 0;         // backend option {"device": N}: the device index it reports
  std::string error = "no error";
};

Instance* inst(void* self) {
  return static_cast<Instance*>(self);
}

size_t page() {
  static const size_t p = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return p;
}

// Opens the arena for the duration of one entry.
class Open {
 public:
  explicit Open(Instance&) {
    Arena& A = arena();
    std::lock_guard<std::mutex> lk(A.mu);
    if (A.open++ == 0) {
      A.open_bytes = (A.used + page() - 1) / page() * page();
      if (A.open_bytes) mprotect(A.base, A.open_bytes, PROT_READ | PROT_WRITE);
    }
  }
  ~Open() {
    Arena& A = arena();
    std::lock_guard<std::mutex> lk(A.mu);
    if (--A.open == 0 && A.open_bytes) mprotect(A.base, A.open_bytes, PROT_NONE);
  }
  Open(const Open&) = delete;
  Open& operator=(const Open&) = delete;
};

bool in_arena(const Instance&, const void* p, size_t bytes) {
  const char* c = static_cast<const char*>(p);
  const char* base = arena().base;
  return c >= base && bytes <= kArena && c + bytes <= base + kArena;
}

oslo_status refuse(Instance& I, const std::string& msg) {
  I.error = "guard: " + msg;
  return OSLO_ERR_INVALID_ARGUMENT;
}

size_t elem_size(oslo_dtype dt) {
  return dt == OSLO_DTYPE_F16 || dt == OSLO_DTYPE_BF16 ? 2 : dt == OSLO_DTYPE_I64 ? 8 : 4;
}

// A view must address arena memory over its whole extent.
bool view_ok(Instance& I, const oslo_bk_view* v, std::string* why) {
  if (!v) return true;
  if (v->ndim < 0 || v->ndim > OSLO_MAX_DIMS) return true;  // the CPU code reports it
  int64_t lo = 0, hi = 0;
  for (int i = 0; i < v->ndim; ++i) {
    if (v->shape[i] <= 0) return true;  // empty: nothing is touched
    const int64_t span = (v->shape[i] - 1) * v->strides[i];
    (span < 0 ? lo : hi) += span;
  }
  const char* d = static_cast<const char*>(v->data);
  const size_t es = elem_size(v->dtype);
  if (!in_arena(I, d + lo * static_cast<int64_t>(es), static_cast<size_t>(hi - lo) * es + es)) {
    *why = "a view at " + std::to_string(reinterpret_cast<uintptr_t>(v->data)) +
           " is not this device's memory (the core handed host memory to a device op?)";
    return false;
  }
  return true;
}

void check_arg(Instance& I, bool& ok, std::string& why, const oslo_bk_view* v) {
  if (ok && !view_ok(I, v, &why)) ok = false;
}
template <typename T>
void check_arg(Instance&, bool&, std::string&, const T&) {}

oslo_status inner_status(Instance& I, oslo_status st) {
  if (st != OSLO_OK) I.error = cpu().last_error(I.inner);
  return st;
}

// One compute entry: checks every view argument, opens the arena, runs the
// CPU backend's entry.
template <typename F, F oslo_backend_iface::*M>
struct Wrap;
template <typename... A, oslo_status (*oslo_backend_iface::*M)(void*, A...)>
struct Wrap<oslo_status (*)(void*, A...), M> {
  static oslo_status fn(void* self, A... a) {
    Instance& I = *inst(self);
    bool ok = true;
    std::string why;
    (check_arg(I, ok, why, a), ...);
    if (!ok) return refuse(I, why);
    Open open(I);
    return inner_status(I, (cpu().*M)(I.inner, a...));
  }
};
#define GUARD_WRAP(entry)   \
  OSLO_BACKEND_ENTRY(entry, \
                     (Wrap<decltype(oslo_backend_iface::entry), &oslo_backend_iface::entry>::fn))

oslo_status create(void** self, const oslo_backend_options* o, const char** error) {
  if (!arena().base) {
    *error = "guard: cannot reserve the arena";
    return OSLO_ERR_BACKEND_UNAVAILABLE;
  }
  auto* I = new (std::nothrow) Instance;
  if (!I) {
    *error = "guard: out of memory";
    return OSLO_ERR_OUT_OF_MEMORY;
  }
  const auto j =
      nlohmann::json::parse(oslo_backend_glue::read_options(o).extra_json, nullptr, false);
  if (j.is_object() && j.contains("device") && j["device"].is_number_integer())
    I->device = j["device"].get<int>();
  oslo_status st = cpu().create(&I->inner, o, error);
  if (st != OSLO_OK) {
    delete I;
    return st;
  }
  *self = I;
  return OSLO_OK;
}
void destroy(void* self) {
  Instance* I = inst(self);
  cpu().destroy(I->inner);
  delete I;
}
const char* last_error(void* self) {
  return inst(self)->error.c_str();
}
int32_t device_type(void*) {
  return 2; /* kDLCUDA: a device the host cannot read */
}
int32_t device_id(void* self) {
  return inst(self)->device;
}
int host_accessible(void*) {
  return 0;
}

oslo_status alloc(void* self, size_t bytes, void** out) {
  Arena& A = arena();
  const size_t n = bytes == 0 ? kAlign : (bytes + kAlign - 1) / kAlign * kAlign;
  std::lock_guard<std::mutex> lk(A.mu);
  auto it = A.free_blocks.find(n);
  size_t off;
  if (it != A.free_blocks.end()) {
    off = it->second;
    A.free_blocks.erase(it);
  } else {
    if (A.used + n > kArena) {
      inst(self)->error = "guard: arena exhausted";
      return OSLO_ERR_OUT_OF_MEMORY;
    }
    off = A.used;
    A.used += n;
    // An entry running on another thread opened only what existed then.
    if (A.open) {
      const size_t want = (A.used + page() - 1) / page() * page();
      if (want > A.open_bytes) {
        mprotect(A.base + A.open_bytes, want - A.open_bytes, PROT_READ | PROT_WRITE);
        A.open_bytes = want;
      }
    }
  }
  A.live[off] = n;
  *out = A.base + off;
  return OSLO_OK;
}
void free_(void*, void* p, size_t) {
  if (!p) return;
  Arena& A = arena();
  std::lock_guard<std::mutex> lk(A.mu);
  const size_t off = static_cast<size_t>(static_cast<char*>(p) - A.base);
  auto it = A.live.find(off);
  if (it == A.live.end()) return;  // not ours: ignored
  A.free_blocks.emplace(it->second, off);
  A.live.erase(it);
}

oslo_status copy(void* self, void* dst, const void* src, size_t bytes, oslo_bk_copy_kind kind) {
  Instance& I = *inst(self);
  if (bytes == 0) return OSLO_OK;
  const bool dst_dev = kind != OSLO_BK_DEVICE_TO_HOST, src_dev = kind != OSLO_BK_HOST_TO_DEVICE;
  if (in_arena(I, dst, bytes) != dst_dev)
    return refuse(I, std::string("copy: the destination is ") +
                         (dst_dev ? "not device memory" : "device memory, not host memory"));
  if (in_arena(I, src, bytes) != src_dev)
    return refuse(I, std::string("copy: the source is ") +
                         (src_dev ? "not device memory" : "device memory, not host memory"));
  Open open(I);
  return inner_status(I, cpu().copy(I.inner, dst, src, bytes, kind));
}
// Every buffer a staged communicator is handed must be arena memory (the
// core's host values go through control messages, staged into the arena).
oslo_status check_memory(void* self, const void* ptr, size_t bytes) {
  Instance& I = *inst(self);
  if (in_arena(I, ptr, bytes)) return OSLO_OK;
  return refuse(I, "[" + std::to_string(reinterpret_cast<uintptr_t>(ptr)) + ", +" +
                       std::to_string(bytes) +
                       ") is not this device's memory (host memory, outside the guard arena)");
}
// Staging memory for host transports: ordinary host memory, counted so that
// tests can see the staged path used it (oslo_guard_host_allocs).
std::atomic<int64_t> g_host_allocs{0};
oslo_status host_alloc(void* self, size_t bytes, void** out) {
  void* p = std::aligned_alloc(kAlign, (bytes + kAlign) / kAlign * kAlign);
  if (!p) {
    inst(self)->error = "guard: out of host memory";
    return OSLO_ERR_OUT_OF_MEMORY;
  }
  ++g_host_allocs;
  *out = p;
  return OSLO_OK;
}
void host_free(void*, void* p) {
  std::free(p);
}

oslo_status synchronize(void*) {
  return OSLO_OK;
}
oslo_status set_num_threads(void* self, int n) {
  Instance& I = *inst(self);
  return inner_status(I, cpu().set_num_threads(I.inner, n));
}

const char* device_name(void*) {
  return "oslo guard device (PROT_NONE memory)";
}
oslo_status memory_info(void*, size_t* free_bytes, size_t* total_bytes) {
  Arena& A = arena();
  std::lock_guard<std::mutex> lk(A.mu);
  size_t live = 0;
  for (auto& kv : A.live) live += kv.second;
  *total_bytes = kArena;
  *free_bytes = kArena - live;
  return OSLO_OK;
}
int op_supported(void*, oslo_bk_op op, oslo_dtype) {
  return op >= OSLO_BK_OP_CONVERT && op < OSLO_BK_OP_FUSED_FIRST ? 1 : 0;
}

// Events, the native stream and stream waits: the CPU backend's, on its
// instance.
oslo_status event_create(void* self, void** ev) {
  Instance& I = *inst(self);
  return inner_status(I, cpu().event_create(I.inner, ev));
}
void event_destroy(void* self, void* ev) {
  cpu().event_destroy(inst(self)->inner, ev);
}
oslo_status event_record(void* self, void* ev) {
  Instance& I = *inst(self);
  return inner_status(I, cpu().event_record(I.inner, ev));
}
oslo_status event_wait(void* self, void* ev) {
  Instance& I = *inst(self);
  return inner_status(I, cpu().event_wait(I.inner, ev));
}
oslo_status event_synchronize(void* self, void* ev) {
  Instance& I = *inst(self);
  return inner_status(I, cpu().event_synchronize(I.inner, ev));
}
// A made-up native stream per device (DLPack value 0x6a00 + device), and the
// last foreign stream made to wait, for the DLPack tests to read
// (oslo_guard_last_stream_wait, found with dlsym).
int64_t native_stream(void* self) {
  return 0x6a00 + inst(self)->device;
}
std::atomic<int64_t> g_last_stream_wait{0};
oslo_status stream_wait_event(void* self, int64_t stream, void* ev) {
  Instance& I = *inst(self);
  g_last_stream_wait = stream;
  return inner_status(I, cpu().stream_wait_event(I.inner, stream, ev));
}

// The table: the CPU backend's compute behind the arena checks, no
// communicators (groups run on the staged host communicator), no fused or
// packed entries (op_supported declines them).
struct Guard {
  static constexpr const char* name = "guard";
  OSLO_BACKEND_ENTRY(create, create);
  OSLO_BACKEND_ENTRY(destroy, destroy);
  OSLO_BACKEND_ENTRY(last_error, last_error);
  OSLO_BACKEND_ENTRY(device_type, device_type);
  OSLO_BACKEND_ENTRY(device_id, device_id);
  OSLO_BACKEND_ENTRY(host_accessible, host_accessible);
  OSLO_BACKEND_ENTRY(alloc, alloc);
  OSLO_BACKEND_ENTRY(free, free_);
  OSLO_BACKEND_ENTRY(copy, copy);
  OSLO_BACKEND_ENTRY(copy_async, copy);
  OSLO_BACKEND_ENTRY(alloc_async, alloc);
  OSLO_BACKEND_ENTRY(free_async, free_);
  OSLO_BACKEND_ENTRY(synchronize, synchronize);
  OSLO_BACKEND_ENTRY(set_num_threads, set_num_threads);
  OSLO_BACKEND_ENTRY(device_name, device_name);
  OSLO_BACKEND_ENTRY(memory_info, memory_info);
  OSLO_BACKEND_ENTRY(op_supported, op_supported);
  OSLO_BACKEND_ENTRY(event_create, event_create);
  OSLO_BACKEND_ENTRY(event_destroy, event_destroy);
  OSLO_BACKEND_ENTRY(event_record, event_record);
  OSLO_BACKEND_ENTRY(event_wait, event_wait);
  OSLO_BACKEND_ENTRY(event_synchronize, event_synchronize);
  OSLO_BACKEND_ENTRY(native_stream, native_stream);
  OSLO_BACKEND_ENTRY(stream_wait_event, stream_wait_event);
  OSLO_BACKEND_ENTRY(check_memory, check_memory);
  OSLO_BACKEND_ENTRY(host_alloc, host_alloc);
  OSLO_BACKEND_ENTRY(host_free, host_free);
  GUARD_WRAP(convert);
  GUARD_WRAP(fill);
  GUARD_WRAP(matmul);
  GUARD_WRAP(binary);
  GUARD_WRAP(unary);
  GUARD_WRAP(unary_backward);
  GUARD_WRAP(reduce);
  GUARD_WRAP(sum_rows);
  GUARD_WRAP(softmax);
  GUARD_WRAP(softmax_backward);
  GUARD_WRAP(norm);
  GUARD_WRAP(gather_rows);
  GUARD_WRAP(scatter_add_rows);
  GUARD_WRAP(gather_cols);
  GUARD_WRAP(scatter_add_cols);
};

}  // namespace

extern "C" __attribute__((visibility("default"))) int64_t oslo_guard_last_stream_wait() {
  return g_last_stream_wait.load();
}

extern "C" __attribute__((visibility("default"))) int64_t oslo_guard_host_allocs() {
  return g_host_allocs.load();
}

OSLO_BACKEND_PLUGIN(Guard)
