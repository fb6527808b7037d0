// Finding a backend: the built-in table first, then a plugin shared library.
#include <dlfcn.h>

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/backend/backend.hpp"
#include "core/backend/hints.hpp"
#include "core/common/error.hpp"
#include "core/common/own_dir.hpp"

namespace oslo {
namespace {

// Candidate paths for the plugin, in order: each folder of OSLO_BACKEND_PATH,
// liboslo's own folder, then the bare name for the loader's search path.
std::vector<std::string> plugin_candidates(const std::string& file) {
  std::vector<std::string> out;
  if (const char* p = std::getenv("OSLO_BACKEND_PATH"); p && *p) {
    std::string s = p;
    size_t start = 0;
    while (start <= s.size()) {
      size_t colon = s.find(':', start);
      std::string dir =
          s.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
      if (!dir.empty()) out.push_back(dir + "/" + file);
      if (colon == std::string::npos) break;
      start = colon + 1;
    }
  }
  std::string own = own_directory();
  if (!own.empty()) out.push_back(own + "/" + file);
  out.push_back(file);
  return out;
}

}  // namespace

oslo_backend_iface validate_backend_table(const oslo_backend_iface* table,
                                          const std::string& from) {
  OSLO_CHECK(table, OSLO_ERR_BACKEND_UNAVAILABLE, from, " returned no backend table");
  OSLO_CHECK(table->abi_version >= OSLO_BACKEND_ABI_VERSION_MIN &&
                 table->abi_version <= OSLO_BACKEND_ABI_VERSION,
             OSLO_ERR_BACKEND_UNAVAILABLE, from, " implements backend ABI v", table->abi_version,
             " but this liboslo loads v", OSLO_BACKEND_ABI_VERSION_MIN, " to v",
             OSLO_BACKEND_ABI_VERSION, " (rebuild the backend against this oslo)");
  OSLO_CHECK(
      table->struct_size >= OSLO_BACKEND_IFACE_V1_SIZE && table->struct_size <= (size_t(1) << 16),
      OSLO_ERR_BACKEND_UNAVAILABLE, from, " has a backend table of ", table->struct_size,
      " bytes, not the ", OSLO_BACKEND_IFACE_V1_SIZE, " or more of ABI v1's entries");
  OSLO_CHECK(table->abi_version < 2 || table->struct_size >= OSLO_BACKEND_IFACE_V2_SIZE,
             OSLO_ERR_BACKEND_UNAVAILABLE, from, " claims backend ABI v2 with a table of ",
             table->struct_size, " bytes, fewer than v2's ", OSLO_BACKEND_IFACE_V2_SIZE);
  oslo_backend_iface t;
  std::memset(&t, 0, sizeof t);
  std::memcpy(&t, table, std::min(sizeof t, table->struct_size));
  struct Required {
    const char* name;
    const void* fn;
  };
  const Required required[] = {
      {"name", t.name},
      {"create", reinterpret_cast<const void*>(t.create)},
      {"destroy", reinterpret_cast<const void*>(t.destroy)},
      {"last_error", reinterpret_cast<const void*>(t.last_error)},
      {"device_type", reinterpret_cast<const void*>(t.device_type)},
      {"device_id", reinterpret_cast<const void*>(t.device_id)},
      {"host_accessible", reinterpret_cast<const void*>(t.host_accessible)},
      {"alloc", reinterpret_cast<const void*>(t.alloc)},
      {"free", reinterpret_cast<const void*>(t.free)},
      {"copy", reinterpret_cast<const void*>(t.copy)},
      {"synchronize", reinterpret_cast<const void*>(t.synchronize)},
      {"set_num_threads", reinterpret_cast<const void*>(t.set_num_threads)},
      {"convert", reinterpret_cast<const void*>(t.convert)},
      {"fill", reinterpret_cast<const void*>(t.fill)},
      {"matmul", reinterpret_cast<const void*>(t.matmul)},
      {"binary", reinterpret_cast<const void*>(t.binary)},
      {"unary", reinterpret_cast<const void*>(t.unary)},
      {"unary_backward", reinterpret_cast<const void*>(t.unary_backward)},
      {"reduce", reinterpret_cast<const void*>(t.reduce)},
      {"sum_rows", reinterpret_cast<const void*>(t.sum_rows)},
      {"softmax", reinterpret_cast<const void*>(t.softmax)},
      {"softmax_backward", reinterpret_cast<const void*>(t.softmax_backward)},
      {"norm", reinterpret_cast<const void*>(t.norm)},
      {"gather_rows", reinterpret_cast<const void*>(t.gather_rows)},
      {"scatter_add_rows", reinterpret_cast<const void*>(t.scatter_add_rows)},
      {"gather_cols", reinterpret_cast<const void*>(t.gather_cols)},
      {"scatter_add_cols", reinterpret_cast<const void*>(t.scatter_add_cols)},
  };
  for (const Required& r : required)
    OSLO_CHECK(r.fn, OSLO_ERR_BACKEND_UNAVAILABLE, from, " lacks the required entry '", r.name,
               "'");
  if (t.comm_create) {
    const Required comm[] = {
        {"comm_destroy", reinterpret_cast<const void*>(t.comm_destroy)},
        {"comm_name", reinterpret_cast<const void*>(t.comm_name)},
        {"comm_last_error", reinterpret_cast<const void*>(t.comm_last_error)},
        {"comm_all_reduce", reinterpret_cast<const void*>(t.comm_all_reduce)},
        {"comm_all_gather", reinterpret_cast<const void*>(t.comm_all_gather)},
        {"comm_reduce_scatter", reinterpret_cast<const void*>(t.comm_reduce_scatter)},
        {"comm_broadcast", reinterpret_cast<const void*>(t.comm_broadcast)},
        {"comm_send", reinterpret_cast<const void*>(t.comm_send)},
        {"comm_recv", reinterpret_cast<const void*>(t.comm_recv)},
        {"comm_barrier", reinterpret_cast<const void*>(t.comm_barrier)},
        {"comm_abort", reinterpret_cast<const void*>(t.comm_abort)},
    };
    for (const Required& r : comm)
      OSLO_CHECK(r.fn, OSLO_ERR_BACKEND_UNAVAILABLE, from, " provides comm_create but lacks '",
                 r.name, "'");
  }
  if (t.event_create) {
    const Required events[] = {
        {"event_destroy", reinterpret_cast<const void*>(t.event_destroy)},
        {"event_record", reinterpret_cast<const void*>(t.event_record)},
        {"event_wait", reinterpret_cast<const void*>(t.event_wait)},
        {"event_synchronize", reinterpret_cast<const void*>(t.event_synchronize)},
    };
    for (const Required& r : events)
      OSLO_CHECK(r.fn, OSLO_ERR_BACKEND_UNAVAILABLE, from, " provides event_create but lacks '",
                 r.name, "'");
  }
  OSLO_CHECK(!t.stream_wait_event || t.event_create, OSLO_ERR_BACKEND_UNAVAILABLE, from,
             " provides stream_wait_event but no events (event_create)");
  OSLO_CHECK(!t.free_async == !t.alloc_async, OSLO_ERR_BACKEND_UNAVAILABLE, from,
             " provides only one of alloc_async and free_async");
  OSLO_CHECK(!t.pack_weight == !t.matmul_packed && !t.pack_weight == !t.packed_free,
             OSLO_ERR_BACKEND_UNAVAILABLE, from,
             " provides only some of pack_weight, matmul_packed and packed_free");
  OSLO_CHECK(!t.unpack_weight || t.pack_weight, OSLO_ERR_BACKEND_UNAVAILABLE, from,
             " provides unpack_weight but no packed copies (pack_weight)");
  return t;
}

std::shared_ptr<Backend> create_backend(const std::string& name, const BackendOptions& options) {
  const oslo_backend_iface* table = nullptr;
  std::string from;
  for (const BuiltinBackend* b = builtin_backends(); b->name; ++b)
    if (name == b->name) {
      table = b->table();
      from = "built-in backend '" + name + "'";
    }
  if (!table) {
    // The name becomes part of a file name: keep it short and plain (glibc
    // builds dlopen's path on the stack, so a huge name would crash a thread
    // with a small stack).
    OSLO_CHECK(!name.empty() && name.size() <= 64, OSLO_ERR_CONFIG, "config: \"backend\" ",
               quote(name), " is not a backend name (1 to 64 characters, got ", name.size(), ")");
    for (char ch : name)
      OSLO_CHECK(std::isalnum(static_cast<unsigned char>(ch)) || ch == '_', OSLO_ERR_CONFIG,
                 "config: \"backend\" ", quote(name),
                 " is not a backend name (letters, digits and '_' only)");
    std::string file = "liboslo_backend_" + name + ".so";
    std::string errors;
    void* handle = nullptr;
    for (const std::string& path : plugin_candidates(file)) {
      handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (handle) {
        from = "backend plugin " + path;
        break;
      }
      const char* e = dlerror();
      if (e && errors.size() < 2000) errors += str("\n  ", e);
    }
    if (!handle) {
      // What the build says about getting this plugin (core names none).
      std::string builtin, hint;
      for (const BuiltinBackend* b = builtin_backends(); b->name; ++b)
        builtin += std::string(builtin.empty() ? "" : ", ") + b->name;
      for (const BackendHint* h = backend_hints(); h->name; ++h)
        if (name == h->name) hint = std::string(" (") + h->hint + ")";
      fail(OSLO_ERR_BACKEND_UNAVAILABLE, "backend '", name,
           "' is not available (built in: ", builtin, "; no loadable ", file, hint, "):", errors);
    }
    // The plugin stays loaded for the life of the process: its code may still
    // run from destructors of objects it created (DLPack exports).
    // The v2 symbol first, then v1's; the table says which ABI it is.
    auto entry =
        reinterpret_cast<oslo_backend_plugin_fn>(dlsym(handle, OSLO_BACKEND_PLUGIN_SYMBOL));
    if (!entry)
      entry =
          reinterpret_cast<oslo_backend_plugin_fn>(dlsym(handle, OSLO_BACKEND_PLUGIN_SYMBOL_V1));
    OSLO_CHECK(entry, OSLO_ERR_BACKEND_UNAVAILABLE, from, " exports neither ",
               OSLO_BACKEND_PLUGIN_SYMBOL, " nor ", OSLO_BACKEND_PLUGIN_SYMBOL_V1);
    table = entry();
  }
  oslo_backend_iface t = validate_backend_table(table, from);
  oslo_backend_options o{};
  o.struct_size = sizeof o;
  o.local_rank = options.local_rank;
  o.num_threads = options.num_threads;
  o.extra_json = options.extra_json.c_str();
  void* self = nullptr;
  const char* err = nullptr;
  oslo_status st = t.create(&self, &o, &err);
  OSLO_CHECK(st == OSLO_OK && self, st == OSLO_OK ? OSLO_ERR_BACKEND_UNAVAILABLE : st, "backend '",
             name, "' failed to start: ", err && *err ? err : "unknown reason");
  return std::make_shared<Backend>(t, self);
}

}  // namespace oslo
