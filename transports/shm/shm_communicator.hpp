// Same-host transport of the CPU backend: the ranks of a group (threads of one
// process or processes on one host) share one POSIX shared-memory segment and
// synchronise through per-rank sequence counters in it, so a collective costs
// a few cache-line transfers instead of a trip through the TCP stack.
//
// Faults: every wait honours the timeout; a peer that dies is noticed within
// about 100 ms (its pid is watched while waiting); abort() on any member fails
// pending and later calls on every member. After any error that happened while
// communicating, the communicator is broken and every later call fails at once
// with the same status. Errors in the arguments (bad dtype, root, peer, null
// buffer) are reported before anything is exchanged and do not break it.
#pragma once

#include <memory>
#include <string>

#include "core/comm/communicator.hpp"
#include "core/rendezvous/store.hpp"

namespace oslo {

// Collective over the group's members: all call it with the same prefix and
// size. prefix is unique per group within a job (e.g. "g/tensor/0"); it names
// the store keys. Returns once every member has mapped the segment (which is
// then already unlinked from /dev/shm). Errors: OSLO_ERR_INVALID_ARGUMENT,
// OSLO_ERR_IO (shm_open/ftruncate/mmap failed), OSLO_ERR_TIMEOUT (the message
// names the ranks that never came), OSLO_ERR_COMM.
std::unique_ptr<Communicator> create_shm_communicator(Store& store, const std::string& prefix,
                                                      int rank, int size, double timeout_seconds);

}  // namespace oslo
