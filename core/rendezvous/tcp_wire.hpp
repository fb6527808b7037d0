// The TCP store's wire (tcp_store.hpp): the frames client and server
// exchange, their encoding, and blocking socket helpers bounded by a
// deadline. Internal to core/rendezvous; any thread.
#pragma once

#include <netdb.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/common/deadline.hpp"
#include "core/common/error.hpp"
#include "core/rendezvous/store_util.hpp"

namespace oslo {
namespace tcp_wire {

using store_detail::errno_string;
using store_detail::get_u64;
using store_detail::put_u64;
using Clock = Deadline::Clock;

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

std::string endpoint_text(const std::string& host, int port);

std::string numeric_host(const sockaddr* sa, socklen_t len);

void set_nodelay(int fd);

struct AddrInfo {
  addrinfo* list = nullptr;
  ~AddrInfo() {
    if (list) freeaddrinfo(list);
  }
};

// getaddrinfo wrapper; returns the EAI_ code (0 on success).
int resolve(const std::string& host, int port, bool passive, AddrInfo* out);

[[noreturn]] inline void fail_resolve(const std::string& host, int rc) {
  fail(OSLO_ERR_IO, "rendezvous: cannot resolve host '", host,
       "': ", rc == EAI_SYSTEM ? errno_string(errno) : std::string(gai_strerror(rc)));
}

int ms_until(Clock::time_point t);

enum class Io { Ok, Timeout, Broken };

// Waits for `events` on fd until `by`. EINTR just retries with the time left.
Io wait_fd(int fd, short events, Clock::time_point by);

Io send_all(int fd, const uint8_t* p, size_t n, Clock::time_point by, int* err);

// *err is 0 when the peer closed the connection.
Io recv_all(int fd, uint8_t* p, size_t n, Clock::time_point by, int* err);

// One non-blocking connect attempt to one address, finished by `by`.
// Returns the connected fd or -1 with *err set.
int connect_one(const addrinfo* ai, Clock::time_point by, int* err);

}  // namespace tcp_wire
}  // namespace oslo
