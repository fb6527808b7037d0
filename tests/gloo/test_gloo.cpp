// gloo communicator: every op, dtype and reduce op on 2, 3 and 4 ranks (as
// threads and as processes) over a TcpStore on 127.0.0.1, exact expected
// values, in-place variants, bitwise agreement across ranks; faults: a rank
// SIGKILLed mid-allreduce, a SIGSTOPped rank, abort() from another thread,
// ranks that never join.
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include "core/common/dtype.hpp"
#include "core/rendezvous/hash_store.hpp"
#include "core/rendezvous/local_address.hpp"
#include "core/rendezvous/tcp_store.hpp"
#include "transports/gloo/gloo_communicator.hpp"

#include "tests/rendezvous/test_util.hpp"  // last: it includes cmocka.h

using oslo::Communicator;
using oslo::Deadline;
using oslo::TcpStore;
using test_util::status_of;

namespace {

const char* kHost = "127.0.0.1";

// The rendezvous server for tests that fork ranks runs in its own process:
// forking while a server thread of this process may hold a lock (malloc's,
// or ASan's allocator's) can leave a child deadlocked forever. This process
// stays single-threaded while it forks.
class ServerProcess {
 public:
  ServerProcess() {
    int port_pipe[2], ctl_pipe[2];
    if (pipe(port_pipe) != 0 || pipe(ctl_pipe) != 0) std::abort();
    pid_ = fork();
    if (pid_ < 0) std::abort();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      close(port_pipe[0]);
      close(ctl_pipe[1]);
      int code = 0;
      try {
        TcpStore server(kHost, 0, true, Deadline(10));
        int port = server.port();
        if (write(port_pipe[1], &port, sizeof port) != sizeof port) code = 1;
        char c;
        while (read(ctl_pipe[0], &c, 1) > 0) {
        }  // until the parent closes its end
      } catch (...) {
        code = 2;
      }
      _exit(code);
    }
    close(port_pipe[1]);
    close(ctl_pipe[0]);
    ctl_ = ctl_pipe[1];
    if (read(port_pipe[0], &port_, sizeof port_) != sizeof port_) port_ = -1;
    close(port_pipe[0]);
  }
  ~ServerProcess() {
    close(ctl_);
    int st;
    waitpid(pid_, &st, 0);
  }
  int port() const { return port_; }

 private:
  pid_t pid_ = -1;
  int ctl_ = -1;
  int port_ = -1;
};
constexpr oslo_dtype kDtypes[] = {OSLO_DTYPE_F32, OSLO_DTYPE_F16, OSLO_DTYPE_BF16, OSLO_DTYPE_I32,
                                  OSLO_DTYPE_I64};
constexpr oslo_reduce_op kOps[] = {OSLO_REDUCE_SUM, OSLO_REDUCE_AVG, OSLO_REDUCE_MAX,
                                   OSLO_REDUCE_MIN};
const size_t kSizes[] = {0, 1, 7, 4096};
constexpr size_t kLarge = (size_t(4) << 20) + 3;  // ~4M elements, not a multiple of n

#define CHECK(cond, ...)                                                                       \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      std::fprintf(stderr, "rank %d: %s:%d: check failed: %s: ", c.rank(), __FILE__, __LINE__, \
                   #cond);                                                                     \
      std::fprintf(stderr, __VA_ARGS__);                                                       \
      std::fprintf(stderr, "\n");                                                              \
      ++failures;                                                                              \
    }                                                                                          \
  } while (0)

// ---- values -------------------------------------------------------------------

// Small integers, so that every float sum is exact and the expected value is
// unambiguous; they differ per rank and element, with negatives, so MAX and
// MIN are exercised.
int64_t base_value(int rank, size_t i) {
  return static_cast<int64_t>((rank * 7 + static_cast<int64_t>(i % 1009) * 3) % 11) - 5 + rank;
}

int64_t int_scale(oslo_dtype dt) {
  return dt == OSLO_DTYPE_I64 ? 3000000007LL : 100000;
}

