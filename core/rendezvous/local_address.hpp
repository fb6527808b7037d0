// The address of this host that peers on other hosts can reach, as the
// context publishes it for transports that connect over TCP.
#pragma once

#include <string>

namespace oslo {

// Best guess of the local address peers can reach: the source address of a UDP
// socket "connected" to master_addr:port (connect() on UDP sends no packet, it
// only asks the routing table); "127.0.0.1" for a loopback master. Falls back
// to "127.0.0.1" when master_addr cannot be resolved or routed.
std::string local_address_towards(const std::string& master_addr, int port);

}  // namespace oslo
