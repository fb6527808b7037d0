#include "core/serve/paged_kv.hpp"

#include <algorithm>
#include <cmath>

#include "core/common/dtype.hpp"
#include "core/common/error.hpp"
#include "core/tensor/view.hpp"
#include "core/tensor/view_util.hpp"

namespace oslo {
namespace serve {

using views::at;
using views::strided;

PagedKV::PagedKV(const BlockStack& stack, int64_t num_blocks, int64_t block_size,
                 oslo_dtype kv_dtype)
    : s_(stack), num_blocks_(num_blocks), block_size_(block_size), kv_dtype_(kv_dtype) {
  OSLO_CHECK(num_blocks >= 1 && block_size >= 1, OSLO_ERR_INVALID_ARGUMENT,
             "paged KV cache: num_blocks and block_size must be >= 1, got ", num_blocks, " and ",
             block_size);
  OSLO_CHECK(kv_dtype == OSLO_DTYPE_F32 || kv_dtype == OSLO_DTYPE_I8, OSLO_ERR_DTYPE,
             "paged KV cache: kv_dtype must be f32 or i8 (int8), got ", dtype_name(kv_dtype));
  const int64_t D = s_.cfg.head_dim, nkvl = s_.nkvl;
  const auto& bp = s_.ctx.backend_ptr();
  for (size_t li = 0; li < s_.layers.size(); ++li) {
    k_.push_back(scratch(bp, kv_dtype, {num_blocks, nkvl, block_size, D}));
    v_.push_back(scratch(bp, kv_dtype, {num_blocks, nkvl, block_size, D}));
    if (kv_dtype == OSLO_DTYPE_I8) {
      ks_.push_back(scratch(bp, OSLO_DTYPE_F32, {num_blocks, nkvl, block_size}));
      vs_.push_back(scratch(bp, OSLO_DTYPE_F32, {num_blocks, nkvl, block_size}));
    }
  }
}

int64_t PagedKV::block_bytes(const BlockStack& stack, int64_t block_size, oslo_dtype kv_dtype) {
  const int64_t per_row = kv_dtype == OSLO_DTYPE_I8 ? stack.cfg.head_dim + 4  // int8 + a scale
                                                    : stack.cfg.head_dim * 4;
  return 2 * static_cast<int64_t>(stack.layers.size()) * stack.nkvl * block_size * per_row;
}

void PagedKV::copy_block(int64_t src, int64_t dst) {
  OSLO_CHECK(src >= 0 && src < num_blocks_ && dst >= 0 && dst < num_blocks_, OSLO_ERR_INTERNAL,
             "paged KV cache: copy of block ", src, " to ", dst);
  Backend& be = s_.ctx.backend();
  auto copy_in = [&](const Tensor& t) {
    const size_t bytes = t.nbytes() / static_cast<size_t>(num_blocks_);
    char* base = static_cast<char*>(t.data());
    be.copy(base + static_cast<size_t>(dst) * bytes, base + static_cast<size_t>(src) * bytes, bytes,
            CopyKind::DeviceToDevice);
  };
  for (const std::vector<Tensor>* pools : {&k_, &v_, &ks_, &vs_})
    for (const Tensor& t : *pools) copy_in(t);
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
  Backend& be = s_.ctx.backend();
  table_ = scratch(s_.ctx.backend_ptr(), OSLO_DTYPE_I64, {C, width});
  if (C > 0)
    be.copy(table_.data(), host.data(), host.size() * sizeof(int64_t), CopyKind::HostToDevice);
}

void PagedKV::attend(size_t li, const View& q, const View& k, const View& v, const View& out) {
  Backend& be = s_.ctx.backend();
  const int64_t D = s_.cfg.head_dim, nkvl = s_.nkvl, nhl = s_.nhl, bs = block_size_;
  const int64_t per = nkvl * bs * D;  // one block of one pool
  const int64_t rk = k.strides[0], rv = v.strides[0], rq = q.strides[0], ro = out.strides[0];
  const Tensor& kp = k_[li];
  const Tensor& vp = v_[li];
  const bool int8 = kv_dtype_ == OSLO_DTYPE_I8;
  // A block's slots [s0, s0 + m) of every kv head: [nkvl, m, D], and their
  // scales [nkvl, m] (int8).
  auto slots = [&](const Tensor& pool, int64_t b, int64_t s0, int64_t m) {
    return strided(at(view(pool), b * per + s0 * D), kv_dtype_, {nkvl, m, D}, {bs * D, D, 1});
  };
  auto scale_slots = [&](const Tensor& sc, int64_t b, int64_t s0, int64_t m) {
    return strided(at(view(sc), b * nkvl * bs + s0), OSLO_DTYPE_F32, {nkvl, m}, {bs, 1});
  };
  for (const PagedChunk& c : chunks_) {
    // Store the chunk's keys and values, block by block.
    for (int64_t p = c.start; p < c.start + c.n;) {
      const int64_t b = (*c.blocks)[static_cast<size_t>(p / bs)], s0 = p % bs;
      const int64_t m = std::min(bs - s0, c.start + c.n - p);
      const int64_t r = c.row + p - c.start;
      const View kn = strided(at(k, r * rk), k.dtype, {nkvl, m, D}, {D, rk, 1});
      const View vn = strided(at(v, r * rv), v.dtype, {nkvl, m, D}, {D, rv, 1});
      if (int8) {
        be.quantize_rows(slots(kp, b, s0, m), scale_slots(ks_[li], b, s0, m), kn);
        be.quantize_rows(slots(vp, b, s0, m), scale_slots(vs_[li], b, s0, m), vn);
      } else {
        be.convert(slots(kp, b, s0, m), kn);
        be.convert(slots(vp, b, s0, m), vn);
      }
      p += m;
    }
  }
  // Every chunk's queries over its blocks, in one call (int8: the pools
  // read as they are stored, with their scales).
  const int64_t T = q.shape[0];
  const View o3 = strided(out.data, out.dtype, {T, nhl, D}, {ro, D, 1});
  const View q3 = strided(q.data, q.dtype, {T, nhl, D}, {rq, D, 1});
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const int64_t C = static_cast<int64_t>(chunks_.size());
  if (int8)
    be.paged_attention_kv8(o3, q3, view(kp), view(ks_[li]), view(vp), view(vs_[li]), view(table_),
                           triples_.data(), C, scale);
  else
    be.paged_attention(o3, q3, view(kp), view(vp), view(table_), triples_.data(), C, scale);
}

}  // namespace serve
}  // namespace oslo
