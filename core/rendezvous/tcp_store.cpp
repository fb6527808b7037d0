#include "core/rendezvous/tcp_store.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <map>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "core/common/error.hpp"
#include "core/rendezvous/store_util.hpp"

namespace oslo {

using store_detail::errno_string;
using store_detail::get_u64;
using store_detail::put_u64;
using Clock = Deadline::Clock;

namespace {

enum Op : uint64_t { kHello = 1, kSet = 2, kGet = 3, kAdd = 4, kCheck = 5, kWait = 6 };
enum ReplyStatus : uint64_t { kOk = 0, kTimedOut = 1, kFailed = 2 };
// Exchanged first on every connection, so that a port held by something else
// is noticed instead of misread.
constexpr uint64_t kMagic = 0x4f534c4f53544f31ull;  // "OSLOSTO1"
// Frames beyond this are treated as a broken peer rather than allocated.
constexpr uint64_t kMaxFrame = uint64_t(1) << 32;
// How long a client waits past a get/wait deadline for the server's own
// timeout reply before it declares the server unresponsive.
constexpr auto kReplyGrace = std::chrono::seconds(2);

// ---- encoding ---------------------------------------------------------------

struct Writer {
  std::vector<uint8_t> buf;
  Writer() { buf.resize(8); }  // room for the frame length
  Writer& u64(uint64_t v) {
    put_u64(buf, v);
    return *this;
  }
  Writer& bytes(const void* p, size_t n) {
    put_u64(buf, n);
    const uint8_t* b = static_cast<const uint8_t*>(p);
    buf.insert(buf.end(), b, b + n);
    return *this;
  }
  Writer& str(const std::string& s) { return bytes(s.data(), s.size()); }
  Writer& keys(const std::vector<std::string>& ks) {
    u64(ks.size());
    for (const auto& k : ks) str(k);
    return *this;
  }
  // Fills in the frame length and hands the frame over.
  std::vector<uint8_t> finish() {
    uint64_t n = buf.size() - 8;
    for (int i = 0; i < 8; ++i) buf[i] = static_cast<uint8_t>(n >> (8 * i));
    return std::move(buf);
  }
};

// Bounds-checked reader of one frame payload; `ok` turns false on a short or
// malformed payload and stays false.
struct Reader {
  const uint8_t* p;
  size_t n;
  size_t pos = 0;
  bool ok = true;
  Reader(const uint8_t* data, size_t size) : p(data), n(size) {}
  uint64_t u64() {
    if (!ok || n - pos < 8) return ok = false, 0;
    uint64_t v = get_u64(p + pos);
    pos += 8;
    return v;
  }
  std::string str() {
    uint64_t len = u64();
    if (!ok || n - pos < len) return ok = false, std::string();
    std::string s(reinterpret_cast<const char*>(p + pos), len);
    pos += len;
    return s;
  }
  std::vector<std::string> keys() {
    uint64_t count = u64();
    std::vector<std::string> ks;
    // Each key takes at least 8 bytes: bounds the reservation by the payload.
    if (!ok || count > (n - pos) / 8) return ok = false, ks;
    ks.reserve(count);
    for (uint64_t i = 0; i < count && ok; ++i) ks.push_back(str());
    return ks;
  }
};

// ---- sockets ----------------------------------------------------------------

std::string endpoint_text(const std::string& host, int port) {
  if (host.find(':') != std::string::npos) return str("[", host, "]:", port);
  return str(host, ":", port);
}

std::string numeric_host(const sockaddr* sa, socklen_t len) {
  char h[NI_MAXHOST];
  if (getnameinfo(sa, len, h, sizeof h, nullptr, 0, NI_NUMERICHOST) != 0) return "?";
  return h;
}

void set_nodelay(int fd) {
  // Store messages are small request/reply pairs: Nagle would add delay to
  // every one. Failure only costs latency.
  int one = 1;
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

struct AddrInfo {
  addrinfo* list = nullptr;
  ~AddrInfo() {
    if (list) freeaddrinfo(list);
  }
};

// getaddrinfo wrapper; returns the EAI_ code (0 on success).
int resolve(const std::string& host, int port, bool passive, AddrInfo* out) {
  addrinfo hints;
  std::memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  std::string service = std::to_string(port);
  return getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &out->list);
}

[[noreturn]] void fail_resolve(const std::string& host, int rc) {
  fail(OSLO_ERR_IO, "rendezvous: cannot resolve host '", host,
       "': ", rc == EAI_SYSTEM ? errno_string(errno) : std::string(gai_strerror(rc)));
}

int ms_until(Clock::time_point t) {
  auto d = std::chrono::duration_cast<std::chrono::milliseconds>(t - Clock::now()).count() + 1;
  if (d < 0) return 0;
  return static_cast<int>(std::min<long long>(d, 1 << 30));
}

enum class Io { Ok, Timeout, Broken };

// Waits for `events` on fd until `by`. EINTR just retries with the time left.
Io wait_fd(int fd, short events, Clock::time_point by) {
  for (;;) {
    pollfd p{fd, events, 0};
    int r = ::poll(&p, 1, ms_until(by));
    if (r > 0) return Io::Ok;  // errors/hangup surface in the following send/recv
    if (r == 0) {
      if (Clock::now() >= by) return Io::Timeout;
      continue;
    }
    if (errno != EINTR) return Io::Broken;
  }
}

Io send_all(int fd, const uint8_t* p, size_t n, Clock::time_point by, int* err) {
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w > 0) {
      p += w;
      n -= static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      Io r = wait_fd(fd, POLLOUT, by);
      if (r != Io::Ok) return r;
      continue;
    }
    *err = w < 0 ? errno : EPIPE;
    return Io::Broken;
  }
  return Io::Ok;
}

