#include "core/rendezvous/tcp_store.hpp"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "core/common/error.hpp"
#include "core/rendezvous/tcp_store_server.hpp"
#include "core/rendezvous/tcp_wire.hpp"

namespace oslo {

using namespace tcp_wire;
using store_detail::errno_string;

// ---- client -----------------------------------------------------------------

struct TcpStore::Reply {
  std::vector<uint8_t> payload;
  uint64_t status = 0;
  Reader reader() const {
    Reader r(payload.data(), payload.size());
    r.u64();  // status, already decoded
    return r;
  }
};

TcpStore::TcpStore(const std::string& host, int port, bool is_server, const Deadline& deadline)
    : host_(host), port_(port), pid_(::getpid()) {
  OSLO_CHECK(port >= 0 && port <= 65535 && (port > 0 || is_server), OSLO_ERR_INVALID_ARGUMENT,
             "rendezvous: invalid port ", port, " for ", host);
  OSLO_CHECK(!host.empty(), OSLO_ERR_INVALID_ARGUMENT, "rendezvous: empty host name");
  const double budget = deadline.remaining();
  io_timeout_ = std::max(std::chrono::milliseconds(1000),
                         std::chrono::milliseconds(static_cast<long long>(budget * 1000)));
  std::string connect_host = host;
  if (is_server) {
    server_.reset(new TcpStoreServer(host, port));
    port_ = server_->port();
    connect_host = server_->connect_host();
  }

  // Retry until the deadline: the server rank may start later than us.
  auto nap = std::chrono::milliseconds(10);
  std::string last_error = "no address";
  for (;;) {
    AddrInfo ai;
    int rc = resolve(connect_host, port_, false, &ai);
    if (rc != 0 && rc != EAI_AGAIN) fail_resolve(host, rc);
    if (rc == EAI_AGAIN) last_error = gai_strerror(rc);
    for (addrinfo* a = rc == 0 ? ai.list : nullptr; a; a = a->ai_next) {
      int err = 0;
      // Cap each attempt so that a dropped SYN does not eat the whole budget
      // of a server that comes up a moment later.
      auto by = std::min(deadline.time_point(), Clock::now() + std::chrono::seconds(2));
      int fd = connect_one(a, by, &err);
      if (fd < 0) {
        last_error = errno_string(err);
        continue;
      }
      Writer hello;
      hello.u64(kHello).u64(kMagic);
      std::vector<uint8_t> frame = hello.finish();
      std::vector<uint8_t> head(8), body;
      Io io = send_all(fd, frame.data(), frame.size(), by, &err);
      if (io == Io::Ok) io = recv_all(fd, head.data(), 8, by, &err);
      if (io == Io::Ok) {
        uint64_t len = get_u64(head.data());
        if (len == 16) {
          body.resize(16);
          io = recv_all(fd, body.data(), 16, by, &err);
        } else {
          io = Io::Broken;
        }
      }
      if (io == Io::Ok && get_u64(body.data()) == kOk && get_u64(body.data() + 8) == kMagic) {
        std::lock_guard<std::mutex> lk(pool_mu_);
        pool_.push_back(fd);
        return;
      }
      ::close(fd);
      last_error = io == Io::Timeout ? "no handshake reply"
                   : io == Io::Ok    ? "not an oslo rendezvous server"
                                     : "connection closed during handshake";
    }
    if (deadline.expired())
      fail(OSLO_ERR_TIMEOUT, "rendezvous: could not reach server at ", endpoint(), " within ",
           store_detail::seconds_text(budget), " s (last error: ", last_error, ")");
    std::this_thread::sleep_for(std::min(nap, std::chrono::duration_cast<std::chrono::milliseconds>(
                                                  deadline.time_point() - Clock::now()) +
                                                  std::chrono::milliseconds(1)));
    nap = std::min(nap * 2, std::chrono::milliseconds(250));
  }
}

TcpStore::~TcpStore() {
  {
    std::lock_guard<std::mutex> lk(pool_mu_);
    for (int fd : pool_) ::close(fd);
    pool_.clear();
  }
  server_.reset();
}

std::string TcpStore::endpoint() const {
  return endpoint_text(host_, port_);
}

int TcpStore::take_connection(Clock::time_point by) {
  {
    std::lock_guard<std::mutex> lk(pool_mu_);
    if (::getpid() != pid_) {
      // Forked: the pooled sockets are shared with the parent, and two
      // processes talking on one connection would mix up their replies.
      for (int fd : pool_) ::close(fd);
      pool_.clear();
      pid_ = ::getpid();
    }
    if (!pool_.empty()) {
      int fd = pool_.back();
      pool_.pop_back();
      return fd;
    }
  }
  // Another thread holds the only connection: open one more. The server was
  // reachable at construction, so a refusal now means it is gone.
  std::string connect_host = server_ ? server_->connect_host() : host_;
  AddrInfo ai;
  int rc = resolve(connect_host, port_, false, &ai);
  if (rc != 0) fail_resolve(connect_host, rc);
  int err = 0;
  for (addrinfo* a = ai.list; a; a = a->ai_next) {
    int fd = connect_one(a, by, &err);
    if (fd >= 0) {
      // The server accepts any request on a new connection; the handshake
      // already proved at construction that it is an oslo store.
      return fd;
    }
  }
  if (err == ETIMEDOUT)
    fail(OSLO_ERR_TIMEOUT, "rendezvous: timed out connecting to server at ", endpoint());
  fail(OSLO_ERR_COMM, "rendezvous: lost the server at ", endpoint(), ": ", errno_string(err));
}

void TcpStore::give_back(int fd) {
  std::lock_guard<std::mutex> lk(pool_mu_);
  pool_.push_back(fd);
}

TcpStore::Reply TcpStore::call(const std::vector<uint8_t>& request, Clock::time_point reply_by,
                               const char* what) {
  int fd = take_connection(reply_by);
  int err = 0;
  Io io = send_all(fd, request.data(), request.size(), reply_by, &err);
  uint8_t head[8];
  Reply rep;
  if (io == Io::Ok) io = recv_all(fd, head, 8, reply_by, &err);
  if (io == Io::Ok) {
    uint64_t len = get_u64(head);
    if (len < 8 || len > kMaxFrame) {
      ::close(fd);
      fail(OSLO_ERR_COMM, "rendezvous: malformed reply from server at ", endpoint(), " to ", what);
    }
    rep.payload.resize(len);
    io = recv_all(fd, rep.payload.data(), len, reply_by, &err);
  }
  if (io != Io::Ok) {
    // The connection is now out of step with the server (a reply may still
    // arrive): never reuse it.
    ::close(fd);
    if (io == Io::Timeout)
      fail(OSLO_ERR_TIMEOUT, "rendezvous: server at ", endpoint(), " did not answer ", what,
           " in time");
    fail(OSLO_ERR_COMM, "rendezvous: lost connection to server at ", endpoint(), " during ", what,
         ": ", err ? errno_string(err) : std::string("connection closed by server"));
  }
  give_back(fd);
  rep.status = get_u64(rep.payload.data());
  return rep;
}

void TcpStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  Writer w;
  w.u64(kSet).str(key).bytes(value.data(), value.size());
  Reply r = call(w.finish(), Clock::now() + io_timeout_, "set");
  OSLO_CHECK(r.status == kOk, OSLO_ERR_COMM, "rendezvous: server rejected set of '", key, "'");
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  Writer w;
  w.u64(kAdd).str(key).u64(static_cast<uint64_t>(delta));
  Reply r = call(w.finish(), Clock::now() + io_timeout_, "add");
  Reader rd = r.reader();
  if (r.status == kFailed) {
    std::string msg = rd.str();
    fail(OSLO_ERR_INVALID_ARGUMENT, rd.ok ? msg : std::string("rendezvous: add failed"));
  }
  uint64_t v = rd.u64();
  OSLO_CHECK(r.status == kOk && rd.ok, OSLO_ERR_COMM, "rendezvous: malformed add reply");
  return static_cast<int64_t>(v);
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  Writer w;
  w.u64(kCheck).keys(keys);
  Reply r = call(w.finish(), Clock::now() + io_timeout_, "check");
  Reader rd = r.reader();
  uint64_t all = rd.u64();
  OSLO_CHECK(r.status == kOk && rd.ok, OSLO_ERR_COMM, "rendezvous: malformed check reply");
  return all != 0;
}