// Buffer of count elements of rank's input, in dtype dt.
std::vector<uint8_t> make_input(oslo_dtype dt, int rank, size_t count, size_t first = 0) {
  std::vector<uint8_t> b(count * oslo::dtype_size(dt) + 1);
  for (size_t i = 0; i < count; ++i) {
    int64_t v = base_value(rank, first + i);
    switch (dt) {
      case OSLO_DTYPE_I32:
        reinterpret_cast<int32_t*>(b.data())[i] = static_cast<int32_t>(v * int_scale(dt));
        break;
      case OSLO_DTYPE_I64: reinterpret_cast<int64_t*>(b.data())[i] = v * int_scale(dt); break;
      default: {
        float f = static_cast<float>(v);
        oslo::from_f32(dt, &f, b.data() + i * oslo::dtype_size(dt), 1);
      }
    }
  }
  b.resize(count * oslo::dtype_size(dt));
  return b;
}

// What the reduction of element i over n ranks must give, stored as dt.
std::vector<uint8_t> expected_reduce(oslo_dtype dt, oslo_reduce_op op, int n, size_t count,
                                     size_t first = 0) {
  std::vector<uint8_t> b(count * oslo::dtype_size(dt) + 1);
  for (size_t i = 0; i < count; ++i) {
    int64_t sum = 0, mx = INT64_MIN, mn = INT64_MAX;
    for (int r = 0; r < n; ++r) {
      int64_t v = base_value(r, first + i);
      sum += v;
      mx = std::max(mx, v);
      mn = std::min(mn, v);
    }
    if (dt == OSLO_DTYPE_I32 || dt == OSLO_DTYPE_I64) {
      int64_t s = int_scale(dt);
      int64_t r = op == OSLO_REDUCE_SUM   ? sum * s
                  : op == OSLO_REDUCE_AVG ? (sum * s) / n
                  : op == OSLO_REDUCE_MAX ? mx * s
                                          : mn * s;
      if (dt == OSLO_DTYPE_I32)
        reinterpret_cast<int32_t*>(b.data())[i] = static_cast<int32_t>(r);
      else
        reinterpret_cast<int64_t*>(b.data())[i] = r;
    } else {
      float f = op == OSLO_REDUCE_SUM   ? static_cast<float>(sum)
                : op == OSLO_REDUCE_AVG ? static_cast<float>(sum) / static_cast<float>(n)
                : op == OSLO_REDUCE_MAX ? static_cast<float>(mx)
                                        : static_cast<float>(mn);
      oslo::from_f32(dt, &f, b.data() + i * oslo::dtype_size(dt), 1);
    }
  }
  b.resize(count * oslo::dtype_size(dt));
  return b;
}

bool same(const std::vector<uint8_t>& a, const uint8_t* b, size_t bytes) {
  return a.size() == bytes && (bytes == 0 || std::memcmp(a.data(), b, bytes) == 0);
}

// Deterministic pseudo-random floats in [-1, 1): sums are not exact, so only
// a rank-ordered reduction reproduces them bit for bit.
float noise(int rank, size_t i) {
  uint64_t x = (static_cast<uint64_t>(rank) << 40) ^ (i * 0x9e3779b97f4a7c15ull);
  x ^= x >> 29;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 32;
  return static_cast<float>(x % 2000001) / 1000000.0f - 1.0f;
}

// ---- the op matrix ------------------------------------------------------------

int check_all_reduce(Communicator& c, size_t count, oslo_dtype dt, oslo_reduce_op op) {
  int failures = 0;
  const int n = c.size(), r = c.rank();
  const size_t bytes = count * oslo::dtype_size(dt);
  auto in = make_input(dt, r, count);
  auto want = expected_reduce(dt, op, n, count);
  std::vector<uint8_t> out(bytes + 1, 0xcd);
  c.all_reduce(in.data(), out.data(), count, dt, op);
  CHECK(same(want, out.data(), bytes), "all_reduce %s op %d count %zu", oslo::dtype_name(dt), op,
        count);
  CHECK(out[bytes] == 0xcd, "all_reduce wrote past the end");
  CHECK(same(make_input(dt, r, count), in.data(), bytes), "all_reduce changed its input");
  c.all_reduce(in.data(), in.data(), count, dt, op);  // in place
  CHECK(same(want, in.data(), bytes), "in-place all_reduce %s op %d count %zu",
        oslo::dtype_name(dt), op, count);
  return failures;
}

