// The KV block pool: allocation, reference counts, the prefix index and its
// eviction order, against hand-worked cases and, over random operations,
// against a plain reference model of what must be findable.
#include <map>
#include <random>
#include <set>

#include "core/serve/block_pool.hpp"
#include "tests/serve/serve_common.hpp"

using oslo::serve::BlockPool;

namespace {

void test_allocate_release(void**) {
  BlockPool p(3, 4);
  assert_int_equal(p.free_blocks(), 3);
  const int64_t a = p.allocate(), b = p.allocate(), c = p.allocate();
  assert_true(a >= 0 && b >= 0 && c >= 0 && a != b && b != c && a != c);
  assert_int_equal(p.allocate(), -1);  // exhausted: -1, no throw
  assert_int_equal(p.used_blocks(), 3);
  p.retain(b);
  assert_int_equal(p.ref_count(b), 2);
  p.release(b);
  assert_int_equal(p.free_blocks(), 0);
  p.release(b);
  assert_int_equal(p.free_blocks(), 1);
  assert_int_equal(p.allocate(), b);
  p.check();
  // Misuse is refused by name.
  expect_error([&] { p.release(99); }, OSLO_ERR_INVALID_ARGUMENT);
  p.release(a);
  expect_error([&] { p.release(a); }, OSLO_ERR_INVALID_ARGUMENT);
  expect_error([&] { p.retain(a); }, OSLO_ERR_INVALID_ARGUMENT);  // free, unpublished
  expect_error([] { BlockPool(0, 4); }, OSLO_ERR_INVALID_ARGUMENT);
  expect_error([] { BlockPool(4, 0); }, OSLO_ERR_INVALID_ARGUMENT);
  p.check();
}

void test_prefix_index(void**) {
  BlockPool p(4, 2);
  const int64_t t1[] = {5, 6}, t2[] = {7, 8};
  const int64_t a = p.allocate();
  const BlockPool::Key ka = p.publish(a, 0, t1);
  assert_true(ka != 0);
  const int64_t b = p.allocate();
  const BlockPool::Key kb = p.publish(b, ka, t2);
  assert_true(kb != 0 && kb != ka);
  // Found while in use: shared.
  assert_int_equal(p.lookup(0, t1), a);
  assert_int_equal(p.ref_count(a), 2);
  // Content is (parent, tokens): the same tokens after another prefix, or
  // other tokens, are not found.
  assert_int_equal(p.lookup(0, t2), -1);
  assert_int_equal(p.lookup(kb, t2), -1);
  assert_int_equal(p.lookup(ka, t2), b);
  assert_int_equal(p.queries(), 4);
  assert_int_equal(p.hits(), 2);
  // Publishing equal content again keeps the first (the caller's block
  // stays private) and returns its key.
  const int64_t c = p.allocate();
  assert_int_equal(p.publish(c, 0, t1), ka);
  assert_int_equal(p.key_of(c), 0);
  expect_error([&] { p.publish(a, 0, t1); }, OSLO_ERR_INVALID_ARGUMENT);  // published
  p.check();
  // Free but findable, until the space is needed.
  for (int64_t x : {a, a, b, b, c}) p.release(x);
  assert_int_equal(p.free_blocks(), 4);
  assert_int_equal(p.cached_blocks(), 2);
  assert_int_equal(p.lookup(0, t1), a);  // back in use
  assert_int_equal(p.free_blocks(), 3);
  p.release(a);
  p.check();
}

void test_eviction_order(void**) {
  // Unpublished free blocks go first, then published ones least recently
  // freed first; a key dies with its block.
  BlockPool p(3, 1);
  const int64_t t[] = {1}, u[] = {2};
  const int64_t a = p.allocate(), b = p.allocate(), c = p.allocate();
  const BlockPool::Key ka = p.publish(a, 0, t);
  p.publish(b, ka, u);
  p.release(b);  // freed first: evicted first
  p.release(a);
  p.release(c);  // unpublished: reused before either
  assert_int_equal(p.allocate(), c);
  assert_int_equal(p.allocate(), b);
  assert_int_equal(p.cached_blocks(), 1);
  assert_int_equal(p.lookup(ka, u), -1);
  assert_int_equal(p.lookup(0, t), a);
  p.release(a);
  assert_int_equal(p.allocate(), a);
  assert_int_equal(p.cached_blocks(), 0);
  assert_int_equal(p.lookup(0, t), -1);
  p.check();
  // A block published after its key's block was evicted cannot be reached
  // through a new block that happens to get the old one's id.
  p.release(a);
  const int64_t d = p.allocate();  // a's id again
  const BlockPool::Key kd = p.publish(d, 0, u);
  assert_true(kd != ka);
  assert_int_equal(p.lookup(ka, t), -1);
  p.check();
}

void test_caching_off(void**) {
  BlockPool p(2, 2, false);
  const int64_t t[] = {1, 2};
  const int64_t a = p.allocate();
  assert_int_equal(p.publish(a, 0, t), 0);
  assert_int_equal(p.lookup(0, t), -1);
  p.release(a);
  assert_int_equal(p.cached_blocks(), 0);
  p.check();
}

// Random operations against a reference: the set of (parent, tokens) each
// published block holds, which blocks users hold, and that lookup() finds
// exactly the published content.
void test_random_against_model(void**) {
  std::mt19937_64 rng(1234);
  for (int round = 0; round < 20; ++round) {
    const int64_t n = 1 + static_cast<int64_t>(rng() % 12),
                  bs = 1 + static_cast<int64_t>(rng() % 3);
    BlockPool p(n, bs);
    std::multiset<int64_t> held;  // one entry per user
    std::map<std::pair<BlockPool::Key, std::vector<int64_t>>, int64_t> content;
    auto tokens = [&] {
      std::vector<int64_t> t(static_cast<size_t>(bs));
      for (auto& x : t) x = static_cast<int64_t>(rng() % 3);
      return t;
    };
    std::vector<BlockPool::Key> keys{0};
    for (int op = 0; op < 3000; ++op) {
      const int kind = static_cast<int>(rng() % 4);
      if (kind == 0) {
        const int64_t b = p.allocate();
        if (b < 0) {  // only when every block has a user
          assert_int_equal(std::set<int64_t>(held.begin(), held.end()).size(), n);
          continue;
        }
        assert_int_equal(held.count(b), 0);
        // Its old content (if any) is gone.
        for (auto it = content.begin(); it != content.end();)
          it = it->second == b ? content.erase(it) : std::next(it);
        held.insert(b);
      } else if (kind == 1 && !held.empty()) {
        auto it = held.begin();
        std::advance(it, static_cast<long>(rng() % held.size()));
        const int64_t b = *it;
        held.erase(it);
        p.release(b);
      } else if (kind == 2 && !held.empty()) {
        auto it = held.begin();
        std::advance(it, static_cast<long>(rng() % held.size()));
        if (p.key_of(*it) != 0) continue;
        const BlockPool::Key parent = keys[rng() % keys.size()];
        const std::vector<int64_t> t = tokens();
        const BlockPool::Key k = p.publish(*it, parent, t.data());
        auto found = content.find({parent, t});
        if (found != content.end()) {
          assert_int_equal(k, p.key_of(found->second));
        } else {
          content[{parent, t}] = *it;
          keys.push_back(k);
        }
      } else if (kind == 3) {
        const BlockPool::Key parent = keys[rng() % keys.size()];
        const std::vector<int64_t> t = tokens();
        const int64_t b = p.lookup(parent, t.data());
        auto found = content.find({parent, t});
        assert_int_equal(b, found == content.end() ? -1 : found->second);
        if (b >= 0) held.insert(b);
      }
      for (int64_t b = 0; b < n; ++b)
        assert_int_equal(p.ref_count(b), static_cast<int64_t>(held.count(b)));
      p.check();
    }
  }
}

}  // namespace

std::vector<struct CMUnitTest> pool_tests() {
  return {
      cmocka_unit_test(test_allocate_release),     cmocka_unit_test(test_prefix_index),
      cmocka_unit_test(test_eviction_order),       cmocka_unit_test(test_caching_off),
      cmocka_unit_test(test_random_against_model),
  };
}
