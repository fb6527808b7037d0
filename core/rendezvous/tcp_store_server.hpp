// The TCP store's server (tcp_store.hpp): one thread serving every
// client's set/get/add/check/wait, parking gets and waits until their keys
// exist or their deadline passes. Started by the rank that hosts the
// store. Internal to core/rendezvous.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <map>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/rendezvous/tcp_wire.hpp"

namespace oslo {

class TcpStoreServer {
 public:
  TcpStoreServer(const std::string& host, int port);
  ~TcpStoreServer();
  int port() const { return port_; }
  // Numeric address the local client should connect to: the bound address, or
  // loopback when the wildcard address was bound.
  const std::string& connect_host() const { return connect_host_; }

 private:
  struct Client {
    std::vector<uint8_t> in;
    size_t in_pos = 0;
    std::vector<uint8_t> out;
    size_t out_pos = 0;
    uint64_t waiter = 0;  // id of the parked get/wait, 0 if none
    bool dead = false;
  };
  struct Waiter {
    int fd;
    bool is_get;
    std::vector<std::string> keys;  // distinct keys
    size_t missing;
    tcp_wire::Clock::time_point deadline;
  };

  void run();
  void loop();
  void accept_clients();
  void read_client(int fd, Client& c);
  void process_frames(int fd, Client& c);
  // Handles one request; false if it is malformed (the client is dropped).
  bool handle(int fd, Client& c, tcp_wire::Reader& r);
  void reply(int fd, Client& c, std::vector<uint8_t> frame);
  void flush(Client& c, int fd);
  void park(int fd, Client& c, bool is_get, std::vector<std::string> keys, uint64_t timeout_ms);
  void key_created(const std::string& key);
  void finish_waiter(uint64_t id, bool timed_out);
  void expire_waiters();
  void drop(int fd, Client& c);
  int poll_timeout_ms() const;

  int listen_fd_ = -1;
  int wake_fd_ = -1;
  int port_ = 0;
  std::string connect_host_;
  std::thread thread_;
  pid_t owner_pid_ = ::getpid();

  // Touched only by the server thread.
  std::map<int, Client> clients_;
  std::unordered_map<std::string, std::vector<uint8_t>> data_;
  std::unordered_map<uint64_t, Waiter> waiters_;
  std::unordered_map<std::string, std::vector<uint64_t>> key_waiters_;
  uint64_t next_waiter_ = 1;
};

}  // namespace oslo