int check_reduce_scatter(Communicator& c, size_t count, oslo_dtype dt, oslo_reduce_op op) {
  int failures = 0;
  const int n = c.size(), r = c.rank();
  const size_t es = oslo::dtype_size(dt);
  auto in = make_input(dt, r, count * n);
  auto want = expected_reduce(dt, op, n, count, static_cast<size_t>(r) * count);
  std::vector<uint8_t> out(count * es + 1, 0xcd);
  c.reduce_scatter(in.data(), out.data(), count, dt, op);
  CHECK(same(want, out.data(), count * es), "reduce_scatter %s op %d count %zu",
        oslo::dtype_name(dt), op, count);
  CHECK(out[count * es] == 0xcd, "reduce_scatter wrote past the end");
  // In place: the result lands in this rank's own block of the input.
  uint8_t* mine = in.data() + static_cast<size_t>(r) * count * es;
  c.reduce_scatter(in.data(), mine, count, dt, op);
  CHECK(same(want, mine, count * es), "in-place reduce_scatter %s op %d count %zu",
        oslo::dtype_name(dt), op, count);
  return failures;
}

int check_all_gather(Communicator& c, size_t count, oslo_dtype dt) {
  int failures = 0;
  const int n = c.size(), r = c.rank();
  const size_t es = oslo::dtype_size(dt);
  std::vector<uint8_t> want;
  for (int p = 0; p < n; ++p) {
    auto part = make_input(dt, p, count);
    want.insert(want.end(), part.begin(), part.end());
  }
  auto in = make_input(dt, r, count);
  std::vector<uint8_t> out(count * es * n + 1, 0xcd);
  c.all_gather(in.data(), out.data(), count, dt);
  CHECK(same(want, out.data(), count * es * n), "all_gather %s count %zu", oslo::dtype_name(dt),
        count);
  CHECK(out[count * es * n] == 0xcd, "all_gather wrote past the end");
  // In place: the input already sits in this rank's block of the output.
  std::vector<uint8_t> io(count * es * n, 0);
  if (count) std::memcpy(io.data() + static_cast<size_t>(r) * count * es, in.data(), count * es);
  c.all_gather(io.data() + static_cast<size_t>(r) * count * es, io.data(), count, dt);
  CHECK(same(want, io.data(), count * es * n), "in-place all_gather %s count %zu",
        oslo::dtype_name(dt), count);
  return failures;
}

int check_broadcast(Communicator& c, size_t count, oslo_dtype dt) {
  int failures = 0;
  const size_t bytes = count * oslo::dtype_size(dt);
  for (int root = 0; root < c.size(); ++root) {
    auto want = make_input(dt, root + 10, count);
    auto buf = c.rank() == root ? want : std::vector<uint8_t>(bytes, 0);
    c.broadcast(buf.data(), count, dt, root);
    CHECK(same(want, buf.data(), bytes), "broadcast %s count %zu root %d", oslo::dtype_name(dt),
          count, root);
  }
  return failures;
}

