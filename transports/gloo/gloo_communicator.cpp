// gloo transport: rendezvous through an oslo::Store, a full mesh of gloo TCP
// pairs, and the collectives written directly on gloo's unbound buffers.
//
// Why not gloo's own algorithms: oslo promises results that are bitwise the
// same on every rank and reduced in rank order 0..n-1 (communicator.hpp), the
// same as the shared-memory transport computes, and an abort() that wakes a
// blocked call from another thread. Both need control over every wait, so the
// collectives here are built from point-to-point messages:
//   reduce_scatter: rank p owns chunk p; every rank sends chunk p of its input
//     to rank p, which combines the n contributions in rank order;
//   all_reduce:     reduce_scatter, then every owner sends its chunk to all;
//   all_gather, broadcast, barrier: direct sends.
// Each rank sends and receives (n-1)/n of the data per phase, like a ring, in
// one round instead of n-1, which suits the small groups (tensor parallel) this
// transport serves.
//
// Faults: every wait uses the time left of the op's timeout. On any error the
// communicator closes its connections (so that peers blocked on it fail fast
// with OSLO_ERR_COMM instead of waiting for their own timeout, and so that no
// late message can land in a buffer that was already given back) and stays
// broken: later calls fail at once with the first error.
#include "transports/gloo/gloo_communicator.hpp"
#include "transports/common/reduce.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <new>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "core/common/deadline.hpp"
#include "core/common/dtype.hpp"
#include "core/common/error.hpp"

