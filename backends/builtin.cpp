// The backends linked into liboslo (others load as plugins, see
// core/backend/registry.cpp).
#include "core/backend/backend.hpp"

namespace oslo {

std::unique_ptr<Backend> create_cpu_backend(const BackendOptions& options);

namespace {
const BuiltinBackend kBuiltin[] = {
    {"cpu", create_cpu_backend},
    {nullptr, nullptr},
};
}  // namespace

const BuiltinBackend* builtin_backends() {
  return kBuiltin;
}

}  // namespace oslo