int check_send_recv(Communicator& c) {
  int failures = 0;
  const int n = c.size(), r = c.rank();
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  // A ring of messages of several sizes (0 bytes included), each sent in
  // order; even ranks send first, odd ranks receive first, so that the
  // synchronous sends of the ring never wait on each other in a cycle.
  const size_t sizes[] = {0, 1, 13, 1 << 20};
  auto payload = [](int from, size_t len) {
    std::vector<uint8_t> v(len);
    for (size_t i = 0; i < len; ++i) v[i] = static_cast<uint8_t>(from * 31 + i * 7);
    return v;
  };
  auto do_sends = [&] {
    for (size_t len : sizes) {
      auto v = payload(r, len);
      c.send(v.data(), v.size(), next);
    }
  };
  auto do_recvs = [&] {
    for (size_t len : sizes) {
      std::vector<uint8_t> v(len, 0);
      c.recv(v.data(), v.size(), prev);
      CHECK(v == payload(prev, len), "recv of %zu bytes from %d", len, prev);
    }
  };
  if (r % 2 == 0) {
    do_sends();
    do_recvs();
  } else {
    do_recvs();
    do_sends();
  }
  // Buffered sends: ranks 0 and 1 both send many messages to each other
  // before either receives (each message is copied and send() returns).
  if (r < 2) {
    const int peer = 1 - r;
    const int kMsgs = 300;
    auto msg = [&](int from, int m) { return payload(from * 1000 + m, (m * 37) % 2000); };
    for (int m = 0; m < kMsgs; ++m) {
      auto v = msg(r, m);
      c.send(v.data(), v.size(), peer);
    }
    for (int m = 0; m < kMsgs; ++m) {
      auto want = msg(peer, m);
      std::vector<uint8_t> v(want.size());
      c.recv(v.data(), v.size(), peer);
      CHECK(v == want, "buffered message %d from %d", m, peer);
    }
    // Large messages (sent from the caller's buffer, send() waits for the
    // receiver) in order with small ones queued before and after them.
    const size_t big = (size_t(5) << 20) + 1;
    for (int m = 0; m < 6; ++m) {
      size_t len = m % 2 ? static_cast<size_t>(m * 101) : big + static_cast<size_t>(m);
      auto want = payload(m + 7, len);
      if (r == 0) {
        c.send(want.data(), want.size(), 1);
      } else {
        std::vector<uint8_t> v(len);
        c.recv(v.data(), v.size(), 0);
        CHECK(v == want, "streamed message %d", m);
      }
    }
  }
  return failures;
}

int check_bitwise_agreement(Communicator& c) {
  int failures = 0;
  const int n = c.size(), r = c.rank();
  const size_t count = 100003;
  std::vector<float> in(count), out(count), want(count, 0.0f);
  for (size_t i = 0; i < count; ++i) in[i] = noise(r, i);
  // Reference: sum in rank order 0..n-1 in f32.
  for (int p = 0; p < n; ++p)
    for (size_t i = 0; i < count; ++i) want[i] = p == 0 ? noise(0, i) : want[i] + noise(p, i);
  c.all_reduce(in.data(), out.data(), count, OSLO_DTYPE_F32, OSLO_REDUCE_SUM);
  CHECK(std::memcmp(want.data(), out.data(), count * 4) == 0, "f32 sum not rank-ordered");
  // Every rank holds the same bits: gather everybody's result and compare.
  std::vector<float> all(count * n);
  c.all_gather(out.data(), all.data(), count, OSLO_DTYPE_F32);
  for (int p = 0; p < n; ++p)
    CHECK(std::memcmp(all.data() + p * count, out.data(), count * 4) == 0,
          "rank %d's result differs", p);
  // bf16 in f32, rounded once.
  std::vector<uint16_t> bin(count), bout(count), bwant(count);
  for (size_t i = 0; i < count; ++i) bin[i] = oslo::f32_to_bf16(noise(r, i));
  std::vector<float> acc(count, 0.0f);
  for (int p = 0; p < n; ++p)
    for (size_t i = 0; i < count; ++i) {
      float v = oslo::bf16_to_f32(oslo::f32_to_bf16(noise(p, i)));
      acc[i] = p == 0 ? v : acc[i] + v;
    }
  for (size_t i = 0; i < count; ++i) bwant[i] = oslo::f32_to_bf16(acc[i] / static_cast<float>(n));
  c.all_reduce(bin.data(), bout.data(), count, OSLO_DTYPE_BF16, OSLO_REDUCE_AVG);
  CHECK(bwant == bout, "bf16 avg differs from f32 accumulation rounded once");
  return failures;
}

