// TcpStore: the Store contract, many clients (threads and processes),
// blocking get released by set, timeouts, unreachable and killed servers,
// ports in use, misbehaving clients, binary and large values.
//
// The fork rule (rdzv_test_util.hpp): a test that forks does so while this process
// has one thread, so the servers that forked clients use run in processes of
// their own (spawn_server); tests with an in-process server or threads do not
// fork, and join their threads and destroy their servers before they return.
// ports in use, misbehaving clients, binary and large values; deadlines far
// in the future (saturation), a context with a huge timeout and a late peer.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

#include "core/rendezvous/file_store.hpp"
#include "core/rendezvous/store_util.hpp"
#include "core/rendezvous/tcp_store.hpp"
#include "oslo.h"
#include "tests/rendezvous/rdzv_test_util.hpp"  // last: it includes cmocka.h

using oslo::Deadline;
using oslo::TcpStore;
using test_util::bytes;
using test_util::status_of;

namespace {

const char* kHost = "127.0.0.1";

// A port nobody listens on right now (bound and released again).
int unused_port() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) std::abort();
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

// Raw connection to the server, for clients that misbehave on purpose. Sends
// and receives give up after 10 s instead of hanging.
int raw_connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  timeval tv{10, 0};
  if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0 ||
      setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) != 0)
    std::abort();
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) std::abort();
  return fd;
}

// Runs a server on `want` (0: a free port) in a child process, forked while
// this process is single-threaded (test_util::spawn checks). Returns its pid
// and stores its port, or -1 if it did not come up within 10 s. The server
// runs until it is killed (the teardown does, or this process dying).
pid_t spawn_server(int* port, int want = 0) {
  int p[2];
  if (pipe(p) != 0) std::abort();
  pid_t pid = test_util::spawn([&]() -> int {
    close(p[0]);
    TcpStore server(kHost, want, true, Deadline(10));
    int prt = server.port();
    if (write(p[1], &prt, sizeof prt) != sizeof prt) return 1;
    close(p[1]);
    for (;;) pause();
  });
  close(p[1]);
  *port = -1;
  pollfd pfd{p[0], POLLIN, 0};
  if (poll(&pfd, 1, 10000) != 1 || read(p[0], port, sizeof *port) != sizeof *port) *port = -1;
  close(p[0]);
  return pid;
}

void test_basic(void**) {
  TcpStore server(kHost, 0, true, Deadline(10));
  assert_true(server.port() > 0);
  TcpStore client(kHost, server.port(), false, Deadline(10));
  client.set("a", bytes("hello"));
  assert_true(server.get("a", Deadline(1)) == bytes("hello"));
  server.set("a", bytes("again"));
  assert_true(client.get("a", Deadline(1)) == bytes("again"));
  assert_true(client.check({"a"}));
  assert_false(client.check({"a", "b"}));
  assert_true(client.check({}));
  assert_int_equal(client.add("n", 5), 5);
  assert_int_equal(server.add("n", -7), -2);
  assert_true(client.get("n", Deadline(1)) == bytes("-2"));
  client.wait({"a", "n", "a"}, Deadline(1));
  client.wait({}, Deadline(1));
  client.set("empty", {});
  assert_true(server.get("empty", Deadline(1)).empty());
  std::string msg;
  assert_int_equal(status_of([&] { client.add("a", 1); }, &msg), OSLO_ERR_INVALID_ARGUMENT);
  assert_non_null(std::strstr(msg.c_str(), "'a'"));
  // The connection is still usable after a rejected request.
  assert_int_equal(client.add("n", 2), 0);
  // "localhost" resolves and connects as well.
  TcpStore by_name("localhost", server.port(), false, Deadline(10));
  assert_true(by_name.get("a", Deadline(1)) == bytes("again"));

  // IPv6 loopback, where the host has it.
  int fd6 = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in6 a6{};
  a6.sin6_family = AF_INET6;
  a6.sin6_addr = in6addr_loopback;
  bool have_v6 = fd6 >= 0 && bind(fd6, reinterpret_cast<sockaddr*>(&a6), sizeof a6) == 0;
  if (fd6 >= 0) close(fd6);
  if (have_v6) {
    TcpStore server6("::1", 0, true, Deadline(10));
    TcpStore client6("::1", server6.port(), false, Deadline(10));
    client6.set("v6", bytes("yes"));
    assert_true(server6.get("v6", Deadline(1)) == bytes("yes"));
    std::string msg6;
    assert_int_equal(
        status_of([&] { TcpStore s("::1", server6.port(), true, Deadline(1)); }, &msg6),
        OSLO_ERR_IO);
    assert_non_null(std::strstr(msg6.c_str(), ("[::1]:" + std::to_string(server6.port())).c_str()));
  }

  assert_int_equal(status_of([&] { TcpStore s(kHost, 0, false, Deadline(1)); }),
                   OSLO_ERR_INVALID_ARGUMENT);
  assert_int_equal(status_of([&] { TcpStore s(kHost, 70000, true, Deadline(1)); }),
                   OSLO_ERR_INVALID_ARGUMENT);
}

