#include "core/comm/transport.hpp"

#include "core/common/error.hpp"

namespace oslo {

std::unique_ptr<Communicator> connect_host_transport(Store& store, const GroupSpec& group) {
  for (const HostTransport* t = host_transports(); t->name; ++t)
    if (t->can_connect(group)) return t->connect(store, group);
  fail(OSLO_ERR_NOT_SUPPORTED, "no host transport can connect group ", group.name);
}

}  // namespace oslo