int check_large(Communicator& c) {
  int failures = 0;
  failures += check_all_reduce(c, kLarge, OSLO_DTYPE_F32, OSLO_REDUCE_SUM);
  failures += check_all_reduce(c, kLarge, OSLO_DTYPE_BF16, OSLO_REDUCE_AVG);
  failures += check_all_gather(c, kLarge / c.size(), OSLO_DTYPE_F32);
  failures += check_reduce_scatter(c, kLarge / c.size(), OSLO_DTYPE_I64, OSLO_REDUCE_MAX);
  failures += check_broadcast(c, kLarge / 4, OSLO_DTYPE_F16);
  return failures;
}

// The whole matrix on one communicator; returns the number of failures.
// large: also the ~4M-element cases (costly under sanitizers, so only some
// of the rank counts run them).
int run_all_ops(Communicator& c, bool large) {
  int failures = 0;
  CHECK(std::strcmp(c.transport(), "gloo/tcp") == 0, "transport %s", c.transport());
  for (oslo_dtype dt : kDtypes)
    for (size_t count : kSizes) {
      for (oslo_reduce_op op : kOps) {
        failures += check_all_reduce(c, count, dt, op);
        failures += check_reduce_scatter(c, count, dt, op);
      }
      failures += check_all_gather(c, count, dt);
      failures += check_broadcast(c, count, dt);
    }
  failures += check_send_recv(c);
  c.barrier();
  failures += check_bitwise_agreement(c);
  if (large) failures += check_large(c);
  c.barrier();
  // Argument errors are reported without breaking the communicator.
  float x = 0;
  CHECK(
      status_of([&] { c.broadcast(&x, 1, OSLO_DTYPE_F32, c.size()); }) == OSLO_ERR_INVALID_ARGUMENT,
      "bad root");
  CHECK(status_of([&] { c.send(&x, 4, c.rank()); }) == OSLO_ERR_INVALID_ARGUMENT, "send to self");
  CHECK(status_of([&] { c.all_reduce(&x, &x, 1, static_cast<oslo_dtype>(7), OSLO_REDUCE_SUM); }) ==
            OSLO_ERR_DTYPE,
        "bad dtype");
  c.barrier();
  return failures;
}

// ---- running ranks --------------------------------------------------------------

std::string unique_prefix(const char* name) {
  static std::atomic<int> counter{0};
  return std::string(name) + "." + std::to_string(counter++);
}

using RankFn = std::function<int(Communicator&, TcpStore&)>;

std::unique_ptr<Communicator> join(TcpStore& store, const std::string& prefix, int rank, int n,
                                   double timeout) {
  return oslo::create_gloo_communicator(store, prefix, rank, n, timeout, kHost);
}

// Ranks as threads of this process; returns the sum of their results (an
// exception counts as one failure).
int run_threads(int n, double timeout, const RankFn& fn) {
  TcpStore server(kHost, 0, true, Deadline(10));
  const std::string prefix = unique_prefix("threads");
  std::vector<int> results(static_cast<size_t>(n), 0);
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r)
    ts.emplace_back([&, r] {
      try {
        TcpStore store(kHost, server.port(), false, Deadline(10));
        auto comm = join(store, prefix, r, n, timeout);
        results[static_cast<size_t>(r)] = fn(*comm, store);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
        results[static_cast<size_t>(r)] = 1;
      }
    });
  for (auto& t : ts) t.join();
  int sum = 0;
  for (int v : results) sum += v;
  return sum;
}

// Ranks as forked processes; returns their pids (in rank order). The caller
// waits for them.
std::vector<pid_t> spawn_ranks(int n, double timeout, int port, const std::string& prefix,
                               const std::function<int(Communicator&, TcpStore&, int)>& fn) {
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r)
    pids.push_back(test_util::spawn([&, r]() -> int {
      TcpStore store(kHost, port, false, Deadline(10));
      auto comm = join(store, prefix, r, n, timeout);
      return fn(*comm, store, r);
    }));
  return pids;
}

