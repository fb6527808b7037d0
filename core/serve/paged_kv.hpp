// The paged KV cache's memory and the attention that reads it: per local
// block (layer) of the model one K and one V pool [num_blocks, local kv
// heads, block_size, head_dim] f32 in the backend's memory, indexed by the
// block ids of core/serve/block_pool.hpp. A step's tokens come from several
// sequences at once (a ragged batch: each chunk continues one sequence at
// its own position); each chunk's new keys and values go into its blocks,
// and its queries attend over its sequence's blocks.
//
// The attention is the backend's paged_attention (oslo_backend.h): queries
// read the keys and values through the step's block tables, uploaded once
// per step (begin_step) for every layer. A backend without the entry runs
// its composition (core/backend/fused_paged.cpp: the blocks gathered, then
// attention). Storing a chunk's new keys and values stays here, as strided
// copies (convert) into its blocks before the attention reads them.
//
// With kv dtype I8 the pools hold int8 rows of head_dim and a scale pool
// [num_blocks, local kv heads, block_size] f32 (one scale per token and KV
// head; oslo_backend.h's quantize_rows). Each layer's attention then
// reads them as stored (Backend::paged_attention_kv8; a backend without the
// entry dequantizes the step's blocks into scratch first, never the whole
// cache).
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
  // Pools for every local block of `stack`, in kv_dtype F32 or I8. Throws
  // oslo::Error: OSLO_ERR_OUT_OF_MEMORY when the backend cannot hold them,
  // OSLO_ERR_DTYPE for another kv_dtype.
  PagedKV(const BlockStack& stack, int64_t num_blocks, int64_t block_size,
          oslo_dtype kv_dtype = OSLO_DTYPE_F32);

  // Bytes of K and V (and their scales) one block takes on this rank, over
  // its local layers.
  static int64_t block_bytes(const BlockStack& stack, int64_t block_size,
                             oslo_dtype kv_dtype = OSLO_DTYPE_F32);
  oslo_dtype kv_dtype() const { return kv_dtype_; }
  int64_t num_blocks() const { return num_blocks_; }
  int64_t block_size() const { return block_size_; }

  // Copies block src to dst in every layer's K and V pool.
  void copy_block(int64_t src, int64_t dst);
  // The chunks of the next step (their block tables must cover start + n
  // tokens): the tables go to the backend's memory as one [chunks, blocks]
  // i64 table, used by every attend() until the next begin_step(). Throws
  // OSLO_ERR_INTERNAL when a chunk's table is shorter than its tokens need.
  void begin_step(const std::vector<PagedChunk>& chunks);
  // Local layer `layer`'s attention for the step begun: q, k, v are the
  // step's rotated projections ([tokens, heads * D] column views), out
  // [tokens, nhl * D]; every chunk's keys and values are stored, then
  // attended through the block tables.
  void attend(size_t layer, const View& q, const View& k, const View& v, const View& out);

 private:
  const BlockStack& s_;
  int64_t num_blocks_, block_size_;
  oslo_dtype kv_dtype_;
  std::vector<Tensor> k_, v_;
  std::vector<Tensor> ks_, vs_;     // I8: scales [num_blocks, nkvl, block_size]
  std::vector<PagedChunk> chunks_;  // the step's, as begin_step() got them
  std::vector<int64_t> triples_;    // (row, start, n) per chunk
  Tensor table_;                    // [chunks, blocks] i64
};

}  // namespace serve
}  // namespace oslo
