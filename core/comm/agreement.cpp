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

void agree_on_outcome(Communicator& world, const LocalOutcome& mine, const std::string& what,
                      const std::function<void()>& on_failure) {
  if (world.size() == 1) {
    if (!mine.failed()) return;
    run_cleanup(on_failure);
    throw Error(mine.status(), mine.message());
  }
  // The lowest failing world rank, then its status and message (clipped to
  // what fits in kWords) from it: every rank reports the same failure.
  constexpr size_t kWords = 256;
  int32_t first = 0;
  std::vector<int32_t> buf(2 + kWords, 0);
  try {
    first = mine.failed() ? world.rank() : world.size();
    world.all_reduce(&first, &first, 1, OSLO_DTYPE_I32, OSLO_REDUCE_MIN);
    if (first == world.size()) return;
    if (world.rank() == first) {
      const std::string m = clip(mine.message(), kWords * 4 - 20);
      buf[0] = static_cast<int32_t>(mine.status());
      buf[1] = static_cast<int32_t>(m.size());
      std::memcpy(buf.data() + 2, m.data(), m.size());
    }
    world.broadcast(buf.data(), buf.size(), OSLO_DTYPE_I32, first);
  } catch (...) {
    run_cleanup(on_failure);
    throw;
  }
  run_cleanup(on_failure);
  if (world.rank() == first)
    fail(mine.status(), what, " failed on world rank ", first, " (this rank): ", mine.message());
  const auto status = static_cast<oslo_status>(buf[0]);
  const size_t len = std::min<size_t>(static_cast<uint32_t>(buf[1]), kWords * 4);
  const std::string theirs(reinterpret_cast<const char*>(buf.data() + 2), len);
  fail(status > OSLO_OK && status < OSLO_STATUS_COUNT ? status : OSLO_ERR_INTERNAL, what,
       " failed on world rank ", first, ": ", theirs,
       mine.failed() ? "; this rank failed too: " + clip(mine.message(), 300) : std::string());
}

}  // namespace oslo
