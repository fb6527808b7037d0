// The communicator of a group of one: every collective is a local copy. As in
// Megatron, a single rank runs exactly the code path of the reference.
//
// The buffers are tensor memory of the context's backend, which may be on a
// device the host cannot read (a GPU): the copy is the backend's own
// (DEVICE_TO_DEVICE, enqueued on its queue like every op), handed in by the
// context as a function so that this tier does not depend on the backend
// tier, never a host memmove. Callers with host-memory control data (the checkpoint agreement)
// do not communicate at all in a group of one. Without a backend (tests and
// tools handing it host buffers only) the copy is a host memmove.
#pragma once

#include <atomic>
#include <cstring>
#include <functional>
#include <memory>
#include <utility>

#include "core/comm/communicator.hpp"
#include "core/common/dtype.hpp"
#include "core/common/error.hpp"

namespace oslo {

class SelfCommunicator : public Communicator {
 public:
  // Copies `bytes` from src to dst in the buffers' memory (the contexts'
  // communicators pass the backend's device-to-device copy).
  using CopyFn = std::function<void(void* dst, const void* src, size_t bytes)>;
  // Buffers copied by `copy` (e.g. a backend's memory).
  explicit SelfCommunicator(CopyFn copy) : copy_(std::move(copy)) {}
  // Buffers in host memory only.
  SelfCommunicator() = default;
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const char* transport() const override { return "self"; }
  void all_reduce(const void* in, void* out, size_t count, oslo_dtype dt, oslo_reduce_op) override {
    check();
    copy(out, in, count * dtype_size(dt));
  }
  void all_gather(const void* in, void* out, size_t count, oslo_dtype dt) override {
    check();
    copy(out, in, count * dtype_size(dt));
  }
  void reduce_scatter(const void* in, void* out, size_t count, oslo_dtype dt,
                      oslo_reduce_op) override {
    check();
    copy(out, in, count * dtype_size(dt));
  }
  void broadcast(void*, size_t, oslo_dtype, int root) override {
    check();
    OSLO_CHECK(root == 0, OSLO_ERR_INVALID_ARGUMENT, "broadcast: root ", root,
               " is outside a group of 1");
  }
  void send(const void*, size_t, int peer) override {
    fail(OSLO_ERR_INVALID_ARGUMENT, "send: peer ", peer, " is not another rank of a group of 1");
  }
  void recv(void*, size_t, int peer) override {
    fail(OSLO_ERR_INVALID_ARGUMENT, "recv: peer ", peer, " is not another rank of a group of 1");
  }
  void barrier() override { check(); }
  void abort() noexcept override { aborted_ = true; }

 private:
  void check() const { OSLO_CHECK(!aborted_, OSLO_ERR_COMM, "communicator was aborted"); }
  void copy(void* out, const void* in, size_t bytes) {
    if (!bytes || out == in) return;
    if (copy_)
      copy_(out, in, bytes);
    else
      std::memmove(out, in, bytes);
  }
  CopyFn copy_;
  std::atomic<bool> aborted_{false};
};

}  // namespace oslo