int run_processes(int n, double timeout, const RankFn& fn) {
  ServerProcess server;
  auto pids = spawn_ranks(n, timeout, server.port(), unique_prefix("procs"),
                          [&](Communicator& c, TcpStore& s, int) { return fn(c, s); });
  int bad = 0;
  for (pid_t pid : pids) bad += test_util::wait_child(pid, 60) != 0;
  return bad;
}

// ---- tests ------------------------------------------------------------------------

void test_threads_2(void**) {
  const bool large = false;
  assert_int_equal(
      run_threads(2, 20, [=](Communicator& c, TcpStore&) { return run_all_ops(c, large); }), 0);
}
void test_threads_3(void**) {
  const bool large = true;
  assert_int_equal(
      run_threads(3, 20, [=](Communicator& c, TcpStore&) { return run_all_ops(c, large); }), 0);
}
void test_threads_4(void**) {
  const bool large = false;
  assert_int_equal(
      run_threads(4, 20, [=](Communicator& c, TcpStore&) { return run_all_ops(c, large); }), 0);
}
void test_processes_2(void**) {
  const bool large = false;
  assert_int_equal(
      run_processes(2, 20, [=](Communicator& c, TcpStore&) { return run_all_ops(c, large); }), 0);
}
void test_processes_3(void**) {
  const bool large = false;
  assert_int_equal(
      run_processes(3, 20, [=](Communicator& c, TcpStore&) { return run_all_ops(c, large); }), 0);
}
void test_processes_4(void**) {
  const bool large = true;
  assert_int_equal(
      run_processes(4, 20, [=](Communicator& c, TcpStore&) { return run_all_ops(c, large); }), 0);
}

// A broadcast whose ranks name different roots fails on every rank with a
// mismatch (before, two ranks that each named themselves returned OK with
// different data). Ranks 0 .. n-2 name root 0, the last rank names itself.
int broadcast_root_mismatch(Communicator& c, TcpStore&) {
  int failures = 0;
  const int n = c.size();
  const int root = c.rank() == n - 1 ? c.rank() : 0;
  std::vector<float> buf(1000, static_cast<float>(c.rank()));
  std::string msg;
  oslo_status st =
      status_of([&] { c.broadcast(buf.data(), buf.size(), OSLO_DTYPE_F32, root); }, &msg);
  CHECK(st == OSLO_ERR_INVALID_ARGUMENT, "status %d: %s", st, msg.c_str());
  CHECK(std::strstr(msg.c_str(), "mismatch") && std::strstr(msg.c_str(), "root"), "message: %s",
        msg.c_str());
  return failures;
}
// A count that differs is caught the same way, instead of gloo aborting the
// process on a message longer than the posted receive.
int broadcast_count_mismatch(Communicator& c, TcpStore&) {
  int failures = 0;
  std::vector<float> buf(2000, 1.0f);
  std::string msg;
  oslo_status st = status_of(
      [&] { c.broadcast(buf.data(), c.rank() == 0 ? 2000 : 1000, OSLO_DTYPE_F32, 0); }, &msg);
  CHECK(st == OSLO_ERR_INVALID_ARGUMENT, "status %d: %s", st, msg.c_str());
  CHECK(std::strstr(msg.c_str(), "mismatch") && std::strstr(msg.c_str(), "count 1000"),
        "message: %s", msg.c_str());
  return failures;
}
void test_processes_broadcast_root_mismatch_2(void**) {
  assert_int_equal(run_processes(2, 10, broadcast_root_mismatch), 0);
  assert_int_equal(run_processes(2, 10, broadcast_count_mismatch), 0);
}
void test_processes_broadcast_root_mismatch_3(void**) {
  assert_int_equal(run_processes(3, 10, broadcast_root_mismatch), 0);
}

