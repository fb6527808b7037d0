// The paged KV cache's bookkeeping: which fixed-size blocks of a rank's KV
// pool are in use, by how many sequences, and which full blocks hold a
// prompt prefix that a later request can reuse (vLLM's "automatic prefix
// caching", at block granularity). Only indices live here; the K and V
// memory itself is the inference runner's (one pool tensor per layer,
// indexed by these block ids), so this file knows no backend.
//
// Prefix index. A full block is known by its content key: the key of the
// block before it in its sequence (0 for a sequence's first block) and its
// block_size token ids. Keys are serial numbers, never reused, so a key
// names one exact prefix of tokens: two blocks published with the same key
// hold the same K and V (same tokens at the same positions after the same
// prefix). A block stays findable after its last user releases it, until
// allocate() needs it for something else (least recently freed first); its
// key then dies, and the blocks published under it (its continuations)
// cannot be found any more (they are freed no later than it when a sequence
// releases its blocks last-first, and so are evicted first).
//
// Not thread-safe: one owner (the serving engine's scheduler) calls it.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

namespace oslo {
namespace serve {

class BlockPool {
 public:
  // A content key (0: none, the parent of a sequence's first block).
  using Key = uint64_t;

  // num_blocks >= 1 blocks of block_size >= 1 tokens each; prefix_caching
  // false: publish() and lookup() never share anything. Throws oslo::Error
  // (OSLO_ERR_INVALID_ARGUMENT) on bad sizes.
  BlockPool(int64_t num_blocks, int64_t block_size, bool prefix_caching = true);

  int64_t num_blocks() const { return static_cast<int64_t>(ref_.size()); }
  int64_t block_size() const { return block_size_; }
  bool prefix_caching() const { return prefix_caching_; }
  // Blocks nobody uses (allocate() can hand them out), the findable ones
  // included.
  int64_t free_blocks() const { return free_count_; }
  // Blocks with at least one user.
  int64_t used_blocks() const { return num_blocks() - free_count_; }
  // Published blocks (findable by lookup()), in use or not.
  int64_t cached_blocks() const { return static_cast<int64_t>(index_.size()); }

  // A block for one user (reference count 1, unpublished): a never
  // published free block if there is one, else the least recently freed
  // published one (its key dies). -1 when every block is in use.
  int64_t allocate();
  // One more user of block b (in use or free-but-published, as lookup()
  // hands them out). Throws on a bad id or a free unpublished block.
  void retain(int64_t b);
  // One user fewer; at 0 the block is free (and findable while published).
  // Throws on a bad id or a free block.
  void release(int64_t b);
  int64_t ref_count(int64_t b) const;
  // The block's key, 0 when it is not published.
  Key key_of(int64_t b) const;

  // The published block holding `tokens` (block_size ids) after the prefix
  // `parent`, retained for the caller (a free one is in use again), or -1.
  // Counts a query and, when found, a hit.
  int64_t lookup(Key parent, const int64_t* tokens);
  // lookup() without taking the block or counting: -1 or the block.
  int64_t find(Key parent, const int64_t* tokens) const;
  // Publishes in-use block b as holding `tokens` after `parent` and returns
  // its key. If a block with that content is already published, b stays
  // unpublished and that block's key is returned (the caller keeps its own
  // copy; continuations chain on either: same content). With prefix caching
  // off, returns 0 and publishes nothing. Throws if b is free or published.
  Key publish(int64_t b, Key parent, const int64_t* tokens);

  // lookup() calls so far and how many found a block.
  int64_t queries() const { return queries_; }
  int64_t hits() const { return hits_; }

  // Checks every internal invariant (reference counts against the free
  // lists, the index against the blocks); throws oslo::Error
  // (OSLO_ERR_INTERNAL) naming the first broken one. For tests.
  void check() const;

 private:
  uint64_t hash(Key parent, const int64_t* tokens) const;
  bool same(int64_t b, Key parent, const int64_t* tokens) const;
  void unpublish(int64_t b);
  // The free list of published blocks, least recently freed at the head.
  void lru_push_back(int64_t b);
  void lru_remove(int64_t b);

  int64_t block_size_;
  bool prefix_caching_;
  std::vector<int32_t> ref_;
  std::vector<Key> key_, parent_;
  std::vector<uint64_t> hash_;
  std::vector<int64_t> tokens_;       // [num_blocks, block_size] of published blocks
  std::vector<int64_t> plain_free_;   // free, unpublished: a stack
  std::vector<int64_t> prev_, next_;  // the LRU list's links (-1: none)
  int64_t lru_head_ = -1, lru_tail_ = -1;
  int64_t free_count_ = 0;
  std::unordered_multimap<uint64_t, int64_t> index_;  // content hash -> block
  Key next_key_ = 1;
  int64_t queries_ = 0, hits_ = 0;
};

}  // namespace serve
}  // namespace oslo
