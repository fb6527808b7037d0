#include <dlfcn.h>

#include <cctype>

#include "core/backend/backend.hpp"
#include "core/common/error.hpp"

namespace oslo {

// Signature a backend plugin exports (C linkage, so any C++ compiler's plugin
// can be found by name). It returns a Backend* allocated with new, or NULL
// and a message in *error (static storage).
using PluginCreateFn = Backend* (*)(const BackendOptions* options, const char** error);

// Longest backend name: it becomes part of a library file name.
constexpr size_t kMaxBackendName = 64;

std::unique_ptr<Backend> create_backend(const std::string& name, const BackendOptions& options) {
  if (name == "cpu") return create_cpu_backend(options);
  // Checked before dlopen: glibc builds the library path on the stack, so a
  // long name would overflow it (rank threads may have small stacks).
  OSLO_CHECK(!name.empty() && name.size() <= kMaxBackendName, OSLO_ERR_CONFIG,
             "config: \"backend\" ", quote(name), " is not a backend name (1 to ", kMaxBackendName,
             " characters, got ", name.size(), ")");
  for (char ch : name)
    OSLO_CHECK(std::isalnum(static_cast<unsigned char>(ch)) || ch == '_', OSLO_ERR_CONFIG,
               "config: \"backend\" ", quote(name),
               " is not a backend name (letters, digits and '_' only)");
  std::string lib = "liboslo_backend_" + name + ".so";
  void* handle = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle)
    fail(OSLO_ERR_BACKEND_UNAVAILABLE, "backend '", name,
         "' is not available (built in: cpu): ", dlerror());
  auto create = reinterpret_cast<PluginCreateFn>(dlsym(handle, "oslo_backend_plugin_create_v1"));
  if (!create) {
    dlclose(handle);
    fail(OSLO_ERR_BACKEND_UNAVAILABLE, "backend plugin ", lib,
         " does not export oslo_backend_plugin_create_v1");
  }
  const char* err = nullptr;
  Backend* b = create(&options, &err);
  if (!b)
    fail(OSLO_ERR_BACKEND_UNAVAILABLE, "backend '", name,
         "' failed to start: ", err ? err : "unknown reason");
  // The plugin stays loaded for the life of the process: its code may still
  // run from destructors of objects it created.
  return std::unique_ptr<Backend>(b);
}

}  // namespace oslo