namespace oslo {
namespace {

using Clock = std::chrono::steady_clock;
using Ms = std::chrono::milliseconds;

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", s);
  return buf;
}

// gloo writes to its sockets with plain writev(), so a peer that died turns
// the next write into SIGPIPE, which kills the process by default. Instead of
// changing the process-wide disposition (the application's business), SIGPIPE
// is blocked in every thread while it is inside gloo: the write then fails
// with EPIPE, which gloo reports as an error. A SIGPIPE raised meanwhile is
// thread-directed and left pending; it is consumed before unblocking, unless
// one was already pending before (then it was not ours).
class SigpipeBlock {
 public:
  SigpipeBlock() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, &old_);
    sigset_t pending;
    sigemptyset(&pending);
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
  }
  ~SigpipeBlock() {
    if (!was_pending_) {
      sigset_t set;
      sigemptyset(&set);
      sigaddset(&set, SIGPIPE);
      struct timespec zero = {0, 0};
      while (sigtimedwait(&set, nullptr, &zero) > 0) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SigpipeBlock(const SigpipeBlock&) = delete;
  SigpipeBlock& operator=(const SigpipeBlock&) = delete;

 private:
  sigset_t old_;
  bool was_pending_ = false;
};

// ---- rank-ordered reduction ---------------------------------------------------
//
// dst = srcs[0] op srcs[1] op ... op srcs[n-1] through the kernel the
// shared-memory transport uses (transports/common/reduce.hpp), so both
// transports give the same bits.
void reduce_ranked(void* dst, const void* const* srcs, int n, size_t count, oslo_dtype dt,
                   oslo_reduce_op op) {
  transport::reduce(dst, srcs, n, count, dt, op, n);
}

// ---- store adapter -------------------------------------------------------------

// Presents an oslo::Store to gloo's rendezvous, under "<prefix>/" so that
// groups do not see each other's keys. gloo's keys are the ranks' numbers.
class GlooStore : public gloo::rendezvous::Store {
 public:
  GlooStore(oslo::Store& store, const std::string& prefix, int size, const Deadline& deadline)
      : store_(store), prefix_(prefix + "/"), size_(size), deadline_(deadline) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    store_.set(prefix_ + key, std::vector<uint8_t>(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    wait({key});
    auto v = store_.get(prefix_ + key, deadline_);
    return std::vector<char>(v.begin(), v.end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, Ms(0)); }
  void wait(const std::vector<std::string>& keys, const Ms& /*timeout*/) override {
    // One deadline for the whole rendezvous (gloo passes its timeout per key,
    // which would let n slow peers add up to n timeouts).
    std::vector<std::string> full;
    for (const auto& k : keys) full.push_back(prefix_ + k);
    try {
      store_.wait(full, deadline_);
    } catch (const Error& e) {
      if (e.status() != OSLO_ERR_TIMEOUT) throw;
      // gloo waits for one rank at a time; name every rank that is missing,
      // not just the first one gloo happened to wait for.
      std::string ranks;
      for (int r = 0; r < size_; ++r) {
        bool there = false;
        try {
          there = store_.check({prefix_ + std::to_string(r)});
        } catch (const Error&) {
        }
        if (!there) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
      }
      fail(OSLO_ERR_TIMEOUT, "gloo '", prefix_.substr(0, prefix_.size() - 1),
           "': timed out waiting for rank(s) ", ranks.empty() ? "?" : ranks, " of ", size_,
           " to join (", e.what(), ")");
    }
  }

 private:
  oslo::Store& store_;
  std::string prefix_;
  int size_;
  Deadline deadline_;
};

// ---- devices ----------------------------------------------------------------------

// One gloo device (one event-loop thread) per local address and process,
// shared by every communicator of the process: ranks that are threads and the
// several groups of one rank would otherwise each start a thread. Keyed by pid
// too, because a device inherited through fork() has no loop thread.
std::shared_ptr<gloo::transport::Device> device_for(const std::string& address) {
  static std::mutex mu;
  static std::map<std::pair<pid_t, std::string>, std::weak_ptr<gloo::transport::Device>> cache;
  std::lock_guard<std::mutex> lk(mu);
  auto key = std::make_pair(::getpid(), address);
  if (auto dev = cache[key].lock()) return dev;
  gloo::transport::tcp::attr attr;
  attr.hostname = address;
  std::shared_ptr<gloo::transport::Device> dev;
  try {
    // The device's event-loop thread inherits this thread's signal mask, so
    // it starts (and stays) with SIGPIPE blocked; see SigpipeBlock.
    SigpipeBlock no_sigpipe;
    dev = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    fail(OSLO_ERR_IO, "gloo: cannot use local address '", address,
         "' (set OSLO_LOCAL_ADDRESS to an address of this host that the other ranks can reach): ",
         e.what());
  }
  cache[key] = dev;
  return dev;
}

bool mentions_timeout(const std::string& msg) {
  std::string m(msg);
  for (auto& ch : m) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return m.find("timed out") != std::string::npos || m.find("timeout") != std::string::npos;
}

// ---- communicator -------------------------------------------------------------------

constexpr uint64_t kP2PSlot = 1;
// send() copies messages up to kEagerMax and returns at once, like the
// shared-memory transport's ring; a background thread waits for them to go
// out. Larger messages are sent from the caller's buffer and send() waits
// until the receiver took them. At most kQueueCap bytes wait at a time.
constexpr size_t kEagerMax = size_t(4) << 20;
constexpr size_t kQueueCap = size_t(64) << 20;
// Collectives get a fresh slot range each: every member runs the same
// sequence of collectives, so the counters agree without talking.
constexpr uint64_t kCollectiveBase = uint64_t(1) << 62;

class GlooCommunicator : public Communicator {
 public:
  GlooCommunicator(std::shared_ptr<gloo::rendezvous::Context> ctx, const std::string& prefix,
                   Ms timeout)
      : ctx_(std::move(ctx)), prefix_(prefix), timeout_(timeout) {}

  ~GlooCommunicator() override {
    // Messages send() already returned for still go out (the peer may be
    // about to receive them), each within its timeout.
    if (sender_.joinable()) {
      {
        std::lock_guard<std::mutex> lk(send_mu_);
        stop_sender_ = true;
      }
      send_cv_.notify_all();
      sender_.join();
    }
    // Pairs close when the context goes; closing first makes sure the device
    // thread stops touching them before they are destroyed.
    close_connections();
  }

  int rank() const override { return ctx_->rank; }
  int size() const override { return ctx_->size; }
  const char* transport() const override { return "gloo/tcp"; }

  void all_reduce(const void* in, void* out, size_t count, oslo_dtype dt,
                  oslo_reduce_op op) override;
  void all_gather(const void* in, void* out, size_t count, oslo_dtype dt) override;
  void reduce_scatter(const void* in, void* out, size_t count, oslo_dtype dt,
                      oslo_reduce_op op) override;
  void broadcast(void* buf, size_t count, oslo_dtype dt, int root) override;
  void send(const void* buf, size_t bytes, int peer) override;
  void recv(void* buf, size_t bytes, int peer) override;
  void barrier() override;
  void abort() noexcept override;

 private:
  friend class Exchange;

  // Runs one communicating operation: fails fast when broken or aborted,
  // turns every exception into oslo::Error and breaks the communicator.
  template <typename Body>
  void run(const char* op, Body&& body);
  [[noreturn]] void rethrow_translated(const char* op, Clock::time_point start);
  // Records the first error (later ones are consequences of it) and closes
  // the connections; returns the status and message to report.
  std::pair<oslo_status, std::string> mark_broken(const char* op, oslo_status st, std::string msg);
  void register_buffer(gloo::transport::UnboundBuffer* b);
  void unregister_buffer(gloo::transport::UnboundBuffer* b);
  // Wakes every wait in progress (they then fail) and closes the pairs.
  void close_connections() noexcept;
  void sender_loop();
  std::string where(const char* op) const {
    return str("gloo ", op, " (group '", prefix_, "', rank ", ctx_->rank, " of ", ctx_->size, ")");
  }
  // [offset, offset + len) of chunk p when count elements are split over
  // the ranks; the first count % n chunks are one longer.
  void chunk(size_t count, int p, size_t* off, size_t* len) const {
    size_t n = static_cast<size_t>(ctx_->size);
    size_t q = count / n, r = count % n, up = static_cast<size_t>(p);
    *off = up * q + std::min(up, r);
    *len = q + (up < r ? 1 : 0);
  }
  uint64_t next_slot() {
    // A few slots per collective (one per phase).
    return kCollectiveBase + 4 * (seq_++);
  }
  void check_dtype_op(oslo_dtype dt, int op) const;
  // Every rank tells every other what it called (desc: three numbers, e.g.
  // op, count and dtype) on slot + 3 of the collective's slots, and all fail
  // with OSLO_ERR_INVALID_ARGUMENT if any differs: otherwise a count
  // mismatch would make gloo kill the process (an oversized message) and an
  // op or dtype mismatch would return garbage as success. One round trip of
  // 24-byte messages.
  void agree(const char* what, const uint64_t desc[3], const char* const names[3], uint64_t slot);
  void reduce_scatter_phase(const uint8_t* in, bool chunked, size_t count, oslo_dtype dt,
                            oslo_reduce_op op, uint8_t* out, uint64_t slot);

  std::shared_ptr<gloo::rendezvous::Context> ctx_;
  std::string prefix_;
  Ms timeout_;
  uint64_t seq_ = 0;
  Clock::time_point deadline_;  // of the op in progress

  std::mutex mu_;                     // guards what follows; abort() may run on any thread
  std::atomic<bool> aborted_{false};  // set under mu_, read anywhere
  bool closed_ = false;
  oslo_status broken_status_ = OSLO_OK;
  std::string broken_msg_;
  std::vector<gloo::transport::UnboundBuffer*> active_;  // buffers being waited on

  // Messages send() returned for, in posting order, and the thread that
  // waits for them. Lock order: send_mu_ before mu_, never the reverse.
  struct Pending {
    uint8_t head[8];            // the message's length, sent first
    std::vector<uint8_t> copy;  // the payload; empty when sent from the caller's buffer
    std::unique_ptr<gloo::transport::UnboundBuffer> head_buf, buf;  // buf null for 0 bytes
    size_t bytes = 0;
    uint64_t seq = 0;
    Clock::time_point deadline;
  };
  std::mutex send_mu_;
  std::condition_variable send_cv_;
  std::deque<std::unique_ptr<Pending>> sends_;
  size_t queued_bytes_ = 0;
  uint64_t posted_seq_ = 0;
  uint64_t done_seq_ = 0;
  bool stop_sender_ = false;
  bool sender_failed_ = false;
  std::thread sender_;
};

// The messages of one phase of one op: posts sends and receives, waits for
// all of them. If it is destroyed without having completed (an exception), it
// closes the connections before giving the buffers back, so gloo never
// writes into memory the caller has reclaimed.
class Exchange {
 public:
  explicit Exchange(GlooCommunicator& c) : c_(c) {}
  ~Exchange() {
    if (!done_) c_.close_connections();
    for (auto& b : bufs_) c_.unregister_buffer(b.buf.get());
  }
  void send(int peer, const void* p, size_t bytes, uint64_t slot) {
    post(true, peer, p, bytes, slot);
  }
  void recv(int peer, void* p, size_t bytes, uint64_t slot) { post(false, peer, p, bytes, slot); }
  void wait_all() {
    for (auto& b : bufs_) {
      auto left = std::chrono::duration_cast<Ms>(c_.deadline_ - Clock::now());
      left = std::max(left, Ms(1));
      bool ok = b.is_send ? b.buf->waitSend(left) : b.buf->waitRecv(left);
      if (!ok) fail(OSLO_ERR_COMM, "aborted");
    }
    done_ = true;
  }

 private:
  struct Entry {
    std::unique_ptr<gloo::transport::UnboundBuffer> buf;
    bool is_send;
  };
  void post(bool is_send, int peer, const void* p, size_t bytes, uint64_t slot) {
    if (bytes == 0) return;  // both sides skip empty chunks alike
    Entry e{c_.ctx_->createUnboundBuffer(const_cast<void*>(p), bytes), is_send};
    c_.register_buffer(e.buf.get());
    bufs_.push_back(std::move(e));
    if (is_send)
      bufs_.back().buf->send(peer, slot);
    else
      bufs_.back().buf->recv(peer, slot);
  }

  GlooCommunicator& c_;
  std::vector<Entry> bufs_;
  bool done_ = false;
};

void GlooCommunicator::register_buffer(gloo::transport::UnboundBuffer* b) {
  std::lock_guard<std::mutex> lk(mu_);
  // An abort() that came after run() checked the flag must still stop us.
  if (aborted_) fail(OSLO_ERR_COMM, "aborted");
  if (closed_) fail(OSLO_ERR_COMM, "connections closed after an error");
  active_.push_back(b);
}

void GlooCommunicator::unregister_buffer(gloo::transport::UnboundBuffer* b) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = std::find(active_.begin(), active_.end(), b);
  if (it != active_.end()) active_.erase(it);
}

void GlooCommunicator::close_connections() noexcept {
  std::lock_guard<std::mutex> lk(mu_);
  for (auto* b : active_) {
    b->abortWaitRecv();
    b->abortWaitSend();
  }
  if (closed_) return;
  closed_ = true;
  try {
    ctx_->closeConnections();
  } catch (...) {
    // Closing a pair that already failed may throw; it is closed either way.
  }
}

void GlooCommunicator::abort() noexcept {
  {
    std::lock_guard<std::mutex> lk(mu_);
    aborted_ = true;
  }
  // Wakes every wait (the op in flight and the sender thread) and closes the
  // pairs, so that peers blocked on this rank fail as well.
  close_connections();
  // A send() waiting for queue space checks aborted_ under send_mu_.
  std::lock_guard<std::mutex> lk(send_mu_);
  send_cv_.notify_all();
}

template <typename Body>
void GlooCommunicator::run(const char* op, Body&& body) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (broken_status_ != OSLO_OK)
      fail(broken_status_, where(op), ": communicator broken by an earlier error: ", broken_msg_);
    if (aborted_) fail(OSLO_ERR_COMM, where(op), ": communicator was aborted");
  }
  auto start = Clock::now();
  deadline_ = start + timeout_;
  try {
    SigpipeBlock no_sigpipe;
    body();
  } catch (...) {
    rethrow_translated(op, start);
  }
}

