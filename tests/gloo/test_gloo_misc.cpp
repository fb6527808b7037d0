// test_gloo processes_*_mismatch, misc_*: ranks that disagree on a
// collective fail on every rank; a huge timeout, a single rank, local
// addresses.
#include "gloo_util.hpp"

namespace gloo_test {

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

}  // namespace gloo_test
