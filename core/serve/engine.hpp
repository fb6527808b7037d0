// The serving engine: requests added at any time, one model step at a time
// over every running request (continuous batching), tokens and text pieces
// out after each step. Built on the inference runner's stack
// (core/model/inference.hpp: run_stack, the head), the paged KV cache
// (paged_kv.hpp), the scheduler (scheduler.hpp) and generate's token choice
// (core/generate/generate.hpp: choose_token), so a request's tokens are the
// tokens generate() gives that request alone (greedy, and sampling with the
// same seed: the request is stream 0, as a lone prompt is).
//
// Threads: add(), cancel(), shutdown() and stats() may be called from any
// thread at any time, also while step() runs; step() from one thread at a
// time.
//
// Ranks: with tensor and pipeline parallelism every rank of the world
// group makes an engine over its part of the model and calls step() in a
// loop; requests are added and cancelled on world rank 0 only, the leader.
// At each step the leader sends the new requests and cancels to the other
// ranks (one control message), every rank runs the same schedule and the
// same model step, and the leader's token choices go to the others, so no
// rank can drift. A leader with nothing to do waits in step() (up to
// idle_wait_ms) for work, then steps anyway: the followers wait for the
// leader's steps with the context's timeout, so the leader keeps stepping
// while the engine lives. shutdown() (leader) ends every rank's engine at
// the next step. A rank that fails or dies fails every rank's step (a
// communicator error or timeout naming it), never a hang. Data-parallel
// replicas are not supported (data-parallel size 1).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/comm/control.hpp"
#include "core/generate/generate.hpp"
#include "core/model/inference.hpp"
#include "core/serve/block_pool.hpp"
#include "core/serve/paged_kv.hpp"
#include "core/serve/scheduler.hpp"
#include "core/serve/text_stream.hpp"

namespace oslo {
namespace serve {

struct EngineOptions {
  // KV blocks on each rank; 0: as many as kv_memory_bytes holds.
  int64_t num_blocks = 0;
  int64_t kv_memory_bytes = int64_t{1} << 30;  // used when num_blocks is 0
  int64_t block_size = 16;
  int64_t max_seqs = 64;          // running requests at most
  int64_t max_step_tokens = 512;  // tokens per step (decode + prompt chunks)
  bool prefix_caching = true;
  // How long the leader's step() waits for work when there is none.
  int64_t idle_wait_ms = 20;
  // The paged cache's storage: F32 or I8 (core/serve/paged_kv.hpp).
  oslo_dtype kv_dtype = OSLO_DTYPE_F32;
};

// One request: its prompt's token ids and how to continue it (generate()'s
// options: max_new_tokens, greedy or sampling, temperature, top_k, top_p,
// seed, repetition_penalty, eos_token_ids, min_new_tokens; num_beams must
// be 1) and stop strings (they need the engine's decode function).
struct Request {
  std::vector<int64_t> prompt;
  GenerateOptions options;
  std::vector<std::string> stop;
};

enum class Finish { kNone = 0, kLength, kEos, kStop, kCancelled, kError };
const char* finish_name(Finish f);

// What a step did for one request: its new tokens (and their text, whole
// UTF-8 characters, when the engine decodes), and whether it finished.
struct Event {
  int64_t id = 0;
  std::vector<int64_t> tokens;
  std::string text;
  Finish finish = Finish::kNone;
  oslo_status status = OSLO_OK;  // finish == kError: the failure's status
  std::string error;             // finish == kError: why
};

// Where a live request is (Engine::state).
enum class State { kUnknown = 0, kWaiting, kRunning };

struct EngineStats {
  int64_t running = 0, waiting = 0;
  int64_t blocks_used = 0, blocks_total = 0, block_size = 0;
  int64_t cached_tokens = 0;  // tokens in the KV cache (running requests)
  int64_t kv_bytes_used = 0;  // bytes of the blocks in use
  int64_t steps = 0, prompt_tokens = 0, generated_tokens = 0;
  int64_t prefix_queries = 0, prefix_hits = 0;
};

class Engine {
 public:
  // Over a loaded causal model's runner and stack (both outlive the
  // engine). decode (may be empty) turns token ids into text: the events'
  // text and stop strings need it. Throws oslo::Error:
  // OSLO_ERR_INVALID_ARGUMENT (bad options), OSLO_ERR_NOT_SUPPORTED (not a
  // causal LM, or several ranks), OSLO_ERR_OUT_OF_MEMORY (the KV pool).
  Engine(InferenceRunner& runner, const BlockStack& stack, const EngineOptions& opt,
         TextStream::Decode decode = nullptr);
  ~Engine();

