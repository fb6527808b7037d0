// Test plugins for the backend loader (core/backend/registry.cpp), built as
// their own shared libraries and loaded by liboslo at run time:
//  - OSLO_PLUGIN_KIND_GOOD: the CPU backend's code compiled into a plugin
//    named "cpu_plugin" (so the whole conformance suite runs through dlopen);
//  - OSLO_PLUGIN_KIND_BAD_VERSION: a table claiming backend ABI v99;
//  - OSLO_PLUGIN_KIND_MISSING_ENTRY: a table without `matmul`;
//  - OSLO_PLUGIN_KIND_CREATE_FAILS: create() refuses with a message.
#include <cstring>

#include "core/backend/oslo_backend.h"

namespace oslo {
const oslo_backend_iface* cpu_backend_table();
}

namespace {

#if OSLO_PLUGIN_KIND == 3
oslo_status refuse(void**, const oslo_backend_options*, const char** error) {
  *error = "this test plugin always refuses to start";
  return OSLO_ERR_BACKEND_UNAVAILABLE;
}
#endif

oslo_backend_iface make() {
  oslo_backend_iface t = *oslo::cpu_backend_table();
  t.name = "cpu_plugin";
#if OSLO_PLUGIN_KIND == 1
  t.abi_version = 99;
#elif OSLO_PLUGIN_KIND == 2
  t.matmul = nullptr;
#elif OSLO_PLUGIN_KIND == 3
  t.create = refuse;
#endif
  return t;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) const oslo_backend_iface*
oslo_backend_plugin_v1() {
  static const oslo_backend_iface table = make();
  return &table;
}
