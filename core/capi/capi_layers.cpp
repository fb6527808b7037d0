// C shims: parallel linear, embedding, cross-entropy.
#include <cstring>

#include "core/capi/handles.hpp"
#include "core/capi/options.hpp"

using oslo::capi::guard;
using oslo::capi::need;
using oslo::capi::tensor_of;

namespace {

oslo_tensor view(const oslo::Tensor& t, oslo_context* ctx) {
  oslo_tensor v;
  v.t = t;
  v.ctx = ctx;
  return v;
}

const oslo::Tensor* opt_tensor(const oslo_tensor* t) {
  return t ? &t->t : nullptr;
}

// The options structs (core/capi/options.hpp): history, defaults, _init.
OSLO_OPTIONS(
    kLinearOptions, oslo_parallel_linear_options, OSLO_PARALLEL_LINEAR_OPTIONS_VERSION,
    [](oslo_parallel_linear_options& o) {
      o.kind = OSLO_LINEAR_COLUMN;
      o.bias = 1;
      o.input_is_parallel = 1;
      o.dtype = OSLO_DTYPE_F32;
    },
    OSLO_OPTIONS_END(oslo_parallel_linear_options, dtype));

OSLO_OPTIONS(
    kEmbeddingOptions, oslo_parallel_embedding_options, OSLO_PARALLEL_EMBEDDING_OPTIONS_VERSION,
    [](oslo_parallel_embedding_options& o) { o.dtype = OSLO_DTYPE_F32; },
    OSLO_OPTIONS_END(oslo_parallel_embedding_options, dtype));

OSLO_OPTIONS(
    kCrossEntropyOptions, oslo_vocab_parallel_cross_entropy_options,
    OSLO_VOCAB_PARALLEL_CROSS_ENTROPY_OPTIONS_VERSION,
    [](oslo_vocab_parallel_cross_entropy_options& o) { o.ignore_index = -100; },
    OSLO_OPTIONS_END(oslo_vocab_parallel_cross_entropy_options, ignore_index));

}  // namespace

