#include "core/backend/backend.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/common/error.hpp"

namespace oslo {

int64_t View::rows() const {
  int64_t r = 1;
  for (int i = 0; i + 1 < ndim; ++i) r *= shape[i];
  return r;
}
int64_t View::cols() const {
  return ndim ? shape[ndim - 1] : 1;
}
int64_t View::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= shape[i];
  return n;
}
bool View::contiguous() const {
  int64_t expect = 1;
  for (int i = ndim - 1; i >= 0; --i) {
    if (shape[i] != 1 && strides[i] != expect) return false;
    expect *= shape[i];
  }
  return true;
}

View make_view(void* data, oslo_dtype dtype, const std::vector<int64_t>& shape) {
  OSLO_CHECK(shape.size() <= OSLO_MAX_DIMS, OSLO_ERR_INVALID_ARGUMENT, "view of ", shape.size(),
             " dimensions (at most ", OSLO_MAX_DIMS, ")");
  View v;
  v.data = data;
  v.dtype = dtype;
  v.ndim = static_cast<int32_t>(shape.size());
  int64_t s = 1;
  for (int i = v.ndim - 1; i >= 0; --i) {
    v.shape[i] = shape[i];
    v.strides[i] = s;
    s *= shape[i];
  }
  return v;
}

Backend::Backend(const oslo_backend_iface& table, void* self) : t_(table), self_(self) {}

Backend::~Backend() {
  t_.destroy(self_);
}

void Backend::raise(oslo_status st, const char* op) const {
  const char* msg = t_.last_error(self_);
  fail(st, name(), " backend: ", op, ": ", msg && *msg ? msg : "failed");
}

int Backend::dlpack_device_type() const {
  return t_.device_type(self_);
}
int Backend::device_id() const {
  return t_.device_id(self_);
}
bool Backend::host_accessible() const {
  return t_.host_accessible(self_) != 0;
}

void* Backend::allocate(size_t bytes) {
  void* p = nullptr;
  check(t_.alloc(self_, bytes, &p), "alloc");
  return p;
}
void Backend::deallocate(void* p, size_t bytes) noexcept {
  if (p) t_.free(self_, p, bytes);
}
void Backend::copy(void* dst, const void* src, size_t bytes, CopyKind kind) {
  if (bytes == 0) return;
  oslo_bk_copy_kind k = kind == CopyKind::HostToDevice   ? OSLO_BK_HOST_TO_DEVICE
                        : kind == CopyKind::DeviceToHost ? OSLO_BK_DEVICE_TO_HOST
                                                         : OSLO_BK_DEVICE_TO_DEVICE;
  check(t_.copy(self_, dst, src, bytes, k), "copy");
}
void Backend::synchronize() {
  check(t_.synchronize(self_), "synchronize");
}
void Backend::set_num_threads(int n) {
  check(t_.set_num_threads(self_, n), "set_num_threads");
}

void Backend::copy_async(void* dst, const void* src, size_t bytes, CopyKind kind) {
  if (bytes == 0) return;
  if (!t_.copy_async) return copy(dst, src, bytes, kind);
  oslo_bk_copy_kind k = kind == CopyKind::HostToDevice   ? OSLO_BK_HOST_TO_DEVICE
                        : kind == CopyKind::DeviceToHost ? OSLO_BK_DEVICE_TO_HOST
                                                         : OSLO_BK_DEVICE_TO_DEVICE;
  check(t_.copy_async(self_, dst, src, bytes, k), "copy_async");
}
void* Backend::allocate_async(size_t bytes) {
  if (!t_.alloc_async) return allocate(bytes);
  void* p = nullptr;
  check(t_.alloc_async(self_, bytes, &p), "alloc_async");
  return p;
}
void Backend::deallocate_async(void* p, size_t bytes) noexcept {
  if (!p) return;
  if (t_.free_async)
    t_.free_async(self_, p, bytes);
  else
    t_.free(self_, p, bytes);
}
std::string Backend::device_name() const {
  const char* n = t_.device_name ? t_.device_name(self_) : nullptr;
  return n && *n ? std::string(n) : std::string(name());
}
void Backend::memory_info(size_t* free_bytes, size_t* total_bytes) {
  OSLO_CHECK(t_.memory_info, OSLO_ERR_NOT_SUPPORTED, name(),
             " backend: memory_info: the backend does not report its device's memory");
  size_t f = 0, t = 0;
  check(t_.memory_info(self_, &f, &t), "memory_info");
  if (free_bytes) *free_bytes = f;
  if (total_bytes) *total_bytes = t;
}
bool Backend::op_supported(oslo_bk_op op, oslo_dtype dtype) const {
  if (t_.op_supported) return t_.op_supported(self_, op, dtype) != 0;
  return op >= OSLO_BK_OP_CONVERT && op < OSLO_BK_OP_FUSED_FIRST;
}
std::string Backend::check_memory(const void* p, size_t bytes) const {
  if (!t_.check_memory || bytes == 0) return {};
  if (t_.check_memory(self_, p, bytes) == OSLO_OK) return {};
  const char* msg = t_.last_error(self_);
  return msg && *msg ? msg : "not this backend's memory";
}

