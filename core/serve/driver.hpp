// What drives a serving engine for the C ABI and the bindings: the three
// ways to take its output (include/oslo.h, "Serving engine").
//  - By hand: step() runs one step and keeps its events until the next.
//  - Driven: run() steps until the engine is shut down, and next(id) takes
//    a request's output from its queue (every event of a driven step goes
//    to its request's queue); when nothing runs run() and no other next()
//    is stepping, next() steps the engine itself.
//  - A callback: every event of any step goes to it (no queues).
// The first step() or run()/next() fixes the way; mixing them is refused.
//
// Threads: add(), cancel-through-engine, next() and state() from any
// thread; step() and run() from one thread at a time (the model's). Lock
// order: the driver's mutex, then the engine's.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/serve/engine.hpp"

namespace oslo {
namespace serve {

class Driver {
 public:
  using Callback = std::function<void(const Event&)>;

  // Over `engine` (outlives the driver); on_event may be empty.
  Driver(Engine& engine, Callback on_event);

  // engine.add, and the request's queue. Any thread.
  int64_t add(Request r);

  // One step by hand; its events stay until the next step. Throws
  // oslo::Error (OSLO_ERR_INVALID_ARGUMENT when the engine is driven), and
  // a failed step's error after keeping its events. One thread.
  const std::vector<Event>& step();
  const std::vector<Event>& last_events() const { return events_; }

  // Steps until the engine is shut down. Throws a failed step's error after
  // delivering its events; OSLO_ERR_INVALID_ARGUMENT when the engine is
  // stepped by hand or run() already runs. One thread.
  void run();

  // A request's output since the last next(): at most max_tokens tokens and
  // max_text bytes of text (whole UTF-8 characters; max_text is 0 or >= 4),
  // and its finish once everything has been taken (the request is then
  // forgotten). Waits up to timeout_ms (>= 0) for output, stepping the
  // engine itself while nothing else steps. Throws oslo::Error:
  // OSLO_ERR_INVALID_ARGUMENT (a request not live, the engine stepped by
  // hand or with a callback), OSLO_ERR_TIMEOUT (nothing within timeout_ms).
  // Any thread.
  struct Output {
    std::vector<int64_t> tokens;
    std::string text;
    Finish finish = Finish::kNone;
    oslo_status status = OSLO_OK;
    std::string error;
  };
  Output next(int64_t id, int64_t timeout_ms, size_t max_tokens, size_t max_text);

  // OSLO_REQUEST_* of include/oslo.h: 0 unknown, 1 waiting, 2 running, 3
  // finished with output left to read. Any thread.
  int state(int64_t id) const;

  Engine& engine() { return engine_; }

 private:
  enum class Mode { kNone, kHand, kDriven };
  struct Queue {
    std::vector<int64_t> tokens;
    std::string text;
    Finish finish = Finish::kNone;
    oslo_status status = OSLO_OK;
    std::string error;
  };
  void claim(Mode m, const char* what);  // under mu_
  // Steps once on this thread (stepping_ set by the caller, mu_ not held);
  // returns the failure, if any.
  std::exception_ptr step_once(std::vector<Event>& events);
  // Into the requests' queues (driven) or forgets finished ones; under
  // mu_. The callback is called before, without mu_ (it may add).
  void deliver(const std::vector<Event>& events);

  Engine& engine_;
  Callback on_event_;
  std::vector<Event> events_;  // the last hand step's

  mutable std::mutex mu_;
  std::condition_variable cv_;
  Mode mode_ = Mode::kNone;
  bool stepping_ = false, running_ = false;
  std::unordered_map<int64_t, Queue> queues_;
};

}  // namespace serve
}  // namespace oslo