  // Queues a request and returns its id (1, 2, ...). Throws oslo::Error
  // (OSLO_ERR_INVALID_ARGUMENT) naming what is wrong: an empty prompt, a
  // token outside the vocabulary, bad options (validate_options), beams,
  // stop strings without a decode function, a request longer than the
  // model's positions or than the whole KV pool, a rank other than the
  // leader, an engine shut down. Any thread.
  int64_t add(Request r);
  // Ends a request (waiting or running): its blocks are freed and the next
  // step() reports it finished with kCancelled. False when the id is not a
  // live request. Leader only (OSLO_ERR_INVALID_ARGUMENT elsewhere). Any
  // thread.
  bool cancel(int64_t id);
  // Ends the engine on every rank at the next step: live requests finish
  // with kCancelled, later steps do nothing and add() is refused. Leader
  // only. Any thread.
  void shutdown();
  // One model step over what is scheduled, on every rank together. Events
  // come in the step's order; a finished request's event is its last.
  // Nothing to do: the leader waits up to idle_wait_ms for work, and then
  // (several ranks) still exchanges an empty step. A failure (the model, a
  // rank) throws, after finishing every live request (and every request
  // the step took in) with kError in `events`. One thread.
  void step(std::vector<Event>& events);
  // The same, returning the events (lost when it throws).
  std::vector<Event> step();
  // Whether no request is waiting or running (and none was added since the
  // last step). Any thread.
  bool idle() const;
  // Whether the engine was shut down (every later step does nothing).
  bool stopped() const;
  bool leader() const { return leader_; }
  EngineStats stats() const;
  // Where request `id` is: waiting (queued, or in the scheduler without a
  // place in the batch), running, or unknown (never added, or finished).
  // Any thread.
  State state(int64_t id) const;

 private:
  struct Live;
  struct Incoming;
  // The step's new requests, cancels and stop flag: the leader's own,
  // shared with the other ranks.
  Incoming take_incoming();
  // Sends the leader's Incoming to the other ranks (several ranks).
  void share(Incoming& in);
  // After a failed step: every live request, and those `taken` in, ends
  // with kError.
  void fail_all(const std::exception& ex, Incoming* taken, std::vector<Event>& events);
  // The stats and running ids as of now (end of a step).
  void publish();
  void apply(Incoming& in, std::vector<Event>& events);
  void run_plan(const StepPlan& plan, std::vector<Event>& events);
  void finish(Live& l, Finish f, std::vector<Event>& events, const std::string& error = "",
              oslo_status status = OSLO_OK);

  InferenceRunner& runner_;
  const BlockStack& stack_;
  EngineOptions opt_;
  TextStream::Decode decode_;
  std::unique_ptr<BlockPool> pool_;
  std::unique_ptr<Scheduler> sched_;
  std::unique_ptr<PagedKV> kv_;
  std::unordered_map<int64_t, std::unique_ptr<Live>> live_;

  Control* ctl_ = nullptr;  // the world group's, with several ranks
  bool leader_ = true;
  bool stopped_ = false;  // the stepping thread's view

  mutable std::mutex mu_;  // guards what other threads touch:
  std::condition_variable work_;
  std::deque<std::pair<int64_t, Request>> inbox_;
  std::unordered_set<int64_t> cancels_, known_;
  std::unordered_set<int64_t> running_ids_;  // as of the last step's end
  bool stop_ = false, stop_seen_ = false;
  int64_t next_id_ = 1;
  EngineStats stats_;
};

}  // namespace serve
}  // namespace oslo
