#include "core/serve/driver.hpp"

#include <algorithm>
#include <chrono>
#include <exception>

#include "core/common/error.hpp"

namespace oslo {
namespace serve {

Driver::Driver(Engine& engine, Callback on_event)
    : engine_(engine), on_event_(std::move(on_event)) {}

void Driver::claim(Mode m, const char* what) {
  if (mode_ == Mode::kNone) mode_ = m;
  if (mode_ == m) return;
  fail(OSLO_ERR_INVALID_ARGUMENT, "serving: ", what,
       mode_ == Mode::kHand
           ? ": the engine is stepped by hand (oslo_engine_step); its events are read with "
             "oslo_engine_get_event"
           : ": the engine is driven by oslo_engine_run / oslo_engine_next; oslo_engine_step "
             "cannot step it too");
}

int64_t Driver::add(Request r) {
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t id = engine_.add(std::move(r));
  queues_[id];
  return id;
}

std::exception_ptr Driver::step_once(std::vector<Event>& events) {
  try {
    engine_.step(events);
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

void Driver::deliver(const std::vector<Event>& events) {
  for (const Event& e : events) {
    auto it = queues_.find(e.id);
    if (it == queues_.end()) continue;
    if (on_event_ || mode_ != Mode::kDriven) {
      if (e.finish != Finish::kNone) queues_.erase(it);
      continue;
    }
    Queue& q = it->second;
    q.tokens.insert(q.tokens.end(), e.tokens.begin(), e.tokens.end());
    q.text += e.text;
    if (e.finish != Finish::kNone) {
      q.finish = e.finish;
      q.status = e.status;
      q.error = e.error;
    }
  }
}

const std::vector<Event>& Driver::step() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    claim(Mode::kHand, "oslo_engine_step");
    OSLO_CHECK(!stepping_, OSLO_ERR_INVALID_ARGUMENT,
               "serving: oslo_engine_step called while another thread steps the engine");
    stepping_ = true;
  }
  events_.clear();
  std::exception_ptr err = step_once(events_);
  if (on_event_)
    for (const Event& e : events_) on_event_(e);
  {
    std::lock_guard<std::mutex> lock(mu_);
    stepping_ = false;
    deliver(events_);
  }
  if (err) std::rethrow_exception(err);
  return events_;
}

void Driver::run() {
  std::unique_lock<std::mutex> lock(mu_);
  claim(Mode::kDriven, "oslo_engine_run");
  OSLO_CHECK(!running_, OSLO_ERR_INVALID_ARGUMENT,
             "serving: oslo_engine_run is already running on another thread");
  running_ = true;
  cv_.wait(lock, [&] { return !stepping_; });  // a next() that is stepping
  stepping_ = true;
  struct Release {
    Driver& d;
    std::unique_lock<std::mutex>& lock;
    ~Release() {
      if (!lock.owns_lock()) lock.lock();
      d.running_ = false;
      d.stepping_ = false;
      d.cv_.notify_all();
    }
  } release{*this, lock};
  while (!engine_.stopped()) {
    lock.unlock();
    std::vector<Event> events;
    std::exception_ptr err = step_once(events);
    if (on_event_)
      for (const Event& e : events) on_event_(e);
    lock.lock();
    deliver(events);
    cv_.notify_all();
    if (err) std::rethrow_exception(err);
  }
}

Driver::Output Driver::next(int64_t id, int64_t timeout_ms, size_t max_tokens, size_t max_text) {
  OSLO_CHECK(timeout_ms >= 0, OSLO_ERR_INVALID_ARGUMENT,
             "oslo_engine_next: timeout_ms must be >= 0 (0: only look), got ", timeout_ms);
  OSLO_CHECK(max_text == 0 || max_text >= 4, OSLO_ERR_INVALID_ARGUMENT,
             "oslo_engine_next: text_capacity must be 0 or at least 5 (a UTF-8 character and "
             "its NUL), got ",
             max_text + 1);
  OSLO_CHECK(engine_.leader(), OSLO_ERR_INVALID_ARGUMENT,
             "oslo_engine_next: requests are read on world rank 0");
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  std::unique_lock<std::mutex> lock(mu_);
  OSLO_CHECK(!on_event_, OSLO_ERR_INVALID_ARGUMENT,
             "oslo_engine_next: the engine's events go to its on_event callback");
  claim(Mode::kDriven, "oslo_engine_next");
  for (;;) {
    auto it = queues_.find(id);
    OSLO_CHECK(it != queues_.end(), OSLO_ERR_INVALID_ARGUMENT, "oslo_engine_next: request ", id,
               " is not live (never added, or finished and its last output already read)");
    Queue& q = it->second;
    const bool text_waits = !q.text.empty() && max_text > 0;
    if (!q.tokens.empty() || text_waits || q.finish != Finish::kNone) {
      Output o;
      const size_t nt = std::min(max_tokens, q.tokens.size());
      o.tokens.assign(q.tokens.begin(), q.tokens.begin() + static_cast<std::ptrdiff_t>(nt));
      q.tokens.erase(q.tokens.begin(), q.tokens.begin() + static_cast<std::ptrdiff_t>(nt));
      size_t nb = std::min(max_text, q.text.size());
      // Whole characters: never cut before a continuation byte.
      while (nb > 0 && nb < q.text.size() &&
             (static_cast<unsigned char>(q.text[nb]) & 0xC0) == 0x80)
        --nb;
      o.text = q.text.substr(0, nb);
      q.text.erase(0, nb);
      // The finish comes with the last output; text nobody asks for
      // (max_text 0) is dropped with it.
      if (q.finish != Finish::kNone && q.tokens.empty() && (q.text.empty() || max_text == 0)) {
        o.finish = q.finish;
        o.status = q.status;
        o.error = q.error;
        queues_.erase(it);
      }
      if (!o.tokens.empty() || !o.text.empty() || o.finish != Finish::kNone) return o;
    }
    if (Clock::now() >= deadline)
      fail(OSLO_ERR_TIMEOUT, "oslo_engine_next: no output of request ", id, " within ", timeout_ms,
           " ms");
    if (!stepping_ && !running_) {
      stepping_ = true;
      lock.unlock();
      std::vector<Event> events;
      // A failure reaches its requests through their queues.
      (void)step_once(events);
      lock.lock();
      stepping_ = false;
      deliver(events);
      cv_.notify_all();
      continue;
    }
    cv_.wait_until(lock, deadline);
  }
}

int Driver::state(int64_t id) const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = queues_.find(id);
    if (it != queues_.end() && it->second.finish != Finish::kNone) return 3;
  }
  switch (engine_.state(id)) {
    case State::kWaiting: return 1;
    case State::kRunning: return 2;
    case State::kUnknown: break;
  }
  return 0;
}

}  // namespace serve
}  // namespace oslo