// The other collectives check what every rank called the same way: a count
// mismatch used to make gloo kill the process (an oversized message), an op
// or dtype mismatch to return garbage as success. The last rank differs;
// every rank fails (and, as after any error, the communicator is broken, so
// each case gets a group of its own).
int collective_mismatch(Communicator& c, int which) {
  int failures = 0;
  const int n = c.size();
  const bool odd = c.rank() == n - 1;
  std::vector<float> buf(4096 * n, 1.0f), out(4096 * n, 0.0f);
  std::string msg;
  const char* needle = "";
  oslo_status st = OSLO_OK;
  switch (which) {
    case 0:
      needle = "count";
      st = status_of(
          [&] {
            c.all_reduce(buf.data(), out.data(), odd ? 1000 : 4096, OSLO_DTYPE_F32,
                         OSLO_REDUCE_SUM);
          },
          &msg);
      break;
    case 1:
      needle = "op";
      st = status_of(
          [&] {
            c.all_reduce(buf.data(), out.data(), 100, OSLO_DTYPE_F32,
                         odd ? OSLO_REDUCE_MAX : OSLO_REDUCE_SUM);
          },
          &msg);
      break;
    case 2:
      needle = "dtype";
      st = status_of(
          [&] {
            c.all_reduce(buf.data(), out.data(), 100, odd ? OSLO_DTYPE_I32 : OSLO_DTYPE_F32,
                         OSLO_REDUCE_SUM);
          },
          &msg);
      break;
    case 3:
      needle = "all_gather";
      st = status_of([&] { c.all_gather(buf.data(), out.data(), odd ? 10 : 20, OSLO_DTYPE_F32); },
                     &msg);
      break;
    default:
      // A rank with nothing to reduce still takes part in the check.
      needle = "reduce_scatter";
      st = status_of(
          [&] {
            c.reduce_scatter(buf.data(), out.data(), odd ? 10 : 0, OSLO_DTYPE_F32, OSLO_REDUCE_SUM);
          },
          &msg);
  }
  CHECK(st == OSLO_ERR_INVALID_ARGUMENT, "case %d: status %d: %s", which, st, msg.c_str());
  CHECK(std::strstr(msg.c_str(), "mismatch") && std::strstr(msg.c_str(), needle),
        "case %d: message lacks '%s': %s", which, needle, msg.c_str());
  return failures;
}
void test_processes_collective_mismatch_2(void**) {
  for (int which = 0; which < 5; ++which)
    assert_int_equal(
        run_processes(2, 20,
                      [=](Communicator& c, TcpStore&) { return collective_mismatch(c, which); }),
        0);
}
void test_processes_collective_mismatch_3(void**) {
  for (int which = 0; which < 5; ++which)
    assert_int_equal(
        run_processes(3, 20,
                      [=](Communicator& c, TcpStore&) { return collective_mismatch(c, which); }),
        0);
}

