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
