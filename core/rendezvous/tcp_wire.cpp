#include "core/rendezvous/tcp_wire.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>

namespace oslo {
namespace tcp_wire {

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

int resolve(const std::string& host, int port, bool passive, AddrInfo* out) {
  addrinfo hints;
  std::memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  std::string service = std::to_string(port);
  return getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &out->list);
}

int ms_until(Clock::time_point t) {
  auto d = std::chrono::duration_cast<std::chrono::milliseconds>(t - Clock::now()).count() + 1;
  if (d < 0) return 0;
  return static_cast<int>(std::min<long long>(d, 1 << 30));
}

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

}  // namespace tcp_wire
}  // namespace oslo
