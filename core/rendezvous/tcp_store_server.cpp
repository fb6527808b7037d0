#include "core/rendezvous/tcp_store_server.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <unordered_set>

#include "core/common/error.hpp"

namespace oslo {

using namespace tcp_wire;
using store_detail::errno_string;

TcpStoreServer::TcpStoreServer(const std::string& host, int port) {
  AddrInfo ai;
  int rc = resolve(host, port, false, &ai);
  if (rc != 0) fail_resolve(host, rc);

  int last_err = 0;
  std::string last_addr;
  for (addrinfo* a = ai.list; a && listen_fd_ < 0; a = a->ai_next) {
    std::string numeric = numeric_host(a->ai_addr, a->ai_addrlen);
    sockaddr_storage addr;
    std::memcpy(&addr, a->ai_addr, a->ai_addrlen);
    socklen_t addrlen = a->ai_addrlen;
    for (int attempt = 0; attempt < 2; ++attempt) {
      int fd = ::socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fd < 0) {
        last_err = errno;
        break;
      }
      // SO_REUSEADDR lets a restarted job bind while old connections sit in
      // TIME_WAIT; Linux still refuses the bind while a socket listens there.
      int one = 1;
      (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), addrlen) == 0 &&
          ::listen(fd, SOMAXCONN) == 0) {
        listen_fd_ = fd;
        break;
      }
      last_err = errno;
      last_addr = numeric;
      ::close(fd);
      if (last_err == EADDRINUSE)
        fail(OSLO_ERR_IO, "rendezvous: address ", endpoint_text(numeric, port), " already in use",
             numeric != host ? str(" (host '", host, "')") : std::string(),
             "; another job or a leftover process holds the port: choose another port");
      if (last_err != EADDRNOTAVAIL || attempt == 1) break;
      // The name resolves to an address this host does not own (NAT, DNS
      // alias): serve on every interface of that family instead.
      if (addr.ss_family == AF_INET) {
        reinterpret_cast<sockaddr_in*>(&addr)->sin_addr.s_addr = htonl(INADDR_ANY);
      } else if (addr.ss_family == AF_INET6) {
        reinterpret_cast<sockaddr_in6*>(&addr)->sin6_addr = in6addr_any;
      } else {
        break;
      }
    }
    if (listen_fd_ >= 0) {
      sockaddr_storage bound;
      socklen_t blen = sizeof bound;
      if (getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &blen) != 0) {
        int e = errno;
        ::close(listen_fd_);
        fail(OSLO_ERR_IO, "rendezvous: getsockname failed: ", errno_string(e));
      }
      if (bound.ss_family == AF_INET) {
        auto* in = reinterpret_cast<sockaddr_in*>(&bound);
        port_ = ntohs(in->sin_port);
        if (in->sin_addr.s_addr == htonl(INADDR_ANY)) in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      } else {
        auto* in6 = reinterpret_cast<sockaddr_in6*>(&bound);
        port_ = ntohs(in6->sin6_port);
        if (std::memcmp(&in6->sin6_addr, &in6addr_any, sizeof in6addr_any) == 0)
          in6->sin6_addr = in6addr_loopback;
      }
      connect_host_ = numeric_host(reinterpret_cast<sockaddr*>(&bound), blen);
    }
  }
  if (listen_fd_ < 0)
    fail(OSLO_ERR_IO, "rendezvous: cannot listen on ", endpoint_text(host, port), ": ",
         errno_string(last_err));

  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) {
    int e = errno;
    ::close(listen_fd_);
    fail(OSLO_ERR_IO, "rendezvous: eventfd failed: ", errno_string(e));
  }
  thread_ = std::thread([this] { run(); });
}

TcpStoreServer::~TcpStoreServer() {
  if (::getpid() != owner_pid_) {
    // A forked child destroying its copy: the server thread lives only in the
    // parent, and waking it through the shared eventfd would stop the
    // parent's server. Close the child's descriptors and let the thread
    // handle go (leaked on purpose: destroying a joinable std::thread aborts).
    for (auto& kv : clients_) ::close(kv.first);
    ::close(listen_fd_);
    ::close(wake_fd_);
    new std::thread(std::move(thread_));
    return;
  }
  uint64_t one = 1;
  // Cannot fail short of a bug (the counter would have to overflow).
  while (::write(wake_fd_, &one, sizeof one) < 0 && errno == EINTR) {
  }
  thread_.join();
  for (auto& kv : clients_) ::close(kv.first);
  ::close(listen_fd_);
  ::close(wake_fd_);
}

void TcpStoreServer::run() {
  try {
    loop();
  } catch (const std::exception& e) {
    // Out of memory or similar: the clients see their connections close and
    // report OSLO_ERR_COMM, which beats killing the process from this thread.
    std::fprintf(stderr, "[oslo] rendezvous server stopped: %s\n", e.what());
    for (auto& kv : clients_) ::shutdown(kv.first, SHUT_RDWR);
    // Wait for the owner to stop us so that the destructor's join returns.
    pollfd p{wake_fd_, POLLIN, 0};
    while (::poll(&p, 1, -1) < 0 && errno == EINTR) {
    }
  }
}