// Status and message of the exception being handled.
std::pair<oslo_status, std::string> translate_current() {
  try {
    throw;
  } catch (const Error& e) {
    return {e.status(), e.what()};
  } catch (const gloo::IoException& e) {
    return {mentions_timeout(e.what()) ? OSLO_ERR_TIMEOUT : OSLO_ERR_COMM, e.what()};
  } catch (const gloo::EnforceNotMet& e) {
    return {mentions_timeout(e.what()) ? OSLO_ERR_TIMEOUT : OSLO_ERR_COMM, e.what()};
  } catch (const gloo::Exception& e) {
    return {mentions_timeout(e.what()) ? OSLO_ERR_TIMEOUT : OSLO_ERR_COMM, e.what()};
  } catch (const std::bad_alloc&) {
    return {OSLO_ERR_OUT_OF_MEMORY, "out of memory"};
  } catch (const std::exception& e) {
    return {OSLO_ERR_COMM, e.what()};
  } catch (...) {
    return {OSLO_ERR_COMM, "unknown exception"};
  }
}

std::pair<oslo_status, std::string> GlooCommunicator::mark_broken(const char* op, oslo_status st,
                                                                  std::string msg) {
  std::pair<oslo_status, std::string> result;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (broken_status_ != OSLO_OK) {
      // This failure is the echo of an earlier one (whose closing of the
      // connections woke this wait): report the cause.
      result = {broken_status_, "communicator broken by an earlier error: " + broken_msg_};
    } else {
      if (aborted_) {
        // Whatever woke the call (our abort, or a peer that closed because
        // it aborted), abort() is the cause to report.
        st = OSLO_ERR_COMM;
        msg = msg == "aborted" ? "aborted by abort()" : "aborted by abort() (" + msg + ")";
      }
      broken_status_ = st;
      broken_msg_ = str(where(op), ": ", msg);
      result = {st, msg};
    }
  }
  close_connections();
  return result;
}

