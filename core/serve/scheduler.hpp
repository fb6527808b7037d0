// The serving engine's step scheduler: which requests compute which tokens
// in the next model step, and where in the paged KV cache they go
// (continuous batching with chunked prefill, as vLLM's V1 scheduler and
// Megatron's dynamic inference context schedule).
//
// A step has a token budget (max_step_tokens) and a sequence limit
// (max_seqs). Each step:
//   1. Running requests, oldest first, each get what they still need
//      (1 token when decoding; the rest of a prompt chunk by chunk) while
//      the budget lasts. When the pool has no block for one, the youngest
//      running request is preempted (its blocks freed, back to the head of
//      the waiting queue, to recompute its prompt and generated tokens when
//      readmitted: what it computed is often still findable in the prefix
//      index) until the older one fits.
//   2. Then, if nothing was preempted, waiting requests are admitted in
//      arrival order (none overtakes the first: no starvation) while budget,
//      sequence limit and blocks last; a long prompt takes the rest of the
//      budget and continues next step (chunked prefill), so decoding
//      requests are never stalled behind it.
// On admission, and at each block boundary of a prompt computed chunk by
// chunk, the request's next full blocks are looked up in the prefix index
// (BlockPool): found blocks are shared (reference counted) and not
// computed again (so requests that arrive together with one system prompt
// compute it about once: the first publishes its blocks as it goes). At least the last token is
// always computed (its logits pick the next token); when that falls into a found block, the block
// is copied first (copy on write: StepPlan::copies) and the copy written, so no other reader sees
// it change (with no block free for the copy and no other user, it is written in place: same tokens
// after the same prefix).
//
// A request that can never fit (prompt + max_new_tokens - 1 positions over
// the whole pool) is refused by add(). A lone running request always fits,
// so every request finishes.
//
// Not thread-safe: the engine's stepping thread owns it.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <unordered_map>
#include <vector>

#include "core/serve/block_pool.hpp"

namespace oslo {
namespace serve {

struct SchedulerLimits {
  int64_t max_seqs = 64;          // running requests at most (>= 1)
  int64_t max_step_tokens = 512;  // tokens computed per step at most (>= 1)
};

// One request's sequence: its tokens and its KV blocks.
struct Sequence {
  int64_t id = 0;
  std::vector<int64_t> tokens;  // the prompt, then the generated tokens
  int64_t prompt_len = 0;
  int64_t max_len = 0;   // prompt_len + max_new_tokens
  int64_t computed = 0;  // leading tokens whose K and V are in `blocks`
  // The block table: blocks[j] holds positions [j * block_size, (j + 1) *
  // block_size).
  std::vector<int64_t> blocks;
  // Content keys of the first keys.size() blocks (full and computed).
  std::vector<BlockPool::Key> keys;
  bool running = false;
  int64_t cached_tokens = 0;  // tokens found in the prefix index, all admissions
  int64_t preemptions = 0;
};

// tokens [start, start + n) of seq to compute this step; `sample`: the
// chunk ends at the last known token, whose logits choose the next one.
struct Chunk {
  Sequence* seq;
  int64_t start, n;
  bool sample;
};

// A whole block (every layer's K and V) to copy before the step.
struct BlockCopy {
  int64_t src, dst;
};

struct StepPlan {
  std::vector<BlockCopy> copies;
  std::vector<Chunk> chunks;       // running requests first, then the admitted
  std::vector<int64_t> preempted;  // request ids sent back to waiting
  int64_t tokens() const {
    int64_t t = 0;
    for (const Chunk& c : chunks) t += c.n;
    return t;
  }
};

class Scheduler {
 public:
  // The pool must outlive the scheduler. Throws oslo::Error
  // (OSLO_ERR_INVALID_ARGUMENT) on limits below 1.
  Scheduler(BlockPool& pool, SchedulerLimits limits);
  ~Scheduler();

  // Queues a request. Throws oslo::Error (OSLO_ERR_INVALID_ARGUMENT) on a
  // duplicate id, an empty prompt, max_new_tokens < 1, or a request whose
  // prompt_len + max_new_tokens - 1 positions exceed the pool.
  Sequence& add(int64_t id, std::vector<int64_t> prompt, int64_t max_new_tokens);
  // Drops a request (waiting or running), freeing its blocks. Returns false
  // for an unknown id.
  bool remove(int64_t id);
  Sequence* find(int64_t id);

  // The next step.
  StepPlan schedule();
  // After the step ran `plan` (copies done, chunks' K and V written): marks
  // the chunks computed and publishes their newly full blocks. The engine
  // then append()s a token to each sampling chunk's sequence (or removes
  // it).
  void commit(const StepPlan& plan);
  // Appends a generated token. Throws if the sequence is at max_len.
  void append(Sequence& s, int64_t token);

  size_t waiting() const { return waiting_.size(); }
  size_t running() const { return running_.size(); }
  const BlockPool& pool() const { return pool_; }
  const SchedulerLimits& limits() const { return limits_; }

 private:
  // Gives s the blocks for positions [0, upto) and makes the block of
  // position s.computed writable (copy on write). False when the pool ran
  // out (s keeps what it got).
  bool reserve(Sequence& s, int64_t upto, StepPlan& plan);
  // Looks s's next full blocks up in the prefix index (on admission, and
  // while its prompt is computed chunk by chunk); returns the tokens found
  // (s.computed moves over them).
  int64_t match_prefix(Sequence& s);
  // Whether a chunk already in `plan` fills, this step, the full prompt
  // block that s would compute next after what the prefix index holds for
  // it (same tokens after the same prefix): s then waits a step and finds
  // that block published instead of computing it again (requests sharing
  // a system prompt that arrive together compute it once).
  bool filled_by_plan(const Sequence& s, const StepPlan& plan) const;
  void free_blocks(Sequence& s, StepPlan* plan);
  void preempt(Sequence& s, StepPlan& plan);

  BlockPool& pool_;
  SchedulerLimits limits_;
  std::unordered_map<int64_t, std::unique_ptr<Sequence>> seqs_;
  std::vector<Sequence*> running_;  // admission order
  std::deque<Sequence*> waiting_;   // arrival order (preempted ones at the head)
};

}  // namespace serve
}  // namespace oslo