namespace {
uint64_t timeout_ms_of(const Deadline& d) {
  return static_cast<uint64_t>(std::ceil(d.remaining() * 1000.0));
}
}  // namespace

std::vector<uint8_t> TcpStore::get(const std::string& key, const Deadline& deadline) {
  auto start = Clock::now();
  Writer w;
  w.u64(kGet).str(key).u64(timeout_ms_of(deadline));
  Reply r = call(w.finish(), deadline.time_point() + kReplyGrace, "get");
  Reader rd = r.reader();
  if (r.status == kTimedOut)
    fail(OSLO_ERR_TIMEOUT, "rendezvous: timed out after ",
         store_detail::seconds_text(std::chrono::duration<double>(Clock::now() - start).count()),
         " s waiting for keys: ", key, " (server ", endpoint(), ")");
  std::string v = rd.str();
  OSLO_CHECK(r.status == kOk && rd.ok, OSLO_ERR_COMM, "rendezvous: malformed get reply");
  return std::vector<uint8_t>(v.begin(), v.end());
}

void TcpStore::wait(const std::vector<std::string>& keys, const Deadline& deadline) {
  auto start = Clock::now();
  Writer w;
  w.u64(kWait).keys(keys).u64(timeout_ms_of(deadline));
  Reply r = call(w.finish(), deadline.time_point() + kReplyGrace, "wait");
  Reader rd = r.reader();
  if (r.status == kTimedOut) {
    auto missing = rd.keys();
    fail(OSLO_ERR_TIMEOUT, "rendezvous: timed out after ",
         store_detail::seconds_text(std::chrono::duration<double>(Clock::now() - start).count()),
         " s waiting for keys: ", store_detail::join_keys(rd.ok ? missing : keys), " (server ",
         endpoint(), ")");
  }
  OSLO_CHECK(r.status == kOk, OSLO_ERR_COMM, "rendezvous: malformed wait reply");
}

}  // namespace oslo