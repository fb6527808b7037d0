// oslo_backend_glue.hpp - what every backend written in C++ needs around the
// C table of core/backend/oslo_backend.h, once: failures as exceptions inside
// the backend and statuses plus a kept message at its entries, the options,
// enum and dtype helpers, and the table itself, built from a struct of its
// entries and exported as the plugin symbols (v2, and v1 for an older
// liboslo).
//
// Header-only C++17 on the C header and the standard library alone: a plugin
// is built against oslo.h and oslo_backend.h only (it never links liboslo and
// may use another C++ standard library ABI), so nothing here may need oslo's
// C++ internals. A plugin includes it as the one header of its glue:
//
//   struct MyBackend {
//     static constexpr const char* name = "mine";
//     OSLO_BACKEND_ENTRIES(REQUIRED, op_)  // create, ..., free_, ..., op_convert, ...
//     OSLO_BACKEND_ENTRY(copy_async, my_copy_async);
//     ...                                  // any optional entries
//   };
//   OSLO_BACKEND_PLUGIN(MyBackend)         // exports oslo_backend_plugin_v2 and _v1
//
// The table is checked while compiling: every entry ABI v1 requires, and the
// optional groups whole (comm_*, event_*, alloc_async with free_async, the
// graph pair, the packed-weight trio, host_alloc with host_free).
//
// Thread-safety: everything here is as thread-safe as the functions it
// wraps; the message of a failed create() is kept per thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <type_traits>
#include <utility>

#include "../../core/backend/oslo_backend.h"

