#include "core/rendezvous/local_address.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

namespace oslo {

std::string local_address_towards(const std::string& master_addr, int port) {
  addrinfo hints;
  std::memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  std::string service = std::to_string(port > 0 && port < 65536 ? port : 29500);
  if (getaddrinfo(master_addr.c_str(), service.c_str(), &hints, &res) != 0 || !res)
    return "127.0.0.1";
  std::string result = "127.0.0.1";
  for (addrinfo* a = res; a; a = a->ai_next) {
    bool loopback =
        (a->ai_family == AF_INET &&
         (ntohl(reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr.s_addr) >> 24) == 127) ||
        (a->ai_family == AF_INET6 &&
         IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr));
    if (loopback) break;
    // connect() on a UDP socket only picks the route and the source address;
    // nothing is sent.
    int fd = ::socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage local;
    socklen_t len = sizeof local;
    bool ok = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
              ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0;
    ::close(fd);
    if (!ok) continue;
    char host[NI_MAXHOST];
    if (getnameinfo(reinterpret_cast<sockaddr*>(&local), len, host, sizeof host, nullptr, 0,
                    NI_NUMERICHOST) == 0) {
      result = host;
      break;
    }
  }
  freeaddrinfo(res);
  return result;
}

}  // namespace oslo
