// Helpers shared by the shm transport tests: exact test data, the suite of
// collective checks that every group (threads or processes) runs, and
// runners for rank threads and rank processes.
//
// Ranks never call CMocka asserts (they are threads or forked children); they
// collect failures in a Checker that the test's main thread asserts on.
#pragma once

#include <dirent.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/common/dtype.hpp"
#include "core/common/error.hpp"
#include "core/rendezvous/hash_store.hpp"
#include "transports/shm/shm_communicator.hpp"

namespace shmtest {

using oslo::Communicator;

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// ---- failure collection ------------------------------------------------------

struct Checker {
  int rank = 0;
  int failures = 0;
  std::string log;  // the first few failures
  void bad(const std::string& m) {
    if (failures++ < 8) log += "rank " + std::to_string(rank) + ": " + m + "\n";
  }
};
#define SHM_EXPECT(ck, cond, ...)                                                                \
  do {                                                                                           \
    if (!(cond)) (ck).bad(oslo::str(__FILE__, ":", __LINE__, ": ", #cond, " -- ", __VA_ARGS__)); \
  } while (0)

// ---- data ------------------------------------------------------------------

const oslo_dtype kDtypes[] = {OSLO_DTYPE_F32, OSLO_DTYPE_F16, OSLO_DTYPE_BF16, OSLO_DTYPE_I32,
                              OSLO_DTYPE_I64};
const oslo_reduce_op kOps[] = {OSLO_REDUCE_SUM, OSLO_REDUCE_AVG, OSLO_REDUCE_MAX, OSLO_REDUCE_MIN};
inline const char* op_str(oslo_reduce_op op) {
  switch (op) {
    case OSLO_REDUCE_SUM: return "sum";
    case OSLO_REDUCE_AVG: return "avg";
    case OSLO_REDUCE_MAX: return "max";
    case OSLO_REDUCE_MIN: return "min";
    default: return "?";
  }
}

inline void put(oslo_dtype dt, void* p, size_t i, double v) {
  switch (dt) {
    case OSLO_DTYPE_F32: static_cast<float*>(p)[i] = static_cast<float>(v); return;
    case OSLO_DTYPE_F16:
      static_cast<uint16_t*>(p)[i] = oslo::f32_to_f16(static_cast<float>(v));
      return;
    case OSLO_DTYPE_BF16:
      static_cast<uint16_t*>(p)[i] = oslo::f32_to_bf16(static_cast<float>(v));
      return;
    case OSLO_DTYPE_I32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); return;
    case OSLO_DTYPE_I64: static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v); return;
    default: return;
  }
}

// Small integers in [-5, 5], exact in every dtype, and so are their sums over
// a few ranks. Periodic in i (period 11), so expectations can be tabulated.
inline int64_t exact_value(int rank, size_t i) {
  return static_cast<int64_t>((i * 7 + static_cast<size_t>(rank) * 3) % 11) - 5;
}

// Expected result of reducing exact_value(r, j) over r = 0..n-1, as the
// implementation must compute it: floats sum exactly, AVG divides in f32 and
// rounds once to the dtype; integer AVG truncates toward zero.
inline double expected_reduce(oslo_dtype dt, oslo_reduce_op op, int n, size_t j) {
  int64_t s = 0, mx = INT64_MIN, mn = INT64_MAX;
  for (int r = 0; r < n; ++r) {
    int64_t v = exact_value(r, j);
    s += v;
    mx = std::max(mx, v);
    mn = std::min(mn, v);
  }
  switch (op) {
    case OSLO_REDUCE_SUM: return static_cast<double>(s);
    case OSLO_REDUCE_MAX: return static_cast<double>(mx);
    case OSLO_REDUCE_MIN: return static_cast<double>(mn);
    case OSLO_REDUCE_AVG:
      if (oslo::dtype_is_float(dt)) return static_cast<double>(static_cast<float>(s) / n);
      return static_cast<double>(s / n);
    default: return 0;
  }
}

// Element bit patterns of f(j % 11) for j in 0..10.
inline std::vector<uint8_t> table(oslo_dtype dt, const std::function<double(size_t)>& f) {
  size_t es = oslo::dtype_size(dt);
  std::vector<uint8_t> t(11 * es);
  for (size_t j = 0; j < 11; ++j) put(dt, t.data(), j, f(j));
  return t;
}

// Compares buf[i] with tab[(i + shift) % 11] bitwise; reports the first miss.
inline bool matches(Checker& ck, const std::string& what, oslo_dtype dt, const uint8_t* buf,
                    size_t count, const std::vector<uint8_t>& tab, size_t shift) {
  size_t es = oslo::dtype_size(dt);
  auto differs = [es](const uint8_t* a, const uint8_t* b) {
    for (size_t k = 0; k < es; ++k)  // not memcmp: a sanitizer call per element is slow
      if (a[k] != b[k]) return true;
    return false;
  };
  for (size_t i = 0; i < count; ++i) {
    if (differs(buf + i * es, tab.data() + ((i + shift) % 11) * es)) {
      ck.bad(oslo::str(what, ": element ", i, " of ", count, " differs"));
      return false;
    }
  }
  return true;
}

inline void fill_exact(oslo_dtype dt, uint8_t* buf, size_t count, int rank, size_t shift = 0) {
  for (size_t i = 0; i < count; ++i)
    put(dt, buf, i, static_cast<double>(exact_value(rank, i + shift)));
}

// ---- the suites ------------------------------------------------------------

// Every collective, dtype and reduce op on sizes 0, 1, 7, 4096, 70001 (one
// partial pipeline chunk, or one step, depending on dtype and group size) and
// `big` (several pipeline chunks, not a multiple of one), in place and out of
// place, with exactly predictable results.
inline void collective_suite(Communicator& c, Checker& ck, size_t big) {
  const int r = c.rank();
  const int n = c.size();
  const size_t counts[] = {0, 1, 7, 4096, 70001, big};
  for (oslo_dtype dt : kDtypes) {
    const size_t es = oslo::dtype_size(dt);
    for (oslo_reduce_op op : kOps) {
      auto tab = table(dt, [&](size_t j) { return expected_reduce(dt, op, n, j); });
      for (size_t count : counts) {
        for (int inplace = 0; inplace < 2; ++inplace) {
          std::string what = oslo::str("all_reduce(", oslo::dtype_name(dt), ", ", op_str(op),
                                       ", count ", count, inplace ? ", in place)" : ")");
          std::vector<uint8_t> in(count * es + 1), out(count * es + 1, 0xab);
          fill_exact(dt, in.data(), count, r);
          std::vector<uint8_t> orig = in;
          try {
            if (inplace) {
              c.all_reduce(in.data(), in.data(), count, dt, op);
              matches(ck, what, dt, in.data(), count, tab, 0);
            } else {
              c.all_reduce(in.data(), out.data(), count, dt, op);
              matches(ck, what, dt, out.data(), count, tab, 0);
              SHM_EXPECT(ck, in == orig, what, ": input modified");
              SHM_EXPECT(ck, out[count * es] == 0xab, what, ": wrote past the end");
            }
          } catch (const oslo::Error& e) {
            ck.bad(what + ": " + e.what());
            return;
          }
        }
      }
    }
    // all_gather: out[p*count + i] = exact_value(p, i).
    for (size_t count : counts) {
      for (int inplace = 0; inplace < 2; ++inplace) {
        std::string what = oslo::str("all_gather(", oslo::dtype_name(dt), ", count ", count,
                                     inplace ? ", in place)" : ")");
        std::vector<uint8_t> in(count * es), out(count * es * n + 1, 0xab);
        fill_exact(dt, in.data(), count, r);
        try {
          if (inplace) {
            if (count) std::memcpy(out.data() + r * count * es, in.data(), count * es);
            c.all_gather(out.data() + r * count * es, out.data(), count, dt);
          } else {
            c.all_gather(in.data(), out.data(), count, dt);
          }
        } catch (const oslo::Error& e) {
          ck.bad(what + ": " + e.what());
          return;
        }
        for (int p = 0; p < n; ++p) {
          auto tab = table(dt, [&](size_t j) { return static_cast<double>(exact_value(p, j)); });
          if (!matches(ck, what + oslo::str(" block ", p), dt, out.data() + p * count * es, count,
                       tab, 0))
            break;
        }
        SHM_EXPECT(ck, out[count * es * n] == 0xab, what, ": wrote past the end");
      }
    }
    // reduce_scatter: rank r gets the reduction of elements [r*count, (r+1)*count).
    for (oslo_reduce_op op : kOps) {
      auto tab = table(dt, [&](size_t j) { return expected_reduce(dt, op, n, j); });
      const size_t rs_counts[] = {0, 1, 7, 4096, big / n + 3};
      for (size_t count : rs_counts) {
        for (int inplace = 0; inplace < 2; ++inplace) {
          std::string what = oslo::str("reduce_scatter(", oslo::dtype_name(dt), ", ", op_str(op),
                                       ", count ", count, inplace ? ", in place)" : ")");
          std::vector<uint8_t> in(count * es * n + 1), out(count * es + 1, 0xab);
          fill_exact(dt, in.data(), count * n, r);
          try {
            if (inplace) {
              uint8_t* mine = in.data() + r * count * es;
              c.reduce_scatter(in.data(), mine, count, dt, op);
              matches(ck, what, dt, mine, count, tab, (r * count) % 11);
            } else {
              c.reduce_scatter(in.data(), out.data(), count, dt, op);
              matches(ck, what, dt, out.data(), count, tab, (r * count) % 11);
              SHM_EXPECT(ck, out[count * es] == 0xab, what, ": wrote past the end");
            }
          } catch (const oslo::Error& e) {
            ck.bad(what + ": " + e.what());
            return;
          }
        }
      }
    }
    // broadcast from every root.
    for (int root = 0; root < n; ++root) {
      for (size_t count : counts) {
        std::string what =
            oslo::str("broadcast(", oslo::dtype_name(dt), ", count ", count, ", root ", root, ")");
        std::vector<uint8_t> buf(count * es + 1, 0xab);
        if (r == root) fill_exact(dt, buf.data(), count, root);
        try {
          c.broadcast(buf.data(), count, dt, root);
        } catch (const oslo::Error& e) {
          ck.bad(what + ": " + e.what());
          return;
        }
        auto tab = table(dt, [&](size_t j) { return static_cast<double>(exact_value(root, j)); });
        matches(ck, what, dt, buf.data(), count, tab, 0);
        SHM_EXPECT(ck, buf[count * es] == 0xab, what, ": wrote past the end");
      }
    }
  }
  // Integer edge cases: SUM wraps around, AVG of large i64 is exact.
  try {
    int32_t v = INT32_MAX, o = 0;
    c.all_reduce(&v, &o, 1, OSLO_DTYPE_I32, OSLO_REDUCE_SUM);
    uint32_t want = static_cast<uint32_t>(INT32_MAX) * static_cast<uint32_t>(n);
    SHM_EXPECT(ck, static_cast<uint32_t>(o) == want, "i32 sum wrap: got ", o);
    int64_t w = INT64_MAX - r, a = 0;
    c.all_reduce(&w, &a, 1, OSLO_DTYPE_I64, OSLO_REDUCE_AVG);
    // mean of INT64_MAX - r for r < n, truncated
    __int128 s = 0;
    for (int q = 0; q < n; ++q) s += INT64_MAX - q;
    SHM_EXPECT(ck, a == static_cast<int64_t>(s / n), "i64 avg: got ", a);
  } catch (const oslo::Error& e) {
    ck.bad(std::string("integer edge cases: ") + e.what());
  }
}

// Deterministic "random" floats in [-1000, 1000) with all mantissa bits used.
inline float noise(int rank, size_t i) {
  uint64_t x =
      (static_cast<uint64_t>(rank) + 1) * 0x9E3779B97F4A7C15ULL + i * 0xBF58476D1CE4E5B9ULL;
  x ^= x >> 31;
  x *= 0x94D049BB133111EBULL;
  x ^= x >> 29;
  return (static_cast<float>(x >> 40) / static_cast<float>(1 << 24) - 0.5f) * 2000.0f;
}
inline float load_f(oslo_dtype dt, const void* p, size_t i) {
  switch (dt) {
    case OSLO_DTYPE_F32: return static_cast<const float*>(p)[i];
    case OSLO_DTYPE_F16: return oslo::f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case OSLO_DTYPE_BF16: return oslo::bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    default: return 0;
  }
}

// Inexact float inputs: every rank must get exactly the bits of the rank-order
// f32 accumulation rounded once, on both the one-step and the pipelined path.
inline void bitwise_suite(Communicator& c, Checker& ck, size_t big) {
  const int r = c.rank();
  const int n = c.size();
  const oslo_dtype dts[] = {OSLO_DTYPE_F32, OSLO_DTYPE_F16, OSLO_DTYPE_BF16};
  const oslo_reduce_op ops[] = {OSLO_REDUCE_SUM, OSLO_REDUCE_AVG};
  for (oslo_dtype dt : dts) {
    const size_t es = oslo::dtype_size(dt);
    for (oslo_reduce_op op : ops) {
      for (size_t count : {size_t(4096), big}) {
        std::vector<uint8_t> buf(count * es), want(count * es);
        for (size_t i = 0; i < count; ++i) put(dt, buf.data(), i, noise(r, i));
        std::vector<uint8_t> tmp(es);
        for (size_t i = 0; i < count; ++i) {
          float acc = 0;
          for (int q = 0; q < n; ++q) {
            put(dt, tmp.data(), 0, noise(q, i));
            float v = load_f(dt, tmp.data(), 0);
            acc = q == 0 ? v : acc + v;
          }
          if (op == OSLO_REDUCE_AVG) acc = acc / static_cast<float>(n);
          put(dt, want.data(), i, acc);
        }
        std::string what = oslo::str("bitwise all_reduce(", oslo::dtype_name(dt), ", ", op_str(op),
                                     ", count ", count, ")");
        try {
          c.all_reduce(buf.data(), buf.data(), count, dt, op);
        } catch (const oslo::Error& e) {
          ck.bad(what + ": " + e.what());
          return;
        }
        for (size_t i = 0; i < count; ++i) {
          if (std::memcmp(buf.data() + i * es, want.data() + i * es, es) != 0) {
            ck.bad(oslo::str(what, ": element ", i, " is ", load_f(dt, buf.data(), i),
                             " but rank-order accumulation gives ", load_f(dt, want.data(), i)));
            break;
          }
        }
      }
    }
  }
}

inline uint8_t pattern(int from, int to, size_t msg, size_t i) {
  return static_cast<uint8_t>(from * 31 + to * 17 + msg * 13 + i * 7 + (i >> 9));
}

// Point to point: a ring with sizes from 0 to larger than the ring buffer, then
// many messages in a row between pairs (eager ones queued up in both
// directions, and streamed ones).
inline void p2p_suite(Communicator& c, Checker& ck, size_t big) {
  const int r = c.rank();
  const int n = c.size();
  if (n < 2) return;
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  try {
    for (size_t bytes : {size_t(0), size_t(1), size_t(7), size_t(4096), big}) {
      std::vector<uint8_t> out(bytes), in(bytes + 1, 0xcd);
      for (size_t i = 0; i < bytes; ++i) out[i] = pattern(r, next, bytes, i);
      // Odd ranks receive first, so the ring cannot deadlock on messages
      // larger than the ring buffer.
      if (r % 2 == 0) {
        c.send(out.data(), bytes, next);
        c.recv(in.data(), bytes, prev);
      } else {
        c.recv(in.data(), bytes, prev);
        c.send(out.data(), bytes, next);
      }
      for (size_t i = 0; i < bytes; ++i)
        if (in[i] != pattern(prev, r, bytes, i)) {
          ck.bad(oslo::str("ring recv of ", bytes, " bytes: byte ", i, " differs"));
          break;
        }
      SHM_EXPECT(ck, in[bytes] == 0xcd, "ring recv wrote past the end");
    }
    // Many eager messages queued in both directions before anyone receives.
    const int kMsgs = 300;
    auto msg_size = [](int m) { return static_cast<size_t>((m * 37) % 2000); };
    if (r < 2) {
      const int peer = 1 - r;
      for (int m = 0; m < kMsgs; ++m) {
        std::vector<uint8_t> out(msg_size(m));
        for (size_t i = 0; i < out.size(); ++i) out[i] = pattern(r, peer, m, i);
        c.send(out.data(), out.size(), peer);
      }
      for (int m = 0; m < kMsgs; ++m) {
        std::vector<uint8_t> in(msg_size(m));
        c.recv(in.data(), in.size(), peer);
        for (size_t i = 0; i < in.size(); ++i)
          if (in[i] != pattern(peer, r, m, i)) {
            ck.bad(oslo::str("eager message ", m, ": byte ", i, " differs"));
            break;
          }
      }
      // Streamed: alternating large and small messages from 0 to 1.
      for (int m = 0; m < 12; ++m) {
        size_t bytes = m % 2 ? static_cast<size_t>(m * 101) : big / 2 + m;
        std::vector<uint8_t> buf(bytes);
        if (r == 0) {
          for (size_t i = 0; i < bytes; ++i) buf[i] = pattern(0, 1, m + 1000, i);
          c.send(buf.data(), bytes, 1);
        } else {
          c.recv(buf.data(), bytes, 0);
          for (size_t i = 0; i < bytes; ++i)
            if (buf[i] != pattern(0, 1, m + 1000, i)) {
              ck.bad(oslo::str("streamed message ", m, ": byte ", i, " differs"));
              break;
            }
        }
      }
    }
    c.barrier();
  } catch (const oslo::Error& e) {
    ck.bad(std::string("p2p: ") + e.what());
  }
}

inline void full_suite(Communicator& c, Checker& ck, size_t big) {
  collective_suite(c, ck, big);
  if (ck.failures) return;
  bitwise_suite(c, ck, big);
  if (ck.failures) return;
  p2p_suite(c, ck, big * 4 + 3);
  try {
    for (int i = 0; i < 50; ++i) c.barrier();
  } catch (const oslo::Error& e) {
    ck.bad(std::string("barrier: ") + e.what());
  }
}

// ---- thread ranks -------------------------------------------------------------

// Creates the communicators of a group of n thread ranks (creation is
// collective, so each on its own thread). Throws the first error.
inline std::vector<std::unique_ptr<Communicator>> make_group(oslo::Store& store,
                                                             const std::string& prefix, int n,
                                                             double timeout) {
  std::vector<std::unique_ptr<Communicator>> comms(n);
  std::vector<std::string> errors(n);
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r)
    ts.emplace_back([&, r] {
      try {
        comms[r] = oslo::create_shm_communicator(store, prefix, r, n, timeout);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : ts) t.join();
  for (auto& e : errors)
    if (!e.empty()) throw std::runtime_error(e);
  return comms;
}

// Runs body(rank, comm, checker) on one thread per rank; returns the log of
// all failures ("" if none). A rank that fails aborts the group, so the
// others do not wait for their timeout.
inline std::string run_threads(std::vector<std::unique_ptr<Communicator>>& comms,
                               const std::function<void(int, Communicator&, Checker&)>& body) {
  const int n = static_cast<int>(comms.size());
  std::vector<Checker> cks(n);
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r)
    ts.emplace_back([&, r] {
      cks[r].rank = r;
      try {
        body(r, *comms[r], cks[r]);
      } catch (const std::exception& e) {
        cks[r].bad(std::string("exception: ") + e.what());
      }
      if (cks[r].failures) comms[r]->abort();
    });
  for (auto& t : ts) t.join();
  std::string log;
  for (auto& ck : cks) log += ck.log;
  return log;
}

// ---- process ranks -------------------------------------------------------------

// What a child rank reports back through memory shared with the parent.
struct ChildReport {
  volatile int done;
  volatile int failures;
  volatile int status;       // oslo_status of the error that ended a fault loop
  volatile double err_time;  // now_s() when it got that error
  volatile double ready_time;
  char msg[1024];
};

struct SharedReports {
  ChildReport* r = nullptr;
  size_t bytes = 0;
  explicit SharedReports(int n) {
    bytes = sizeof(ChildReport) * n;
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("mmap of the report area failed");
    std::memset(p, 0, bytes);
    r = static_cast<ChildReport*>(p);
  }
  ~SharedReports() { munmap(r, bytes); }
  ChildReport& operator[](int i) { return r[i]; }
};

inline void set_msg(ChildReport& rep, const std::string& m) {
  std::snprintf(rep.msg, sizeof rep.msg, "%s", m.c_str());
}

// Forks n children; child r runs body(r) and _exits with its return value.
// The parent gets the pids (to kill or stop them).
inline std::vector<pid_t> fork_ranks(int n, const std::function<int(int)>& body) {
  std::vector<pid_t> pids;
  std::fflush(nullptr);
  for (int r = 0; r < n; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      int rc = 1;
      try {
        rc = body(r);
      } catch (...) {
        rc = 3;
      }
      std::fflush(nullptr);
      _exit(rc);
    }
    if (pid < 0) throw std::runtime_error("fork failed");
    pids.push_back(pid);
  }
  return pids;
}

