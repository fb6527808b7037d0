// A context is one rank's view of a job: its configuration, topology, backend
// and one communicator per process group. Everything else (tensors, layers,
// parameter sets) hangs off a context; there is no global state.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/backend/backend.hpp"
#include "core/comm/communicator.hpp"
#include "core/comm/control.hpp"
#include "core/common/log.hpp"
#include "core/context/config.hpp"
#include "core/topology/topology.hpp"

namespace oslo {

class Context {
 public:
  // Joins the rendezvous and connects every group (collective, see oslo.h).
  explicit Context(const Config& config);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const Topology& topology() const { return *topo_; }
  // The group's communicator: it takes the backend's memory only. Outside
  // core/parallel (mappings) nothing calls it (a test scans for that).
  Communicator& comm(oslo_group g) const;
  // The group's control messages (host values; core/comm/control.hpp): the
  // one way the core exchanges what it holds in host memory.
  Control& control(oslo_group g) const;
  // The group's transport as logs name it ("shm", "staged/shm", "nccl", ...).
  const char* transport_name(oslo_group g) const;
  // A second communicator over the data-parallel group's members, used only
  // by the gradient reducer's background thread (core/train/data_parallel),
  // so that it never shares a communicator with the calling thread. A group
  // of one when the data-parallel size is 1.
  Communicator& grad_comm() const { return *grad_comm_; }
  bool grad_comm_host_transport() const { return grad_host_transport_; }
  // Whether the group runs on a host transport (reads tensor memory directly,
  // so the backend's queue must drain first; see core/parallel/mappings.hpp).
  bool host_transport(oslo_group g) const;
  Backend& backend() const { return *backend_; }
  const std::shared_ptr<Backend>& backend_ptr() const { return backend_; }
  const Logger& log() const { return log_; }
  double timeout_seconds() const { return config_.timeout_seconds; }
  int num_threads() const { return num_threads_; }
  const Config& config() const { return config_; }
  // Aborts every communicator; callable from any thread.
  void abort() noexcept;

 private:
  void rendezvous_and_connect(const std::string& init_method);
  // One Control per group over its communicator (after comms_ is set).
  void make_controls();

  Config config_;
  Logger log_;
  std::unique_ptr<Topology> topo_;
  std::shared_ptr<Backend> backend_;
  int num_threads_ = 1;
  // Groups with identical members share one communicator.
  std::vector<std::shared_ptr<Communicator>> comms_;  // indexed by oslo_group
  std::vector<bool> host_transport_;                  // indexed by oslo_group
  std::vector<std::unique_ptr<Control>> controls_;    // indexed by oslo_group
  std::shared_ptr<Communicator> grad_comm_;
  bool grad_host_transport_ = false;
};

// Identity of this host for deciding which ranks can share memory:
// OSLO_HOST_ID if set, else hostname + kernel boot id.
std::string host_identity();

}  // namespace oslo