void GlooCommunicator::rethrow_translated(const char* op, Clock::time_point start) {
  auto t = translate_current();
  auto r = mark_broken(op, t.first, t.second);
  double took = std::chrono::duration<double>(Clock::now() - start).count();
  if (r.first == OSLO_ERR_TIMEOUT && t.first == OSLO_ERR_TIMEOUT)
    fail(r.first, where(op), ": timed out after ", seconds_text(took), " s (timeout ",
         seconds_text(timeout_.count() / 1000.0), " s): ", r.second);
  fail(r.first, where(op), ": ", r.second);
}

// Waits, in posting order, for the messages send() returned for. The first
// failure breaks the communicator and drops the rest (their peer will not get
// them: the connections are closed).
void GlooCommunicator::sender_loop() {
  SigpipeBlock no_sigpipe;  // for the thread's lifetime
  std::unique_lock<std::mutex> lk(send_mu_);
  for (;;) {
    send_cv_.wait(lk, [&] { return stop_sender_ || !sends_.empty(); });
    if (sends_.empty()) return;  // stopping, and everything went out
    Pending* p = sends_.front().get();
    lk.unlock();
    bool ok = false;
    std::pair<oslo_status, std::string> err{OSLO_ERR_COMM, "aborted"};
    try {
      auto left = [&] {
        return std::max(Ms(1), std::chrono::duration_cast<Ms>(p->deadline - Clock::now()));
      };
      ok = p->head_buf->waitSend(left()) && (!p->buf || p->buf->waitSend(left()));
    } catch (...) {
      err = translate_current();
    }
    if (!ok) {
      // Woken because another failure already closed the connections (not
      // by abort()): whoever closed them records the cause, not this echo.
      bool echo;
      {
        std::lock_guard<std::mutex> g(mu_);
        echo = closed_ && !aborted_;
      }
      if (err.first == OSLO_ERR_TIMEOUT)
        err.second = "the receiver did not take a message within the timeout (" + err.second + ")";
      if (!echo) mark_broken("send", err.first, err.second);
    }
    lk.lock();
    if (ok) {
      unregister_buffer(p->head_buf.get());
      if (p->buf) unregister_buffer(p->buf.get());
      queued_bytes_ -= p->bytes;
      done_seq_ = p->seq;
      sends_.pop_front();
    } else {
      // The connections are closed: gloo no longer touches these buffers.
      for (auto& q : sends_) {
        unregister_buffer(q->head_buf.get());
        if (q->buf) unregister_buffer(q->buf.get());
      }
      sends_.clear();
      queued_bytes_ = 0;
      sender_failed_ = true;
    }
    send_cv_.notify_all();
  }
}

