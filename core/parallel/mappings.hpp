// The communication ops layers are built from (Megatron's mappings). Layers
// never call a collective directly; each op returns early (or makes a local
// copy) for a group of one, so a single rank runs exactly the reference
// computation. Each op says which op is its backward (the op the gradient
// takes on the way back). Views are of the context's backend memory; buffers
// handed to a communicator are contiguous.
#pragma once

#include <cstdint>

#include "core/context/context.hpp"
#include "core/tensor/view.hpp"

namespace oslo {

// The group's communicator, after the backend's queue has drained when the
// group runs on a host transport (which reads memory directly): the one
// place that ordering is written. Used by the ops below and nowhere outside
// core/parallel.
Communicator& comm_ready(Context& ctx, oslo_group g);

// The group's size and this rank's index in it.
int group_size(const Context& ctx, oslo_group g);
int group_rank(const Context& ctx, oslo_group g);

// The plain collectives on backend memory, for callers whose buffers are not
// one of the layer ops below (data parallelism, pipeline stages, the C
// shims). Same contracts as Communicator's (counts in elements, bytes for
// send/recv); they order the queue as comm_ready() does. Host values never
// come here: they go through ctx.control(g) (core/comm/control.hpp).
void all_reduce(Context& ctx, oslo_group g, void* buf, size_t count, oslo_dtype dt,
                oslo_reduce_op op);
void all_gather(Context& ctx, oslo_group g, const void* in, void* out, size_t count, oslo_dtype dt);
void reduce_scatter(Context& ctx, oslo_group g, const void* in, void* out, size_t count,
                    oslo_dtype dt, oslo_reduce_op op);
void broadcast(Context& ctx, oslo_group g, void* buf, size_t count, oslo_dtype dt, int root);
void send(Context& ctx, oslo_group g, const void* buf, size_t bytes, int peer);
void recv(Context& ctx, oslo_group g, void* buf, size_t bytes, int peer);
void barrier(Context& ctx, oslo_group g);

// The gradient reducer's own communicator over the data-parallel group
// (Context::grad_comm), which may run on the reducer's background thread:
// no queue ordering here (the reducer orders its buckets itself).
void grad_all_reduce(Context& ctx, void* buf, size_t count, oslo_dtype dt);
void grad_reduce_scatter(Context& ctx, const void* in, void* out, size_t count, oslo_dtype dt);
void grad_all_gather(Context& ctx, const void* in, void* out, size_t count, oslo_dtype dt);
// Whether the reducer may run those on a background thread: its
// communicator is a host transport over host memory (nothing to order on a
// device queue, and no backend entry is called from that thread).
bool grad_background_ok(const Context& ctx);

// In-place sum over the group of a contiguous view (forward of a row-parallel
// layer, backward of a column-parallel one). Backward: the identity.
void reduce_sum(Context& ctx, oslo_group g, const View& x);

// In-place maximum over the group of a contiguous view (the largest logit of
// each row of a vocabulary-parallel softmax). Backward: none; as in
// Megatron's cross-entropy the maximum only shifts the exponentials and
// cancels out of the result, so it is held constant.
void reduce_max(Context& ctx, oslo_group g, const View& x);

// out (contiguous, size * numel(local) elements) = every rank's contiguous
// `local` one after the other along the first dimension, in group rank order
// (Megatron's gather along the first dimension). Backward:
// reduce_scatter_first_dim.
void gather_first_dim(Context& ctx, oslo_group g, const View& local, const View& out);

// local (contiguous) = this rank's block, along the first dimension, of the
// sum over the group of every rank's contiguous `full` (size * numel(local)
// elements; Megatron's reduce-scatter along the first dimension). Backward:
// gather_first_dim.
void reduce_scatter_first_dim(Context& ctx, oslo_group g, const View& full, const View& local);

// out [rows, cols * size] = concatenation along the last dimension of every
// rank's local [rows, cols] (any dtypes; out may be strided).
void gather_last_dim(Context& ctx, oslo_group g, const View& local, const View& out);

// local [rows, cols / size] = this rank's slice of full [rows, cols] along the
// last dimension (no communication).
void split_last_dim(Context& ctx, oslo_group g, const View& full, const View& local);

}  // namespace oslo
