// Communicator over gloo's TCP transport, for groups whose ranks are on
// different hosts (the shared-memory transport covers ranks on one host).
//
// Semantics beyond communicator.hpp:
//  - Reductions combine the ranks' contributions in rank order 0..n-1 (f16 and
//    bf16 in f32, rounded once; integer SUM wraps; integer AVG truncates), the
//    same rules as the shared-memory transport, and the result is bitwise the
//    same on every rank.
//  - send() is synchronous: it returns once the receiver has posted the
//    matching recv() and the data went out (gloo's rendezvous protocol, as
//    torch.distributed.send over gloo). Two ranks that both send to each other
//    before receiving wait for each other until the timeout; order the calls
//    (e.g. even ranks send first) for exchanges in both directions.
//  - Any error (timeout, dead peer, abort) closes the connections, so peers
//    blocked on this rank fail promptly with OSLO_ERR_COMM, and leaves the
//    communicator broken: later calls fail at once with the first error.
//    Argument errors (bad dtype, root, peer, null buffer) are reported before
//    anything is sent and do not break it.
//  - SIGPIPE: gloo writes with plain writev(); the calling thread has SIGPIPE
//    blocked while inside gloo and gloo's event thread keeps it blocked, so a
//    dead peer is an error, never a killed process. The process-wide
//    disposition is left alone.
//  - A communicator is not usable in a child made by fork(); make a new one.
#pragma once

#include <memory>
#include <string>

#include "core/comm/communicator.hpp"
#include "core/rendezvous/store.hpp"

namespace oslo {

// Collective over the group's members: every member calls it with the same
// prefix, size and timeout. prefix is unique per group within a job; all store
// keys this communicator uses start with it. local_address: IP or host name
// this rank's gloo device binds to (reachable by peers).
// Throws OSLO_ERR_TIMEOUT when peers do not join within timeout_seconds,
// OSLO_ERR_COMM when connecting fails, OSLO_ERR_INVALID_ARGUMENT on bad rank
// or size, OSLO_ERR_IO when local_address cannot be bound.
std::unique_ptr<Communicator> create_gloo_communicator(Store& store, const std::string& prefix,
                                                       int rank, int size, double timeout_seconds,
                                                       const std::string& local_address);

// Best guess of the local address peers can reach: the source address of a UDP
// socket "connected" to master_addr:port (connect() on UDP sends no packet, it
// only asks the routing table); "127.0.0.1" for a loopback master. Falls back
// to "127.0.0.1" when master_addr cannot be resolved or routed.
std::string local_address_towards(const std::string& master_addr, int port);

}  // namespace oslo