// Waits for every child up to `seconds`; SIGKILLs and reaps whatever is left
// (so that no test leaks a process). Returns the exit codes (-1: killed by us,
// -100 - sig: died of a signal).
inline std::vector<int> reap(const std::vector<pid_t>& pids, double seconds) {
  std::vector<int> codes(pids.size(), -2);
  double end = now_s() + seconds;
  size_t left = pids.size();
  while (left > 0 && now_s() < end) {
    for (size_t i = 0; i < pids.size(); ++i) {
      if (codes[i] != -2) continue;
      int st = 0;
      pid_t w = waitpid(pids[i], &st, WNOHANG);
      if (w == pids[i]) {
        codes[i] = WIFEXITED(st) ? WEXITSTATUS(st) : -100 - WTERMSIG(st);
        --left;
      }
    }
    if (left) usleep(2000);
  }
  for (size_t i = 0; i < pids.size(); ++i) {
    if (codes[i] != -2) continue;
    kill(pids[i], SIGKILL);
    kill(pids[i], SIGCONT);
    int st = 0;
    waitpid(pids[i], &st, 0);
    codes[i] = -1;
  }
  return codes;
}

// Names of /dev/shm entries made by this transport for any of `pids`.
inline std::vector<std::string> leftover_segments(const std::vector<pid_t>& pids) {
  std::vector<std::string> out;
  DIR* d = opendir("/dev/shm");
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    for (pid_t p : pids)
      if (name.rfind("oslo-shm-" + std::to_string(p) + "-", 0) == 0) out.push_back(name);
  }
  closedir(d);
  return out;
}

}  // namespace shmtest
