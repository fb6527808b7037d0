// A Store served over TCP by one rank (like torch's TCPStore), used for
// init_method tcp:// and env://.
//
// One rank constructs it with is_server = true: it binds host:port and runs a
// server thread (poll() over all clients, one wakeup eventfd to stop it). Every
// rank, the server's included, is a client. Blocking get()/wait() are parked
// on the server in per-key waiter lists and answered when the keys arrive or
// their deadline passes, so clients never poll.
//
// Wire format (all integers little-endian u64): a request or reply is a frame
// of [u64 payload length][payload]. A request payload is [u64 opcode][fields];
// a string field is [u64 length][bytes]. Keys and values are arbitrary bytes.
//
// Threads: every method is thread-safe. A client keeps a small pool of
// connections, so one thread blocked in get() does not stop another thread of
// the same store from set()-ing the key it waits for.
//
// fork(): a child may keep using a TcpStore it inherited; it opens its own
// connections (the inherited ones stay the parent's). A server inherited by a
// child does not serve there; the parent's keeps running.
//
// Timeouts: get()/wait() honour their deadline. set()/add()/check() (which the
// server answers at once) use the time the constructor was given, measured
// from construction, as their I/O limit, so that a frozen server is reported
// as OSLO_ERR_TIMEOUT instead of hanging.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/rendezvous/store.hpp"

namespace oslo {

class TcpStoreServer;

class TcpStore : public Store {
 public:
  // is_server: bind host:port and serve (one rank does this), then also act as
  // a client. Clients retry connecting until `deadline`.
  // port 0 (server only) binds a free port; port() tells which.
  // The server binds the address host resolves to (so 127.0.0.1 stays on
  // loopback); if that address is not local (a name behind NAT), it binds the
  // wildcard address of the same family instead.
  // Errors: OSLO_ERR_IO (host unresolvable, port in use: the message names
  // address and port), OSLO_ERR_TIMEOUT (server not reachable before deadline),
  // OSLO_ERR_INVALID_ARGUMENT (bad port).
  TcpStore(const std::string& host, int port, bool is_server, const Deadline& deadline);
  ~TcpStore() override;
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  int port() const { return port_; }
  const std::string& host() const { return host_; }

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> get(const std::string& key, const Deadline& deadline) override;
  // Stored as decimal text, like HashStore ("3").
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const Deadline& deadline) override;

 private:
  struct Reply;
  // Sends one request and reads its reply on a pooled connection. A
  // connection whose exchange failed is closed, never returned to the pool.
  Reply call(const std::vector<uint8_t>& request, Deadline::Clock::time_point reply_by,
             const char* what);
  int take_connection(Deadline::Clock::time_point by);
  void give_back(int fd);
  std::string endpoint() const;

  std::string host_;
  int port_ = 0;
  std::chrono::milliseconds io_timeout_;
  std::unique_ptr<TcpStoreServer> server_;
  std::mutex pool_mu_;
  std::vector<int> pool_;  // idle connections
  pid_t pid_;              // process the pool belongs to (see take_connection)
};

}  // namespace oslo