// A timeout far beyond any deadline arithmetic's range (the largest the
// config accepts) still waits for a peer that is late, in the rendezvous and
// in a collective, instead of firing at once.
void test_misc_huge_timeout_late_peer(void**) {
  TcpStore server(kHost, 0, true, Deadline(10));
  const std::string prefix = unique_prefix("huge");
  std::atomic<int> failures{0};
  std::vector<std::thread> ts;
  for (int r = 0; r < 2; ++r)
    ts.emplace_back([&, r] {
      try {
        if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
        TcpStore store(kHost, server.port(), false, Deadline(1e7));
        auto c = join(store, prefix, r, 2, 1e7);
        if (r == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
        float v = 1.0f;
        c->all_reduce(&v, &v, 1, OSLO_DTYPE_F32, OSLO_REDUCE_SUM);
        if (v != 2.0f) ++failures;
        c->barrier();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
        ++failures;
      }
    });
  for (auto& t : ts) t.join();
  assert_int_equal(failures.load(), 0);
}

void test_misc_single_rank(void**) {
  TcpStore server(kHost, 0, true, Deadline(10));
  auto c = join(server, unique_prefix("single"), 0, 1, 5);
  assert_int_equal(c->size(), 1);
  int32_t v[3] = {1, -2, 3}, o[3] = {0, 0, 0};
  c->all_reduce(v, o, 3, OSLO_DTYPE_I32, OSLO_REDUCE_AVG);
  assert_memory_equal(v, o, sizeof v);
  c->all_gather(v, o, 3, OSLO_DTYPE_I32);
  assert_memory_equal(v, o, sizeof v);
  c->reduce_scatter(v, o, 3, OSLO_DTYPE_I32, OSLO_REDUCE_MAX);
  assert_memory_equal(v, o, sizeof v);
  c->broadcast(v, 3, OSLO_DTYPE_I32, 0);
  c->barrier();
}

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

void test_misc_local_address_towards(void**) {
  assert_string_equal(oslo::local_address_towards("127.0.0.1", 29500).c_str(), "127.0.0.1");
  assert_string_equal(oslo::local_address_towards("localhost", 29500).c_str(), "127.0.0.1");
  // Any other address of this host routes to itself; the answer is an
  // address of this host (here: whatever the routing table says, never empty).
  std::string a = oslo::local_address_towards("no-such-host.invalid", 1);
  assert_false(a.empty());
}

// A local address that is not this host's: the error names the variable
// that sets it (OSLO_LOCAL_ADDRESS, the one the context reads).
void test_misc_bad_local_address(void**) {
  oslo::HashStore store;
  std::string msg;
  // 192.0.2.1 is TEST-NET-1 (RFC 5737): never an address of this host.
  oslo_status st = test_util::status_of(
      [&] {
        oslo::create_gloo_communicator(store, unique_prefix("badaddr"), 0, 2, 1.0, "192.0.2.1");
      },
      &msg);
  assert_int_equal(st, OSLO_ERR_IO);
  assert_non_null(std::strstr(msg.c_str(), "192.0.2.1"));
  assert_non_null(std::strstr(msg.c_str(), "OSLO_LOCAL_ADDRESS"));
  assert_null(std::strstr(msg.c_str(), "OSLO_LOCAL_ADDR "));
}

}  // namespace

// argv[1], if given, is a cmocka name pattern ("test_fault_*"): ctest runs
// the groups as separate tests so that each stays short.
int main(int argc, char** argv) {
  if (argc > 1) cmocka_set_test_filter(argv[1]);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_misc_single_rank, test_util::kill_children),
      cmocka_unit_test_teardown(test_threads_2, test_util::kill_children),
      cmocka_unit_test_teardown(test_threads_3, test_util::kill_children),
      cmocka_unit_test_teardown(test_threads_4, test_util::kill_children),
      cmocka_unit_test_teardown(test_processes_2, test_util::kill_children),
      cmocka_unit_test_teardown(test_processes_3, test_util::kill_children),
      cmocka_unit_test_teardown(test_processes_4, test_util::kill_children),
      cmocka_unit_test_teardown(test_fault_sigkill_mid_allreduce, test_util::kill_children),
      cmocka_unit_test_teardown(test_fault_sigstop_times_out, test_util::kill_children),
      cmocka_unit_test_teardown(test_fault_abort_from_other_thread, test_util::kill_children),
      cmocka_unit_test_teardown(test_fault_missing_rank, test_util::kill_children),
      cmocka_unit_test_teardown(test_fault_send_never_received, test_util::kill_children),
      cmocka_unit_test_teardown(test_fault_destroy_flushes_sends, test_util::kill_children),
      cmocka_unit_test_teardown(test_fault_send_recv_size_mismatch, test_util::kill_children),
      cmocka_unit_test_teardown(test_fault_frozen_during_rendezvous, test_util::kill_children),
      cmocka_unit_test_teardown(test_processes_broadcast_root_mismatch_2, test_util::kill_children),
      cmocka_unit_test_teardown(test_processes_collective_mismatch_2, test_util::kill_children),
      cmocka_unit_test_teardown(test_processes_collective_mismatch_3, test_util::kill_children),
      cmocka_unit_test_teardown(test_processes_broadcast_root_mismatch_3, test_util::kill_children),
      cmocka_unit_test_teardown(test_misc_huge_timeout_late_peer, test_util::kill_children),
      cmocka_unit_test_teardown(test_misc_local_address_towards, test_util::kill_children),
      cmocka_unit_test_teardown(test_misc_bad_local_address, test_util::kill_children),
  };
  return cmocka_run_group_tests_name("gloo", tests, nullptr, nullptr);
}
