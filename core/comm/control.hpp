// Host control messages: the one way the core exchanges host values between
// ranks (agreements, decisions, strings, ids, verdicts).
//
// The rule (core/comm/README.md, "Control messages"): a communicator only
// ever receives memory of its context's backend. Tensor data goes through
// core/parallel/mappings; anything the core holds in host memory (a failure
// status, generate's next tokens, a checkpoint's save id, parameter names)
// goes through a Control of the group, which stages it through backend
// memory when the backend's memory is not host memory (a GPU) and hands the
// host buffer straight to the communicator when it is (the CPU backend). So
// the same code runs on NCCL, on a staged host transport and on shm.
//
// Every rank of the group calls the same sequence of operations with
// matching counts; each is a collective with the communicator's timeout and
// throws oslo::Error (OSLO_ERR_TIMEOUT, OSLO_ERR_COMM) like it. A group of one
// never communicates. Not thread-safe: one thread at a time, as for the
// communicator it runs on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/comm/communicator.hpp"

namespace oslo {

// How host bytes reach memory the group's communicator accepts (the
// context fills it from its backend, so this tier includes none).
struct ControlStaging {
  // Memory the communicator accepts, at least `bytes` (throws on failure),
  // and its release.
  std::function<void*(size_t bytes)> alloc;
  std::function<void(void* p, size_t bytes)> release;
  // Host to that memory (returns when `src` may be reused), and back
  // (returns when `dst` holds the data).
  std::function<void(void* dst, const void* src, size_t bytes)> put;
  std::function<void(void* dst, const void* src, size_t bytes)> get;
};

class Control {
 public:
  // Over a communicator that takes host memory (a host transport over
  // host-memory tensors, or a test's communicator): no staging.
  explicit Control(std::shared_ptr<Communicator> comm);
  // Over a communicator that takes only the memory `staging` describes.
  Control(std::shared_ptr<Communicator> comm, ControlStaging staging);
  ~Control();
  Control(const Control&) = delete;
  Control& operator=(const Control&) = delete;

  int rank() const { return comm_->rank(); }
  int size() const { return comm_->size(); }

  // v[i] = op over ranks of v[i] (host memory, n values).
  void all_reduce(int64_t* v, size_t n, oslo_reduce_op op);
  // out (n * size() values) = every rank's n values of `in`, in rank order.
  void all_gather(const int64_t* in, int64_t* out, size_t n);
  // v (n values) on `root` to every rank.
  void broadcast(int64_t* v, size_t n, int root);
  // `s` of every rank, in rank order.
  std::vector<std::string> all_gather_strings(const std::string& s);
  // `s` of `root` on every rank (the argument is ignored elsewhere).
  std::string broadcast_string(const std::string& s, int root);
  void barrier();

 private:
  // Runs `op` on a buffer the communicator accepts holding `words` values
  // copied from `host` (`in_words` of them; the rest zero), then copies
  // `out_words` back to `host`.
  void staged(int64_t* host, size_t in_words, size_t words, size_t out_words,
              const std::function<void(int64_t*)>& op);

  std::shared_ptr<Communicator> comm_;
  ControlStaging staging_;
  bool staged_ = false;
  void* buf_ = nullptr;  // staging memory, grown as needed
  size_t cap_ = 0;
};

}  // namespace oslo
