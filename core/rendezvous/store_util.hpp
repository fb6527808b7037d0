// Small helpers shared by the store implementations (not part of any interface).
#pragma once

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/common/error.hpp"

namespace oslo {
namespace store_detail {

// strerror is not thread-safe; strerror_r's GNU variant may return a static
// string instead of filling the buffer, so use its return value.
inline std::string errno_string(int err) {
  char buf[256];
  const char* s = strerror_r(err, buf, sizeof buf);
  return s ? std::string(s) : std::string("errno ") + std::to_string(err);
}

// "a, b, c": used to name the keys a timed-out wait was still missing.
inline std::string join_keys(const std::vector<std::string>& keys) {
  std::string out;
  for (const auto& k : keys) {
    if (!out.empty()) out += ", ";
    out += k;
  }
  return out;
}

// Fixed little-endian encodings, so that a store file written on one host
// reads the same on another and the wire format does not depend on the host.
inline void put_u64(std::vector<uint8_t>& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
inline uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Decimal text of an add() counter; a value that is not an integer is a
// caller error (the key was set() with something else).
inline int64_t parse_counter(const std::string& key, const std::vector<uint8_t>& v) {
  std::string s(v.begin(), v.end());
  errno = 0;
  char* end = nullptr;
  long long n = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || errno != 0 || end != s.c_str() + s.size())
    fail(OSLO_ERR_INVALID_ARGUMENT, "store: add() on key '", key,
         "' whose value is not an integer");
  return static_cast<int64_t>(n);
}
inline std::vector<uint8_t> counter_bytes(int64_t v) {
  std::string s = std::to_string(v);
  return std::vector<uint8_t>(s.begin(), s.end());
}

// Seconds with one decimal for messages ("within 5.0 s").
inline std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", s);
  return buf;
}

}  // namespace store_detail
}  // namespace oslo
