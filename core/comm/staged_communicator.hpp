// A host transport (shm on one host, gloo across hosts) for a backend whose
// memory the host cannot read (a GPU): every buffer is checked to be the
// backend's memory, copied to host staging memory (page-locked where the
// backend offers it) with the backend's copy entries, reduced or moved by the
// host transport, and copied back. Chosen with "communicator": "host" in the
// context's config (the default for a backend without communicators of its
// own); it is what lets several ranks share one GPU (NCCL refuses two ranks
// of one communicator on a device) and serves GPUs without an NCCL network.
//
// Ordering: the copy to the host waits for the work enqueued before it (the
// backend's DEVICE_TO_HOST copy is a wait point), so callers need not
// synchronize; the copy back is enqueued before the call returns.
// Errors: a buffer that is not the backend's memory fails with
// OSLO_ERR_INVALID_ARGUMENT naming the group, the call, the argument and the
// backend's reason, before anything is sent; transport errors (timeouts, a
// dead peer, abort) are the host transport's. One thread at a time, except
// abort().
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "core/comm/communicator.hpp"

namespace oslo {

// What the staged communicator needs of the backend (the context fills it,
// so this tier includes no backend).
struct DeviceStaging {
  std::string backend;  // the backend's name, for messages
  // "" when [p, p + bytes) is the backend's memory, else the reason it is not.
  std::function<std::string(const void* p, size_t bytes)> check;
  // Device to host: returns when `host` holds the data.
  std::function<void(void* host, const void* dev, size_t bytes)> to_host;
  // Host to device: returns when `host` may be reused.
  std::function<void(void* dev, const void* host, size_t bytes)> to_device;
  // Host staging memory (page-locked where the backend offers it).
  std::function<void*(size_t bytes)> host_alloc;
  std::function<void(void* p)> host_free;
};

class StagedCommunicator : public Communicator {
 public:
  // `host` is a connected host transport of the group named `group`.
  StagedCommunicator(std::unique_ptr<Communicator> host, DeviceStaging staging, std::string group);
  ~StagedCommunicator() override;

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  const char* transport() const override { return name_.c_str(); }

  void all_reduce(const void* in, void* out, size_t count, oslo_dtype dt,
                  oslo_reduce_op op) override;
  void all_gather(const void* in, void* out, size_t count, oslo_dtype dt) override;
  void reduce_scatter(const void* in, void* out, size_t count, oslo_dtype dt,
                      oslo_reduce_op op) override;
  void broadcast(void* buf, size_t count, oslo_dtype dt, int root) override;
  void send(const void* buf, size_t bytes, int peer) override;
  void recv(void* buf, size_t bytes, int peer) override;
  void barrier() override;
  void abort() noexcept override;

 private:
  // Throws OSLO_ERR_INVALID_ARGUMENT unless [p, p + bytes) is the backend's.
  void check(const char* call, const char* arg, const void* p, size_t bytes) const;
  // count elements of dt, in bytes; throws OSLO_ERR_INVALID_ARGUMENT unless
  // `blocks` times that fits in size_t (the staging holds up to that much).
  size_t bytes_of(const char* call, size_t count, oslo_dtype dt, size_t blocks) const;
  // Host staging of at least `bytes`, grown as needed.
  char* stage(size_t bytes);

  std::unique_ptr<Communicator> host_;
  DeviceStaging s_;
  std::string group_;
  std::string name_;  // "staged/<host transport>"
  char* buf_ = nullptr;
  size_t cap_ = 0;
};

}  // namespace oslo
