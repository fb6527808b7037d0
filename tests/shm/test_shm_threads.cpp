// shm transport with ranks that are threads of this process, sharing one
// in-process HashStore: every op, dtype and reduce op; argument errors; the
// fault paths that threads can exercise (abort, timeout, a peer that left,
// mismatched collectives, a broken communicator).
#include <fcntl.h>
#include <sys/mman.h>

#include <atomic>

#include "tests/shm/shm_test_util.hpp"

// cmocka last: it defines a fail() macro that would clash with oslo::fail.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
// cmocka.h has no extern "C" of its own.
extern "C" {
// clang-format off
#include <cmocka.h>
// clang-format on
}

using namespace shmtest;

namespace {

int g_group = 0;
std::string next_prefix() {
  return "t/shm/" + std::to_string(g_group++);
}

// Big enough for several pipeline chunks of every dtype, and not a multiple
// of a chunk (a prime number of elements).
constexpr size_t kBig = 700001;

void ops_with(int n) {
  oslo::HashStore store;
  auto comms = make_group(store, next_prefix(), n, 30.0);
  // The segment is unlinked as soon as the group has formed.
  assert_true(leftover_segments({getpid()}).empty());
  std::string log =
      run_threads(comms, [](int, Communicator& c, Checker& ck) { full_suite(c, ck, kBig); });
  if (!log.empty()) print_error("%s", log.c_str());
  assert_true(log.empty());
}

void test_ops_1(void**) {
  ops_with(1);
}
void test_ops_2(void**) {
  ops_with(2);
}
void test_ops_3(void**) {
  ops_with(3);
}
void test_ops_4(void**) {
  ops_with(4);
}

template <typename F>
oslo_status status_of(F&& f, std::string* msg = nullptr) {
  try {
    f();
  } catch (const oslo::Error& e) {
    if (msg) *msg = e.what();
    return e.status();
  }
  return OSLO_OK;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Argument errors are reported before anything is exchanged and leave the
// communicator usable.
void test_argument_errors(void**) {
  oslo::HashStore store;
  auto comms = make_group(store, next_prefix(), 2, 10.0);
  std::string log = run_threads(comms, [](int r, Communicator& c, Checker& ck) {
    float x[4] = {1, 2, 3, 4};
    float y[8];
    // Out-of-range values as a C caller can pass them (the enums span int).
    SHM_EXPECT(ck, status_of([&] {
                     c.all_reduce(x, x, 4, static_cast<oslo_dtype>(9), OSLO_REDUCE_SUM);
                   }) == OSLO_ERR_DTYPE,
               "bad dtype");
    SHM_EXPECT(ck, status_of([&] {
                     c.all_reduce(x, x, 4, OSLO_DTYPE_F32, static_cast<oslo_reduce_op>(7));
                   }) == OSLO_ERR_INVALID_ARGUMENT,
               "bad op");
    SHM_EXPECT(ck, status_of([&] {
                     c.all_reduce(nullptr, x, 4, OSLO_DTYPE_F32, OSLO_REDUCE_SUM);
                   }) == OSLO_ERR_INVALID_ARGUMENT,
               "null in");
    SHM_EXPECT(ck, status_of([&] {
                     c.all_gather(x, nullptr, 4, OSLO_DTYPE_F32);
                   }) == OSLO_ERR_INVALID_ARGUMENT,
               "null out");
    SHM_EXPECT(
        ck, status_of([&] { c.broadcast(x, 4, OSLO_DTYPE_F32, 2); }) == OSLO_ERR_INVALID_ARGUMENT,
        "bad root");
    SHM_EXPECT(
        ck, status_of([&] { c.broadcast(x, 4, OSLO_DTYPE_F32, -1); }) == OSLO_ERR_INVALID_ARGUMENT,
        "negative root");
    SHM_EXPECT(ck, status_of([&] { c.send(x, 4, r); }) == OSLO_ERR_INVALID_ARGUMENT,
               "send to self");
    SHM_EXPECT(ck, status_of([&] { c.recv(x, 4, 5); }) == OSLO_ERR_INVALID_ARGUMENT, "recv from 5");
    SHM_EXPECT(ck, status_of([&] {
                     c.reduce_scatter(x, y, SIZE_MAX / 2, OSLO_DTYPE_F32, OSLO_REDUCE_SUM);
                   }) == OSLO_ERR_INVALID_ARGUMENT,
               "overflowing count");
    // Count 0 with null buffers is a legal no-op.
    SHM_EXPECT(ck, status_of([&] {
                     c.all_reduce(nullptr, nullptr, 0, OSLO_DTYPE_F32, OSLO_REDUCE_SUM);
                   }) == OSLO_OK,
               "count 0");
    // Still usable.
    c.all_reduce(x, y, 4, OSLO_DTYPE_F32, OSLO_REDUCE_SUM);
    SHM_EXPECT(ck, y[0] == 2 && y[3] == 8, "all_reduce after argument errors");
    SHM_EXPECT(ck, std::string(c.transport()) == "shm", "transport");
  });
  if (!log.empty()) print_error("%s", log.c_str());
  assert_true(log.empty());
}

void test_create_errors(void**) {
  oslo::HashStore store;
  assert_int_equal(status_of([&] { oslo::create_shm_communicator(store, "x", 0, 0, 1.0); }),
                   OSLO_ERR_INVALID_ARGUMENT);
  assert_int_equal(status_of([&] { oslo::create_shm_communicator(store, "x", 2, 2, 1.0); }),
                   OSLO_ERR_INVALID_ARGUMENT);
  assert_int_equal(status_of([&] { oslo::create_shm_communicator(store, "x", 0, 2, 0.0); }),
                   OSLO_ERR_INVALID_ARGUMENT);
  // Rank 1 never comes: rank 0 times out naming it, and nothing is left in /dev/shm.
  std::string msg;
  double t0 = now_s();
  assert_int_equal(
      status_of([&] { oslo::create_shm_communicator(store, next_prefix(), 0, 2, 1.0); }, &msg),
      OSLO_ERR_TIMEOUT);
  double dt = now_s() - t0;
  assert_true(dt >= 0.9 && dt < 2.0);
  assert_true(contains(msg, "rank(s) 1"));
  assert_true(leftover_segments({getpid()}).empty());
  // Disagreement on the group size.
  std::string prefix = next_prefix();
  std::string m0, m1;
  oslo_status s0 = OSLO_OK, s1 = OSLO_OK;
  std::thread t([&] {
    s1 = status_of([&] { oslo::create_shm_communicator(store, prefix, 1, 3, 1.0); }, &m1);
  });
  s0 = status_of([&] { oslo::create_shm_communicator(store, prefix, 0, 2, 1.0); }, &m0);
  t.join();
  assert_int_equal(s1, OSLO_ERR_INVALID_ARGUMENT);
  assert_true(contains(m1, "created for 2 ranks"));
  assert_true(s0 == OSLO_ERR_TIMEOUT || s0 == OSLO_ERR_COMM);
  assert_true(leftover_segments({getpid()}).empty());
}

// A joining rank checks what it maps: a missing segment and a foreign one
// are OSLO_ERR_IO errors naming the call or the problem.
void test_open_errors(void**) {
  oslo::HashStore store;
  std::string msg;
  std::string missing = "/oslo-shm-test-missing-" + std::to_string(getpid());
  store.set("bad/1/shm/name", std::vector<uint8_t>(missing.begin(), missing.end()));
  assert_int_equal(
      status_of([&] { oslo::create_shm_communicator(store, "bad/1", 1, 2, 1.0); }, &msg),
      OSLO_ERR_IO);
  assert_true(contains(msg, "shm_open(") && contains(msg, "No such file"));
  // A segment of the right size that is not ours.
  std::string foreign = "/oslo-shm-" + std::to_string(getpid()) + "-foreign";
  int fd = shm_open(foreign.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  assert_true(fd >= 0);
  assert_int_equal(ftruncate(fd, 1 << 20), 0);
  close(fd);
  store.set("bad/2/shm/name", std::vector<uint8_t>(foreign.begin(), foreign.end()));
  oslo_status st =
      status_of([&] { oslo::create_shm_communicator(store, "bad/2", 1, 2, 1.0); }, &msg);
  shm_unlink(foreign.c_str());
  assert_int_equal(st, OSLO_ERR_IO);
  assert_true(contains(msg, "not an oslo shm segment"));
  assert_true(leftover_segments({getpid()}).empty());
}

// abort() from another thread unblocks a waiting barrier with OSLO_ERR_COMM,
// fails the peer's later calls, and leaves both broken.
void test_abort_from_thread(void**) {
  oslo::HashStore store;
  auto comms = make_group(store, next_prefix(), 2, 30.0);
  std::string m0, m1, m2;
  double t0 = now_s();
  std::thread watchdog([&] {
    usleep(200 * 1000);
    comms[0]->abort();
  });
  oslo_status s0 = status_of([&] { comms[0]->barrier(); }, &m0);
  double waited = now_s() - t0;
  watchdog.join();
  assert_int_equal(s0, OSLO_ERR_COMM);
  assert_true(contains(m0, "aborted by rank 0"));
  assert_true(waited < 2.0);
  // The peer, which never took part, fails at once too.
  float x = 1;
  oslo_status s1 =
      status_of([&] { comms[1]->all_reduce(&x, &x, 1, OSLO_DTYPE_F32, OSLO_REDUCE_SUM); }, &m1);
  assert_int_equal(s1, OSLO_ERR_COMM);
  assert_true(contains(m1, "aborted by rank 0"));
  // Broken for good, with the same status and the reason.
  oslo_status s2 = status_of([&] { comms[0]->all_gather(&x, &x, 0, OSLO_DTYPE_F32); }, &m2);
  assert_int_equal(s2, OSLO_ERR_COMM);
  assert_true(contains(m2, "unusable") && contains(m2, "aborted by rank 0"));
  // abort() is idempotent and callable again.
  comms[0]->abort();
  comms[1]->abort();
}

// abort() on one rank wakes a peer that sleeps in recv.
void test_abort_wakes_peer(void**) {
  oslo::HashStore store;
  auto comms = make_group(store, next_prefix(), 3, 30.0);
  std::string m;
  std::thread t([&] {
    usleep(150 * 1000);
    comms[2]->abort();
  });
  double t0 = now_s();
  char buf[16];
  oslo_status s = status_of([&] { comms[0]->recv(buf, sizeof buf, 1); }, &m);
  double waited = now_s() - t0;
  t.join();
  assert_int_equal(s, OSLO_ERR_COMM);
  assert_true(contains(m, "aborted by rank 2"));
  assert_true(waited < 1.0);
}

// A peer that never calls: OSLO_ERR_TIMEOUT within [timeout, 2 x timeout]
// naming it; then the communicator is broken, and the late peer fails at once
// (the first rank left after its error) instead of waiting a timeout itself.
void test_timeout(void**) {
  oslo::HashStore store;
  auto comms = make_group(store, next_prefix(), 2, 1.0);
  std::string m0, m0b, m1;
  double t0 = now_s();
  oslo_status s0 = status_of([&] { comms[0]->barrier(); }, &m0);
  double waited = now_s() - t0;
  assert_int_equal(s0, OSLO_ERR_TIMEOUT);
  assert_true(waited >= 0.95 && waited < 2.0);
  assert_true(contains(m0, "barrier") && contains(m0, "rank 1"));
  t0 = now_s();
  oslo_status s0b = status_of([&] { comms[0]->barrier(); }, &m0b);
  assert_int_equal(s0b, OSLO_ERR_TIMEOUT);
  assert_true(contains(m0b, "unusable"));
  assert_true(now_s() - t0 < 0.1);
  // Rank 1's barrier: rank 0 already posted its step, so it completes; the
  // next one waits for rank 0, which has left.
  comms[1]->barrier();
  t0 = now_s();
  oslo_status s1 = status_of([&] { comms[1]->barrier(); }, &m1);
  assert_int_equal(s1, OSLO_ERR_COMM);
  assert_true(contains(m1, "rank 0") && contains(m1, "left the group"));
  assert_true(now_s() - t0 < 0.5);
}

// Point to point honours the timeout too: a recv of a message never sent, and
// a send larger than the ring that nobody receives.
void test_p2p_timeouts(void**) {
  for (int sender = 0; sender < 2; ++sender) {
    oslo::HashStore store;
    auto comms = make_group(store, next_prefix(), 2, 1.0);
    std::vector<uint8_t> buf(8 << 20);
    std::string m;
    double t0 = now_s();
    oslo_status s = status_of(
        [&] {
          if (sender)
            comms[0]->send(buf.data(), buf.size(), 1);
          else
            comms[0]->recv(buf.data(), 16, 1);
        },
        &m);
    double waited = now_s() - t0;
    assert_int_equal(s, OSLO_ERR_TIMEOUT);
    assert_true(waited >= 0.95 && waited < 2.0);
    assert_true(contains(m, sender ? "send to rank 1" : "recv from rank 1"));
  }
}

// A send up to the ring's size (4 MB per pair for 2 ranks) returns before the
// receiver calls recv: a pipeline stage hands over its activations (1.5 MB
// for 512 tokens of GPT-2) and goes on. OSLO_SHM_RING_KB sets the ring,
// rounded down to a power of two: with 1500 (1 MB) the same 1.5 MB send
// waits for a receiver that never comes and times out.
void test_send_without_receiver(void**) {
  const size_t sizes[] = {1536u << 10, (4u << 20) - 64};
  for (size_t n : sizes) {
    oslo::HashStore store;
    auto comms = make_group(store, next_prefix(), 2, 2.0);
    std::vector<uint8_t> out(n), in(n, 0);
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(i * 131 + 7);
    std::string m;
    assert_int_equal(status_of([&] { comms[0]->send(out.data(), n, 1); }, &m), OSLO_OK);
    assert_int_equal(status_of([&] { comms[1]->recv(in.data(), n, 0); }, &m), OSLO_OK);
    assert_true(in == out);
  }
  setenv("OSLO_SHM_RING_KB", "1500", 1);
  oslo::HashStore store;
  auto comms = make_group(store, next_prefix(), 2, 1.0);
  unsetenv("OSLO_SHM_RING_KB");
  std::vector<uint8_t> buf(1536u << 10);
  std::string m;
  assert_int_equal(status_of([&] { comms[0]->send(buf.data(), buf.size(), 1); }, &m),
                   OSLO_ERR_TIMEOUT);
  assert_true(contains(m, "ring of 1048576 bytes"));
}

// A peer that destroyed its communicator: waiting for it fails at once.
void test_peer_destroyed(void**) {
  oslo::HashStore store;
  auto comms = make_group(store, next_prefix(), 2, 30.0);
  comms[1].reset();
  std::string m;
  double t0 = now_s();
  oslo_status s = status_of([&] { comms[0]->barrier(); }, &m);
  assert_int_equal(s, OSLO_ERR_COMM);
  assert_true(contains(m, "destroyed"));
  assert_true(now_s() - t0 < 0.5);
}

// Mismatched collectives are detected instead of exchanging garbage.
void test_mismatch(void**) {
  for (int variant = 0; variant < 3; ++variant) {
    oslo::HashStore store;
    auto comms = make_group(store, next_prefix(), 2, 5.0);
    std::string msg[2];
    oslo_status st[2];
    std::vector<std::thread> ts;
    for (int r = 0; r < 2; ++r)
      ts.emplace_back([&, r] {
        std::vector<float> buf(200000, 1.0f), out(400000);
        st[r] = status_of(
            [&] {
              Communicator& c = *comms[r];
              if (variant == 0)
                c.all_reduce(buf.data(), buf.data(), r ? 20 : 10, OSLO_DTYPE_F32, OSLO_REDUCE_SUM);
              if (variant == 1) {
                if (r)
                  c.all_gather(buf.data(), out.data(), 10, OSLO_DTYPE_F32);
                else
                  c.barrier();
              }
              if (variant == 2)  // different step counts: one-step vs pipelined
                c.all_reduce(buf.data(), buf.data(), r ? 200000 : 10, OSLO_DTYPE_F32,
                             OSLO_REDUCE_SUM);
            },
            &msg[r]);
      });
    for (auto& t : ts) t.join();
    bool any_mismatch = false;
    for (int r = 0; r < 2; ++r) {
      assert_true(st[r] == OSLO_ERR_INVALID_ARGUMENT || st[r] == OSLO_ERR_COMM);
      any_mismatch |= st[r] == OSLO_ERR_INVALID_ARGUMENT && contains(msg[r], "mismatch");
    }
    if (!any_mismatch) print_error("%s\n%s\n", msg[0].c_str(), msg[1].c_str());
    assert_true(any_mismatch);
  }
}

// Four ranks on two cores, many small collectives back to back: the futex
// path has to hand over quickly and never lose a wake-up.
void test_oversubscribed_stress(void**) {
  oslo::HashStore store;
  auto comms = make_group(store, next_prefix(), 4, 30.0);
  double t0 = now_s();
  std::string log = run_threads(comms, [](int r, Communicator& c, Checker& ck) {
    for (int it = 0; it < 2000; ++it) {
      int32_t v = r + it, o = 0;
      c.all_reduce(&v, &o, 1, OSLO_DTYPE_I32, OSLO_REDUCE_SUM);
      if (o != 6 + 4 * it) {
        ck.bad(oslo::str("iteration ", it, ": got ", o));
        return;
      }
      if (it % 7 == 0) c.barrier();
      if (it % 11 == 0) {
        int32_t b = r == it % 4 ? it : -1;
        c.broadcast(&b, 1, OSLO_DTYPE_I32, it % 4);
        SHM_EXPECT(ck, b == it, "broadcast");
      }
    }
  });
  if (!log.empty()) print_error("%s", log.c_str());
  assert_true(log.empty());
  print_message("2000 all-reduces on 4 thread ranks took %.2f s\n", now_s() - t0);
}

}  // namespace

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_ops_1),
      cmocka_unit_test(test_ops_2),
      cmocka_unit_test(test_ops_3),
      cmocka_unit_test(test_ops_4),
      cmocka_unit_test(test_argument_errors),
      cmocka_unit_test(test_create_errors),
      cmocka_unit_test(test_open_errors),
      cmocka_unit_test(test_abort_from_thread),
      cmocka_unit_test(test_abort_wakes_peer),
      cmocka_unit_test(test_timeout),
      cmocka_unit_test(test_p2p_timeouts),
      cmocka_unit_test(test_send_without_receiver),
      cmocka_unit_test(test_peer_destroyed),
      cmocka_unit_test(test_mismatch),
      cmocka_unit_test(test_oversubscribed_stress),
  };
  return cmocka_run_group_tests(tests, nullptr, nullptr);
}
