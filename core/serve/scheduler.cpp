#include "core/serve/scheduler.hpp"

#include <algorithm>

#include "core/common/error.hpp"

namespace oslo {
namespace serve {

Scheduler::Scheduler(BlockPool& pool, SchedulerLimits limits) : pool_(pool), limits_(limits) {
  if (limits.max_seqs < 1)
    throw Error(OSLO_ERR_INVALID_ARGUMENT,
                str("scheduler: max_seqs must be >= 1, got ", limits.max_seqs));
  if (limits.max_step_tokens < 1)
    throw Error(OSLO_ERR_INVALID_ARGUMENT,
                str("scheduler: max_step_tokens must be >= 1, got ", limits.max_step_tokens));
}

Scheduler::~Scheduler() {
  for (auto& kv : seqs_) {
    Sequence& s = *kv.second;
    for (auto it = s.blocks.rbegin(); it != s.blocks.rend(); ++it) pool_.release(*it);
  }
}

Sequence& Scheduler::add(int64_t id, std::vector<int64_t> prompt, int64_t max_new_tokens) {
  if (seqs_.count(id))
    throw Error(OSLO_ERR_INVALID_ARGUMENT, str("request ", id, " exists already"));
  if (prompt.empty()) throw Error(OSLO_ERR_INVALID_ARGUMENT, str("request ", id, ": empty prompt"));
  if (max_new_tokens < 1)
    throw Error(OSLO_ERR_INVALID_ARGUMENT,
                str("request ", id, ": max_new_tokens must be >= 1, got ", max_new_tokens));
  const int64_t len = static_cast<int64_t>(prompt.size());
  const int64_t bs = pool_.block_size();
  // The last generated token is never fed back: max_len - 1 positions.
  const int64_t capacity = pool_.num_blocks() * bs;
  if (max_new_tokens > capacity || len - 1 > capacity - max_new_tokens)
    throw Error(OSLO_ERR_INVALID_ARGUMENT,
                str("request ", id, ": ", len, " prompt tokens + ", max_new_tokens,
                    " new tokens need more than the KV pool's ", capacity, " positions (",
                    pool_.num_blocks(), " blocks of ", bs, ")"));
  auto s = std::make_unique<Sequence>();
  s->id = id;
  s->tokens = std::move(prompt);
  s->prompt_len = len;
  s->max_len = len + max_new_tokens;
  Sequence& ref = *s;
  seqs_.emplace(id, std::move(s));
  waiting_.push_back(&ref);
  return ref;
}

Sequence* Scheduler::find(int64_t id) {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? nullptr : it->second.get();
}

bool Scheduler::remove(int64_t id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return false;
  Sequence* s = it->second.get();
  free_blocks(*s, nullptr);
  running_.erase(std::remove(running_.begin(), running_.end(), s), running_.end());
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), s), waiting_.end());
  seqs_.erase(it);
  return true;
}

void Scheduler::free_blocks(Sequence& s, StepPlan* plan) {
  // Last block first: a prefix's continuations are evicted before it.
  for (auto it = s.blocks.rbegin(); it != s.blocks.rend(); ++it) pool_.release(*it);
  if (plan) {
    auto& c = plan->copies;
    c.erase(std::remove_if(c.begin(), c.end(),
                           [&s](const BlockCopy& x) {
                             return std::find(s.blocks.begin(), s.blocks.end(), x.dst) !=
                                    s.blocks.end();
                           }),
            c.end());
  }
  s.blocks.clear();
  s.keys.clear();
  s.computed = 0;
}

int64_t Scheduler::match_prefix(Sequence& s) {
  const int64_t bs = pool_.block_size();
  const int64_t len = static_cast<int64_t>(s.tokens.size());
  // Only from the end of s's published chain, at a block boundary: on
  // admission (no blocks yet), and while a running prompt is still being
  // computed (another request may have published its next blocks since).
  if (!pool_.prefix_caching() || s.keys.size() != s.blocks.size() ||
      s.computed != static_cast<int64_t>(s.blocks.size()) * bs)
    return 0;
  const int64_t start = s.computed;
  for (int64_t j = static_cast<int64_t>(s.blocks.size()); (j + 1) * bs <= len; ++j) {
    const BlockPool::Key parent = j ? s.keys[static_cast<size_t>(j - 1)] : 0;
    const int64_t b = pool_.lookup(parent, s.tokens.data() + j * bs);
    if (b < 0) break;
    s.blocks.push_back(b);
    s.keys.push_back(pool_.key_of(b));
  }
  const int64_t hit = static_cast<int64_t>(s.blocks.size()) * bs;
  // The last token is always computed: its logits choose the next token.
  s.computed = std::max(start, std::min(hit, len - 1));
  if (s.computed < hit) s.keys.pop_back();  // that block is written again
  return s.computed - start;
}