void GlooCommunicator::check_dtype_op(oslo_dtype dt, int op) const {
  OSLO_CHECK(dtype_valid(dt), OSLO_ERR_DTYPE, "gloo: unknown dtype ", static_cast<int>(dt));
  OSLO_CHECK(op >= OSLO_REDUCE_SUM && op <= OSLO_REDUCE_MIN, OSLO_ERR_INVALID_ARGUMENT,
             "gloo: unknown reduce op ", op);
}

// Chunk p of the input goes to rank p; this rank combines its own chunk from
// every rank in rank order into out. chunked: all_reduce's split of count
// elements; otherwise reduce_scatter's layout of n blocks of count elements.
void GlooCommunicator::reduce_scatter_phase(const uint8_t* in, bool chunked, size_t count,
                                            oslo_dtype dt, oslo_reduce_op op, uint8_t* out,
                                            uint64_t slot) {
  const int n = ctx_->size, me = ctx_->rank;
  const size_t es = dtype_size(dt);
  size_t my_off, my_len;
  if (chunked) {
    chunk(count, me, &my_off, &my_len);
  } else {
    my_off = static_cast<size_t>(me) * count;
    my_len = count;
  }
  // Uninitialised scratch (make_unique<T[]> would zero it for nothing).
  std::unique_ptr<uint8_t[]> incoming(new uint8_t[my_len * es * static_cast<size_t>(n - 1) + 1]);
  std::vector<const void*> srcs(static_cast<size_t>(n));
  {
    Exchange ex(*this);
    size_t slotno = 0;
    for (int p = 0; p < n; ++p) {
      if (p == me) {
        srcs[static_cast<size_t>(p)] = in + my_off * es;
        continue;
      }
      uint8_t* dst = incoming.get() + slotno++ * my_len * es;
      srcs[static_cast<size_t>(p)] = dst;
      ex.recv(p, dst, my_len * es, slot);
      size_t off, len;
      if (chunked) {
        chunk(count, p, &off, &len);
      } else {
        off = static_cast<size_t>(p) * count;
        len = count;
      }
      ex.send(p, in + off * es, len * es, slot);
    }
    // Everything sent before out is written: out may alias any part of in.
    ex.wait_all();
  }
  reduce_ranked(out, srcs.data(), n, my_len, dt, op);
}