void* Backend::host_allocate(size_t bytes) {
  if (t_.host_alloc && t_.host_free) {
    void* p = nullptr;
    check(t_.host_alloc(self_, bytes, &p), "host_alloc");
    return p;
  }
  void* p = std::aligned_alloc(64, (std::max<size_t>(bytes, 1) + 63) / 64 * 64);
  OSLO_CHECK(p, OSLO_ERR_OUT_OF_MEMORY, "out of host memory for ", bytes, " staging bytes");
  return p;
}

void Backend::host_deallocate(void* p) noexcept {
  if (!p) return;
  if (t_.host_alloc && t_.host_free)
    t_.host_free(self_, p);
  else
    std::free(p);
}

bool Backend::graph_begin() {
  if (!t_.graph_begin || !t_.graph_end) return false;
  const oslo_status st = t_.graph_begin(self_);
  if (st == OSLO_ERR_NOT_SUPPORTED) return false;
  check(st, "graph_begin");
  return true;
}
void Backend::graph_end(bool launch) {
  check(t_.graph_end(self_, launch ? 1 : 0), "graph_end");
}
int64_t Backend::native_stream() const {
  return t_.native_stream ? t_.native_stream(self_) : 0;
}
void Backend::make_stream_wait(int64_t stream) {
  Event e(*this);
  e.record();
  if (t_.stream_wait_event && e.native()) {
    check(t_.stream_wait_event(self_, stream, e.native()), "stream_wait_event");
    return;
  }
  e.synchronize();
}

Event::Event(Backend& owner) : b_(owner) {
  if (b_.t_.event_create) b_.check(b_.t_.event_create(b_.self_, &ev_), "event_create");
}
Event::~Event() {
  if (ev_) b_.t_.event_destroy(b_.self_, ev_);
}
void Event::record() {
  if (ev_)
    b_.check(b_.t_.event_record(b_.self_, ev_), "event_record");
  else
    b_.synchronize();
}
void Event::wait(Backend& queue) {
  if (!ev_) return;  // record() already synchronized the host
  OSLO_CHECK(queue.t_.event_wait == b_.t_.event_wait, OSLO_ERR_INVALID_ARGUMENT,
             "event of backend '", b_.name(), "' waited for by backend '", queue.name(), "'");
  queue.check(queue.t_.event_wait(queue.self_, ev_), "event_wait");
}
void Event::synchronize() {
  if (ev_) b_.check(b_.t_.event_synchronize(b_.self_, ev_), "event_synchronize");
}

void Backend::convert(const View& out, const View& x) {
  check(t_.convert(self_, &out, &x), "convert");
}
void Backend::fill(const View& out, double value) {
  check(t_.fill(self_, &out, value), "fill");
}
void Backend::matmul(const View& c, const View& a, const View& b, const View* bias, float alpha,
                     float beta) {
  check(t_.matmul(self_, &c, &a, &b, bias, alpha, beta), "matmul");
}
void Backend::binary(oslo_bk_binary op, const View& out, const View& a, const View& b) {
  check(t_.binary(self_, op, &out, &a, &b), "binary");
}
void Backend::unary(oslo_bk_unary op, const View& out, const View& x, float alpha) {
  check(t_.unary(self_, op, &out, &x, alpha), "unary");
}
void Backend::unary_backward(oslo_bk_unary op, const View& grad_x, const View& x,
                             const View& grad_out, float alpha) {
  check(t_.unary_backward(self_, op, &grad_x, &x, &grad_out, alpha), "unary_backward");
}
void Backend::reduce(oslo_bk_reduce op, const View& out, const View& x, const View* shift,
                     int64_t valid, bool accumulate) {
  check(t_.reduce(self_, op, &out, &x, shift, valid, accumulate ? 1 : 0), "reduce");
}
void Backend::sum_rows(const View& out, const View& x, bool accumulate) {
  check(t_.sum_rows(self_, &out, &x, accumulate ? 1 : 0), "sum_rows");
}
void Backend::softmax(const View& out, const View& x, const View* mask, float scale, bool causal,
                      int64_t causal_offset) {
  check(t_.softmax(self_, &out, &x, mask, scale, causal ? 1 : 0, causal_offset), "softmax");
}
void Backend::softmax_backward(const View& grad_x, const View& y, const View& grad_y, float scale) {
  check(t_.softmax_backward(self_, &grad_x, &y, &grad_y, scale), "softmax_backward");
}
void Backend::norm(const View& out, const View& x, const View* gamma, const View* beta, float eps,
                   bool rms) {
  check(t_.norm(self_, &out, &x, gamma, beta, eps, rms ? 1 : 0), "norm");
}
void Backend::gather_rows(const View& out, const View& table, const View& ids, int64_t offset,
                          int64_t limit) {
  check(t_.gather_rows(self_, &out, &table, &ids, offset, limit), "gather_rows");
}
void Backend::scatter_add_rows(const View& table, const View& ids, const View& src,
                               int64_t offset) {
  check(t_.scatter_add_rows(self_, &table, &ids, &src, offset), "scatter_add_rows");
}
void Backend::gather_cols(const View& out, const View& x, const View& idx, int64_t offset,
                          int64_t limit, int64_t ignore) {
  check(t_.gather_cols(self_, &out, &x, &idx, offset, limit, ignore), "gather_cols");
}
void Backend::scatter_add_cols(const View& x, const View& idx, int64_t offset, int64_t ignore,
                               float value) {
  check(t_.scatter_add_cols(self_, &x, &idx, offset, ignore, value), "scatter_add_cols");
}

