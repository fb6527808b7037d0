// FileStore: the Store contract, threads, forked processes, timeouts, binary
// and large values, foreign and torn files; and the fork rule of rdzv_test_util.hpp
// (tests that run threads join them all before any fork) being enforced;
// contexts on a store file left by a run that timed out.
#include <fcntl.h>
#include <poll.h>

#include <atomic>
#include <cstring>
#include <memory>

#include "core/rendezvous/file_store.hpp"
#include "oslo.h"
#include "tests/rendezvous/rdzv_test_util.hpp"  // last: it includes cmocka.h

using oslo::Deadline;
using oslo::FileStore;
using test_util::bytes;
using test_util::status_of;

namespace {

struct Fixture {
  std::string dir;
  std::string path;
};

int setup(void** state) {
  auto* f = new Fixture;
  f->dir = test_util::temp_dir();
  f->path = f->dir + "/store";
  *state = f;
  return 0;
}

int teardown(void** state) {
  test_util::kill_children(state);
  auto* f = static_cast<Fixture*>(*state);
  test_util::remove_tree(f->dir);
  delete f;
  return 0;
}

const std::string& path_of(void** state) {
  return static_cast<Fixture*>(*state)->path;
}

void test_basic(void** state) {
  FileStore s(path_of(state));
  s.set("a", bytes("hello"));
  assert_true(s.get("a", Deadline(1)) == bytes("hello"));
  s.set("a", bytes("again"));  // overwrite: last record wins
  assert_true(s.get("a", Deadline(1)) == bytes("again"));
  assert_true(s.check({"a"}));
  assert_false(s.check({"a", "b"}));
  assert_true(s.check({}));
  assert_int_equal(s.add("n", 5), 5);
  assert_int_equal(s.add("n", -7), -2);
  assert_true(s.get("n", Deadline(1)) == bytes("-2"));
  s.wait({"a", "n"}, Deadline(1));
  s.set("empty", {});
  assert_true(s.get("empty", Deadline(1)).empty());

  // A second object on the same path (another rank) sees everything.
  FileStore t(path_of(state));
  assert_true(t.get("a", Deadline(1)) == bytes("again"));
  assert_int_equal(t.add("n", 2), 0);
  assert_int_equal(s.add("n", 0), 0);

  std::string msg;
  assert_int_equal(status_of([&] { s.add("a", 1); }, &msg), OSLO_ERR_INVALID_ARGUMENT);
}

void test_binary_and_large(void** state) {
  FileStore s(path_of(state));
  std::vector<uint8_t> bin = {0, 1, 0, 255, 0, 0, 7};
  std::string key("k\0ey", 4);  // NUL inside the key too
  s.set(key, bin);
  FileStore t(path_of(state));
  assert_true(t.get(key, Deadline(1)) == bin);
  assert_false(t.check({"k"}));

  std::vector<uint8_t> big(8u << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
  s.set("big", big);
  assert_true(t.get("big", Deadline(5)) == big);
  s.set("after", bytes("x"));
  assert_true(t.get("after", Deadline(1)) == bytes("x"));
}

void test_timeout_names_missing_keys(void** state) {
  FileStore s(path_of(state));
  s.set("present", bytes("1"));
  std::string msg;
  auto t0 = std::chrono::steady_clock::now();
  oslo_status st = status_of(
      [&] {
        s.wait({"present", "absent1", "absent2"}, Deadline(0.3));
      },
      &msg);
  double took = test_util::seconds_since(t0);
  assert_int_equal(st, OSLO_ERR_TIMEOUT);
  assert_non_null(std::strstr(msg.c_str(), "absent1, absent2"));
  assert_null(std::strstr(msg.c_str(), "present,"));
  assert_true(took >= 0.29 && took < 2.0);

  st = status_of([&] { s.get("nope", Deadline(0.1)); }, &msg);
  assert_int_equal(st, OSLO_ERR_TIMEOUT);
  assert_non_null(std::strstr(msg.c_str(), "nope"));
  // An expired deadline still looks once: present keys succeed.
  s.wait({"present"}, Deadline(0));
}

void test_get_released_by_later_set(void** state) {
  FileStore s(path_of(state));
  std::thread setter([&] {
    FileStore other(path_of(state));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    other.set("late", bytes("v"));
  });
  auto t0 = std::chrono::steady_clock::now();
  auto v = s.get("late", Deadline(5));
  setter.join();
  assert_true(v == bytes("v"));
  assert_true(test_util::seconds_since(t0) < 2.0);

  // The same object shared by the waiting and the setting thread.
  std::thread setter2([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    s.set("late2", bytes("w"));
  });
  assert_true(s.get("late2", Deadline(5)) == bytes("w"));
  setter2.join();
}

void test_threads(void** state) {
  constexpr int kThreads = 8, kAdds = 100;
  FileStore shared(path_of(state));
  std::vector<std::thread> ts;
  std::atomic<int> errors{0};
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([&, t] {
      try {
        // Half the threads use their own object, half share one.
        std::unique_ptr<FileStore> own;
        if (t % 2) own.reset(new FileStore(path_of(state)));
        FileStore& s = own ? *own : shared;
        for (int i = 0; i < kAdds; ++i) s.add("counter", 1);
        s.set("t" + std::to_string(t), bytes(std::to_string(t)));
        for (int o = 0; o < kThreads; ++o)
          if (s.get("t" + std::to_string(o), Deadline(10)) != bytes(std::to_string(o))) ++errors;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "thread %d: %s\n", t, e.what());
        ++errors;
      }
    });
  for (auto& t : ts) t.join();
  assert_int_equal(errors.load(), 0);
  assert_int_equal(shared.add("counter", 0), kThreads * kAdds);
}

void test_processes(void** state) {
  constexpr int kProcs = 4, kAdds = 100;
  const std::string path = path_of(state);
  // The parent's store is inherited by the children: it must reopen the file
  // after fork, or parent and children would share one flock.
  FileStore inherited(path);
  inherited.set("go", bytes("1"));
  std::vector<pid_t> pids;
  for (int p = 0; p < kProcs; ++p)
    pids.push_back(test_util::spawn([&, p]() -> int {
      std::unique_ptr<FileStore> own;
      if (p % 2) own.reset(new FileStore(path));
      FileStore& s = own ? *own : inherited;
      s.wait({"go"}, Deadline(10));
      for (int i = 0; i < kAdds; ++i) s.add("counter", 1);
      s.set("p" + std::to_string(p), bytes("rank" + std::to_string(p)));
      for (int o = 0; o < kProcs; ++o)
        if (s.get("p" + std::to_string(o), Deadline(20)) != bytes("rank" + std::to_string(o)))
          return 1;
      return 0;
    }));
  for (int i = 0; i < kAdds; ++i) inherited.add("counter", 1);
  for (pid_t pid : pids) assert_int_equal(test_util::wait_child(pid, 30), 0);
  assert_int_equal(inherited.add("counter", 0), (kProcs + 1) * kAdds);
}

void test_foreign_and_stale_files(void** state) {
  const std::string path = path_of(state);
  {
    FILE* f = std::fopen(path.c_str(), "w");
    std::fputs("not a store", f);
    std::fclose(f);
  }
  std::string msg;
  assert_int_equal(status_of([&] { FileStore s(path); }, &msg), OSLO_ERR_FORMAT);
  assert_non_null(std::strstr(msg.c_str(), path.c_str()));

  FileStore::remove(path);
  FileStore::remove(path);  // missing: fine
  {
    FileStore s(path);
    s.set("old", bytes("1"));
  }
  // A stale file keeps its keys: that is why rank 0 removes it.
  {
    FileStore s(path);
    assert_true(s.check({"old"}));
  }
  FileStore::remove(path);
  FileStore fresh(path);
  assert_false(fresh.check({"old"}));

  assert_int_equal(status_of([&] { FileStore s(path_of(state) + "/no/such/dir/x"); }, &msg),
                   OSLO_ERR_IO);
  assert_non_null(std::strstr(msg.c_str(), "no/such/dir"));
  assert_int_equal(status_of([&] { FileStore::remove(static_cast<Fixture*>(*state)->dir); }),
                   OSLO_ERR_IO);
}

void test_torn_record_is_ignored_then_cut(void** state) {
  const std::string path = path_of(state);
  FileStore s(path);
  s.set("whole", bytes("ok"));
  // Simulate a writer that died half way through a record.
  int fd = open(path.c_str(), O_WRONLY | O_APPEND);
  assert_true(fd >= 0);
  uint8_t torn[20] = {5, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 't', 'o'};
  assert_int_equal(write(fd, torn, sizeof torn), (ssize_t)sizeof torn);
  close(fd);
  FileStore t(path);
  assert_true(t.get("whole", Deadline(1)) == bytes("ok"));
  assert_false(t.check({"torn!"}));
  t.set("next", bytes("n"));
  assert_true(s.get("next", Deadline(1)) == bytes("n"));
  FileStore u(path);
  assert_true(u.check({"whole", "next"}));
  assert_false(u.check({"torn!"}));
}

// test_util::spawn in a process with a second thread alive aborts that
// process, naming the thread, instead of forking. Checked in a child of its
// own whose stderr goes to a pipe.
void test_fork_rule_enforced(void**) {
  int err[2];
  assert_int_equal(pipe(err), 0);
  pid_t checker = test_util::spawn([&]() -> int {
    close(err[0]);
    dup2(err[1], STDERR_FILENO);
    close(err[1]);
    int hold[2];
    if (pipe(hold) != 0) return 1;
    std::thread blocked([&] {
      char c;
      if (read(hold[0], &c, 1) < 0) std::perror("read");
    });
    pid_t pid = test_util::spawn([] { return 0; });  // must abort instead
    close(hold[1]);
    blocked.join();
    test_util::wait_child(pid, 5);
    return 2;
  });
  close(err[1]);
  int rc = test_util::wait_child(checker, 10);
  std::string out;
  char buf[4096];
  pollfd pfd{err[0], POLLIN, 0};
  while (poll(&pfd, 1, 5000) == 1) {
    ssize_t n = read(err[0], buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(err[0]);
  if (rc != 128 + SIGABRT) std::fprintf(stderr, "checker: %d, said: %s\n", rc, out.c_str());
  assert_int_equal(rc, 128 + SIGABRT);
  assert_non_null(std::strstr(out.c_str(), "test_util::spawn: fork() with 2 threads alive"));
}

// Ranks `ranks` (threads) of a world of 2 create contexts on file://path;
// returns each one's status and message (an empty slot: not started).
struct RunResult {
  oslo_status st[2] = {OSLO_OK, OSLO_OK};
  std::string msg[2];
};
RunResult run_contexts(const std::string& path, std::vector<int> ranks, int tp, double timeout) {
  RunResult res;
  std::vector<std::thread> ts;
  for (int r : ranks)
    ts.emplace_back([&, r] {
      std::string cfg = "{\"rank\": " + std::to_string(r) +
                        ", \"world_size\": 2, \"tensor_parallel_size\": " + std::to_string(tp) +
                        ", \"init_method\": \"file://" + path +
                        "\", \"timeout_seconds\": " + std::to_string(timeout) +
                        ", \"num_threads\": 1}";
      oslo_context* ctx = nullptr;
      res.st[r] = oslo_context_create(cfg.c_str(), &ctx);
      res.msg[r] = oslo_last_error();
      oslo_context_destroy(ctx);
    });
  for (auto& t : ts) t.join();
  return res;
}

// A run that timed out leaves its store file behind; the next run must fail
// on every rank with the same advice (before, only the rank that had joined
// the old run said so: the other one compared its layout with the old run's
// record and blamed rank 0's "tp=1", or waited for a group that could not form).
void test_stale_store_reported_on_every_rank(void** state) {
  const std::string path = path_of(state);
  struct Variant {
    std::vector<int> old_ranks;
    int old_tp;
  };
  for (const Variant& v : {Variant{{0}, 1}, Variant{{1}, 2}}) {
    RunResult old = run_contexts(path, v.old_ranks, v.old_tp, 0.3);
    for (int r : v.old_ranks) assert_int_equal(old.st[r], OSLO_ERR_TIMEOUT);
    struct stat st;
    assert_int_equal(stat(path.c_str(), &st), 0);  // left behind

    RunResult now = run_contexts(path, {0, 1}, 2, 20);
    for (int r = 0; r < 2; ++r) {
      const std::string& m = now.msg[r];
      bool ok = now.st[r] == OSLO_ERR_CONFIG && m.find("stale store file") != std::string::npos &&
                m.find("delete it") != std::string::npos && m.find(path) != std::string::npos;
      if (!ok)
        std::fprintf(stderr, "old ranks {%d}, rank %d: %s: %s\n", v.old_ranks[0], r,
                     oslo_status_string(now.st[r]), m.c_str());
      assert_true(ok);
    }
    // Once deleted, the same run succeeds.
    oslo::FileStore::remove(path);
    RunResult fresh = run_contexts(path, {0, 1}, 2, 20);
    for (int r = 0; r < 2; ++r) {
      if (fresh.st[r] != OSLO_OK) std::fprintf(stderr, "rank %d: %s\n", r, fresh.msg[r].c_str());
      assert_int_equal(fresh.st[r], OSLO_OK);
    }
  }
}

}  // namespace

int main() {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_basic, setup, teardown),
      cmocka_unit_test_setup_teardown(test_binary_and_large, setup, teardown),
      cmocka_unit_test_setup_teardown(test_timeout_names_missing_keys, setup, teardown),
      cmocka_unit_test_setup_teardown(test_get_released_by_later_set, setup, teardown),
      cmocka_unit_test_setup_teardown(test_threads, setup, teardown),
      cmocka_unit_test_setup_teardown(test_processes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_foreign_and_stale_files, setup, teardown),
      cmocka_unit_test_setup_teardown(test_torn_record_is_ignored_then_cut, setup, teardown),
      cmocka_unit_test_setup_teardown(test_fork_rule_enforced, setup, teardown),
      cmocka_unit_test_setup_teardown(test_stale_store_reported_on_every_rank, setup, teardown),
  };
  return cmocka_run_group_tests_name("file_store", tests, nullptr, nullptr);
}