void GlooCommunicator::agree(const char* what, const uint64_t desc[3], const char* const names[3],
                             uint64_t slot) {
  const int n = ctx_->size, me = ctx_->rank;
  std::vector<uint64_t> theirs(3 * static_cast<size_t>(n));
  {
    Exchange ex(*this);
    for (int p = 0; p < n; ++p) {
      if (p == me) continue;
      ex.recv(p, &theirs[3 * static_cast<size_t>(p)], 3 * sizeof(uint64_t), slot + 3);
      ex.send(p, desc, 3 * sizeof(uint64_t), slot + 3);
    }
    ex.wait_all();
  }
  auto text = [&](const uint64_t* d) {
    std::string t;
    for (int i = 0; i < 3; ++i) {
      if (!names[i]) continue;
      t += (t.empty() ? "" : ", ") + std::string(names[i]) + " ";
      if (std::strcmp(names[i], "dtype") == 0)
        t += dtype_valid(static_cast<int>(d[i])) ? dtype_name(static_cast<oslo_dtype>(d[i])) : "?";
      else
        t += std::to_string(d[i]);
    }
    return t;
  };
  for (int p = 0; p < n; ++p) {
    const uint64_t* t = &theirs[3 * static_cast<size_t>(p)];
    if (p == me || (t[0] == desc[0] && t[1] == desc[1] && t[2] == desc[2])) continue;
    fail(OSLO_ERR_INVALID_ARGUMENT, "collective mismatch: this rank (", me, ") called ", what, "(",
         text(desc), ") but rank ", p, " called ", what, "(", text(t), ")");
  }
}

void GlooCommunicator::all_reduce(const void* in, void* out, size_t count, oslo_dtype dt,
                                  oslo_reduce_op op) {
  check_dtype_op(dt, op);
  OSLO_CHECK(count == 0 || (in && out), OSLO_ERR_INVALID_ARGUMENT, "gloo all_reduce: null buffer");
  run("all_reduce", [&] {
    const size_t es = dtype_size(dt);
    const int n = ctx_->size, me = ctx_->rank;
    if (n == 1) {
      const void* src = in;
      if (count) reduce_ranked(out, &src, 1, count, dt, op);
      return;
    }
    uint64_t slot = next_slot();
    const uint64_t desc[3] = {static_cast<uint64_t>(op), count, static_cast<uint64_t>(dt)};
    const char* const names[3] = {"op", "count", "dtype"};
    agree("all_reduce", desc, names, slot);
    if (count == 0) return;
    size_t my_off, my_len;
    chunk(count, me, &my_off, &my_len);
    uint8_t* o = static_cast<uint8_t*>(out);
    // Reduce into a scratch chunk: out's other chunks may still be the
    // input other ranks are about to need (in place), so out is only written
    // once this rank's sends are done.
    std::unique_ptr<uint8_t[]> mine(new uint8_t[my_len * es + 1]);
    reduce_scatter_phase(static_cast<const uint8_t*>(in), true, count, dt, op, mine.get(), slot);
    if (my_len) std::memcpy(o + my_off * es, mine.get(), my_len * es);
    Exchange ex(*this);
    for (int p = 0; p < n; ++p) {
      if (p == me) continue;
      size_t off, len;
      chunk(count, p, &off, &len);
      ex.recv(p, o + off * es, len * es, slot + 1);
      ex.send(p, o + my_off * es, my_len * es, slot + 1);
    }
    ex.wait_all();
  });
}

void GlooCommunicator::reduce_scatter(const void* in, void* out, size_t count, oslo_dtype dt,
                                      oslo_reduce_op op) {
  check_dtype_op(dt, op);
  OSLO_CHECK(count == 0 || (in && out), OSLO_ERR_INVALID_ARGUMENT,
             "gloo reduce_scatter: null buffer");
  run("reduce_scatter", [&] {
    if (ctx_->size == 1) {
      const void* src = in;
      if (count) reduce_ranked(out, &src, 1, count, dt, op);
      return;
    }
    uint64_t slot = next_slot();
    const uint64_t desc[3] = {static_cast<uint64_t>(op), count, static_cast<uint64_t>(dt)};
    const char* const names[3] = {"op", "count", "dtype"};
    agree("reduce_scatter", desc, names, slot);
    if (count == 0) return;
    const size_t es = dtype_size(dt);
    // Scratch result, for the same aliasing reason as in all_reduce.
    std::unique_ptr<uint8_t[]> mine(new uint8_t[count * es]);
    reduce_scatter_phase(static_cast<const uint8_t*>(in), false, count, dt, op, mine.get(), slot);
    std::memcpy(out, mine.get(), count * es);
  });
}

