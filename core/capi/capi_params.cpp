// C shims: parameter sets, gradient clipping, checkpoints.
#include "core/capi/handles.hpp"

using oslo::capi::guard;
using oslo::capi::need;
using oslo::capi::tensor_of;

extern "C" {

oslo_status oslo_param_set_create(oslo_context* ctx, oslo_param_set** out) {
  if (out) *out = nullptr;
  return guard([&] {
    need(out, "oslo_param_set_create", "out");
    need(ctx, "oslo_param_set_create", "ctx");
    auto h = std::make_unique<oslo_param_set>();
    h->ctx = ctx->impl;
    h->impl = std::make_unique<oslo::ParamSet>(*ctx->impl);
    *out = h.release();
  });
}

void oslo_param_set_destroy(oslo_param_set* set) {
  delete set;
}

oslo_status oslo_param_set_add(oslo_param_set* set, const char* name, oslo_tensor* tensor,
                               oslo_tensor* grad, int split_dim) {
  return guard([&] {
    need(set, "oslo_param_set_add", "set");
    need(name, "oslo_param_set_add", "name");
    set->impl->add(name, tensor_of(tensor, "oslo_param_set_add", "tensor"),
                   grad ? &grad->t : nullptr, split_dim);
  });
}

oslo_status oslo_param_set_add_linear(oslo_param_set* set, const char* prefix,
                                      oslo_parallel_linear* layer) {
  return guard([&] {
    need(set, "oslo_param_set_add_linear", "set");
    need(prefix, "oslo_param_set_add_linear", "prefix");
    need(layer, "oslo_param_set_add_linear", "layer");
    set->impl->add_linear(prefix, *layer->impl);
  });
}

oslo_status oslo_param_set_add_embedding(oslo_param_set* set, const char* prefix,
                                         oslo_parallel_embedding* emb) {
  return guard([&] {
    need(set, "oslo_param_set_add_embedding", "set");
    need(prefix, "oslo_param_set_add_embedding", "prefix");
    need(emb, "oslo_param_set_add_embedding", "emb");
    set->impl->add_embedding(prefix, *emb->impl);
  });
}

oslo_status oslo_param_set_count(const oslo_param_set* set, size_t* count) {
  return guard([&] {
    need(set, "oslo_param_set_count", "set");
    need(count, "oslo_param_set_count", "count");
    *count = set->impl->size();
  });
}

oslo_status oslo_param_set_clip_grad_norm(oslo_param_set* set, double max_norm, double norm_type,
                                          double* total_norm) {
  return guard([&] {
    need(set, "oslo_param_set_clip_grad_norm", "set");
    double n = set->impl->clip_grad_norm(max_norm, norm_type);
    if (total_norm) *total_norm = n;
  });
}

oslo_status oslo_param_set_save_checkpoint(oslo_param_set* set, const char* dir) {
  return guard([&] {
    need(set, "oslo_param_set_save_checkpoint", "set");
    need(dir, "oslo_param_set_save_checkpoint", "dir");
    set->impl->save(dir);
  });
}

oslo_status oslo_param_set_load_checkpoint(oslo_param_set* set, const char* dir) {
  return guard([&] {
    need(set, "oslo_param_set_load_checkpoint", "set");
    need(dir, "oslo_param_set_load_checkpoint", "dir");
    set->impl->load(dir);
  });
}

}  // extern "C"
