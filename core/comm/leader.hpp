// One rank decides, the others follow: rank 0 of a group runs a decision
// that fills a message of int64 words, and every rank gets rank 0's
// message. If the decision throws on rank 0, every rank fails: rank 0 with
// its own error, the others with one naming rank 0's status (they cannot
// go on without the decision, and must not wait for a message that never
// comes). Users: generate's token choices (core/generate), the serving
// engine's tokens (core/serve).
#pragma once

#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "core/comm/control.hpp"
#include "core/common/error.hpp"

namespace oslo {

// msg[0] is the outcome: decide()'s return value (>= 0) on success, or
// -status when it threw; decide() fills msg[1..] (it runs on rank 0 only,
// or on the only rank when `c` is null or of size 1). `what` names the
// decision in the other ranks' error ("generate at step 3"). Collective
// over `c`: every rank passes a message of the same size.
template <typename Fn>
void leader_decides(Control* c, std::vector<int64_t>& msg, const std::string& what, Fn&& decide) {
  const bool shared = c && c->size() > 1;
  std::exception_ptr err;
  if (!shared || c->rank() == 0) {
    try {
      msg[0] = static_cast<int64_t>(decide());
    } catch (const Error& e) {
      msg[0] = -static_cast<int64_t>(e.status());
      err = std::current_exception();
    } catch (...) {
      msg[0] = -static_cast<int64_t>(OSLO_ERR_INTERNAL);
      err = std::current_exception();
    }
  }
  if (shared) c->broadcast(msg.data(), msg.size(), 0);
  if (err) std::rethrow_exception(err);
  if (msg[0] < 0) {
    const auto st = static_cast<oslo_status>(-msg[0]);
    fail(st, what, ": rank 0 failed (", oslo_status_string(st), "); its error says why");
  }
}

}  // namespace oslo
