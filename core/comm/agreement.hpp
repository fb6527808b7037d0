// Failure agreement: the collective that turns "some rank failed a local
// step" into the same error on every rank.
//
// A collective operation made of local steps (a checkpoint save: write my
// shard, then rank 0 writes the manifest; a load: read my slices) must not
// let one rank throw while the others go on into the next collective and
// wait for it until their timeout. The pattern is:
//
//   LocalOutcome mine("model save");
//   mine.run([&] { ...local step that may throw... });  // never throws
//   agree_on_outcome(world, mine, "model save to '/ckpt'", cleanup);
//
// Every rank calls agree_on_outcome the same number of times, whether its
// own step failed or not. Users: parameter-set checkpoint save and load
// (core/checkpoint/checkpoint.cpp), model load and save
// (core/checkpoint/model_load.cpp, model_save.cpp), the model's load in
// core/model (run_agreed). Later collective steps (training checkpoints,
// pipeline stages) use it the same way; see core/comm/README.md.
#pragma once

#include <functional>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

#include "core/comm/control.hpp"
#include "core/common/error.hpp"
#include "oslo.h"

namespace oslo {

// The outcome of this rank's local steps: OSLO_OK until a step run through
// run() throws; then the status and message of that exception, and later
// steps are skipped. Not thread-safe; one per collective operation per rank.
class LocalOutcome {
 public:
  // `context` names the operation in messages for exceptions that carry no
  // status (e.g. "checkpoint"): "out of memory in <context>", "<context>: <what()>".
  explicit LocalOutcome(std::string context) : context_(std::move(context)) {}

  // Runs fn() unless an earlier step failed; catches what it throws: an
  // oslo::Error keeps its status and message, std::bad_alloc is
  // OSLO_ERR_OUT_OF_MEMORY, any other std::exception OSLO_ERR_INTERNAL.
  template <typename Fn>
  void run(Fn&& fn) {
    if (failed()) return;
    try {
      fn();
    } catch (const Error& e) {
      status_ = e.status();
      message_ = e.what();
    } catch (const std::bad_alloc&) {
      status_ = OSLO_ERR_OUT_OF_MEMORY;
      message_ = "out of memory in " + context_;
    } catch (const std::exception& e) {
      status_ = OSLO_ERR_INTERNAL;
      message_ = context_ + ": " + e.what();
    }
  }

  bool failed() const { return status_ != OSLO_OK; }
  oslo_status status() const { return status_; }
  const std::string& message() const { return message_; }

 private:
  std::string context_;
  oslo_status status_ = OSLO_OK;
  std::string message_;
};

// Collective over `world` (every rank calls it with its own outcome): if no
// rank failed, returns on every rank. Otherwise every rank runs `on_failure`
// (if set; it must not throw: cleanup such as removing a file this rank
// wrote) and throws the status of the LOWEST failing world rank:
//   - that rank: "<what> failed on world rank R (this rank): <its message>";
//   - every other rank: "<what> failed on world rank R: <R's message, up to
//     about 1 KiB>", plus "; this rank failed too: <own message>" where it did.
// A world of one rank rethrows its own status and message unchanged. Costs
// one control all-reduce of one value when nothing failed, plus one
// broadcast of about 1 KiB when something did (control messages: host
// values staged through the backend's memory where it is not host memory). The collectives honour
// `world`'s timeout: if one of them throws (OSLO_ERR_COMM, OSLO_ERR_TIMEOUT), `on_failure` runs on
// this rank and that error propagates. A status outside the known range received from a peer
// becomes OSLO_ERR_INTERNAL.
void agree_on_outcome(Control& world, const LocalOutcome& mine, const std::string& what,
                      const std::function<void()>& on_failure = {});

}  // namespace oslo