// *err is 0 when the peer closed the connection.
Io recv_all(int fd, uint8_t* p, size_t n, Clock::time_point by, int* err) {
  while (n > 0) {
    ssize_t r = ::recv(fd, p, n, 0);
    if (r > 0) {
      p += r;
      n -= static_cast<size_t>(r);
      continue;
    }
    if (r == 0) {
      *err = 0;
      return Io::Broken;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      Io w = wait_fd(fd, POLLIN, by);
      if (w != Io::Ok) return w;
      continue;
    }
    *err = errno;
    return Io::Broken;
  }
  return Io::Ok;
}

// One non-blocking connect attempt to one address, finished by `by`.
// Returns the connected fd or -1 with *err set.
int connect_one(const addrinfo* ai, Clock::time_point by, int* err) {
  int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
  if (fd < 0) {
    *err = errno;
    return -1;
  }
  int r = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
  if (r != 0 && errno != EINPROGRESS && errno != EINTR) {
    *err = errno;
    ::close(fd);
    return -1;
  }
  if (r != 0) {
    // EINTR also leaves the connect running in the background: wait for it.
    if (wait_fd(fd, POLLOUT, by) != Io::Ok) {
      *err = ETIMEDOUT;
      ::close(fd);
      return -1;
    }
    int so = 0;
    socklen_t len = sizeof so;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &len) != 0) so = errno;
    if (so != 0) {
      *err = so;
      ::close(fd);
      return -1;
    }
  }
  set_nodelay(fd);
  return fd;
}

}  // namespace

// ---- server -----------------------------------------------------------------

class TcpStoreServer {
 public:
  TcpStoreServer(const std::string& host, int port);
  ~TcpStoreServer();
  int port() const { return port_; }
  // Numeric address the local client should connect to: the bound address, or
  // loopback when the wildcard address was bound.
  const std::string& connect_host() const { return connect_host_; }

 private:
  struct Client {
    std::vector<uint8_t> in;
    size_t in_pos = 0;
    std::vector<uint8_t> out;
    size_t out_pos = 0;
    uint64_t waiter = 0;  // id of the parked get/wait, 0 if none
    bool dead = false;
  };
  struct Waiter {
    int fd;
    bool is_get;
    std::vector<std::string> keys;  // distinct keys
    size_t missing;
    Clock::time_point deadline;
  };

  void run();
  void loop();
  void accept_clients();
  void read_client(int fd, Client& c);
  void process_frames(int fd, Client& c);
  // Handles one request; false if it is malformed (the client is dropped).
  bool handle(int fd, Client& c, Reader& r);
  void reply(int fd, Client& c, std::vector<uint8_t> frame);
  void flush(Client& c, int fd);
  void park(int fd, Client& c, bool is_get, std::vector<std::string> keys, uint64_t timeout_ms);
  void key_created(const std::string& key);
  void finish_waiter(uint64_t id, bool timed_out);
  void expire_waiters();
  void drop(int fd, Client& c);
  int poll_timeout_ms() const;

  int listen_fd_ = -1;
  int wake_fd_ = -1;
  int port_ = 0;
  std::string connect_host_;
  std::thread thread_;
  pid_t owner_pid_ = ::getpid();

  // Touched only by the server thread.
  std::map<int, Client> clients_;
  std::unordered_map<std::string, std::vector<uint8_t>> data_;
  std::unordered_map<uint64_t, Waiter> waiters_;
  std::unordered_map<std::string, std::vector<uint64_t>> key_waiters_;
  uint64_t next_waiter_ = 1;
};

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
