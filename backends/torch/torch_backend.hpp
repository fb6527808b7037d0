// Internals of the libtorch backend plugin (liboslo_backend_torch.so). From
// oslo it includes only the public header and the backend ABI header; it
// never links liboslo. Everything here has hidden visibility: the plugin
// exports oslo_backend_plugin_v2 and oslo_backend_plugin_v1 alone (see
// plugin.map).
#pragma once

#include <ATen/ATen.h>
#include <c10/core/Stream.h>

#include <cstdint>
#include <cstring>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>

#include "oslo.h"
#include "oslo_backend.h"

namespace oslo_torch {

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

[[noreturn]] inline void fail(oslo_status status, std::string message) {
  throw Failure(status, "torch: " + message);
}

// Converts whatever the body throws into a status and a message.
oslo_status status_of_current_exception(std::string* message, const char* entry);

// One backend instance: a device, its queue, its memory and its last error.
struct Instance {
  c10::Device device{c10::kCPU};
  std::optional<c10::Stream> stream;  // the queue on a non-CPU device
  int num_threads = 0;                // 0: leave libtorch's setting alone
  std::string comm_mode;              // "", "none", "gloo", "nccl"
  std::string gloo_address;           // for createDeviceForHostname ("" = default)
  std::string error = "no error";
  std::string device_name;  // device_name()'s answer, made on first use

  // free() may run on any thread.
  std::mutex mem_mutex;
  std::unordered_map<void*, c10::DataPtr> host_blocks;  // CPU: c10's CPU allocator
  std::unordered_map<void*, at::Tensor> device_blocks;  // other devices: at::empty

  bool is_cpu() const { return device.is_cpu(); }
};

// Runs body with the instance's device, stream and thread count in force;
// turns exceptions into a status kept for last_error().
template <class F>
oslo_status guard(void* self, const char* entry, F&& body);

// The device, stream and thread count of an instance, for the current scope.
class Scope {
 public:
  explicit Scope(Instance& in);
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  c10::OptionalDeviceGuard device_guard_;
  c10::OptionalStreamGuard stream_guard_;
};

template <class F>
oslo_status guard(void* self, const char* entry, F&& body) {
  if (self == nullptr) return OSLO_ERR_INVALID_ARGUMENT;
  Instance& in = *static_cast<Instance*>(self);
  try {
    Scope scope(in);
    body(in);
    return OSLO_OK;
  } catch (...) {
    return status_of_current_exception(&in.error, entry);
  }
}

// The int value of an enum argument, read without loading the enum type: the
// ABI's op and copy-kind enums have no sentinel members, so a value outside
// the enumerators (a caller's bug, to be reported) must not be loaded as one.
template <class E>
int enum_value(const E& e) {
  static_assert(sizeof(E) == sizeof(int), "C enums are int-sized here");
  int v;
  std::memcpy(&v, &e, sizeof v);
  return v;
}

// -- views ----------------------------------------------------------------

at::ScalarType scalar_type_of(oslo_dtype dtype, const char* entry, const char* what);
const char* dtype_name(oslo_dtype dtype);
bool is_float(oslo_dtype dtype);
bool is_int(oslo_dtype dtype);

enum class Role { Input, Output };
// A zero-copy tensor over a view (at::from_blob). Checks the view: rank,
// extents, strides (non-negative; 0 only for inputs), data, dtype.
at::Tensor wrap(const Instance& in, const oslo_bk_view* v, const char* entry, const char* what,
                Role role);
std::string shape_string(const oslo_bk_view* v);

// The f32 tensor computations use: t itself if it is f32, else a converted copy.
inline at::Tensor f32(const at::Tensor& t) {
  return t.scalar_type() == at::kFloat ? t : t.to(at::kFloat);
}
// out = r (converting to out's dtype), unless r is out itself.
inline void store(const at::Tensor& out, const at::Tensor& r) {
  if (!r.is_same(out)) out.copy_(r);
}

// -- the table's entries, grouped by file ---------------------------------

// torch_ops.cpp
oslo_status op_convert(void* self, const oslo_bk_view* out, const oslo_bk_view* x);
oslo_status op_fill(void* self, const oslo_bk_view* out, double value);
oslo_status op_matmul(void* self, const oslo_bk_view* c, const oslo_bk_view* a,
                      const oslo_bk_view* b, const oslo_bk_view* bias, float alpha, float beta);
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

// torch_comm.cpp
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

}  // namespace oslo_torch
