// test_gloo fault_*: a rank SIGKILLed mid-allreduce, a SIGSTOPped rank,
// abort() from another thread, sends never received or of the wrong size,
// a missing rank, a store frozen during the rendezvous.
#include "gloo_util.hpp"

namespace gloo_test {

// Survivors of a rank SIGKILLed in the middle of a stream of all_reduces
// fail (COMM, or TIMEOUT for one that waited on a survivor that already
// gave up) within twice the timeout.
void test_fault_sigkill_mid_allreduce(void**) {
  constexpr int n = 3;
  constexpr double timeout = 2.0;
  ServerProcess server;
  auto pids = spawn_ranks(
      n, timeout, server.port(), unique_prefix("kill"),
      [](Communicator& c, TcpStore& s, int r) -> int {
        std::vector<float> buf(1 << 20, 1.0f);
        s.add("running", 1);
        for (int it = 0;; ++it) {
          std::string msg;
          auto t0 = std::chrono::steady_clock::now();
          oslo_status st = status_of(
              [&] {
                c.all_reduce(buf.data(), buf.data(), buf.size(), OSLO_DTYPE_F32, OSLO_REDUCE_SUM);
                std::fill(buf.begin(), buf.end(), 1.0f);
              },
              &msg);
          if (st == OSLO_OK) continue;
          double took = test_util::seconds_since(t0);
          std::fprintf(stderr, "rank %d: iteration %d: %.2f s: %s\n", r, it, took, msg.c_str());
          if (st != OSLO_ERR_COMM && st != OSLO_ERR_TIMEOUT) return 2;
          if (took > 2 * timeout) return 3;
          // Broken now: later calls fail at once.
          auto t1 = std::chrono::steady_clock::now();
          if (status_of([&] { c.barrier(); }) != st) return 4;
          if (test_util::seconds_since(t1) > 0.1) return 5;
          return 0;
        }
      });
  // Let them run a few all_reduces, then kill the last rank. (A client made
  // only now: nothing in this process may run threads while it forks.)
  TcpStore client(kHost, server.port(), false, Deadline(10));
  auto running = [&] { return client.add("running", 0) == n; };
  for (int i = 0; i < 500 && !running(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto t0 = std::chrono::steady_clock::now();
  kill(pids[2], SIGKILL);
  assert_int_equal(test_util::wait_child(pids[2], 5), 128 + SIGKILL);
  for (int r = 0; r < n - 1; ++r) assert_int_equal(test_util::wait_child(pids[r], 3 * timeout), 0);
  assert_true(test_util::seconds_since(t0) < 2 * timeout + 1.0);
}

// A frozen (SIGSTOPped) rank: the others report OSLO_ERR_TIMEOUT after the
// timeout, not earlier and not much later.
void test_fault_sigstop_times_out(void**) {
  constexpr int n = 3;
  constexpr double timeout = 2.0;
  ServerProcess server;
  auto pids = spawn_ranks(n, timeout, server.port(), unique_prefix("stop"),
                          [](Communicator& c, TcpStore& s, int r) -> int {
                            c.barrier();
                            if (r == n - 1) {
                              s.set("stopping", test_util::bytes("1"));
                              raise(SIGSTOP);
                              return 0;
                            }
                            s.wait({"stopping"}, Deadline(10));
                            std::vector<float> buf(1000, 1.0f);
                            std::string msg;
                            auto t0 = std::chrono::steady_clock::now();
                            oslo_status st = status_of(
                                [&] {
                                  c.all_reduce(buf.data(), buf.data(), buf.size(), OSLO_DTYPE_F32,
                                               OSLO_REDUCE_SUM);
                                },
                                &msg);
                            double took = test_util::seconds_since(t0);
                            std::fprintf(stderr, "rank %d: %.2f s: %s\n", r, took, msg.c_str());
                            if (st != OSLO_ERR_TIMEOUT) return 2;
                            if (took < 0.9 * timeout || took > 2 * timeout) return 3;
                            if (std::strstr(msg.c_str(), "all_reduce") == nullptr) return 4;
                            return 0;
                          });
  for (int r = 0; r < n - 1; ++r) assert_int_equal(test_util::wait_child(pids[r], 3 * timeout), 0);
  test_util::kill_children(nullptr);
}

// abort() from another thread wakes a blocked recv with OSLO_ERR_COMM, later
// calls fail at once, and the peer blocked on the aborted rank fails with
// OSLO_ERR_COMM well before its timeout.
void test_fault_abort_from_other_thread(void**) {
  constexpr double timeout = 20.0;
  int rc = run_threads(2, timeout, [](Communicator& c, TcpStore&) -> int {
    int failures = 0;
    c.barrier();
    char byte = 0;
    std::string msg;
    auto t0 = std::chrono::steady_clock::now();
    if (c.rank() == 0) {
      std::thread aborter([&c] {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        c.abort();
      });
      oslo_status st = status_of([&] { c.recv(&byte, 1, 1); }, &msg);
      aborter.join();
      CHECK(st == OSLO_ERR_COMM, "recv after abort: %d %s", st, msg.c_str());
      CHECK(test_util::seconds_since(t0) < 2.0, "abort took %.2f s", test_util::seconds_since(t0));
      CHECK(std::strstr(msg.c_str(), "abort") != nullptr, "message: %s", msg.c_str());
      auto t1 = std::chrono::steady_clock::now();
      CHECK(status_of([&] { c.barrier(); }) == OSLO_ERR_COMM, "barrier after abort");
      CHECK(test_util::seconds_since(t1) < 0.1, "not failing fast");
      c.abort();  // twice is fine
    } else {
      oslo_status st = status_of([&] { c.recv(&byte, 1, 0); }, &msg);
      CHECK(st == OSLO_ERR_COMM, "peer of aborted rank: %d %s", st, msg.c_str());
      CHECK(test_util::seconds_since(t0) < 5.0, "peer took %.2f s", test_util::seconds_since(t0));
    }
    return failures;
  });
  assert_int_equal(rc, 0);

  // abort() wakes a send() that waits for its receiver (a message too large
  // to be buffered).
  rc = run_threads(2, timeout, [](Communicator& c, TcpStore&) -> int {
    int failures = 0;
    c.barrier();
    std::string msg;
    if (c.rank() == 0) {
      std::vector<uint8_t> big(size_t(8) << 20, 1);
      std::thread aborter([&c] {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        c.abort();
      });
      auto t0 = std::chrono::steady_clock::now();
      oslo_status st = status_of([&] { c.send(big.data(), big.size(), 1); }, &msg);
      aborter.join();
      CHECK(st == OSLO_ERR_COMM, "big send after abort: %d %s", st, msg.c_str());
      CHECK(test_util::seconds_since(t0) < 2.0, "abort took %.2f s", test_util::seconds_since(t0));
    } else {
      // Receives only after rank 0 aborted.
      std::this_thread::sleep_for(std::chrono::milliseconds(600));
      std::vector<uint8_t> big(size_t(8) << 20);
      oslo_status st = status_of([&] { c.recv(big.data(), big.size(), 0); }, &msg);
      CHECK(st == OSLO_ERR_COMM, "peer of aborted rank: %d %s", st, msg.c_str());
    }
    return failures;
  });
  assert_int_equal(rc, 0);

  // abort() before any call: the first call fails at once.
  rc = run_threads(2, timeout, [](Communicator& c, TcpStore&) -> int {
    int failures = 0;
    c.barrier();
    if (c.rank() == 0) {
      c.abort();
      CHECK(status_of([&] { c.barrier(); }) == OSLO_ERR_COMM, "barrier after early abort");
    } else {
      auto t0 = std::chrono::steady_clock::now();
      CHECK(status_of([&] { c.barrier(); }) == OSLO_ERR_COMM, "peer barrier");
      CHECK(test_util::seconds_since(t0) < 5.0, "peer took %.2f s", test_util::seconds_since(t0));
    }
    return failures;
  });
  assert_int_equal(rc, 0);
}

// Ranks that never join: the others time out naming them.
// A buffered message nobody receives: send() returned, but once the timeout
// passed the communicator is broken and the next call says why.
void test_fault_send_never_received(void**) {
  int rc = run_threads(2, 1.0, [](Communicator& c, TcpStore&) -> int {
    int failures = 0;
    c.barrier();
    int x = 42;
    std::string msg;
    if (c.rank() == 0) {
      auto t0 = std::chrono::steady_clock::now();
      c.send(&x, sizeof x, 1);
      CHECK(test_util::seconds_since(t0) < 0.5, "buffered send blocked");
      std::this_thread::sleep_for(std::chrono::milliseconds(1600));
      t0 = std::chrono::steady_clock::now();
      oslo_status st = status_of([&] { c.barrier(); }, &msg);
      CHECK(st == OSLO_ERR_TIMEOUT, "after unreceived send: %d %s", st, msg.c_str());
      CHECK(std::strstr(msg.c_str(), "receiver did not take") != nullptr, "message: %s",
            msg.c_str());
      CHECK(test_util::seconds_since(t0) < 0.1, "not failing fast");
    } else {
      // Never receives, and stays connected until rank 0 has checked.
      std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    }
    return failures;
  });
  assert_int_equal(rc, 0);
}

// A recv() whose size differs from the matching send() is an error (the
// communicator breaks: the pair's stream is out of step), not a crash.
void test_fault_send_recv_size_mismatch(void**) {
  int rc = run_threads(2, 5.0, [](Communicator& c, TcpStore&) -> int {
    int failures = 0;
    std::vector<uint8_t> big(size_t(8) << 20, 3);
    std::string msg;
    if (c.rank() == 0) {
      c.send(big.data(), 16, 1);
      oslo_status st = status_of([&] { c.send(big.data(), big.size(), 1); }, &msg);
      CHECK(st == OSLO_ERR_COMM, "sender: %d %s", st, msg.c_str());
    } else {
      oslo_status st = status_of([&] { c.recv(big.data(), 8, 0); }, &msg);
      CHECK(st == OSLO_ERR_INVALID_ARGUMENT, "recv 8 of 16: %d %s", st, msg.c_str());
      CHECK(std::strstr(msg.c_str(), "sent 16 bytes but this rank expects 8") != nullptr,
            "message: %s", msg.c_str());
      CHECK(status_of([&] { c.recv(big.data(), 1, 0); }) == OSLO_ERR_INVALID_ARGUMENT,
            "broken after a mismatch");
    }
    return failures;
  });
  assert_int_equal(rc, 0);
}

// Destroying a communicator right after send() still delivers the buffered
// messages to a receiver that comes a little later.
void test_fault_destroy_flushes_sends(void**) {
  TcpStore server(kHost, 0, true, Deadline(10));
  const std::string prefix = unique_prefix("flush");
  std::atomic<int> failures{0};
  std::thread sender([&] {
    try {
      TcpStore store(kHost, server.port(), false, Deadline(10));
      auto c = join(store, prefix, 0, 2, 5.0);
      c->barrier();
      for (int m = 0; m < 3; ++m) {
        std::vector<int> v(1000, m);
        c->send(v.data(), v.size() * sizeof(int), 1);
      }
      c.reset();  // waits for the three messages to go out
    } catch (const std::exception& e) {
      std::fprintf(stderr, "sender: %s\n", e.what());
      ++failures;
    }
  });
  try {
    TcpStore store(kHost, server.port(), false, Deadline(10));
    auto c = join(store, prefix, 1, 2, 5.0);
    c->barrier();
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    for (int m = 0; m < 3; ++m) {
      std::vector<int> v(1000, -1);
      c->recv(v.data(), v.size() * sizeof(int), 0);
      if (v != std::vector<int>(1000, m)) ++failures;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "receiver: %s\n", e.what());
    ++failures;
  }
  sender.join();
  assert_int_equal(failures.load(), 0);
}

void test_fault_missing_rank(void**) {
  TcpStore server(kHost, 0, true, Deadline(10));
  const std::string prefix = unique_prefix("missing");
  std::vector<std::string> msgs(2);
  std::vector<oslo_status> sts(2);
  std::vector<std::thread> ts;
  auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < 2; ++r)
    ts.emplace_back([&, r] {
      TcpStore store(kHost, server.port(), false, Deadline(10));
      sts[static_cast<size_t>(r)] =
          status_of([&] { join(store, prefix, r, 4, 1.0); }, &msgs[static_cast<size_t>(r)]);
    });
  for (auto& t : ts) t.join();
  double took = test_util::seconds_since(t0);
  for (int r = 0; r < 2; ++r) {
    assert_int_equal(sts[static_cast<size_t>(r)], OSLO_ERR_TIMEOUT);
    if (!std::strstr(msgs[static_cast<size_t>(r)].c_str(), "rank(s) 2, 3 of 4"))
      fail_msg("message: %s", msgs[static_cast<size_t>(r)].c_str());
  }
  assert_true(took < 3.0);

  assert_int_equal(status_of([&] { join(server, prefix, 4, 4, 1.0); }), OSLO_ERR_INVALID_ARGUMENT);
}

// A Store that freezes its process (SIGSTOP) when gloo waits for a peer's
// address ("<prefix>/<rank>"), that is after this rank published its own: the
// peers see it in the store but it never answers their connections.
class FreezingStore : public oslo::Store {
 public:
  explicit FreezingStore(oslo::Store& inner) : inner_(inner) {}
  void set(const std::string& k, const std::vector<uint8_t>& v) override { inner_.set(k, v); }
  std::vector<uint8_t> get(const std::string& k, const Deadline& d) override {
    maybe_freeze(k);
    return inner_.get(k, d);
  }
  int64_t add(const std::string& k, int64_t d) override { return inner_.add(k, d); }
  bool check(const std::vector<std::string>& k) override { return inner_.check(k); }
  void wait(const std::vector<std::string>& k, const Deadline& d) override {
    for (const auto& key : k) maybe_freeze(key);
    inner_.wait(k, d);
  }

 private:
  static void maybe_freeze(const std::string& key) {
    if (key.find("rank_") == std::string::npos) raise(SIGSTOP);
  }
  oslo::Store& inner_;
};

// A rank that freezes half way through the rendezvous: the others give up
// with OSLO_ERR_TIMEOUT within about the timeout (gloo's own connect wait
// would be five times as long), or fail their first op after the timeout.
void test_fault_frozen_during_rendezvous(void**) {
  constexpr double timeout = 1.0;
  ServerProcess server;
  const int port = server.port();
  const std::string prefix = unique_prefix("frozen");
  pid_t frozen = test_util::spawn([&]() -> int {
    TcpStore store(kHost, port, false, Deadline(10));
    FreezingStore fs(store);
    oslo::create_gloo_communicator(fs, prefix, 1, 2, timeout, kHost);
    return 0;
  });
  TcpStore client(kHost, port, false, Deadline(10));
  std::string msg;
  auto t0 = std::chrono::steady_clock::now();
  // Depending on which side of the pair connects (gloo decides by address),
  // rank 0 fails while connecting or connects to the frozen rank's listening
  // socket, which the kernel accepts, and fails in its first op.
  oslo_status st = status_of(
      [&] {
        auto c = join(client, prefix, 0, 2, timeout);
        c->barrier();
      },
      &msg);
  double took = test_util::seconds_since(t0);
  std::fprintf(stderr, "rank 0: %.2f s: %s\n", took, msg.c_str());
  assert_int_equal(st, OSLO_ERR_TIMEOUT);
  assert_true(took < 2 * timeout + 0.5);
  test_util::kill_children(nullptr);
  (void)frozen;
}

}  // namespace gloo_test
