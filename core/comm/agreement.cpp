#include "core/comm/agreement.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace oslo {

namespace {

void run_cleanup(const std::function<void()>& on_failure) {
  if (!on_failure) return;
  try {
    on_failure();
  } catch (...) {  // cleanup is best effort; the agreed error is what counts
  }
}

}  // namespace

void agree_on_outcome(Control& world, const LocalOutcome& mine, const std::string& what,
                      const std::function<void()>& on_failure) {
  if (world.size() == 1) {
    if (!mine.failed()) return;
    run_cleanup(on_failure);
    throw Error(mine.status(), mine.message());
  }
  // The lowest failing world rank, then its status and message (clipped to
  // kMessage bytes) from it: every rank reports the same failure.
  constexpr size_t kMessage = 1004;
  int64_t first = 0;
  std::string theirs;
  int64_t status = 0;
  try {
    first = mine.failed() ? world.rank() : world.size();
    world.all_reduce(&first, 1, OSLO_REDUCE_MIN);
    if (first == world.size()) return;
    const int root = static_cast<int>(first);
    status = world.rank() == root ? static_cast<int64_t>(mine.status()) : 0;
    world.broadcast(&status, 1, root);
    theirs = world.broadcast_string(
        world.rank() == root ? clip(mine.message(), kMessage) : std::string(), root);
  } catch (...) {
    run_cleanup(on_failure);
    throw;
  }
  run_cleanup(on_failure);
  if (world.rank() == first)
    fail(mine.status(), what, " failed on world rank ", first, " (this rank): ", mine.message());
  const auto st = static_cast<oslo_status>(status);
  fail(status > OSLO_OK && status < OSLO_STATUS_COUNT ? st : OSLO_ERR_INTERNAL, what,
       " failed on world rank ", first, ": ", clip(theirs, kMessage),
       mine.failed() ? "; this rank failed too: " + clip(mine.message(), 300) : std::string());
}

}  // namespace oslo
