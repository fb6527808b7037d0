#include "core/comm/mappings.hpp"

#include "core/common/error.hpp"
#include "core/tensor/tensor.hpp"

namespace oslo {

void reduce_sum(Context& ctx, oslo_group g, float* x, int64_t n) {
  Communicator& c = ctx.comm(g);
  if (c.size() == 1 || n == 0) return;
  c.all_reduce(x, x, static_cast<size_t>(n), OSLO_DTYPE_F32, OSLO_REDUCE_SUM);
}

void gather_last_dim(Context& ctx, oslo_group g, const float* local, float* out, int64_t rows,
                     int64_t cols) {
  Communicator& c = ctx.comm(g);
  const int n = c.size();
  if (n == 1) {
    ctx.kernels().copy_2d(out, cols, local, cols, rows, cols);
    return;
  }
  // all_gather concatenates along the first dimension: [n][rows][cols]; then
  // each block moves to its column range.
  DeviceBuffer tmp(ctx.backend(), static_cast<size_t>(n * rows * cols) * sizeof(float));
  c.all_gather(local, tmp.get(), static_cast<size_t>(rows * cols), OSLO_DTYPE_F32);
  for (int r = 0; r < n; ++r)
    ctx.kernels().copy_2d(out + r * cols, cols * n, tmp.f32() + r * rows * cols, cols, rows, cols);
}

void split_last_dim(Context& ctx, oslo_group g, const float* full, float* local, int64_t rows,
                    int64_t cols) {
  Communicator& c = ctx.comm(g);
  const int n = c.size();
  OSLO_CHECK(cols % n == 0, OSLO_ERR_SHAPE, "split: last dimension ", cols,
             " is not divisible by the group size ", n);
  const int64_t part = cols / n;
  ctx.kernels().copy_2d(local, part, full + c.rank() * part, cols, rows, part);
}

}  // namespace oslo
