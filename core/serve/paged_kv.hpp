// The paged KV cache's memory and the attention that reads it: per local
// block (layer) of the model one K and one V pool [num_blocks, local kv
// heads, block_size, head_dim] f32 in the backend's memory, indexed by the
// block ids of core/serve/block_pool.hpp. A step's tokens come from several
// sequences at once (a ragged batch: each chunk continues one sequence at
// its own position); each chunk's new keys and values go into its blocks,
// and its queries attend over its sequence's blocks.
//
// The attention here is the composition: a chunk's blocks are gathered into
// one contiguous [kv heads, length, D] buffer and the backend's attention
// (fused where it has one) runs over it with the chunk's causal offset.
//
// Not thread-safe: the engine's stepping thread owns it. Collective only
// through the model calls it plugs into.
#pragma once

#include <cstdint>
#include <vector>

#include "core/model/stack.hpp"
#include "core/tensor/tensor.hpp"

namespace oslo {
namespace serve {

// One chunk of a step: tokens [start, start + n) of a sequence whose block
// table is `blocks`, at rows [row, row + n) of the step's q, k, v.
struct PagedChunk {
  int64_t start = 0, n = 0, row = 0;
  const std::vector<int64_t>* blocks = nullptr;
};

class PagedKV {
 public:
  // Pools for every local block of `stack`. Throws oslo::Error
  // (OSLO_ERR_OUT_OF_MEMORY) when the backend cannot hold them.
  PagedKV(const BlockStack& stack, int64_t num_blocks, int64_t block_size);

  // Bytes of K and V one block takes on this rank, over its local layers.
  static int64_t block_bytes(const BlockStack& stack, int64_t block_size);
  int64_t num_blocks() const { return num_blocks_; }
  int64_t block_size() const { return block_size_; }

  // Copies block src to dst in every layer's K and V pool.
  void copy_block(int64_t src, int64_t dst);
  // Local layer `layer`'s attention for a step: q, k, v are the step's
  // rotated projections ([tokens, heads * D] column views), out [tokens,
  // nhl * D]; every chunk's keys and values are stored, then attended.
  void attend(size_t layer, const std::vector<PagedChunk>& chunks, const View& q, const View& k,
              const View& v, const View& out);

 private:
  const BlockStack& s_;
  int64_t num_blocks_, block_size_;
  std::vector<Tensor> k_, v_;
};

}  // namespace serve
}  // namespace oslo
