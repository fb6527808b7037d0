// C shims: context.
#include "core/capi/handles.hpp"

using oslo::capi::guard;
using oslo::capi::need;

namespace {
void check_group(oslo_group g, const char* fn) {
  if (g < OSLO_GROUP_WORLD || g > OSLO_GROUP_DATA)
    oslo::fail(OSLO_ERR_INVALID_ARGUMENT, fn, ": unknown group ", static_cast<int>(g));
}
}  // namespace

extern "C" {

oslo_status oslo_context_create(const char* config, oslo_context** out) {
  if (out) *out = nullptr;
  return guard([&] {
    need(out, "oslo_context_create", "out");
    oslo::Config c = oslo::Config::parse(config);
    auto h = std::make_unique<oslo_context>();
    h->impl = std::make_unique<oslo::Context>(c);
    *out = h.release();
  });
}

void oslo_context_destroy(oslo_context* ctx) {
  if (!ctx) return;
  try {
    delete ctx;
  } catch (...) {
    // Destructors do not throw; nothing may escape regardless.
  }
}

oslo_status oslo_context_abort(oslo_context* ctx) {
  return guard([&] {
    need(ctx, "oslo_context_abort", "ctx");
    ctx->impl->abort();
  });
}

oslo_status oslo_context_rank(const oslo_context* ctx, oslo_group group, int* rank) {
  return guard([&] {
    need(ctx, "oslo_context_rank", "ctx");
    check_group(group, "oslo_context_rank");
    need(rank, "oslo_context_rank", "rank");
    *rank = ctx->impl->topology().rank(group);
  });
}

oslo_status oslo_context_size(const oslo_context* ctx, oslo_group group, int* size) {
  return guard([&] {
    need(ctx, "oslo_context_size", "ctx");
    check_group(group, "oslo_context_size");
    need(size, "oslo_context_size", "size");
    *size = ctx->impl->topology().size(group);
  });
}

oslo_status oslo_context_backend(const oslo_context* ctx, oslo_group group, const char** backend,
                                 const char** transport) {
  return guard([&] {
    need(ctx, "oslo_context_backend", "ctx");
    check_group(group, "oslo_context_backend");
    need(backend, "oslo_context_backend", "backend");
    *backend = ctx->impl->backend().name();
    if (transport) *transport = ctx->impl->transport_name(group);
  });
}

}  // extern "C"
