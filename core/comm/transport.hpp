// Host transports: communicators over host memory, usable by every backend
// whose tensors the host can address (cpu; torch with CPU tensors). The core
// knows them only through this table; the transports tier (transports/)
// defines it and is linked into liboslo, so core never includes a transport.
#pragma once

#include <memory>

#include "core/comm/communicator.hpp"
#include "core/comm/group.hpp"
#include "core/rendezvous/store.hpp"

namespace oslo {

struct HostTransport {
  const char* name;  // "shm", "gloo"
  // Whether this transport can connect the group (e.g. shm: all members on
  // one host).
  bool (*can_connect)(const GroupSpec& group);
  // Collective over the group's members; throws oslo::Error.
  std::unique_ptr<Communicator> (*connect)(Store& store, const GroupSpec& group);
};

// The built-in host transports in order of preference, terminated by an entry
// with name == nullptr. Defined in transports/registry.cpp.
const HostTransport* host_transports();

// The first transport that can connect the group; throws
// OSLO_ERR_NOT_SUPPORTED if none can.
std::unique_ptr<Communicator> connect_host_transport(Store& store, const GroupSpec& group);

}  // namespace oslo