int TcpStoreServer::poll_timeout_ms() const {
  if (waiters_.empty()) return -1;
  auto first = Clock::time_point::max();
  for (const auto& kv : waiters_) first = std::min(first, kv.second.deadline);
  return ms_until(first);
}

void TcpStoreServer::loop() {
  std::vector<pollfd> fds;
  for (;;) {
    fds.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    for (const auto& kv : clients_) {
      short ev = POLLIN;
      if (kv.second.out_pos < kv.second.out.size()) ev |= POLLOUT;
      fds.push_back({kv.first, ev, 0});
    }
    int n = ::poll(fds.data(), fds.size(), poll_timeout_ms());
    if (n < 0) {
      if (errno == EINTR) continue;
      fail(OSLO_ERR_IO, "poll failed: ", errno_string(errno));
    }
    if (fds[0].revents) return;  // the destructor asked us to stop
    for (size_t i = 2; i < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      auto it = clients_.find(fds[i].fd);
      if (it == clients_.end() || it->second.dead) continue;
      if (fds[i].revents & POLLOUT) flush(it->second, it->first);
      if (!it->second.dead && (fds[i].revents & (POLLIN | POLLHUP | POLLERR)))
        read_client(it->first, it->second);
    }
    if (fds[1].revents) accept_clients();
    expire_waiters();
    // A client whose parked request was answered may have more requests
    // buffered; dead clients are closed only here, after every iteration over
    // clients_ is done, so that no fd number is reused while still listed.
    for (auto it = clients_.begin(); it != clients_.end();) {
      if (!it->second.dead && !it->second.waiter && it->second.in_pos < it->second.in.size())
        process_frames(it->first, it->second);
      if (it->second.dead) {
        ::close(it->first);
        it = clients_.erase(it);
      } else {
        ++it;
      }
    }
  }
}

void TcpStoreServer::accept_clients() {
  for (;;) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      // EAGAIN: all taken. EMFILE/ENFILE/ENOBUFS: leave the connection in the
      // backlog; it is retried on the next wakeup.
      return;
    }
    set_nodelay(fd);
    clients_[fd];
  }
}

