// The host transports liboslo is built with, in order of preference: shared
// memory for groups on one host, gloo over TCP for groups spanning hosts.
#include "core/comm/transport.hpp"
#include "transports/gloo/gloo_communicator.hpp"
#include "transports/shm/shm_communicator.hpp"

namespace oslo {
namespace {

bool shm_can_connect(const GroupSpec& g) {
  return g.same_host;
}
std::unique_ptr<Communicator> shm_connect(Store& store, const GroupSpec& g) {
  return create_shm_communicator(store, g.name, g.rank, g.size, g.timeout_seconds);
}
bool gloo_can_connect(const GroupSpec&) {
  return true;
}
std::unique_ptr<Communicator> gloo_connect(Store& store, const GroupSpec& g) {
  return create_gloo_communicator(store, g.name, g.rank, g.size, g.timeout_seconds,
                                  g.local_address);
}

const HostTransport kTransports[] = {
    {"shm", shm_can_connect, shm_connect},
    {"gloo", gloo_can_connect, gloo_connect},
    {nullptr, nullptr, nullptr},
};

}  // namespace

const HostTransport* host_transports() {
  return kTransports;
}

}  // namespace oslo
