// C shims: collectives on a context's groups.
#include "core/capi/handles.hpp"
#include "core/common/dtype.hpp"

using oslo::capi::guard;
using oslo::capi::need;
using oslo::capi::tensor_of;

namespace {

oslo::Communicator& comm_of(oslo_context* ctx, oslo_group g, const char* fn) {
  need(ctx, fn, "ctx");
  if (g < OSLO_GROUP_WORLD || g > OSLO_GROUP_DATA)
    oslo::fail(OSLO_ERR_INVALID_ARGUMENT, fn, ": unknown group ", static_cast<int>(g));
  return ctx->impl->comm(g);
}

void check_op(oslo_reduce_op op, const char* fn) {
  if (op < OSLO_REDUCE_SUM || op > OSLO_REDUCE_MIN)
    oslo::fail(OSLO_ERR_INVALID_ARGUMENT, fn, ": unknown reduce op ", static_cast<int>(op));
}

void check_peer(oslo::Communicator& c, int peer, const char* fn) {
  if (peer < 0 || peer >= c.size() || peer == c.rank())
    oslo::fail(OSLO_ERR_INVALID_ARGUMENT, fn, ": peer ", peer,
               " is not another rank of a group of ", c.size(), " (this rank is ", c.rank(), ")");
}

}  // namespace

extern "C" {

oslo_status oslo_all_reduce(oslo_context* ctx, oslo_group group, oslo_tensor* tensor,
                            oslo_reduce_op op) {
  return guard([&] {
    auto& c = comm_of(ctx, group, "oslo_all_reduce");
    const auto& t = tensor_of(tensor, "oslo_all_reduce", "tensor");
    check_op(op, "oslo_all_reduce");
    c.all_reduce(t.data(), t.data(), t.numel(), t.dtype(), op);
  });
}

oslo_status oslo_all_gather(oslo_tensor* output, oslo_context* ctx, oslo_group group,
                            const oslo_tensor* input) {
  return guard([&] {
    auto& c = comm_of(ctx, group, "oslo_all_gather");
    const auto& out = tensor_of(output, "oslo_all_gather", "output");
    const auto& in = tensor_of(input, "oslo_all_gather", "input");
    if (in.dtype() != out.dtype())
      oslo::fail(OSLO_ERR_DTYPE, "oslo_all_gather: input is ", oslo::dtype_name(in.dtype()),
                 " but output is ", oslo::dtype_name(out.dtype()));
    if (out.numel() != in.numel() * c.size())
      oslo::fail(OSLO_ERR_SHAPE, "oslo_all_gather: output ", out.describe(), " must hold ",
                 c.size(), " x the input's ", in.numel(), " elements");
    c.all_gather(in.data(), out.data(), in.numel(), in.dtype());
  });
}

oslo_status oslo_reduce_scatter(oslo_tensor* output, oslo_context* ctx, oslo_group group,
                                const oslo_tensor* input, oslo_reduce_op op) {
  return guard([&] {
    auto& c = comm_of(ctx, group, "oslo_reduce_scatter");
    const auto& out = tensor_of(output, "oslo_reduce_scatter", "output");
    const auto& in = tensor_of(input, "oslo_reduce_scatter", "input");
    check_op(op, "oslo_reduce_scatter");
    if (in.dtype() != out.dtype())
      oslo::fail(OSLO_ERR_DTYPE, "oslo_reduce_scatter: input is ", oslo::dtype_name(in.dtype()),
                 " but output is ", oslo::dtype_name(out.dtype()));
    if (in.numel() != out.numel() * c.size())
      oslo::fail(OSLO_ERR_SHAPE, "oslo_reduce_scatter: input ", in.describe(), " must hold ",
                 c.size(), " x the output's ", out.numel(), " elements");
    c.reduce_scatter(in.data(), out.data(), out.numel(), in.dtype(), op);
  });
}

oslo_status oslo_broadcast(oslo_context* ctx, oslo_group group, oslo_tensor* tensor, int root) {
  return guard([&] {
    auto& c = comm_of(ctx, group, "oslo_broadcast");
    const auto& t = tensor_of(tensor, "oslo_broadcast", "tensor");
    if (root < 0 || root >= c.size())
      oslo::fail(OSLO_ERR_INVALID_ARGUMENT, "oslo_broadcast: root ", root,
                 " is outside a group of ", c.size());
    c.broadcast(t.data(), t.numel(), t.dtype(), root);
  });
}

oslo_status oslo_send(oslo_context* ctx, oslo_group group, const oslo_tensor* tensor, int peer) {
  return guard([&] {
    auto& c = comm_of(ctx, group, "oslo_send");
    const auto& t = tensor_of(tensor, "oslo_send", "tensor");
    check_peer(c, peer, "oslo_send");
    c.send(t.data(), t.nbytes(), peer);
  });
}

oslo_status oslo_recv(oslo_tensor* tensor, oslo_context* ctx, oslo_group group, int peer) {
  return guard([&] {
    auto& c = comm_of(ctx, group, "oslo_recv");
    const auto& t = tensor_of(tensor, "oslo_recv", "tensor");
    check_peer(c, peer, "oslo_recv");
    c.recv(t.data(), t.nbytes(), peer);
  });
}

oslo_status oslo_barrier(oslo_context* ctx, oslo_group group) {
  return guard([&] { comm_of(ctx, group, "oslo_barrier").barrier(); });
}

}  // extern "C"
