// C shims: parameter sets, gradient clipping, checkpoints.
#include "core/capi/handles.hpp"

using oslo::capi::guard;
using oslo::capi::need;
using oslo::capi::tensor_of;

extern "C" {

oslo_status oslo_param_set_create(oslo_param_set** out, oslo_context* ctx) {
  if (out) *out = nullptr;
  return guard([&] {
    need(out, "oslo_param_set_create", "out");
    need(ctx, "oslo_param_set_create", "ctx");
    auto h = std::make_unique<oslo_param_set>();
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

oslo_status oslo_param_set_count(size_t* count, const oslo_param_set* set) {
  return guard([&] {
    need(count, "oslo_param_set_count", "count");
    need(set, "oslo_param_set_count", "set");
    *count = set->impl->size();
  });
}

oslo_status oslo_clip_grad_norm(double* total_norm, oslo_param_set* set, double max_norm,
                                double norm_type) {
  return guard([&] {
    need(set, "oslo_clip_grad_norm", "set");
    double n = set->impl->clip_grad_norm(max_norm, norm_type);
    if (total_norm) *total_norm = n;
  });
}

oslo_status oslo_checkpoint_save(oslo_param_set* set, const char* dir) {
  return guard([&] {
    need(set, "oslo_checkpoint_save", "set");
    need(dir, "oslo_checkpoint_save", "dir");
    set->impl->save(dir);
  });
}

oslo_status oslo_checkpoint_load(oslo_param_set* set, const char* dir) {
  return guard([&] {
    need(set, "oslo_checkpoint_load", "set");
    need(dir, "oslo_checkpoint_load", "dir");
    set->impl->load(dir);
  });
}

}  // extern "C"