namespace {

// The job's store lent to a plugin through C callbacks; errors become
// statuses plus a message kept here.
struct StoreBridge {
  Store& store;
  std::string prefix;
  std::string error;

  static oslo_status set(void* self, const char* key, const void* value, size_t bytes) {
    auto* b = static_cast<StoreBridge*>(self);
    try {
      const uint8_t* p = static_cast<const uint8_t*>(value);
      b->store.set(b->prefix + key, std::vector<uint8_t>(p, p + bytes));
      return OSLO_OK;
    } catch (const Error& e) {
      b->error = e.what();
      return e.status();
    } catch (const std::exception& e) {
      b->error = e.what();
      return OSLO_ERR_INTERNAL;
    }
  }
  static oslo_status get(void* self, const char* key, void* value, size_t cap, size_t* bytes,
                         double timeout_seconds) {
    auto* b = static_cast<StoreBridge*>(self);
    try {
      std::vector<uint8_t> v = b->store.get(b->prefix + key, Deadline(timeout_seconds));
      if (bytes) *bytes = v.size();
      if (value && cap) std::memcpy(value, v.data(), std::min(cap, v.size()));
      return OSLO_OK;
    } catch (const Error& e) {
      b->error = e.what();
      return e.status();
    } catch (const std::exception& e) {
      b->error = e.what();
      return OSLO_ERR_INTERNAL;
    }
  }
  static const char* last_error(void* self) {
    return static_cast<StoreBridge*>(self)->error.c_str();
  }
};

// A communicator implemented by a backend plugin.
class PluginCommunicator : public Communicator {
 public:
  PluginCommunicator(const oslo_backend_iface& t, void* comm, int rank, int size,
                     std::string backend)
      : t_(t), comm_(comm), rank_(rank), size_(size), backend_(std::move(backend)) {}
  ~PluginCommunicator() override { t_.comm_destroy(comm_); }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* transport() const override { return t_.comm_name(comm_); }

  void all_reduce(const void* in, void* out, size_t count, oslo_dtype dt,
                  oslo_reduce_op op) override {
    check(t_.comm_all_reduce(comm_, in, out, count, dt, op), "all_reduce");
  }
  void all_gather(const void* in, void* out, size_t count, oslo_dtype dt) override {
    check(t_.comm_all_gather(comm_, in, out, count, dt), "all_gather");
  }
  void reduce_scatter(const void* in, void* out, size_t count, oslo_dtype dt,
                      oslo_reduce_op op) override {
    check(t_.comm_reduce_scatter(comm_, in, out, count, dt, op), "reduce_scatter");
  }
  void broadcast(void* buf, size_t count, oslo_dtype dt, int root) override {
    check(t_.comm_broadcast(comm_, buf, count, dt, root), "broadcast");
  }
  void send(const void* buf, size_t bytes, int peer) override {
    check(t_.comm_send(comm_, buf, bytes, peer), "send");
  }
  void recv(void* buf, size_t bytes, int peer) override {
    check(t_.comm_recv(comm_, buf, bytes, peer), "recv");
  }
  void barrier() override { check(t_.comm_barrier(comm_), "barrier"); }
  void abort() noexcept override { t_.comm_abort(comm_); }

 private:
  void check(oslo_status st, const char* op) const {
    if (st == OSLO_OK) return;
    const char* msg = t_.comm_last_error(comm_);
    fail(st, backend_, " backend ", transport(), " ", op, ": ", msg && *msg ? msg : "failed");
  }

  const oslo_backend_iface& t_;
  void* comm_;
  int rank_, size_;
  std::string backend_;
};

}  // namespace

std::unique_ptr<Communicator> Backend::create_communicator(Store& store, const GroupSpec& g) {
  if (!t_.comm_create) return nullptr;
  StoreBridge bridge{store, g.name + "/backend/", {}};
  oslo_bk_store s{&bridge, StoreBridge::set, StoreBridge::get, StoreBridge::last_error};
  oslo_bk_group group{};
  group.struct_size = sizeof group;
  group.name = g.name.c_str();
  group.rank = g.rank;
  group.size = g.size;
  group.members = g.members.data();
  group.same_host = g.same_host ? 1 : 0;
  group.timeout_seconds = g.timeout_seconds;
  void* comm = nullptr;
  check(t_.comm_create(self_, &comm, &group, &s), "comm_create");
  if (!comm) return nullptr;
  return std::make_unique<PluginCommunicator>(t_, comm, g.rank, g.size, name());
}

}  // namespace oslo
