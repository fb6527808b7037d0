// Test plugins for the backend loader (core/backend/registry.cpp), built as
// their own shared libraries and loaded by liboslo at run time:
//  - OSLO_PLUGIN_KIND_GOOD: the CPU backend's code compiled into a plugin
//    named "cpu_plugin" (so the whole conformance suite runs through dlopen);
//  - OSLO_PLUGIN_KIND_BAD_VERSION: a table claiming backend ABI v99;
//  - OSLO_PLUGIN_KIND_MISSING_ENTRY: a table without `matmul`;
//  - OSLO_PLUGIN_KIND_CREATE_FAILS: create() refuses with a message;
//  - 4, "cpu_v1": the CPU backend as a backend ABI v1 plugin would hand it
//    over: abi_version 1, a table of exactly OSLO_BACKEND_IFACE_V1_SIZE bytes
//    (no v2 entry exists, so reading one would read past the table), exported
//    only as oslo_backend_plugin_v1; the core must fall back for every v2
//    entry (the conformance cases run on it);
//  - 5: an ABI v2 table with event_create but without event_wait;
//  - 6: a table claiming ABI v2 with a v1-sized struct.
// Every kind but 4 exports oslo_backend_plugin_v2.
#include "backends/common/oslo_backend_glue.hpp"

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
#elif OSLO_PLUGIN_KIND == 4
  t.name = "cpu_v1";
  t.abi_version = 1;
  t.struct_size = OSLO_BACKEND_IFACE_V1_SIZE;
#elif OSLO_PLUGIN_KIND == 5
  t.name = "half_events";
  t.event_wait = nullptr;
#elif OSLO_PLUGIN_KIND == 6
  t.name = "short_v2";
  t.struct_size = OSLO_BACKEND_IFACE_V1_SIZE;
#endif
  return t;
}

}  // namespace

#if OSLO_PLUGIN_KIND == 4
// Exactly the bytes of a v1 table, as a plugin built against ABI v1 has them.
OSLO_BACKEND_DL_IMPL_V1(make)
#else
OSLO_BACKEND_DL_IMPL_V2(make)
#endif
