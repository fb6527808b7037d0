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
#include "oslo_backend_glue.hpp"

namespace oslo_torch {

// The glue every backend shares (backends/common/oslo_backend_glue.hpp):
// failures thrown inside the plugin, caught by guard() before any entry
// returns; enum and dtype helpers.
using namespace oslo_backend_glue;  // NOLINT: the plugin's own namespace

// Messages read "torch: <text>" (the texts name the entry themselves), and
// libtorch's exceptions are mapped to statuses by their kind.
struct Messages : oslo_backend_glue::Messages {
  static constexpr const char* kPrefix = "torch: ";
  static constexpr bool kEntryInFailure = false;
  static bool translate(const std::string& where, std::string* message, oslo_status* status);
};

// Converts whatever the body throws into a status and a message.
inline oslo_status status_of_current_exception(std::string* message, const char* entry) {
  return oslo_backend_glue::status_of_current_exception<Messages>(message, entry);
}

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

// Runs body with the instance's device, stream and thread count in force;
// turns exceptions into a status kept for last_error().
template <class F>
oslo_status guard(void* self, const char* entry, F&& body) {
  return oslo_backend_glue::guard<Messages, Instance>(self, entry, [&](Instance& in) {
    Scope scope(in);
    body(in);
  });
}

// -- views ----------------------------------------------------------------

at::ScalarType scalar_type_of(oslo_dtype dtype, const char* entry, const char* what);

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

// With oslo_backend.h's signatures (the glue's OSLO_BACKEND_DECLARE): the
// compute entries op_<entry> (torch_ops.cpp) and the communicators
// (torch_comm.cpp); the rest are in torch_backend.cpp.
OSLO_BACKEND_DECLARE(COMPUTE, op_)
OSLO_BACKEND_DECLARE(COMM, )

}  // namespace oslo_torch
