#include "core/parallel/mappings.hpp"

#include "core/common/dtype.hpp"
#include "core/common/error.hpp"
#include "core/tensor/tensor.hpp"

namespace oslo {

Communicator& comm_ready(Context& ctx, oslo_group g) {
  Communicator& c = ctx.comm(g);
  if (c.size() > 1 && ctx.host_transport(g)) ctx.backend().synchronize();
  return c;
}

int group_size(const Context& ctx, oslo_group g) {
  return ctx.comm(g).size();
}

int group_rank(const Context& ctx, oslo_group g) {
  return ctx.comm(g).rank();
}

void all_reduce(Context& ctx, oslo_group g, void* buf, size_t count, oslo_dtype dt,
                oslo_reduce_op op) {
  comm_ready(ctx, g).all_reduce(buf, buf, count, dt, op);
}

void all_gather(Context& ctx, oslo_group g, const void* in, void* out, size_t count,
                oslo_dtype dt) {
  comm_ready(ctx, g).all_gather(in, out, count, dt);
}

void reduce_scatter(Context& ctx, oslo_group g, const void* in, void* out, size_t count,
                    oslo_dtype dt, oslo_reduce_op op) {
  comm_ready(ctx, g).reduce_scatter(in, out, count, dt, op);
}

void broadcast(Context& ctx, oslo_group g, void* buf, size_t count, oslo_dtype dt, int root) {
  comm_ready(ctx, g).broadcast(buf, count, dt, root);
}

void send(Context& ctx, oslo_group g, const void* buf, size_t bytes, int peer) {
  comm_ready(ctx, g).send(buf, bytes, peer);
}

void recv(Context& ctx, oslo_group g, void* buf, size_t bytes, int peer) {
  comm_ready(ctx, g).recv(buf, bytes, peer);
}

void barrier(Context& ctx, oslo_group g) {
  comm_ready(ctx, g).barrier();
}

void grad_all_reduce(Context& ctx, void* buf, size_t count, oslo_dtype dt) {
  ctx.grad_comm().all_reduce(buf, buf, count, dt, OSLO_REDUCE_SUM);
}

void grad_reduce_scatter(Context& ctx, const void* in, void* out, size_t count, oslo_dtype dt) {
  ctx.grad_comm().reduce_scatter(in, out, count, dt, OSLO_REDUCE_SUM);
}

void grad_all_gather(Context& ctx, const void* in, void* out, size_t count, oslo_dtype dt) {
  ctx.grad_comm().all_gather(in, out, count, dt);
}

bool grad_background_ok(const Context& ctx) {
  return ctx.backend().host_accessible() && ctx.grad_comm_host_transport();
}

namespace {

void reduce_in_place(Context& ctx, oslo_group g, const View& x, oslo_reduce_op op,
                     const char* what) {
  Communicator& c = ctx.comm(g);
  if (c.size() == 1 || x.numel() == 0) return;
  OSLO_CHECK(x.contiguous(), OSLO_ERR_INTERNAL, what, " of a strided view");
  comm_ready(ctx, g).all_reduce(x.data, x.data, static_cast<size_t>(x.numel()), x.dtype, op);
}

// A collective between this rank's block `part` and the group's `whole`
// (contiguous, one dtype, whole n times part's elements): op(communicator,
// part's element count), or for a group of one a copy of src to dst.
template <typename Op>
void block_collective(Context& ctx, oslo_group g, const View& part, const View& whole,
                      const char* what, void* dst, const void* src, Op op) {
  const int n = ctx.comm(g).size();
  OSLO_CHECK(part.contiguous() && whole.contiguous() && part.dtype == whole.dtype &&
                 whole.numel() == part.numel() * n,
             OSLO_ERR_INTERNAL, what, ": views of ", part.numel(), " and ", whole.numel(),
             " elements over a group of ", n);
  const size_t count = static_cast<size_t>(part.numel());
  if (count == 0) return;
  if (n == 1)
    ctx.backend().copy(dst, src, count * dtype_size(part.dtype), CopyKind::DeviceToDevice);
  else
    op(comm_ready(ctx, g), count);
}

}  // namespace

void reduce_sum(Context& ctx, oslo_group g, const View& x) {
  reduce_in_place(ctx, g, x, OSLO_REDUCE_SUM, "reduce_sum");
}

void reduce_max(Context& ctx, oslo_group g, const View& x) {
  reduce_in_place(ctx, g, x, OSLO_REDUCE_MAX, "reduce_max");
}

void gather_first_dim(Context& ctx, oslo_group g, const View& local, const View& out) {
  block_collective(ctx, g, local, out, "gather_first_dim", out.data, local.data,
                   [&](Communicator& c, size_t count) {
                     c.all_gather(local.data, out.data, count, local.dtype);
                   });
}

void reduce_scatter_first_dim(Context& ctx, oslo_group g, const View& full, const View& local) {
  block_collective(ctx, g, local, full, "reduce_scatter_first_dim", local.data, full.data,
                   [&](Communicator& c, size_t count) {
                     c.reduce_scatter(full.data, local.data, count, local.dtype, OSLO_REDUCE_SUM);
                   });
}

void gather_last_dim(Context& ctx, oslo_group g, const View& local, const View& out) {
  Communicator& c = ctx.comm(g);
  const int n = c.size();
  const int64_t rows = local.rows(), cols = local.cols();
  OSLO_CHECK(out.rows() == rows && out.cols() == cols * n, OSLO_ERR_INTERNAL,
             "gather_last_dim: output has the wrong shape");
  if (n == 1) {
    ctx.backend().convert(out, local);
    return;
  }
  // all_gather concatenates along the first dimension: [n][rows][cols]; one
  // strided copy then moves every block to its column range.
  Tensor tmp = scratch(ctx.backend_ptr(), local.dtype, {n, rows, cols});
  View packed = view(tmp);
  if (local.contiguous()) {
    comm_ready(ctx, g).all_gather(local.data, tmp.data(), static_cast<size_t>(rows * cols),
                                  local.dtype);
  } else {
    Tensor mine = scratch(ctx.backend_ptr(), local.dtype, {rows, cols});
    ctx.backend().convert(view(mine), local);
    comm_ready(ctx, g).all_gather(mine.data(), tmp.data(), static_cast<size_t>(rows * cols),
                                  local.dtype);
  }
  // packed as [rows, n, cols]; out as [rows, n, cols].
  View src = packed;
  src.ndim = 3;
  src.shape[0] = rows;
  src.shape[1] = n;
  src.shape[2] = cols;
  src.strides[0] = cols;
  src.strides[1] = rows * cols;
  src.strides[2] = 1;
  View dst = out;
  dst.ndim = 3;
  dst.shape[0] = rows;
  dst.shape[1] = n;
  dst.shape[2] = cols;
  dst.strides[0] = out.ndim >= 2 ? out.strides[out.ndim - 2] : cols * n;
  dst.strides[1] = cols * out.strides[out.ndim - 1];
  dst.strides[2] = out.strides[out.ndim - 1];
  ctx.backend().convert(dst, src);
}

void split_last_dim(Context& ctx, oslo_group g, const View& full, const View& local) {
  Communicator& c = ctx.comm(g);
  const int n = c.size();
  OSLO_CHECK(full.cols() % n == 0, OSLO_ERR_SHAPE, "split: last dimension ", full.cols(),
             " is not divisible by the group size ", n);
  const int64_t part = full.cols() / n;
  ctx.backend().convert(local, columns(full, c.rank() * part, part));
}

}  // namespace oslo
