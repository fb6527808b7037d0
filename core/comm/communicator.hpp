// The communication interface a backend implements for one process group.
// Collectives are blocking and collective: every member of the group must call
// the same sequence of operations with matching counts. Every call honours the
// communicator's timeout and throws oslo::Error with OSLO_ERR_TIMEOUT or
// OSLO_ERR_COMM instead of hanging on a dead, frozen or aborted peer.
// Buffers are in the backend's memory (host memory for the CPU backend).
// A communicator is used by one thread at a time.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "oslo.h"

namespace oslo {

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;  // rank inside the group
  virtual int size() const = 0;
  // Short description for logs and errors, e.g. "shm" or "gloo/tcp".
  virtual const char* transport() const = 0;

  // out[i] = op over ranks of in[i]; in == out allowed. The result is
  // bitwise identical on every rank (reduction in rank order 0..n-1).
  virtual void all_reduce(const void* in, void* out, size_t count, oslo_dtype dt,
                          oslo_reduce_op op) = 0;
  // out = concat over ranks r of in_r; each in has count elements, out has
  // count * size(). in may alias out + rank()*count.
  virtual void all_gather(const void* in, void* out, size_t count, oslo_dtype dt) = 0;
  // in has count * size() elements; out (count elements) = op over ranks of
  // in_r[rank()*count .. (rank()+1)*count).
  virtual void reduce_scatter(const void* in, void* out, size_t count, oslo_dtype dt,
                              oslo_reduce_op op) = 0;
  // buf on root is sent to buf on every other rank.
  virtual void broadcast(void* buf, size_t count, oslo_dtype dt, int root) = 0;
  // Point to point, blocking; matched in order per (sender, receiver) pair.
  virtual void send(const void* buf, size_t bytes, int peer) = 0;
  virtual void recv(void* buf, size_t bytes, int peer) = 0;
  virtual void barrier() = 0;
  // Makes every pending and future call on this communicator (and, where the
  // transport can, on the peers) fail with OSLO_ERR_COMM. Safe from any thread.
  virtual void abort() noexcept = 0;
};

}  // namespace oslo
