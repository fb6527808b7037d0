#include "core/serve/block_pool.hpp"

#include <algorithm>
#include <limits>

#include "core/common/error.hpp"

namespace oslo {
namespace serve {

BlockPool::BlockPool(int64_t num_blocks, int64_t block_size, bool prefix_caching)
    : block_size_(block_size), prefix_caching_(prefix_caching) {
  if (num_blocks < 1 || num_blocks > std::numeric_limits<int32_t>::max())
    throw Error(OSLO_ERR_INVALID_ARGUMENT,
                str("KV block pool: num_blocks must be in [1, 2^31), got ", num_blocks));
  if (block_size < 1 || block_size > (int64_t{1} << 20))
    throw Error(OSLO_ERR_INVALID_ARGUMENT,
                str("KV block pool: block_size must be in [1, 2^20], got ", block_size));
  const size_t n = static_cast<size_t>(num_blocks);
  ref_.assign(n, 0);
  key_.assign(n, 0);
  parent_.assign(n, 0);
  hash_.assign(n, 0);
  prev_.assign(n, -1);
  next_.assign(n, -1);
  if (prefix_caching_) tokens_.assign(n * static_cast<size_t>(block_size), 0);
  plain_free_.reserve(n);
  // Lowest ids first out of the stack.
  for (int64_t b = num_blocks - 1; b >= 0; --b) plain_free_.push_back(b);
  free_count_ = num_blocks;
}

int64_t BlockPool::allocate() {
  int64_t b = -1;
  if (!plain_free_.empty()) {
    b = plain_free_.back();
    plain_free_.pop_back();
  } else if (lru_head_ >= 0) {
    b = lru_head_;
    lru_remove(b);
    unpublish(b);
  } else {
    return -1;
  }
  ref_[static_cast<size_t>(b)] = 1;
  --free_count_;
  return b;
}

int64_t BlockPool::ref_count(int64_t b) const {
  if (b < 0 || b >= num_blocks())
    throw Error(OSLO_ERR_INVALID_ARGUMENT, str("KV block pool: no block ", b));
  return ref_[static_cast<size_t>(b)];
}

BlockPool::Key BlockPool::key_of(int64_t b) const {
  ref_count(b);  // checks b
  return key_[static_cast<size_t>(b)];
}

void BlockPool::retain(int64_t b) {
  const size_t i = static_cast<size_t>(b);
  if (ref_count(b) == 0) {
    if (key_[i] == 0)
      throw Error(OSLO_ERR_INVALID_ARGUMENT,
                  str("KV block pool: retain of free unpublished block ", b));
    lru_remove(b);
    --free_count_;
  }
  ++ref_[i];
}

void BlockPool::release(int64_t b) {
  const size_t i = static_cast<size_t>(b);
  if (ref_count(b) == 0)
    throw Error(OSLO_ERR_INVALID_ARGUMENT, str("KV block pool: release of free block ", b));
  if (--ref_[i] > 0) return;
  ++free_count_;
  if (key_[i] != 0)
    lru_push_back(b);
  else
    plain_free_.push_back(b);
}

uint64_t BlockPool::hash(Key parent, const int64_t* tokens) const {
  // FNV-1a over the parent key and the ids, then a final mix (splitmix64's).
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](uint64_t v) {
    for (int k = 0; k < 8; ++k) {
      h ^= (v >> (8 * k)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  mix(parent);
  for (int64_t t = 0; t < block_size_; ++t) mix(static_cast<uint64_t>(tokens[t]));
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  return h ^ (h >> 31);
}

bool BlockPool::same(int64_t b, Key parent, const int64_t* tokens) const {
  const size_t i = static_cast<size_t>(b);
  if (parent_[i] != parent) return false;
  const int64_t* have = tokens_.data() + i * static_cast<size_t>(block_size_);
  return std::equal(have, have + block_size_, tokens);
}

int64_t BlockPool::find(Key parent, const int64_t* tokens) const {
  if (!prefix_caching_) return -1;
  auto range = index_.equal_range(hash(parent, tokens));
  for (auto it = range.first; it != range.second; ++it)
    if (same(it->second, parent, tokens)) return it->second;
  return -1;
}

int64_t BlockPool::lookup(Key parent, const int64_t* tokens) {
  ++queries_;
  const int64_t b = find(parent, tokens);
  if (b < 0) return -1;
  retain(b);
  ++hits_;
  return b;
}

BlockPool::Key BlockPool::publish(int64_t b, Key parent, const int64_t* tokens) {
  const size_t i = static_cast<size_t>(b);
  if (ref_count(b) == 0)
    throw Error(OSLO_ERR_INVALID_ARGUMENT, str("KV block pool: publish of free block ", b));
  if (key_[i] != 0)
    throw Error(OSLO_ERR_INVALID_ARGUMENT,
                str("KV block pool: block ", b, " is published already"));
  if (!prefix_caching_) return 0;
  const uint64_t h = hash(parent, tokens);
  auto range = index_.equal_range(h);
  for (auto it = range.first; it != range.second; ++it)
    if (same(it->second, parent, tokens)) return key_[static_cast<size_t>(it->second)];
  key_[i] = next_key_++;
  parent_[i] = parent;
  hash_[i] = h;
  std::copy(tokens, tokens + block_size_,
            tokens_.begin() + static_cast<ptrdiff_t>(i) * block_size_);
  index_.emplace(h, b);
  return key_[i];
}

void BlockPool::unpublish(int64_t b) {
  const size_t i = static_cast<size_t>(b);
  auto range = index_.equal_range(hash_[i]);
  for (auto it = range.first; it != range.second; ++it) {
    if (it->second == b) {
      index_.erase(it);
      break;
    }
  }
  key_[i] = 0;
  parent_[i] = 0;
  hash_[i] = 0;
}

void BlockPool::lru_push_back(int64_t b) {
  const size_t i = static_cast<size_t>(b);
  prev_[i] = lru_tail_;
  next_[i] = -1;
  if (lru_tail_ >= 0)
    next_[static_cast<size_t>(lru_tail_)] = b;
  else
    lru_head_ = b;
  lru_tail_ = b;
}

void BlockPool::lru_remove(int64_t b) {
  const size_t i = static_cast<size_t>(b);
  if (prev_[i] >= 0)
    next_[static_cast<size_t>(prev_[i])] = next_[i];
  else
    lru_head_ = next_[i];
  if (next_[i] >= 0)
    prev_[static_cast<size_t>(next_[i])] = prev_[i];
  else
    lru_tail_ = prev_[i];
  prev_[i] = next_[i] = -1;
}

void BlockPool::check() const {
  auto fail = [](const std::string& what) {
    throw Error(OSLO_ERR_INTERNAL, "KV block pool invariant: " + what);
  };
  const int64_t n = num_blocks();
  std::vector<int> seen(static_cast<size_t>(n), 0);
  for (int64_t b : plain_free_) {
    if (b < 0 || b >= n) fail(str("plain free list holds ", b));
    if (seen[static_cast<size_t>(b)]++) fail(str("block ", b, " twice on the free lists"));
    if (ref_[static_cast<size_t>(b)] != 0) fail(str("plain free block ", b, " has users"));
    if (key_[static_cast<size_t>(b)] != 0) fail(str("plain free block ", b, " is published"));
  }
  int64_t prev = -1, count = 0;
  for (int64_t b = lru_head_; b >= 0; b = next_[static_cast<size_t>(b)]) {
    if (++count > n) fail("the LRU list loops");
    if (seen[static_cast<size_t>(b)]++) fail(str("block ", b, " twice on the free lists"));
    if (prev_[static_cast<size_t>(b)] != prev) fail(str("LRU back link of ", b));
    if (ref_[static_cast<size_t>(b)] != 0) fail(str("LRU block ", b, " has users"));
    if (key_[static_cast<size_t>(b)] == 0) fail(str("LRU block ", b, " is not published"));
    prev = b;
  }
  if (prev != lru_tail_) fail("LRU tail");
  int64_t free_seen = 0, published = 0;
  for (int64_t b = 0; b < n; ++b) {
    const size_t i = static_cast<size_t>(b);
    if (ref_[i] < 0) fail(str("block ", b, " has ", ref_[i], " users"));
    if (ref_[i] == 0) {
      ++free_seen;
      if (!seen[i]) fail(str("free block ", b, " is on no free list"));
    } else if (seen[i]) {
      fail(str("used block ", b, " is on a free list"));
    }
    if (key_[i] != 0) {
      ++published;
      if (key_[i] >= next_key_) fail(str("block ", b, " has a key never given"));
      bool found = false;
      auto range = index_.equal_range(hash_[i]);
      for (auto it = range.first; it != range.second; ++it) found |= it->second == b;
      if (!found) fail(str("published block ", b, " is not in the index"));
      if (hash_[i] != hash(parent_[i], tokens_.data() + i * static_cast<size_t>(block_size_)))
        fail(str("block ", b, "'s hash does not match its content"));
    }
  }
  if (free_seen != free_count_) fail(str("free count ", free_count_, " but ", free_seen, " free"));
  if (static_cast<size_t>(published) != index_.size())
    fail(str("index holds ", index_.size(), " entries for ", published, " published blocks"));
}

}  // namespace serve
}  // namespace oslo
