// Communicator over gloo's TCP transport, for groups whose ranks are on
// different hosts (the shared-memory transport covers ranks on one host).
//
// Semantics beyond communicator.hpp:
//  - Reductions combine the ranks' contributions in rank order 0..n-1 (f16 and
//    bf16 in f32, rounded once; integer SUM wraps; integer AVG truncates), the
//    same rules as the shared-memory transport, and the result is bitwise the
//    same on every rank.
//  - send() is buffered like the shared-memory transport's: a message of up
//    to 4 MiB is copied and send() returns at once (a background thread sees
//    it out; at most 64 MiB wait at a time), so two ranks may send to each
//    other before either receives. A larger message is sent from the caller's
//    buffer and send() returns once the receiver took it. Every message
//    carries its length: a recv() of another size fails with
//    OSLO_ERR_INVALID_ARGUMENT (and breaks the communicator: the pair's
//    stream is out of step) instead of gloo's abort of the process. A
//    buffered message the receiver does not take within the timeout breaks
//    the communicator; the next call reports it. Destroying the communicator
//    waits (each within its timeout) for buffered messages to go out.
//  - Collectives must be called with the same counts on every rank, as the
//    interface requires: gloo aborts the process (an enforce in its event
//    thread) when a rank receives more bytes than it posted for.
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

}  // namespace oslo