namespace oslo_backend_glue {

// -- failures -------------------------------------------------------------------

// A failure with an oslo status, thrown inside a backend and turned into the
// status and its message before an entry returns (guarded()). The message is
// the backend's own text; how it is shown (the backend's name, the entry) is
// its Messages' business.
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

// Throws a Failure. Never returns.
[[noreturn]] inline void fail(oslo_status status, std::string message) {
  throw Failure(status, std::move(message));
}

// How a backend words the messages its entries keep. A backend derives its
// own struct from this one and hides what it changes:
//   kPrefix         put before every message ("cuda: ");
//   kEntryInFailure whether a Failure's text gets the entry's name before it
//                   ("cuda: alloc: out of device memory"); false for a
//                   backend whose Failure texts name the entry themselves;
//   kOutOfMemory    the text for std::bad_alloc;
//   translate()     the exceptions of a library the backend maps itself
//                   (c10::Error): called inside a handler, it rethrows with
//                   `throw;`, and returns true with *status and *message set
//                   when it knows the exception (`where` is the prefix and the
//                   entry), false otherwise.
struct Messages {
  static constexpr const char* kPrefix = "";
  static constexpr bool kEntryInFailure = true;
  static constexpr const char* kOutOfMemory = "out of memory";
  static bool translate(const std::string& /*where*/, std::string* /*message*/,
                        oslo_status* /*status*/) {
    return false;
  }
};

// Inside a handler (catch (...)): the status of the exception in flight, its
// message written to *message. `entry` names the entry (NULL: none). A
// Failure keeps its status; std::bad_alloc is OSLO_ERR_OUT_OF_MEMORY; what
// M::translate() does not know is OSLO_ERR_INTERNAL.
template <class M = Messages>
oslo_status status_of_current_exception(std::string* message, const char* entry) {
  std::string where = M::kPrefix;
  if (entry != nullptr) where += std::string(entry) + ": ";
  try {
    throw;
  } catch (const Failure& e) {
    *message = (M::kEntryInFailure ? where : std::string(M::kPrefix)) + e.what();
    return e.status();
  } catch (...) {
    oslo_status status = OSLO_ERR_INTERNAL;
    if (M::translate(where, message, &status)) return status;
  }
  try {
    throw;
  } catch (const std::bad_alloc&) {
    *message = where + M::kOutOfMemory;
    return OSLO_ERR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    *message = where + e.what();
    return OSLO_ERR_INTERNAL;
  } catch (...) {
    *message = where + "unknown exception";
    return OSLO_ERR_INTERNAL;
  }
}

// Runs body() and returns OSLO_OK, or the status of what it threw with the
// message in *message (the instance's last_error text). Never throws.
template <class M = Messages, class F>
oslo_status guarded(std::string* message, const char* entry, F&& body) noexcept {
  try {
    try {
      body();
      return OSLO_OK;
    } catch (...) {
      return status_of_current_exception<M>(message, entry);
    }
  } catch (...) {
    return OSLO_ERR_OUT_OF_MEMORY;  // the message itself could not be made
  }
}

// The guard of an entry on an instance: `self` is an Instance* (NULL:
// OSLO_ERR_INVALID_ARGUMENT) whose `error` string keeps the message;
// body(Instance&) runs under guarded().
template <class M, class Instance, class F>
oslo_status guard(void* self, const char* entry, F&& body) noexcept {
  if (self == nullptr) return OSLO_ERR_INVALID_ARGUMENT;
  Instance& in = *static_cast<Instance*>(self);
  return guarded<M>(&in.error, entry, [&] { body(in); });
}

// The create() entry around a constructor: a new Instance, then start(*in)
// (parsing the options, opening the device); on failure the instance is
// deleted, *self is NULL and *error points at the message (kept per thread
// until its next create()).
template <class M, class Instance, class Start>
oslo_status create_instance(void** self, const char** error, Start&& start) noexcept {
  static thread_local std::string message;
  if (self == nullptr) {
    message = std::string(M::kPrefix) + "create: self is NULL";
    if (error) *error = message.c_str();
    return OSLO_ERR_INVALID_ARGUMENT;
  }
  *self = nullptr;
  Instance* in = nullptr;
  const oslo_status status = guarded<M>(&message, "create", [&] {
    in = new Instance();
    start(*in);
  });
  if (status != OSLO_OK) {
    delete in;
    if (error) *error = message.c_str();
    return status;
  }
  *self = in;
  return OSLO_OK;
}

// -- arguments --------------------------------------------------------------------

// The int value of an enum argument, read without loading the enum type: a
// value outside the enumerators (a caller's bug, to be reported) must not be
// loaded as one.
template <class E>
int enum_value(const E& e) {
  static_assert(sizeof(E) == sizeof(int), "C enums are int-sized here");
  int v;
  std::memcpy(&v, &e, sizeof v);
  return v;
}

// The arguments of copy() and copy_async(): fails (OSLO_ERR_INVALID_ARGUMENT,
// the text after `prefix`) on an unknown kind or a NULL end of a non-empty
// copy; returns false when there is nothing to copy (bytes == 0).
inline bool check_copy(const std::string& prefix, oslo_bk_copy_kind kind_arg, const void* dst,
                       const void* src, size_t bytes) {
  const int kind = enum_value(kind_arg);
  if (kind != OSLO_BK_HOST_TO_DEVICE && kind != OSLO_BK_DEVICE_TO_HOST &&
      kind != OSLO_BK_DEVICE_TO_DEVICE)
    fail(OSLO_ERR_INVALID_ARGUMENT, prefix + "unknown kind " + std::to_string(kind));
  if (bytes == 0) return false;
  if (dst == nullptr || src == nullptr)
    fail(OSLO_ERR_INVALID_ARGUMENT,
         prefix + "NULL pointer for " + std::to_string(bytes) + " bytes");
  return true;
}

// The fields of create()'s options as far as the caller's struct_size
// reaches (a smaller struct of an older caller, or NULL: the defaults).
// extra_json is never NULL.
struct Options {
  int local_rank = 0;
  int num_threads = 0;
  const char* extra_json = "{}";
};
inline Options read_options(const oslo_backend_options* options) {
  Options o;
  if (options == nullptr) return o;
  const size_t size = options->struct_size;
  if (size >= offsetof(oslo_backend_options, local_rank) + sizeof(int))
    o.local_rank = options->local_rank;
  if (size >= offsetof(oslo_backend_options, num_threads) + sizeof(int))
    o.num_threads = options->num_threads;
  if (size >= offsetof(oslo_backend_options, extra_json) + sizeof(const char*) &&
      options->extra_json != nullptr)
    o.extra_json = options->extra_json;
  return o;
}

// The backend-specific options (extra_json) parsed as a JSON object with
// the JSON library J (J::parse and is_object(), as nlohmann::json has them;
// the glue itself needs no JSON library). OSLO_ERR_FORMAT naming `what`
// when the text is not JSON or not an object.
template <class J>
J parse_json_object(const char* text, const std::string& what) {
  J value;
  try {
    value = J::parse(text);
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& e) {
    fail(OSLO_ERR_FORMAT, what + " is not valid JSON: " + e.what());
  }
  if (!value.is_object()) fail(OSLO_ERR_FORMAT, what + " must be a JSON object");
  return value;
}

// -- dtypes -----------------------------------------------------------------------

inline const char* dtype_name(oslo_dtype dtype) {
  switch (dtype) {
    case OSLO_DTYPE_F32: return "f32";
    case OSLO_DTYPE_F16: return "f16";
    case OSLO_DTYPE_BF16: return "bf16";
    case OSLO_DTYPE_I32: return "i32";
    case OSLO_DTYPE_I64: return "i64";
    default: return "unknown dtype";
  }
}
inline bool is_float(oslo_dtype dtype) {
  return dtype == OSLO_DTYPE_F32 || dtype == OSLO_DTYPE_F16 || dtype == OSLO_DTYPE_BF16;
}
inline bool is_int(oslo_dtype dtype) {
  return dtype == OSLO_DTYPE_I32 || dtype == OSLO_DTYPE_I64;
}
// Bytes of one element; 0 for a value that is no dtype.
inline size_t dtype_size(oslo_dtype dtype) {
  switch (dtype) {
    case OSLO_DTYPE_F32:
    case OSLO_DTYPE_I32: return 4;
    case OSLO_DTYPE_F16:
    case OSLO_DTYPE_BF16: return 2;
    case OSLO_DTYPE_I64: return 8;
    default: return 0;
  }
}

// -- the table --------------------------------------------------------------------

// Every entry of the table, in slot order (oslo_backend.h pins the slots).
// clang-format off
#define OSLO_BACKEND_GLUE_ENTRIES(X)                                                       \
  X(create) X(destroy) X(last_error) X(device_type) X(device_id) X(host_accessible)       \
  X(alloc) X(free) X(copy) X(synchronize) X(set_num_threads) X(convert) X(fill) X(matmul) \
  X(binary) X(unary) X(unary_backward) X(reduce) X(sum_rows) X(softmax)                   \
  X(softmax_backward) X(norm) X(gather_rows) X(scatter_add_rows) X(gather_cols)           \
  X(scatter_add_cols) X(comm_create) X(comm_destroy) X(comm_name) X(comm_last_error)      \
  X(comm_all_reduce) X(comm_all_gather) X(comm_reduce_scatter) X(comm_broadcast)          \
  X(comm_send) X(comm_recv) X(comm_barrier) X(comm_abort) X(copy_async) X(event_create)   \
  X(event_destroy) X(event_record) X(event_wait) X(event_synchronize) X(alloc_async)      \
  X(free_async) X(device_name) X(memory_info) X(op_supported) X(native_stream)            \
  X(stream_wait_event) X(attention) X(residual_norm) X(rope) X(matmul_act) X(argmax)      \
  X(norm_backward) X(adamw) X(graph_begin) X(graph_end) X(pack_weight) X(matmul_packed)   \
  X(packed_free) X(check_memory) X(host_alloc) X(host_free) X(attention_backward)         \
  X(paged_attention) X(dequantize) X(matmul_quant) X(quantize_rows) X(dequantize_rows)   \
  X(attention_kv8) X(unpack_weight) X(paged_attention_kv8)
// clang-format on

// One entry of a backend's struct: `fn` as the table's field `entry`, a
// static member of exactly the field's type (a misspelt entry or a function
// of another signature does not compile; of overloads of `fn`, the one of
// the entry's signature is taken). The member is named oslo_bk_<entry>, so
// `fn` may have the entry's own name: OSLO_BACKEND_ENTRY(copy, copy).
#define OSLO_BACKEND_ENTRY(entry, fn) \
  static constexpr decltype(::oslo_backend_iface::entry) oslo_bk_##entry = fn

// Groups of entries, for a backend whose functions are named by convention:
// each entry's function has the entry's name (`free`'s is `free_`, the C
// library's free being in scope), with a prefix where the group takes one.
// Each group is a list X(entry, prefix, name) for the macros below.
//   REQUIRED  every entry ABI v1 requires; the prefix goes before the
//             fifteen compute entries only (convert .. scatter_add_cols)
//   COMPUTE   those fifteen compute entries
//   COMM      the twelve comm_* entries
//   V2_QUEUE  copy_async, the five event_* entries, alloc_async,
//             free_async, device_name, memory_info, op_supported,
//             native_stream, stream_wait_event
//   FUSED     attention, residual_norm, rope, matmul_act, argmax,
//             norm_backward, adamw
//   GRAPHS    graph_begin, graph_end
//   PACKED    pack_weight, matmul_packed, packed_free
//   STAGING   check_memory, host_alloc, host_free
//   TRAIN     attention_backward
//   SERVE     paged_attention
//   QUANT     dequantize, matmul_quant
//   KV8       quantize_rows, dequantize_rows
//   KV8_ATTENTION attention_kv8
//   UNPACK    unpack_weight
//   PAGED_KV8 paged_attention_kv8
// clang-format off
#define OSLO_BACKEND_GROUP_COMPUTE(X, p)                                                 \
  X(convert, p, convert) X(fill, p, fill) X(matmul, p, matmul) X(binary, p, binary)     \
  X(unary, p, unary) X(unary_backward, p, unary_backward) X(reduce, p, reduce)          \
  X(sum_rows, p, sum_rows) X(softmax, p, softmax)                                       \
  X(softmax_backward, p, softmax_backward) X(norm, p, norm) X(gather_rows, p, gather_rows) \
  X(scatter_add_rows, p, scatter_add_rows) X(gather_cols, p, gather_cols)               \
  X(scatter_add_cols, p, scatter_add_cols)
#define OSLO_BACKEND_GROUP_REQUIRED(X, p)                                                \
  X(create, , create) X(destroy, , destroy) X(last_error, , last_error)                 \
  X(device_type, , device_type) X(device_id, , device_id)                               \
  X(host_accessible, , host_accessible) X(alloc, , alloc) X(free, , free_)              \
  X(copy, , copy) X(synchronize, , synchronize) X(set_num_threads, , set_num_threads)   \
  OSLO_BACKEND_GROUP_COMPUTE(X, p)
#define OSLO_BACKEND_GROUP_COMM(X, p)                                                    \
  X(comm_create, p, comm_create) X(comm_destroy, p, comm_destroy)                       \
  X(comm_name, p, comm_name) X(comm_last_error, p, comm_last_error)                     \
  X(comm_all_reduce, p, comm_all_reduce) X(comm_all_gather, p, comm_all_gather)         \
  X(comm_reduce_scatter, p, comm_reduce_scatter) X(comm_broadcast, p, comm_broadcast)   \
  X(comm_send, p, comm_send) X(comm_recv, p, comm_recv) X(comm_barrier, p, comm_barrier) \
  X(comm_abort, p, comm_abort)
#define OSLO_BACKEND_GROUP_V2_QUEUE(X, p)                                                \
  X(copy_async, p, copy_async) X(event_create, p, event_create)                         \
  X(event_destroy, p, event_destroy) X(event_record, p, event_record)                   \
  X(event_wait, p, event_wait) X(event_synchronize, p, event_synchronize)               \
  X(alloc_async, p, alloc_async) X(free_async, p, free_async)                           \
  X(device_name, p, device_name) X(memory_info, p, memory_info)                         \
  X(op_supported, p, op_supported) X(native_stream, p, native_stream)                   \
  X(stream_wait_event, p, stream_wait_event)
#define OSLO_BACKEND_GROUP_FUSED(X, p)                                                   \
  X(attention, p, attention) X(residual_norm, p, residual_norm) X(rope, p, rope)        \
  X(matmul_act, p, matmul_act) X(argmax, p, argmax) X(norm_backward, p, norm_backward)  \
  X(adamw, p, adamw)
#define OSLO_BACKEND_GROUP_GRAPHS(X, p)                                                  \
  X(graph_begin, p, graph_begin) X(graph_end, p, graph_end)
#define OSLO_BACKEND_GROUP_PACKED(X, p)                                                  \
  X(pack_weight, p, pack_weight) X(matmul_packed, p, matmul_packed)                     \
  X(packed_free, p, packed_free)
#define OSLO_BACKEND_GROUP_STAGING(X, p)                                                 \
  X(check_memory, p, check_memory) X(host_alloc, p, host_alloc) X(host_free, p, host_free)
#define OSLO_BACKEND_GROUP_TRAIN(X, p) X(attention_backward, p, attention_backward)
#define OSLO_BACKEND_GROUP_SERVE(X, p) X(paged_attention, p, paged_attention)
#define OSLO_BACKEND_GROUP_QUANT(X, p) \
  X(dequantize, p, dequantize) X(matmul_quant, p, matmul_quant)
#define OSLO_BACKEND_GROUP_KV8(X, p) \
  X(quantize_rows, p, quantize_rows) X(dequantize_rows, p, dequantize_rows)
#define OSLO_BACKEND_GROUP_KV8_ATTENTION(X, p) X(attention_kv8, p, attention_kv8)
#define OSLO_BACKEND_GROUP_UNPACK(X, p) X(unpack_weight, p, unpack_weight)
#define OSLO_BACKEND_GROUP_PAGED_KV8(X, p) X(paged_attention_kv8, p, paged_attention_kv8)
// clang-format on

#define OSLO_BACKEND_ENTRY_FROM_(entry, p, name) OSLO_BACKEND_ENTRY(entry, p##name);
#define OSLO_BACKEND_DECLARE_AS_(entry, p, name) \
  ::std::remove_pointer_t<decltype(::oslo_backend_iface::entry)> p##name;

// In a backend's struct: every entry of `group` (above) from the functions
// named by convention with prefix p (which may be empty), as
// OSLO_BACKEND_ENTRY each. No semicolon after it:
//   OSLO_BACKEND_ENTRIES(REQUIRED, op_)   // create .. , op_convert ..
#define OSLO_BACKEND_ENTRIES(group, p) OSLO_BACKEND_GROUP_##group(OSLO_BACKEND_ENTRY_FROM_, p)
// At namespace scope: declares the functions OSLO_BACKEND_ENTRIES(group, p)
// takes, each with its entry's signature (oslo_backend.h documents them).
// No semicolon after it.
#define OSLO_BACKEND_DECLARE(group, p) OSLO_BACKEND_GROUP_##group(OSLO_BACKEND_DECLARE_AS_, p)

namespace detail {
// has_<entry><B>: B declares the entry (OSLO_BACKEND_ENTRY).
#define OSLO_BACKEND_GLUE_HAS_(entry)      \
  template <class B, class = void>         \
  struct has_##entry : std::false_type {}; \
  template <class B>                       \
  struct has_##entry<B, std::void_t<decltype(&B::oslo_bk_##entry)>> : std::true_type {};
OSLO_BACKEND_GLUE_ENTRIES(OSLO_BACKEND_GLUE_HAS_)
#undef OSLO_BACKEND_GLUE_HAS_

template <bool... B>
constexpr bool all_or_none() {
  return ((B && ...) || (!B && ...));
}
}  // namespace detail

// The table of backend B (a struct with `static constexpr const char* name`
// and its entries, each declared with OSLO_BACKEND_ENTRY): every entry B
// has, the others NULL, struct_size and abi_version of this header's ABI.
template <class B>
oslo_backend_iface make_table() {
  using namespace detail;
#define OSLO_BACKEND_GLUE_REQUIRED_(entry)                                          \
  static_assert(has_##entry<B>::value, "backend table: the required entry '" #entry \
                                       "' is "                                      \
                                       "missing");
  OSLO_BACKEND_GLUE_REQUIRED_(create)
  OSLO_BACKEND_GLUE_REQUIRED_(destroy)
  OSLO_BACKEND_GLUE_REQUIRED_(last_error)
  OSLO_BACKEND_GLUE_REQUIRED_(device_type)
  OSLO_BACKEND_GLUE_REQUIRED_(device_id)
  OSLO_BACKEND_GLUE_REQUIRED_(host_accessible)
  OSLO_BACKEND_GLUE_REQUIRED_(alloc)
  OSLO_BACKEND_GLUE_REQUIRED_(free)
  OSLO_BACKEND_GLUE_REQUIRED_(copy)
  OSLO_BACKEND_GLUE_REQUIRED_(synchronize)
  OSLO_BACKEND_GLUE_REQUIRED_(set_num_threads)
  OSLO_BACKEND_GLUE_REQUIRED_(convert)
  OSLO_BACKEND_GLUE_REQUIRED_(fill)
  OSLO_BACKEND_GLUE_REQUIRED_(matmul)
  OSLO_BACKEND_GLUE_REQUIRED_(binary)
  OSLO_BACKEND_GLUE_REQUIRED_(unary)
  OSLO_BACKEND_GLUE_REQUIRED_(unary_backward)
  OSLO_BACKEND_GLUE_REQUIRED_(reduce)
  OSLO_BACKEND_GLUE_REQUIRED_(sum_rows)
  OSLO_BACKEND_GLUE_REQUIRED_(softmax)
  OSLO_BACKEND_GLUE_REQUIRED_(softmax_backward)
  OSLO_BACKEND_GLUE_REQUIRED_(norm)
  OSLO_BACKEND_GLUE_REQUIRED_(gather_rows)
  OSLO_BACKEND_GLUE_REQUIRED_(scatter_add_rows)
  OSLO_BACKEND_GLUE_REQUIRED_(gather_cols)
  OSLO_BACKEND_GLUE_REQUIRED_(scatter_add_cols)
#undef OSLO_BACKEND_GLUE_REQUIRED_
  static_assert(
      all_or_none<has_comm_create<B>::value, has_comm_destroy<B>::value, has_comm_name<B>::value,
                  has_comm_last_error<B>::value, has_comm_all_reduce<B>::value,
                  has_comm_all_gather<B>::value, has_comm_reduce_scatter<B>::value,
                  has_comm_broadcast<B>::value, has_comm_send<B>::value, has_comm_recv<B>::value,
                  has_comm_barrier<B>::value, has_comm_abort<B>::value>(),
      "backend table: the comm_* entries come all or none");
  static_assert(all_or_none<has_event_create<B>::value, has_event_destroy<B>::value,
                            has_event_record<B>::value, has_event_wait<B>::value,
                            has_event_synchronize<B>::value>(),
                "backend table: the five event_* entries come all or none");
  static_assert(!has_stream_wait_event<B>::value || has_event_create<B>::value,
                "backend table: stream_wait_event needs the event_* entries");
  static_assert(all_or_none<has_alloc_async<B>::value, has_free_async<B>::value>(),
                "backend table: alloc_async and free_async come together");
  static_assert(all_or_none<has_graph_begin<B>::value, has_graph_end<B>::value>(),
                "backend table: graph_begin and graph_end come together");
  static_assert(all_or_none<has_pack_weight<B>::value, has_matmul_packed<B>::value,
                            has_packed_free<B>::value>(),
                "backend table: pack_weight, matmul_packed and packed_free come together");
  static_assert(!has_unpack_weight<B>::value || has_pack_weight<B>::value,
                "backend table: unpack_weight needs the packed entries (pack_weight, ...)");
  static_assert(all_or_none<has_host_alloc<B>::value, has_host_free<B>::value>(),
                "backend table: host_alloc and host_free come together");
  static_assert(all_or_none<has_quantize_rows<B>::value, has_dequantize_rows<B>::value>(),
                "backend table: quantize_rows and dequantize_rows come together");
  oslo_backend_iface t;
  std::memset(&t, 0, sizeof t);
  t.struct_size = sizeof t;
  t.abi_version = OSLO_BACKEND_ABI_VERSION;
  t.name = B::name;
#define OSLO_BACKEND_GLUE_SET_(entry) \
  if constexpr (has_##entry<B>::value) t.entry = B::oslo_bk_##entry;
  OSLO_BACKEND_GLUE_ENTRIES(OSLO_BACKEND_GLUE_SET_)
#undef OSLO_BACKEND_GLUE_SET_
  return t;
}

// Exactly the bytes of an ABI v1 table (OSLO_BACKEND_IFACE_V1_SIZE: what a
// v1 liboslo reads), made from a newer one: abi_version 1, struct_size v1's.
struct V1Table {
  alignas(oslo_backend_iface) unsigned char bytes[OSLO_BACKEND_IFACE_V1_SIZE];
  const oslo_backend_iface* table() const {
    return reinterpret_cast<const oslo_backend_iface*>(bytes);
  }
};
inline V1Table make_v1_table(oslo_backend_iface t) {
  t.abi_version = 1;
  t.struct_size = OSLO_BACKEND_IFACE_V1_SIZE;
  V1Table v;
  std::memcpy(v.bytes, &t, sizeof v.bytes);
  return v;
}

}  // namespace oslo_backend_glue

// Defines the plugin's exported entry points from a function returning its
// table (`oslo_backend_iface table_fn()`, called once per symbol):
// oslo_backend_plugin_v2 and, for a liboslo of backend ABI v1,
// oslo_backend_plugin_v1 with the v1 copy. Use once, at namespace scope of
// one source file of the plugin (the counterpart of ggml's
// GGML_BACKEND_DL_IMPL). The _V2 and _V1 halves define one symbol each.
#define OSLO_BACKEND_DL_IMPL_V2(table_fn)                                     \
  extern "C" __attribute__((visibility("default"))) const oslo_backend_iface* \
  oslo_backend_plugin_v2(void) {                                              \
    static const oslo_backend_iface oslo_glue_table_ = table_fn();            \
    return &oslo_glue_table_;                                                 \
  }
#define OSLO_BACKEND_DL_IMPL_V1(table_fn)                                     \
  extern "C" __attribute__((visibility("default"))) const oslo_backend_iface* \
  oslo_backend_plugin_v1(void) {                                              \
    static const ::oslo_backend_glue::V1Table oslo_glue_v1_ =                 \
        ::oslo_backend_glue::make_v1_table(table_fn());                       \
    return oslo_glue_v1_.table();                                             \
  }
#define OSLO_BACKEND_DL_IMPL(table_fn) \
  OSLO_BACKEND_DL_IMPL_V2(table_fn)    \
  OSLO_BACKEND_DL_IMPL_V1(table_fn)

// The plugin of backend struct B (see make_table): its table, exported.
#define OSLO_BACKEND_PLUGIN(B) OSLO_BACKEND_DL_IMPL(::oslo_backend_glue::make_table<B>)