void GlooCommunicator::all_gather(const void* in, void* out, size_t count, oslo_dtype dt) {
  check_dtype_op(dt, OSLO_REDUCE_SUM);
  OSLO_CHECK(count == 0 || (in && out), OSLO_ERR_INVALID_ARGUMENT, "gloo all_gather: null buffer");
  run("all_gather", [&] {
    const size_t es = dtype_size(dt);
    const int n = ctx_->size, me = ctx_->rank;
    uint8_t* o = static_cast<uint8_t*>(out);
    uint8_t* mine = o + static_cast<size_t>(me) * count * es;
    if (count && mine != in) std::memmove(mine, in, count * es);
    if (n == 1) return;
    uint64_t slot = next_slot();
    const uint64_t desc[3] = {0, count, static_cast<uint64_t>(dt)};
    const char* const names[3] = {nullptr, "count", "dtype"};
    agree("all_gather", desc, names, slot);
    if (count == 0) return;
    Exchange ex(*this);
    for (int p = 0; p < n; ++p) {
      if (p == me) continue;
      ex.recv(p, o + static_cast<size_t>(p) * count * es, count * es, slot);
      ex.send(p, mine, count * es, slot);
    }
    ex.wait_all();
  });
}

void GlooCommunicator::broadcast(void* buf, size_t count, oslo_dtype dt, int root) {
  check_dtype_op(dt, OSLO_REDUCE_SUM);
  OSLO_CHECK(root >= 0 && root < ctx_->size, OSLO_ERR_INVALID_ARGUMENT, "gloo broadcast: root ",
             root, " out of range for group of ", ctx_->size);
  OSLO_CHECK(count == 0 || buf, OSLO_ERR_INVALID_ARGUMENT, "gloo broadcast: null buffer");
  run("broadcast", [&] {
    if (ctx_->size == 1) return;
    uint64_t slot = next_slot();
    const size_t bytes = count * dtype_size(dt);
    // Ranks naming different roots would otherwise each send (or each
    // wait), and a different count would make gloo abort on the oversized
    // message.
    const uint64_t desc[3] = {static_cast<uint64_t>(root), count, static_cast<uint64_t>(dt)};
    const char* const names[3] = {"root", "count", "dtype"};
    agree("broadcast", desc, names, slot);
    if (count == 0) return;
    Exchange ex(*this);
    if (ctx_->rank == root) {
      for (int p = 0; p < ctx_->size; ++p)
        if (p != root) ex.send(p, buf, bytes, slot);
    } else {
      ex.recv(root, buf, bytes, slot);
    }
    ex.wait_all();
  });
}

void GlooCommunicator::send(const void* buf, size_t bytes, int peer) {
  OSLO_CHECK(peer >= 0 && peer < ctx_->size && peer != ctx_->rank, OSLO_ERR_INVALID_ARGUMENT,
             "gloo send: invalid peer ", peer, " (rank ", ctx_->rank, " of ", ctx_->size, ")");
  OSLO_CHECK(bytes == 0 || buf, OSLO_ERR_INVALID_ARGUMENT, "gloo send: null buffer");
  run("send", [&] {
    if (!sender_.joinable()) sender_ = std::thread([this] { sender_loop(); });
    // Every message is its length (8 bytes), then the payload, in one slot
    // per pair that gloo matches in order. The receiver checks the length
    // before it posts the payload: gloo would kill the process (an enforce
    // in its event thread) on a message longer than the posted receive.
    const bool eager = bytes <= kEagerMax;
    auto p = std::make_unique<Pending>();
    for (int i = 0; i < 8; ++i) p->head[i] = static_cast<uint8_t>(uint64_t(bytes) >> (8 * i));
    if (eager && bytes) {
      const uint8_t* b = static_cast<const uint8_t*>(buf);
      p->copy.assign(b, b + bytes);
    }
    p->head_buf = ctx_->createUnboundBuffer(p->head, sizeof p->head);
    if (bytes)
      p->buf = ctx_->createUnboundBuffer(eager ? p->copy.data() : const_cast<void*>(buf), bytes);
    p->bytes = bytes;
    p->deadline = Clock::now() + timeout_;
    register_buffer(p->head_buf.get());
    try {
      if (p->buf) register_buffer(p->buf.get());
      // Only this thread posts, so queue order is posting order.
      p->head_buf->send(peer, kP2PSlot);
      if (p->buf) p->buf->send(peer, kP2PSlot);
    } catch (...) {
      close_connections();
      unregister_buffer(p->head_buf.get());
      if (p->buf) unregister_buffer(p->buf.get());
      throw;
    }
    std::unique_lock<std::mutex> lk(send_mu_);
    const uint64_t seq = p->seq = ++posted_seq_;
    queued_bytes_ += bytes;
    sends_.push_back(std::move(p));
    send_cv_.notify_all();
    auto ready = [&] {
      return sender_failed_ || aborted_ || (eager ? queued_bytes_ <= kQueueCap : done_seq_ >= seq);
    };
    if (!send_cv_.wait_until(lk, deadline_, ready))
      fail(OSLO_ERR_TIMEOUT, eager ? "too much data still waiting for receivers"
                                   : "the receiver did not take the message");
    if (aborted_) fail(OSLO_ERR_COMM, "aborted");
    if (sender_failed_) fail(OSLO_ERR_COMM, "an earlier message failed");  // already broken
  });
}