void test_binary_and_large(void**) {
  TcpStore server(kHost, 0, true, Deadline(10));
  TcpStore client(kHost, server.port(), false, Deadline(10));
  std::vector<uint8_t> bin = {0, 1, 0, 255, 0, 0, 7};
  std::string key("k\0ey", 4);
  client.set(key, bin);
  assert_true(server.get(key, Deadline(1)) == bin);
  assert_false(server.check({"k"}));

  std::vector<uint8_t> big(16u << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
  // A large value reaching a blocked get, and one read back directly.
  std::thread waiter([&] {
    TcpStore c2(kHost, server.port(), false, Deadline(10));
    if (c2.get("big", Deadline(20)) != big) std::abort();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  client.set("big", big);
  waiter.join();
  assert_true(server.get("big", Deadline(20)) == big);
  client.set("after", bytes("x"));
  assert_true(server.get("after", Deadline(1)) == bytes("x"));
}

void test_timeout_names_missing_keys(void**) {
  TcpStore server(kHost, 0, true, Deadline(10));
  TcpStore client(kHost, server.port(), false, Deadline(10));
  client.set("present", bytes("1"));
  std::string msg;
  auto t0 = std::chrono::steady_clock::now();
  oslo_status st = status_of(
      [&] {
        client.wait({"present", "absent1", "absent2"}, Deadline(0.3));
      },
      &msg);
  double took = test_util::seconds_since(t0);
  assert_int_equal(st, OSLO_ERR_TIMEOUT);
  assert_non_null(std::strstr(msg.c_str(), "absent1, absent2"));
  assert_null(std::strstr(msg.c_str(), "present,"));
  assert_true(took >= 0.29 && took < 1.5);

  st = status_of([&] { client.get("nope", Deadline(0.1)); }, &msg);
  assert_int_equal(st, OSLO_ERR_TIMEOUT);
  assert_non_null(std::strstr(msg.c_str(), "nope"));
  st = status_of([&] { client.get("nope", Deadline(0)); }, &msg);
  assert_int_equal(st, OSLO_ERR_TIMEOUT);
  // Still in step with the server afterwards.
  client.wait({"present"}, Deadline(0));
  assert_true(client.get("present", Deadline(1)) == bytes("1"));
  // Setting a key whose waiters all timed out is harmless.
  client.set("absent1", bytes("late"));
  assert_true(server.get("absent1", Deadline(1)) == bytes("late"));
}

void test_get_released_by_later_set(void**) {
  TcpStore server(kHost, 0, true, Deadline(10));
  TcpStore client(kHost, server.port(), false, Deadline(10));
  std::thread setter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    TcpStore other(kHost, server.port(), false, Deadline(10));
    other.set("late", bytes("v"));
  });
  auto t0 = std::chrono::steady_clock::now();
  auto v = client.get("late", Deadline(5));
  setter.join();
  assert_true(v == bytes("v"));
  assert_true(test_util::seconds_since(t0) < 2.0);

  // One object shared by the blocked and the setting thread (needs a second
  // connection), and a wait released by add().
  std::thread setter2([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    client.set("late2", bytes("w"));
    client.add("counter", 1);
  });
  assert_true(client.get("late2", Deadline(5)) == bytes("w"));
  client.wait({"counter"}, Deadline(5));
  setter2.join();
}

void test_many_threads(void**) {
  constexpr int kThreads = 16, kAdds = 50;
  TcpStore server(kHost, 0, true, Deadline(10));
  std::vector<std::thread> ts;
  std::atomic<int> errors{0};
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([&, t] {
      try {
        std::unique_ptr<TcpStore> own;
        if (t % 2) own.reset(new TcpStore(kHost, server.port(), false, Deadline(10)));
        TcpStore& s = own ? *own : server;
        // Everyone waits for everyone: many parked waiters at once.
        s.set("t" + std::to_string(t), bytes(std::to_string(t)));
        std::vector<std::string> all;
        for (int o = 0; o < kThreads; ++o) all.push_back("t" + std::to_string(o));
        s.wait(all, Deadline(20));
        for (int i = 0; i < kAdds; ++i) s.add("counter", 1);
        for (int o = 0; o < kThreads; ++o)
          if (s.get("t" + std::to_string(o), Deadline(10)) != bytes(std::to_string(o))) ++errors;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "thread %d: %s\n", t, e.what());
        ++errors;
      }
    });
  for (auto& t : ts) t.join();
  assert_int_equal(errors.load(), 0);
  assert_int_equal(server.add("counter", 0), kThreads * kAdds);
}

