#include "core/serve/paged_kv.hpp"

#include <algorithm>
#include <cmath>

#include "core/common/error.hpp"
#include "core/tensor/view.hpp"
#include "core/tensor/view_util.hpp"

namespace oslo {
namespace serve {

using views::at;
using views::strided;

PagedKV::PagedKV(const BlockStack& stack, int64_t num_blocks, int64_t block_size)
    : s_(stack), num_blocks_(num_blocks), block_size_(block_size) {
  OSLO_CHECK(num_blocks >= 1 && block_size >= 1, OSLO_ERR_INVALID_ARGUMENT,
             "paged KV cache: num_blocks and block_size must be >= 1, got ", num_blocks, " and ",
             block_size);
  const auto& bp = s_.ctx.backend_ptr();
  for (size_t li = 0; li < s_.layers.size(); ++li) {
    k_.push_back(scratch(bp, OSLO_DTYPE_F32, {num_blocks, s_.nkvl, block_size, s_.cfg.head_dim}));
    v_.push_back(scratch(bp, OSLO_DTYPE_F32, {num_blocks, s_.nkvl, block_size, s_.cfg.head_dim}));
  }
}

int64_t PagedKV::block_bytes(const BlockStack& stack, int64_t block_size) {
  return 2 * static_cast<int64_t>(stack.layers.size()) * stack.nkvl * block_size *
         stack.cfg.head_dim * static_cast<int64_t>(sizeof(float));
}

void PagedKV::copy_block(int64_t src, int64_t dst) {
  OSLO_CHECK(src >= 0 && src < num_blocks_ && dst >= 0 && dst < num_blocks_, OSLO_ERR_INTERNAL,
             "paged KV cache: copy of block ", src, " to ", dst);
  Backend& be = s_.ctx.backend();
  const int64_t per = s_.nkvl * block_size_ * s_.cfg.head_dim;
  const size_t bytes = static_cast<size_t>(per) * sizeof(float);
  for (size_t li = 0; li < k_.size(); ++li)
    for (const Tensor* t : {&k_[li], &v_[li]}) {
      char* base = static_cast<char*>(t->data());
      be.copy(base + dst * per * 4, base + src * per * 4, bytes, CopyKind::DeviceToDevice);
    }
}

void PagedKV::begin_step(const std::vector<PagedChunk>& chunks) {
  chunks_ = chunks;
  triples_.clear();
  int64_t width = 1;
  for (const PagedChunk& c : chunks) {
    const int64_t nb = (c.start + c.n + block_size_ - 1) / block_size_;
    OSLO_CHECK(c.blocks && static_cast<int64_t>(c.blocks->size()) >= nb, OSLO_ERR_INTERNAL,
               "paged KV cache: a chunk reaching position ", c.start + c.n - 1, " has ",
               c.blocks ? c.blocks->size() : 0, " blocks");
    width = std::max(width, nb);
    triples_.insert(triples_.end(), {c.row, c.start, c.n});
  }
  const int64_t C = static_cast<int64_t>(chunks.size());
  std::vector<int64_t> host(static_cast<size_t>(C * width), 0);
  for (int64_t c = 0; c < C; ++c) {
    const PagedChunk& pc = chunks[static_cast<size_t>(c)];
    const int64_t nb = (pc.start + pc.n + block_size_ - 1) / block_size_;
    std::copy(pc.blocks->begin(), pc.blocks->begin() + nb, host.begin() + c * width);
  }
  table_ = scratch(s_.ctx.backend_ptr(), OSLO_DTYPE_I64, {C, width});
  if (C > 0)
    s_.ctx.backend().copy(table_.data(), host.data(), host.size() * sizeof(int64_t),
                          CopyKind::HostToDevice);
}

void PagedKV::attend(size_t li, const View& q, const View& k, const View& v, const View& out) {
  Backend& be = s_.ctx.backend();
  const int64_t D = s_.cfg.head_dim, nkvl = s_.nkvl, nhl = s_.nhl, bs = block_size_;
  const int64_t per = nkvl * bs * D;  // one block of one pool
  const int64_t rk = k.strides[0], rv = v.strides[0], rq = q.strides[0], ro = out.strides[0];
  const Tensor& kp = k_[li];
  const Tensor& vp = v_[li];
  // A block's slots [s0, s0 + m) of every kv head: [nkvl, m, D].
  auto slots = [&](const Tensor& pool, int64_t b, int64_t s0, int64_t m) {
    return strided(at(view(pool), b * per + s0 * D), OSLO_DTYPE_F32, {nkvl, m, D}, {bs * D, D, 1});
  };
  for (const PagedChunk& c : chunks_) {
    // Store the chunk's keys and values, block by block.
    for (int64_t p = c.start; p < c.start + c.n;) {
      const int64_t b = (*c.blocks)[static_cast<size_t>(p / bs)], s0 = p % bs;
      const int64_t m = std::min(bs - s0, c.start + c.n - p);
      const int64_t r = c.row + p - c.start;
      be.convert(slots(kp, b, s0, m), strided(at(k, r * rk), k.dtype, {nkvl, m, D}, {D, rk, 1}));
      be.convert(slots(vp, b, s0, m), strided(at(v, r * rv), v.dtype, {nkvl, m, D}, {D, rv, 1}));
      p += m;
    }
  }
  // Every chunk's queries over its blocks, in one call.
  const int64_t T = q.shape[0];
  be.paged_attention(strided(out.data, out.dtype, {T, nhl, D}, {ro, D, 1}),
                     strided(q.data, q.dtype, {T, nhl, D}, {rq, D, 1}), view(kp), view(vp),
                     view(table_), triples_.data(), static_cast<int64_t>(chunks_.size()),
                     1.0f / std::sqrt(static_cast<float>(D)));
}

}  // namespace serve
}  // namespace oslo