void TcpStoreServer::read_client(int fd, Client& c) {
  uint8_t buf[64 * 1024];
  for (;;) {
    ssize_t r = ::recv(fd, buf, sizeof buf, 0);
    if (r > 0) {
      c.in.insert(c.in.end(), buf, buf + r);
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    // EOF or a reset: the client is gone, maybe mid-request.
    drop(fd, c);
    return;
  }
  if (!c.waiter) process_frames(fd, c);
}

void TcpStoreServer::process_frames(int fd, Client& c) {
  // One request at a time per client: a parked get/wait holds the rest back,
  // so replies go out in request order.
  while (!c.dead && !c.waiter && c.in.size() - c.in_pos >= 8) {
    uint64_t len = get_u64(&c.in[c.in_pos]);
    if (len > kMaxFrame) {
      drop(fd, c);
      return;
    }
    if (c.in.size() - c.in_pos - 8 < len) break;
    Reader r(&c.in[c.in_pos + 8], len);
    c.in_pos += 8 + len;
    if (!handle(fd, c, r)) {
      drop(fd, c);
      return;
    }
  }
  if (c.in_pos == c.in.size()) {
    c.in.clear();
    c.in_pos = 0;
  } else if (c.in_pos > (1u << 20)) {
    c.in.erase(c.in.begin(), c.in.begin() + static_cast<long>(c.in_pos));
    c.in_pos = 0;
  }
}

bool TcpStoreServer::handle(int fd, Client& c, Reader& r) {
  uint64_t op = r.u64();
  switch (op) {
    case kHello: {
      uint64_t magic = r.u64();
      if (!r.ok || magic != kMagic) return false;
      reply(fd, c, Writer().u64(kOk).u64(kMagic).finish());
      return true;
    }
    case kSet: {
      std::string key = r.str();
      std::string value = r.str();
      if (!r.ok) return false;
      bool created = data_.find(key) == data_.end();
      data_[key].assign(value.begin(), value.end());
      reply(fd, c, Writer().u64(kOk).finish());
      if (created) key_created(key);
      return true;
    }
    case kAdd: {
      std::string key = r.str();
      int64_t delta = static_cast<int64_t>(r.u64());
      if (!r.ok) return false;
      auto it = data_.find(key);
      bool created = it == data_.end();
      int64_t v = 0;
      try {
        if (!created) v = store_detail::parse_counter(key, it->second);
      } catch (const Error& e) {
        reply(fd, c, Writer().u64(kFailed).str(e.what()).finish());
        return true;
      }
      v = static_cast<int64_t>(static_cast<uint64_t>(v) + static_cast<uint64_t>(delta));
      data_[key] = store_detail::counter_bytes(v);
      reply(fd, c, Writer().u64(kOk).u64(static_cast<uint64_t>(v)).finish());
      if (created) key_created(key);
      return true;
    }
    case kCheck: {
      auto keys = r.keys();
      if (!r.ok) return false;
      bool all = std::all_of(keys.begin(), keys.end(),
                             [&](const std::string& k) { return data_.count(k) > 0; });
      reply(fd, c, Writer().u64(kOk).u64(all ? 1 : 0).finish());
      return true;
    }
    case kGet: {
      std::string key = r.str();
      uint64_t timeout_ms = r.u64();
      if (!r.ok) return false;
      park(fd, c, true, {key}, timeout_ms);
      return true;
    }
    case kWait: {
      auto keys = r.keys();
      uint64_t timeout_ms = r.u64();
      if (!r.ok) return false;
      park(fd, c, false, std::move(keys), timeout_ms);
      return true;
    }
    default: return false;
  }
}

void TcpStoreServer::park(int fd, Client& c, bool is_get, std::vector<std::string> keys,
                          uint64_t timeout_ms) {
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  uint64_t id = next_waiter_++;
  // Clamp so that now + timeout cannot overflow the clock.
  timeout_ms = std::min<uint64_t>(timeout_ms, uint64_t(1) << 40);
  Waiter w{fd, is_get, std::move(keys), 0, Clock::now() + std::chrono::milliseconds(timeout_ms)};
  for (const auto& k : w.keys)
    if (!data_.count(k)) {
      ++w.missing;
      key_waiters_[k].push_back(id);
    }
  c.waiter = id;
  waiters_.emplace(id, std::move(w));
  if (waiters_.at(id).missing == 0) finish_waiter(id, false);
  // Past-deadline waiters with missing keys are answered by expire_waiters()
  // later in this loop iteration.
}

void TcpStoreServer::key_created(const std::string& key) {
  auto it = key_waiters_.find(key);
  if (it == key_waiters_.end()) return;
  std::vector<uint64_t> ids = std::move(it->second);
  key_waiters_.erase(it);
  for (uint64_t id : ids) {
    auto w = waiters_.find(id);
    if (w == waiters_.end()) continue;
    if (--w->second.missing == 0) finish_waiter(id, false);
  }
}

void TcpStoreServer::finish_waiter(uint64_t id, bool timed_out) {
  auto it = waiters_.find(id);
  Waiter w = std::move(it->second);
  waiters_.erase(it);
  std::vector<std::string> missing;
  for (const auto& k : w.keys) {
    if (data_.count(k)) continue;
    missing.push_back(k);
    // Unlink from the per-key list so timed-out waiters do not pile up there.
    auto kw = key_waiters_.find(k);
    if (kw != key_waiters_.end()) {
      auto& v = kw->second;
      v.erase(std::remove(v.begin(), v.end(), id), v.end());
      if (v.empty()) key_waiters_.erase(kw);
    }
  }
  auto cit = clients_.find(w.fd);
  if (cit == clients_.end() || cit->second.waiter != id) return;
  Client& c = cit->second;
  c.waiter = 0;
  if (c.dead) return;
  if (timed_out) {
    reply(w.fd, c, Writer().u64(kTimedOut).keys(missing).finish());
  } else if (w.is_get) {
    const auto& v = data_.at(w.keys[0]);
    reply(w.fd, c, Writer().u64(kOk).bytes(v.data(), v.size()).finish());
  } else {
    reply(w.fd, c, Writer().u64(kOk).finish());
  }
}

void TcpStoreServer::expire_waiters() {
  auto now = Clock::now();
  std::vector<uint64_t> due;
  for (const auto& kv : waiters_)
    if (kv.second.deadline <= now) due.push_back(kv.first);
  for (uint64_t id : due) finish_waiter(id, true);
}

void TcpStoreServer::reply(int fd, Client& c, std::vector<uint8_t> frame) {
  if (c.out_pos == c.out.size()) {
    c.out = std::move(frame);
    c.out_pos = 0;
  } else {
    c.out.insert(c.out.end(), frame.begin(), frame.end());
  }
  flush(c, fd);
}

void TcpStoreServer::flush(Client& c, int fd) {
  while (c.out_pos < c.out.size()) {
    ssize_t w = ::send(fd, c.out.data() + c.out_pos, c.out.size() - c.out_pos, MSG_NOSIGNAL);
    if (w > 0) {
      c.out_pos += static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;  // POLLOUT resumes
    drop(fd, c);
    return;
  }
  c.out.clear();
  c.out_pos = 0;
}

void TcpStoreServer::drop(int fd, Client& c) {
  (void)fd;
  c.dead = true;
  c.in.clear();
  c.in_pos = 0;
  c.out.clear();
  c.out_pos = 0;
  if (c.waiter) {
    uint64_t id = c.waiter;
    c.waiter = 0;
    // Forget the parked request; finish_waiter sees no owner and just unlinks.
    auto it = waiters_.find(id);
    if (it != waiters_.end()) {
      it->second.fd = -1;
      finish_waiter(id, true);
    }
  }
}

// ---- client -----------------------------------------------------------------
}  // namespace oslo