extern "C" {

oslo_status oslo_parallel_linear_options_init(oslo_parallel_linear_options* options,
                                              unsigned int version) {
  return kLinearOptions.init(options, version);
}

oslo_status oslo_parallel_linear_create(oslo_context* ctx,
                                        const oslo_parallel_linear_options* options,
                                        oslo_parallel_linear** out) {
  if (out) *out = nullptr;
  return guard([&] {
    const char* fn = "oslo_parallel_linear_create";
    need(out, fn, "out");
    need(ctx, fn, "ctx");
    oslo_parallel_linear_options o = kLinearOptions.read(options, fn, "options");
    auto h = std::make_unique<oslo_parallel_linear>();
    h->ctx = ctx->impl;
    h->impl = std::make_unique<oslo::ParallelLinear>(*ctx->impl, o);
    h->weight = view(h->impl->weight, ctx);
    h->grad_weight = view(h->impl->grad_weight, ctx);
    h->bias = view(h->impl->bias, ctx);
    h->grad_bias = view(h->impl->grad_bias, ctx);
    *out = h.release();
  });
}

void oslo_parallel_linear_destroy(oslo_parallel_linear* layer) {
  delete layer;
}

oslo_status oslo_parallel_linear_load_full(oslo_parallel_linear* layer, const oslo_tensor* weight,
                                           const oslo_tensor* bias) {
  return guard([&] {
    need(layer, "oslo_parallel_linear_load_full", "layer");
    layer->impl->load_full(tensor_of(weight, "oslo_parallel_linear_load_full", "weight"),
                           opt_tensor(bias));
  });
}

oslo_status oslo_parallel_linear_load_shard(oslo_parallel_linear* layer, const oslo_tensor* weight,
                                            const oslo_tensor* bias) {
  return guard([&] {
    need(layer, "oslo_parallel_linear_load_shard", "layer");
    layer->impl->load_shard(tensor_of(weight, "oslo_parallel_linear_load_shard", "weight"),
                            opt_tensor(bias));
  });
}

oslo_status oslo_parallel_linear_params(const oslo_parallel_linear* layer, oslo_tensor** weight,
                                        oslo_tensor** bias, oslo_tensor** grad_weight,
                                        oslo_tensor** grad_bias) {
  return guard([&] {
    need(layer, "oslo_parallel_linear_params", "layer");
    auto* l = const_cast<oslo_parallel_linear*>(layer);
    bool has_bias = l->impl->options().bias != 0;
    if (weight) *weight = &l->weight;
    if (grad_weight) *grad_weight = &l->grad_weight;
    if (bias) *bias = has_bias ? &l->bias : nullptr;
    if (grad_bias) *grad_bias = has_bias ? &l->grad_bias : nullptr;
  });
}

oslo_status oslo_parallel_linear_forward(oslo_parallel_linear* layer, const oslo_tensor* input,
                                         oslo_tensor* output) {
  return guard([&] {
    need(layer, "oslo_parallel_linear_forward", "layer");
    layer->impl->forward(tensor_of(input, "oslo_parallel_linear_forward", "input"),
                         tensor_of(output, "oslo_parallel_linear_forward", "output"));
  });
}

oslo_status oslo_parallel_linear_backward(oslo_parallel_linear* layer, const oslo_tensor* input,
                                          const oslo_tensor* grad_output, oslo_tensor* grad_input) {
  return guard([&] {
    need(layer, "oslo_parallel_linear_backward", "layer");
    layer->impl->backward(tensor_of(input, "oslo_parallel_linear_backward", "input"),
                          tensor_of(grad_output, "oslo_parallel_linear_backward", "grad_output"),
                          opt_tensor(grad_input));
  });
}

oslo_status oslo_parallel_linear_zero_grad(oslo_parallel_linear* layer) {
  return guard([&] {
    need(layer, "oslo_parallel_linear_zero_grad", "layer");
    layer->impl->zero_grad();
  });
}

oslo_status oslo_parallel_embedding_options_init(oslo_parallel_embedding_options* options,
                                                 unsigned int version) {
  return kEmbeddingOptions.init(options, version);
}

oslo_status oslo_parallel_embedding_create(oslo_context* ctx,
                                           const oslo_parallel_embedding_options* options,
                                           oslo_parallel_embedding** out) {
  if (out) *out = nullptr;
  return guard([&] {
    const char* fn = "oslo_parallel_embedding_create";
    need(out, fn, "out");
    need(ctx, fn, "ctx");
    oslo_parallel_embedding_options o = kEmbeddingOptions.read(options, fn, "options");
    auto h = std::make_unique<oslo_parallel_embedding>();
    h->ctx = ctx->impl;
    h->impl =
        std::make_unique<oslo::ParallelEmbedding>(*ctx->impl, o.vocab_size, o.hidden_size, o.dtype);
    h->weight = view(h->impl->weight, ctx);
    h->grad_weight = view(h->impl->grad_weight, ctx);
    *out = h.release();
  });
}

void oslo_parallel_embedding_destroy(oslo_parallel_embedding* emb) {
  delete emb;
}

oslo_status oslo_parallel_embedding_vocab_range(const oslo_parallel_embedding* emb, int64_t* start,
                                                int64_t* end, int64_t* local_rows) {
  return guard([&] {
    need(emb, "oslo_parallel_embedding_vocab_range", "emb");
    if (start) *start = emb->impl->start();
    if (end) *end = emb->impl->start() + emb->impl->real_rows();
    if (local_rows) *local_rows = emb->impl->local_rows();
  });
}

oslo_status oslo_parallel_embedding_load_full(oslo_parallel_embedding* emb,
                                              const oslo_tensor* weight) {
  return guard([&] {
    need(emb, "oslo_parallel_embedding_load_full", "emb");
    emb->impl->load_full(tensor_of(weight, "oslo_parallel_embedding_load_full", "weight"));
  });
}

oslo_status oslo_parallel_embedding_load_shard(oslo_parallel_embedding* emb,
                                               const oslo_tensor* weight) {
  return guard([&] {
    need(emb, "oslo_parallel_embedding_load_shard", "emb");
    emb->impl->load_shard(tensor_of(weight, "oslo_parallel_embedding_load_shard", "weight"));
  });
}

oslo_status oslo_parallel_embedding_params(const oslo_parallel_embedding* emb, oslo_tensor** weight,
                                           oslo_tensor** grad_weight) {
  return guard([&] {
    need(emb, "oslo_parallel_embedding_params", "emb");
    auto* e = const_cast<oslo_parallel_embedding*>(emb);
    if (weight) *weight = &e->weight;
    if (grad_weight) *grad_weight = &e->grad_weight;
  });
}

oslo_status oslo_parallel_embedding_forward(oslo_parallel_embedding* emb, const oslo_tensor* ids,
                                            oslo_tensor* output) {
  return guard([&] {
    need(emb, "oslo_parallel_embedding_forward", "emb");
    emb->impl->forward(tensor_of(ids, "oslo_parallel_embedding_forward", "ids"),
                       tensor_of(output, "oslo_parallel_embedding_forward", "output"));
  });
}

oslo_status oslo_parallel_embedding_backward(oslo_parallel_embedding* emb, const oslo_tensor* ids,
                                             const oslo_tensor* grad_output) {
  return guard([&] {
    need(emb, "oslo_parallel_embedding_backward", "emb");
    emb->impl->backward(tensor_of(ids, "oslo_parallel_embedding_backward", "ids"),
                        tensor_of(grad_output, "oslo_parallel_embedding_backward", "grad_output"));
  });
}

oslo_status oslo_parallel_embedding_zero_grad(oslo_parallel_embedding* emb) {
  return guard([&] {
    need(emb, "oslo_parallel_embedding_zero_grad", "emb");
    emb->impl->zero_grad();
  });
}

oslo_status oslo_vocab_parallel_cross_entropy_options_init(
    oslo_vocab_parallel_cross_entropy_options* options, unsigned int version) {
  return kCrossEntropyOptions.init(options, version);
}

oslo_status oslo_context_vocab_parallel_cross_entropy(
    oslo_context* ctx, const oslo_tensor* logits, const oslo_tensor* labels,
    const oslo_vocab_parallel_cross_entropy_options* options, oslo_tensor* losses,
    oslo_tensor* grad_logits, float* mean_loss) {
  return guard([&] {
    const char* fn = "oslo_context_vocab_parallel_cross_entropy";
    need(ctx, fn, "ctx");
    const oslo::Tensor& lg = tensor_of(logits, fn, "logits");
    const oslo::Tensor& lb = tensor_of(labels, fn, "labels");
    oslo_vocab_parallel_cross_entropy_options o = kCrossEntropyOptions.read(options, fn, "options");
    oslo::vocab_parallel_cross_entropy(*ctx->impl, lg, lb, o.vocab_size, o.ignore_index,
                                       opt_tensor(losses), mean_loss, opt_tensor(grad_logits));
  });
}

}  // extern "C"