void test_processes(void**) {
  constexpr int kProcs = 4, kAdds = 50;
  int port = 0;
  pid_t server_pid = spawn_server(&port);
  assert_true(port > 0);
  TcpStore inherited_client(kHost, port, false, Deadline(10));
  inherited_client.set("warm", bytes("1"));  // its pool holds a live connection
  std::vector<pid_t> pids;
  for (int p = 0; p < kProcs; ++p)
    pids.push_back(test_util::spawn([&, p]() -> int {
      // Odd ranks use the client they inherited through fork(), even ones a
      // fresh one. (A child destroying an inherited server: see
      // test_child_destroys_inherited_server.)
      std::unique_ptr<TcpStore> own;
      if (p % 2 == 0) own.reset(new TcpStore(kHost, port, false, Deadline(10)));
      TcpStore& s = own ? *own : inherited_client;
      s.wait({"go"}, Deadline(10));
      for (int i = 0; i < kAdds; ++i) s.add("counter", 1);
      s.set("p" + std::to_string(p), bytes("rank" + std::to_string(p)));
      for (int o = 0; o < kProcs; ++o)
        if (s.get("p" + std::to_string(o), Deadline(20)) != bytes("rank" + std::to_string(o)))
          return 1;
      return 0;
    }));
  inherited_client.set("go", bytes("1"));
  for (pid_t pid : pids) assert_int_equal(test_util::wait_child(pid, 30), 0);
  TcpStore fresh(kHost, port, false, Deadline(10));
  assert_int_equal(fresh.add("counter", 0), kProcs * kAdds);
  assert_int_equal(inherited_client.add("counter", 0), kProcs * kAdds);
  kill(server_pid, SIGKILL);
  assert_int_equal(test_util::wait_child(server_pid, 5), 128 + SIGKILL);

  // Clients may start before the server: they retry until it is up.
  int late_port = unused_port();
  pid_t early = test_util::spawn([&]() -> int {
    TcpStore s(kHost, late_port, false, Deadline(10));
    return s.get("k", Deadline(10)) == bytes("v") ? 0 : 1;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  int got_port = 0;
  spawn_server(&got_port, late_port);
  assert_int_equal(got_port, late_port);
  TcpStore late(kHost, late_port, false, Deadline(10));
  late.set("k", bytes("v"));
  assert_int_equal(test_util::wait_child(early, 15), 0);
}

// A child that destroys the copy of a server it inherited through fork()
// leaves the parent's server serving, the parent's old connections included.
// That needs a fork with the server thread alive: the one exception to the
// fork rule. So it happens in an owner process of its own (forked while this
// one is single-threaded), and only once the server thread sits idle in
// poll() (test_util::spawn_beside_idle_threads).
void test_child_destroys_inherited_server(void**) {
  pid_t owner = test_util::spawn([]() -> int {
    auto server = std::make_unique<TcpStore>(kHost, 0, true, Deadline(10));
    const int port = server->port();
    server->set("before", bytes("1"));  // the owner's pool holds a live connection
    // Nothing talks to the server now: its thread goes back to poll() for good.
    pid_t child = test_util::spawn_beside_idle_threads([&]() -> int {
      server.reset();  // the child's copy only
      TcpStore s(kHost, port, false, Deadline(10));
      if (s.get("before", Deadline(5)) != bytes("1")) return 1;
      s.set("from_child", bytes("2"));
      return s.add("counter", 1) == 1 ? 0 : 2;
    });
    int rc = test_util::wait_child(child, 20);
    if (rc != 0) {
      std::fprintf(stderr, "owner: child exited with %d\n", rc);
      return 10;
    }
    // The owner's server still serves its own client and new ones.
    if (server->get("from_child", Deadline(5)) != bytes("2")) return 2;
    if (server->add("counter", 1) != 2) return 3;
    TcpStore fresh(kHost, port, false, Deadline(10));
    if (fresh.add("counter", 0) != 2) return 4;
    server->set("after", bytes("3"));
    return fresh.get("after", Deadline(5)) == bytes("3") ? 0 : 5;
  });
  assert_int_equal(test_util::wait_child(owner, 30), 0);
}

void test_unreachable_and_unresolvable(void**) {
  int port = unused_port();
  std::string msg;
  auto t0 = std::chrono::steady_clock::now();
  oslo_status st = status_of([&] { TcpStore s(kHost, port, false, Deadline(0.5)); }, &msg);
  double took = test_util::seconds_since(t0);
  assert_int_equal(st, OSLO_ERR_TIMEOUT);
  std::string where = std::string(kHost) + ":" + std::to_string(port);
  assert_non_null(std::strstr(msg.c_str(), where.c_str()));
  assert_non_null(std::strstr(msg.c_str(), "could not reach server"));
  assert_non_null(std::strstr(msg.c_str(), "within 0.5 s"));
  assert_true(took >= 0.45 && took < 2.0);

  // .invalid never resolves (RFC 2606). Without DNS the resolver may only
  // say "temporary failure", which is retried until the deadline: either way
  // the error names the host or the endpoint.
  st = status_of([&] { TcpStore s("no-such-host.invalid", 1234, false, Deadline(1)); }, &msg);
  assert_true(st == OSLO_ERR_IO || st == OSLO_ERR_TIMEOUT);
  assert_non_null(std::strstr(msg.c_str(), "no-such-host.invalid"));
  st = status_of([&] { TcpStore s("no-such-host.invalid", 1234, true, Deadline(1)); }, &msg);
  assert_int_equal(st, OSLO_ERR_IO);
  assert_non_null(std::strstr(msg.c_str(), "no-such-host.invalid"));
}

void test_port_in_use(void**) {
  TcpStore first(kHost, 0, true, Deadline(10));
  std::string msg;
  oslo_status st = status_of([&] { TcpStore s(kHost, first.port(), true, Deadline(1)); }, &msg);
  assert_int_equal(st, OSLO_ERR_IO);
  std::string expect = "address 127.0.0.1:" + std::to_string(first.port()) + " already in use";
  assert_non_null(std::strstr(msg.c_str(), expect.c_str()));

  // A listener that is not ours (no SO_REUSEADDR) blocks the port as well.
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  assert_int_equal(listen(fd, 4), 0);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  int port = ntohs(a.sin_port);
  st = status_of([&] { TcpStore s(kHost, port, true, Deadline(1)); }, &msg);
  assert_int_equal(st, OSLO_ERR_IO);
  assert_non_null(std::strstr(msg.c_str(), std::to_string(port).c_str()));
  // Something listening there that does not speak the protocol is not
  // mistaken for a server: the client times out.
  st = status_of([&] { TcpStore s(kHost, port, false, Deadline(0.5)); }, &msg);
  assert_int_equal(st, OSLO_ERR_TIMEOUT);
  close(fd);
}

void test_restart_after_time_wait(void**) {
  int port;
  std::unique_ptr<TcpStore> client;
  {
    TcpStore server(kHost, 0, true, Deadline(10));
    port = server.port();
    client.reset(new TcpStore(kHost, port, false, Deadline(10)));
    client->set("x", bytes("1"));
    // The server closes first, leaving its side in TIME_WAIT.
  }
  std::string msg;
  assert_int_equal(status_of([&] { client->set("y", bytes("2")); }, &msg), OSLO_ERR_COMM);
  client.reset();
  TcpStore again(kHost, port, true, Deadline(10));
  assert_false(again.check({"x"}));
}

void test_server_killed_mid_wait(void**) {
  int port = 0;
  pid_t pid = spawn_server(&port);
  assert_true(port > 0);
  TcpStore client(kHost, port, false, Deadline(10));
  client.set("k", bytes("v"));
  std::thread killer([pid] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    kill(pid, SIGKILL);
  });
  std::string msg;
  auto t0 = std::chrono::steady_clock::now();
  oslo_status st = status_of([&] { client.get("never", Deadline(20)); }, &msg);
  killer.join();
  assert_int_equal(st, OSLO_ERR_COMM);
  assert_true(test_util::seconds_since(t0) < 5.0);
  assert_non_null(std::strstr(msg.c_str(), std::to_string(port).c_str()));
  assert_int_equal(test_util::wait_child(pid, 5), 128 + SIGKILL);
  // Later calls fail as well instead of hanging.
  assert_int_equal(status_of([&] { client.set("a", bytes("b")); }), OSLO_ERR_COMM);
  assert_int_equal(status_of([&] { client.wait({"k"}, Deadline(5)); }), OSLO_ERR_COMM);
}

void test_server_destroyed_while_waiting(void**) {
  auto server = std::make_unique<TcpStore>(kHost, 0, true, Deadline(10));
  TcpStore client(kHost, server->port(), false, Deadline(10));
  std::atomic<int> status{-1};
  std::thread waiter([&] { status = status_of([&] { client.get("never", Deadline(20)); }); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto t0 = std::chrono::steady_clock::now();
  server.reset();  // must not hang on the parked get
  waiter.join();
  assert_true(test_util::seconds_since(t0) < 2.0);
  assert_int_equal(status.load(), OSLO_ERR_COMM);
}

void test_frozen_server(void**) {
  int port = 0;
  pid_t pid = spawn_server(&port);
  assert_true(port > 0);
  TcpStore client(kHost, port, false, Deadline(1));  // 1 s also for set/add/check
  client.set("k", bytes("v"));
  test_util::stop_child(pid);
  std::string msg;
  auto t0 = std::chrono::steady_clock::now();
  assert_int_equal(status_of([&] { client.set("k2", bytes("v")); }, &msg), OSLO_ERR_TIMEOUT);
  double took = test_util::seconds_since(t0);
  assert_true(took >= 0.9 && took < 3.0);
  t0 = std::chrono::steady_clock::now();
  assert_int_equal(status_of([&] { client.get("k", Deadline(0.2)); }, &msg), OSLO_ERR_TIMEOUT);
  assert_true(test_util::seconds_since(t0) < 4.0);
  test_util::kill_children(nullptr);
}

void test_misbehaving_clients(void**) {
  TcpStore server(kHost, 0, true, Deadline(10));
  const int port = server.port();
  // Half a frame, then gone.
  int fd = raw_connect(port);
  uint8_t half[12] = {100, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4};
  assert_int_equal(send(fd, half, sizeof half, MSG_NOSIGNAL), (ssize_t)sizeof half);
  close(fd);
  // A parked get whose client disappears before the key arrives.
  fd = raw_connect(port);
  std::vector<uint8_t> req;
  oslo::store_detail::put_u64(req, 8 + 8 + 7 + 8);
  oslo::store_detail::put_u64(req, 3);  // get
  oslo::store_detail::put_u64(req, 7);
  for (char ch : std::string("orphans")) req.push_back(static_cast<uint8_t>(ch));
  oslo::store_detail::put_u64(req, 60000);
  assert_int_equal(send(fd, req.data(), req.size(), MSG_NOSIGNAL), (ssize_t)req.size());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  close(fd);
  // Garbage: an unknown opcode and an absurd frame length.
  fd = raw_connect(port);
  uint8_t junk[24] = {8, 0, 0, 0, 0, 0, 0, 0, 99};
  assert_int_equal(send(fd, junk, 17, MSG_NOSIGNAL), 17);
  int fd2 = raw_connect(port);
  std::memset(junk, 0xff, sizeof junk);
  assert_int_equal(send(fd2, junk, sizeof junk, MSG_NOSIGNAL), (ssize_t)sizeof junk);
  char c;
  assert_int_equal(recv(fd, &c, 1, 0), 0);  // the server hung up on it
  assert_int_equal(recv(fd2, &c, 1, 0), 0);
  close(fd);
  close(fd2);
  // The server is fine.
  TcpStore client(kHost, port, false, Deadline(10));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  client.set("orphans", bytes("ok"));
  assert_true(server.get("orphans", Deadline(1)) == bytes("ok"));
}

// Deadlines far away (1e10 s, 1e300 s, infinity) saturate instead of
// overflowing: before, a store wait with a 1e10 s deadline timed out at once.
void test_huge_deadlines(void**) {
  const double inf = std::numeric_limits<double>::infinity();
  for (double s : {1e10, 1e300, inf}) {
    Deadline d(s);
    assert_false(d.expired());
    assert_true(d.remaining() > 1e8);
    assert_true(d.time_point() > Deadline::Clock::now() + std::chrono::hours(24 * 365));
  }
  for (double s : {0.0, -1.0, -inf, std::nan("")}) assert_true(Deadline(s).expired());
  // Stores wait for a key that comes late with such deadlines.
  std::string dir = test_util::temp_dir();
  for (double s : {1e10, 1e300, inf}) {
    TcpStore server(kHost, 0, true, Deadline(s));
    TcpStore client(kHost, server.port(), false, Deadline(s));
    oslo::FileStore fs(dir + "/store");
    std::thread setter([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      server.set("late", bytes("v"));
      fs.set("late", bytes("w"));
    });
    auto t0 = std::chrono::steady_clock::now();
    std::string msg;
    std::vector<uint8_t> got_tcp, got_file;
    oslo_status st = status_of(
        [&] {
          client.wait({"late"}, Deadline(s));
          got_tcp = client.get("late", Deadline(s));
          got_file = fs.get("late", Deadline(s));
        },
        &msg);
    setter.join();
    oslo::FileStore::remove(dir + "/store");
    if (st != OSLO_OK) std::fprintf(stderr, "deadline %g s: %s\n", s, msg.c_str());
    assert_int_equal(st, OSLO_OK);
    assert_true(got_tcp == bytes("v"));
    assert_true(got_file == bytes("w"));
    assert_true(test_util::seconds_since(t0) >= 0.29);
  }
  test_util::remove_tree(dir);
}

// A context with the largest timeout_seconds the config accepts rendezvouses
// with a peer that comes 0.3 s late, and communicates (ranks are threads;
// alarm() ends the process should anything wait for that long timeout).
void test_context_huge_timeout_late_peer(void**) {
  const int port = unused_port();
  oslo_status st[2] = {OSLO_ERR_INTERNAL, OSLO_ERR_INTERNAL};
  std::string msg[2];
  alarm(60);
  std::vector<std::thread> ts;
  for (int r = 0; r < 2; ++r)
    ts.emplace_back([&, r] {
      if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
      std::string cfg = "{\"rank\": " + std::to_string(r) +
                        ", \"world_size\": 2, \"tensor_parallel_size\": 2, \"init_method\": "
                        "\"tcp://127.0.0.1:" +
                        std::to_string(port) + "\", \"timeout_seconds\": 1e7, \"num_threads\": 1}";
      oslo_context* ctx = nullptr;
      st[r] = oslo_context_create(cfg.c_str(), &ctx);
      if (st[r] == OSLO_OK) {
        if (r == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
        st[r] = oslo_context_barrier(ctx, OSLO_GROUP_WORLD);
      }
      msg[r] = oslo_last_error();
      oslo_context_destroy(ctx);
    });
  for (auto& t : ts) t.join();
  alarm(0);
  for (int r = 0; r < 2; ++r) {
    if (st[r] != OSLO_OK) std::fprintf(stderr, "rank %d: %s\n", r, msg[r].c_str());
    assert_int_equal(st[r], OSLO_OK);
  }
}

}  // namespace

int main() {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_basic, test_util::kill_children),
      cmocka_unit_test_teardown(test_binary_and_large, test_util::kill_children),
      cmocka_unit_test_teardown(test_timeout_names_missing_keys, test_util::kill_children),
      cmocka_unit_test_teardown(test_get_released_by_later_set, test_util::kill_children),
      cmocka_unit_test_teardown(test_many_threads, test_util::kill_children),
      cmocka_unit_test_teardown(test_processes, test_util::kill_children),
      cmocka_unit_test_teardown(test_child_destroys_inherited_server, test_util::kill_children),
      cmocka_unit_test_teardown(test_unreachable_and_unresolvable, test_util::kill_children),
      cmocka_unit_test_teardown(test_port_in_use, test_util::kill_children),
      cmocka_unit_test_teardown(test_restart_after_time_wait, test_util::kill_children),
      cmocka_unit_test_teardown(test_server_killed_mid_wait, test_util::kill_children),
      cmocka_unit_test_teardown(test_server_destroyed_while_waiting, test_util::kill_children),
      cmocka_unit_test_teardown(test_frozen_server, test_util::kill_children),
      cmocka_unit_test_teardown(test_misbehaving_clients, test_util::kill_children),
      cmocka_unit_test_teardown(test_huge_deadlines, test_util::kill_children),
      cmocka_unit_test_teardown(test_context_huge_timeout_late_peer, test_util::kill_children),
  };
  return cmocka_run_group_tests_name("tcp_store", tests, nullptr, nullptr);
}
