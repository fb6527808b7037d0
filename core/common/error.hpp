// Internal error type of the oslo core. Every failure inside the core is thrown
// as oslo::Error carrying a public status code; the C shims in core/capi catch it
// and turn it into a status plus the thread-local message. Nothing else may
// cross the ABI.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

#include "oslo.h"

namespace oslo {

class Error : public std::runtime_error {
 public:
  Error(oslo_status status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  oslo_status status() const noexcept { return status_; }

 private:
  oslo_status status_;
};

namespace detail {
inline void append(std::ostringstream&) {}
template <typename T, typename... Rest>
void append(std::ostringstream& os, T&& first, Rest&&... rest) {
  os << std::forward<T>(first);
  append(os, std::forward<Rest>(rest)...);
}
}  // namespace detail

// Builds a message from streamable parts: str("rank ", r, " died").
template <typename... Parts>
std::string str(Parts&&... parts) {
  std::ostringstream os;
  detail::append(os, std::forward<Parts>(parts)...);
  return os.str();
}

namespace detail {
inline size_t clip_length(const std::string& s, size_t max) {
  if (s.size() <= max) return s.size();
  size_t n = max;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return n;
}
inline std::string clip_tail(const std::string& s, size_t max) {
  return s.size() <= max ? std::string() : "... (" + std::to_string(s.size()) + " bytes)";
}
}  // namespace detail

// How messages show a user-supplied string (config key or value, backend
// name, path, tensor name): clip() cuts it after `max` bytes (at a UTF-8
// character boundary) and appends "... (N bytes)", so that a huge input cannot
// make a huge message; quote() also puts it in `q` quotes and writes control
// characters (a NUL would end the C string) as \xNN. quote_path() allows
// kQuotedPathMax bytes: room for any real path, not for a megabyte.
constexpr size_t kQuotedPathMax = 512;
inline std::string clip(const std::string& s, size_t max = 100) {
  return s.substr(0, detail::clip_length(s, max)) + detail::clip_tail(s, max);
}
inline std::string quote(const std::string& s, char q = '\'', size_t max = 100) {
  std::string out(1, q);
  const size_t n = detail::clip_length(s, max);
  for (size_t i = 0; i < n; ++i) {
    unsigned char ch = static_cast<unsigned char>(s[i]);
    if (ch < 0x20 || ch == 0x7f) {
      const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[ch >> 4];
      out += hex[ch & 15];
    } else {
      out += static_cast<char>(ch);
    }
  }
  return out + q + detail::clip_tail(s, max);
}
inline std::string quote_path(const std::string& path) {
  return quote(path, '\'', kQuotedPathMax);
}

// Throws oslo::Error(status, message built from parts).
template <typename... Parts>
[[noreturn]] void fail(oslo_status status, Parts&&... parts) {
  throw Error(status, str(std::forward<Parts>(parts)...));
}

}  // namespace oslo

// Check a condition; on failure throw oslo::Error with the given status and message parts.
#define OSLO_CHECK(cond, status, ...)                 \
  do {                                                \
    if (!(cond)) ::oslo::fail((status), __VA_ARGS__); \
  } while (0)
