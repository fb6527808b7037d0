// The backends linked into liboslo (others load as plugins, see
// core/backend/registry.cpp). Each provides the same C table a plugin does.
#include "core/backend/backend.hpp"

namespace oslo {

const oslo_backend_iface* cpu_backend_table();

namespace {
const BuiltinBackend kBuiltin[] = {
    {"cpu", cpu_backend_table},
    {nullptr, nullptr},
};
}  // namespace

const BuiltinBackend* builtin_backends() {
  return kBuiltin;
}

}  // namespace oslo