void GlooCommunicator::recv(void* buf, size_t bytes, int peer) {
  OSLO_CHECK(peer >= 0 && peer < ctx_->size && peer != ctx_->rank, OSLO_ERR_INVALID_ARGUMENT,
             "gloo recv: invalid peer ", peer, " (rank ", ctx_->rank, " of ", ctx_->size, ")");
  OSLO_CHECK(bytes == 0 || buf, OSLO_ERR_INVALID_ARGUMENT, "gloo recv: null buffer");
  run("recv", [&] {
    uint8_t head[8];
    {
      Exchange ex(*this);
      ex.recv(peer, head, sizeof head, kP2PSlot);
      ex.wait_all();
    }
    uint64_t len = 0;
    for (int i = 7; i >= 0; --i) len = (len << 8) | head[i];
    // The payload that follows would not fit (or not fill) the buffer; the
    // stream of this pair is out of step, so the communicator breaks.
    if (len != bytes)
      fail(OSLO_ERR_INVALID_ARGUMENT, "rank ", peer, " sent ", len, " bytes but this rank expects ",
           bytes, " (sends and recvs must match in order)");
    Exchange ex(*this);
    ex.recv(peer, buf, bytes, kP2PSlot);
    ex.wait_all();
  });
}

void GlooCommunicator::barrier() {
  run("barrier", [&] {
    if (ctx_->size == 1) return;
    uint64_t slot = next_slot();
    // A token from every rank to every rank: nobody leaves before all came.
    uint8_t out_token = 1;
    std::vector<uint8_t> in_tokens(static_cast<size_t>(ctx_->size));
    Exchange ex(*this);
    for (int p = 0; p < ctx_->size; ++p) {
      if (p == ctx_->rank) continue;
      ex.recv(p, &in_tokens[static_cast<size_t>(p)], 1, slot);
      ex.send(p, &out_token, 1, slot);
    }
    ex.wait_all();
  });
}

}  // namespace

std::unique_ptr<Communicator> create_gloo_communicator(Store& store, const std::string& prefix,
                                                       int rank, int size, double timeout_seconds,
                                                       const std::string& local_address) {
  OSLO_CHECK(size >= 1 && rank >= 0 && rank < size, OSLO_ERR_INVALID_ARGUMENT,
             "gloo: invalid rank ", rank, " for group size ", size);
  OSLO_CHECK(timeout_seconds > 0, OSLO_ERR_INVALID_ARGUMENT, "gloo: timeout must be > 0");
  OSLO_CHECK(!prefix.empty(), OSLO_ERR_INVALID_ARGUMENT, "gloo: empty group prefix");
  const Ms timeout(std::max<long long>(1, static_cast<long long>(timeout_seconds * 1000.0)));
  auto start = Clock::now();
  Deadline deadline(timeout_seconds);
  auto dev = device_for(local_address.empty() ? std::string("127.0.0.1") : local_address);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
  // gloo waits five times its pairs' timeout for a connection to come up, and
  // the pairs take the context's timeout when they are made: so connect with
  // a fifth of it (a peer that published its address and froze is then
  // reported after about timeout_seconds), then set the real one. The waits
  // of the ops pass their own timeouts and do not depend on this.
  ctx->setTimeout(std::max(Ms(1), timeout / 5));
  try {
    GlooStore gstore(store, prefix, size, deadline);
    SigpipeBlock no_sigpipe;
    if (size > 1) ctx->connectFullMesh(gstore, dev);
    ctx->setTimeout(timeout);
  } catch (const Error&) {
    throw;
  } catch (const std::bad_alloc&) {
    fail(OSLO_ERR_OUT_OF_MEMORY, "gloo '", prefix, "': out of memory while connecting");
  } catch (const std::exception& e) {
    std::string msg = e.what();
    double took = std::chrono::duration<double>(Clock::now() - start).count();
    fail(mentions_timeout(msg) ? OSLO_ERR_TIMEOUT : OSLO_ERR_COMM, "gloo '", prefix, "' rank ",
         rank, " of ", size, ": connecting to the group failed after ", seconds_text(took),
         " s: ", msg);
  }
  return std::unique_ptr<Communicator>(new GlooCommunicator(std::move(ctx), prefix, timeout));
}

}  // namespace oslo