bool Scheduler::filled_by_plan(const Sequence& s, const StepPlan& plan) const {
  if (!pool_.prefix_caching() || plan.chunks.empty()) return false;
  const int64_t bs = pool_.block_size();
  const int64_t len = static_cast<int64_t>(s.tokens.size());
  // Where s's computation would start: past its published blocks and the
  // ones the index holds after them (what match_prefix would take).
  if (s.keys.size() != s.blocks.size() ||
      s.computed != static_cast<int64_t>(s.blocks.size()) * bs)
    return false;
  int64_t j = static_cast<int64_t>(s.blocks.size());
  BlockPool::Key parent = j ? s.keys.back() : 0;
  for (; (j + 1) * bs <= len; ++j) {
    const int64_t b = pool_.find(parent, s.tokens.data() + j * bs);
    if (b < 0) break;
    parent = pool_.key_of(b);
  }
  const int64_t end = (j + 1) * bs;  // the next block's end
  if (end > s.prompt_len) return false;  // not a full prompt block
  for (const Chunk& c : plan.chunks) {
    const Sequence& t = *c.seq;
    if (&t == &s || c.start >= end || c.start + c.n < end ||
        static_cast<int64_t>(t.tokens.size()) < end)
      continue;
    if (std::equal(s.tokens.begin(), s.tokens.begin() + end, t.tokens.begin())) return true;
  }
  return false;
}

bool Scheduler::reserve(Sequence& s, int64_t upto, StepPlan& plan) {
  const int64_t bs = pool_.block_size();
  const size_t j = static_cast<size_t>(s.computed / bs);
  if (j < s.blocks.size()) {
    // A block found in the prefix index gets the last prompt token written
    // again: write a private copy (copy on write), so that nobody reading
    // the block sees it change. When the pool has no block for the copy and
    // nobody else uses this one, it is written in place (same tokens after
    // the same prefix: its content stays what its key says).
    const int64_t b = s.blocks[j];
    const bool shared = pool_.ref_count(b) > 1;
    if (shared || pool_.key_of(b) != 0) {
      const int64_t nb = pool_.allocate();
      if (nb >= 0) {
        plan.copies.push_back({b, nb});
        pool_.release(b);
        s.blocks[j] = nb;
        if (s.keys.size() > j) s.keys.resize(j);
      } else if (shared) {
        return false;
      }
    }
  }
  const size_t need = static_cast<size_t>((upto + bs - 1) / bs);
  while (s.blocks.size() < need) {
    const int64_t nb = pool_.allocate();
    if (nb < 0) return false;
    s.blocks.push_back(nb);
  }
  return true;
}

void Scheduler::preempt(Sequence& s, StepPlan& plan) {
  free_blocks(s, &plan);
  s.running = false;
  ++s.preemptions;
  running_.erase(std::remove(running_.begin(), running_.end(), &s), running_.end());
  waiting_.push_front(&s);
  plan.preempted.push_back(s.id);
}

StepPlan Scheduler::schedule() {
  StepPlan plan;
  int64_t budget = limits_.max_step_tokens;
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Sequence& s = *running_[i];
    const int64_t len = static_cast<int64_t>(s.tokens.size());
    if (filled_by_plan(s, plan)) continue;
    s.cached_tokens += match_prefix(s);
    const int64_t n = std::min(len - s.computed, budget);
    if (n <= 0) continue;
    bool gone = false;
    while (!reserve(s, s.computed + n, plan)) {
      // The youngest gives way (never an older one: no request starves).
      Sequence& victim = *running_.back();
      preempt(victim, plan);
      if (&victim == &s) {
        gone = true;
        break;
      }
    }
    if (gone) break;
    plan.chunks.push_back({&s, s.computed, n, s.computed + n == len});
    budget -= n;
  }
  if (!plan.preempted.empty()) return plan;
  size_t w = 0;  // the waiting request looked at
  while (budget > 0 && w < waiting_.size() &&
         static_cast<int64_t>(running_.size()) < limits_.max_seqs) {
    Sequence& s = *waiting_[w];
    if (filled_by_plan(s, plan)) {
      ++w;  // next step; those behind it may go first
      continue;
    }
    const int64_t hit = match_prefix(s);
    const int64_t len = static_cast<int64_t>(s.tokens.size());
    const int64_t n = std::min(len - s.computed, budget);
    if (!reserve(s, s.computed + n, plan)) {
      free_blocks(s, &plan);  // waits, first in line, for blocks to free up
      break;
    }
    waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(w));
    s.running = true;
    s.cached_tokens += hit;
    running_.push_back(&s);
    plan.chunks.push_back({&s, s.computed, n, s.computed + n == len});
    budget -= n;
  }
  return plan;
}

void Scheduler::commit(const StepPlan& plan) {
  const int64_t bs = pool_.block_size();
  for (const Chunk& c : plan.chunks) {
    Sequence& s = *c.seq;
    s.computed = c.start + c.n;
    // Publish the blocks this chunk filled.
    while (static_cast<int64_t>(s.keys.size()) < s.computed / bs) {
      const size_t j = s.keys.size();
      const int64_t b = s.blocks[j];
      const BlockPool::Key parent = j ? s.keys[j - 1] : 0;
      BlockPool::Key key = pool_.key_of(b);
      if (key == 0) key = pool_.publish(b, parent, s.tokens.data() + static_cast<int64_t>(j) * bs);
      s.keys.push_back(key);
    }
  }
}

void Scheduler::append(Sequence& s, int64_t token) {
  if (static_cast<int64_t>(s.tokens.size()) >= s.max_len)
    throw Error(OSLO_ERR_INTERNAL,
                str("request ", s.id, ": a token past max_len ", s.max_len, " appended"));
  s.tokens.push_back(token);
}

}  // namespace serve
}  // namespace oslo
