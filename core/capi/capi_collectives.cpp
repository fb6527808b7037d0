// C shims: collectives on a context's groups.
#include "core/capi/handles.hpp"
#include "core/common/dtype.hpp"
#include "core/parallel/mappings.hpp"

using oslo::capi::guard;
using oslo::capi::need;
using oslo::capi::tensor_of;

namespace {

// The context after checking ctx and group; collectives then run through
// core/parallel/mappings (which orders the backend's queue for them).
oslo::Context& group_of(oslo_context* ctx, oslo_group g, const char* fn) {
  need(ctx, fn, "ctx");
  if (g < OSLO_GROUP_WORLD || g > OSLO_GROUP_DATA)
    oslo::fail(OSLO_ERR_INVALID_ARGUMENT, fn, ": unknown group ", static_cast<int>(g));
  return *ctx->impl;
}

void check_op(oslo_reduce_op op, const char* fn) {
  if (op < OSLO_REDUCE_SUM || op > OSLO_REDUCE_MIN)
    oslo::fail(OSLO_ERR_INVALID_ARGUMENT, fn, ": unknown reduce op ", static_cast<int>(op));
}

void check_peer(oslo::Context& c, oslo_group g, int peer, const char* fn) {
  const int n = oslo::group_size(c, g), me = oslo::group_rank(c, g);
  if (peer < 0 || peer >= n || peer == me)
    oslo::fail(OSLO_ERR_INVALID_ARGUMENT, fn, ": peer ", peer,
               " is not another rank of a group of ", n, " (this rank is ", me, ")");
}

}  // namespace

extern "C" {

oslo_status oslo_context_all_reduce(oslo_context* ctx, oslo_group group, oslo_reduce_op op,
                                    oslo_tensor* tensor) {
  return guard([&] {
    auto& c = group_of(ctx, group, "oslo_context_all_reduce");
    check_op(op, "oslo_context_all_reduce");
    const auto& t = tensor_of(tensor, "oslo_context_all_reduce", "tensor");
    oslo::all_reduce(c, group, t.data(), t.numel(), t.dtype(), op);
  });
}

oslo_status oslo_context_all_gather(oslo_context* ctx, oslo_group group, const oslo_tensor* input,
                                    oslo_tensor* output) {
  return guard([&] {
    const char* fn = "oslo_context_all_gather";
    auto& c = group_of(ctx, group, fn);
    const int n = oslo::group_size(c, group);
    const auto& in = tensor_of(input, fn, "input");
    const auto& out = tensor_of(output, fn, "output");
    if (in.dtype() != out.dtype())
      oslo::fail(OSLO_ERR_DTYPE, fn, ": input is ", oslo::dtype_name(in.dtype()), " but output is ",
                 oslo::dtype_name(out.dtype()));
    if (out.numel() != in.numel() * n)
      oslo::fail(OSLO_ERR_SHAPE, fn, ": output ", out.describe(), " must hold ", n,
                 " x the input's ", in.numel(), " elements");
    oslo::all_gather(c, group, in.data(), out.data(), in.numel(), in.dtype());
  });
}

oslo_status oslo_context_reduce_scatter(oslo_context* ctx, oslo_group group, oslo_reduce_op op,
                                        const oslo_tensor* input, oslo_tensor* output) {
  return guard([&] {
    const char* fn = "oslo_context_reduce_scatter";
    auto& c = group_of(ctx, group, fn);
    const int n = oslo::group_size(c, group);
    check_op(op, fn);
    const auto& in = tensor_of(input, fn, "input");
    const auto& out = tensor_of(output, fn, "output");
    if (in.dtype() != out.dtype())
      oslo::fail(OSLO_ERR_DTYPE, fn, ": input is ", oslo::dtype_name(in.dtype()), " but output is ",
                 oslo::dtype_name(out.dtype()));
    if (in.numel() != out.numel() * n)
      oslo::fail(OSLO_ERR_SHAPE, fn, ": input ", in.describe(), " must hold ", n,
                 " x the output's ", out.numel(), " elements");
    oslo::reduce_scatter(c, group, in.data(), out.data(), out.numel(), in.dtype(), op);
  });
}

oslo_status oslo_context_broadcast(oslo_context* ctx, oslo_group group, int root,
                                   oslo_tensor* tensor) {
  return guard([&] {
    auto& c = group_of(ctx, group, "oslo_context_broadcast");
    const auto& t = tensor_of(tensor, "oslo_context_broadcast", "tensor");
    const int n = oslo::group_size(c, group);
    if (root < 0 || root >= n)
      oslo::fail(OSLO_ERR_INVALID_ARGUMENT, "oslo_context_broadcast: root ", root,
                 " is outside a group of ", n);
    oslo::broadcast(c, group, t.data(), t.numel(), t.dtype(), root);
  });
}

oslo_status oslo_context_send(oslo_context* ctx, oslo_group group, int peer,
                              const oslo_tensor* tensor) {
  return guard([&] {
    auto& c = group_of(ctx, group, "oslo_context_send");
    const auto& t = tensor_of(tensor, "oslo_context_send", "tensor");
    check_peer(c, group, peer, "oslo_context_send");
    oslo::send(c, group, t.data(), t.nbytes(), peer);
  });
}

oslo_status oslo_context_recv(oslo_context* ctx, oslo_group group, int peer, oslo_tensor* tensor) {
  return guard([&] {
    auto& c = group_of(ctx, group, "oslo_context_recv");
    const auto& t = tensor_of(tensor, "oslo_context_recv", "tensor");
    check_peer(c, group, peer, "oslo_context_recv");
    oslo::recv(c, group, t.data(), t.nbytes(), peer);
  });
}

oslo_status oslo_context_barrier(oslo_context* ctx, oslo_group group) {
  return guard([&] { oslo::barrier(group_of(ctx, group, "oslo_context_barrier"), group); });
}

}  // extern "C"
