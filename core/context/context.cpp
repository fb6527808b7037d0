#include "core/context/context.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/comm/self_communicator.hpp"
#include "core/comm/staged_communicator.hpp"
#include "core/comm/transport.hpp"
#include "core/common/error.hpp"
#include "core/rendezvous/file_store.hpp"
#include "core/rendezvous/hash_store.hpp"
#include "core/rendezvous/local_address.hpp"
#include "core/rendezvous/tcp_store.hpp"
#include "core/topology/launch_env.hpp"

namespace oslo {
namespace {

// The copy of a group of one: the backend's own device-to-device copy on its
// queue (tensor memory may be on a device the host cannot read).
SelfCommunicator::CopyFn self_copy(const std::shared_ptr<Backend>& backend) {
  return [backend](void* dst, const void* src, size_t bytes) {
    backend->copy_async(dst, src, bytes, CopyKind::DeviceToDevice);
  };
}

// A host transport's view of the backend's memory (core/comm/staged_communicator.hpp).
DeviceStaging device_staging(const std::shared_ptr<Backend>& backend) {
  DeviceStaging s;
  s.backend = std::string("'") + backend->name() + "' backend";
  if (backend->has_memory_check())
    s.check = [backend](const void* p, size_t bytes) { return backend->check_memory(p, bytes); };
  s.to_host = [backend](void* host, const void* dev, size_t bytes) {
    backend->copy(host, dev, bytes, CopyKind::DeviceToHost);
  };
  s.to_device = [backend](void* dev, const void* host, size_t bytes) {
    backend->copy(dev, host, bytes, CopyKind::HostToDevice);
  };
  s.host_alloc = [backend](size_t bytes) { return backend->host_allocate(bytes); };
  s.host_free = [backend](void* p) { backend->host_deallocate(p); };
  return s;
}

// Control messages of a device backend go through its memory.
ControlStaging control_staging(const std::shared_ptr<Backend>& backend) {
  ControlStaging s;
  s.alloc = [backend](size_t bytes) { return backend->allocate(bytes); };
  s.release = [backend](void* p, size_t bytes) { backend->deallocate(p, bytes); };
  s.put = [backend](void* dst, const void* src, size_t bytes) {
    backend->copy(dst, src, bytes, CopyKind::HostToDevice);
  };
  s.get = [backend](void* dst, const void* src, size_t bytes) {
    backend->copy(dst, src, bytes, CopyKind::DeviceToHost);
  };
  return s;
}

using json = nlohmann::json;

std::vector<uint8_t> bytes_of(const std::string& s) {
  return {s.begin(), s.end()};
}
std::string string_of(const std::vector<uint8_t>& v) {
  return {v.begin(), v.end()};
}

// Verdict (step 2 of the rendezvous) of a rank whose claim was not the first.
const char* const kVerdictTwice = "twice";

std::string describe_ranks(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i == 8) {
      s += str(", ... (", ranks.size(), " in all)");
      break;
    }
    s += (i ? ", " : "") + std::to_string(ranks[i]);
  }
  return s;
}

}  // namespace

std::string host_identity() {
  if (const char* id = std::getenv("OSLO_HOST_ID"); id && *id) return id;
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  std::string boot;
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::getline(f, boot);
  return std::string(host) + "/" + boot;
}

Context::Context(const Config& config) : config_(config) {
  LaunchInfo li =
      resolve_launch(config.rank, config.world_size, config.local_rank, config.local_world_size,
                     [](const char* n) { return std::getenv(n); });
  log_.set_rank(li.rank);
  for (const auto& w : li.warnings) log_.log(LogLevel::Warn, w);

  const int world = li.world_size;
  const int tp = config.tensor_parallel_size, pp = config.pipeline_parallel_size;
  OSLO_CHECK(world % tp == 0, OSLO_ERR_CONFIG, "config: \"tensor_parallel_size\" (", tp,
             ") does not divide the world size (", world, ")");
  OSLO_CHECK(world % (static_cast<long long>(tp) * pp) == 0, OSLO_ERR_CONFIG,
             "config: \"pipeline_parallel_size\" (", pp, ") x tensor_parallel_size (", tp,
             ") does not divide the world size (", world, ")");
  int dp = config.data_parallel_size > 0 ? config.data_parallel_size : world / (tp * pp);
  OSLO_CHECK(static_cast<long long>(tp) * pp * dp == world, OSLO_ERR_CONFIG,
             "config: \"data_parallel_size\" (", dp, ") x tensor (", tp, ") x pipeline (", pp,
             ") = ", static_cast<long long>(tp) * pp * dp, " is not the world size (", world, ")");
  topo_ = std::make_unique<Topology>(li.rank, world, tp, pp, dp);

  num_threads_ = config.num_threads > 0
                     ? config.num_threads
                     : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) /
                                       std::max(1, li.local_world_size));
  BackendOptions bo;
  bo.local_rank = li.local_rank;
  bo.num_threads = num_threads_;
  bo.extra_json = config.backend_options;
  backend_ = create_backend(config.backend, bo);
  if (const char* f = std::getenv("OSLO_FUSED_OPS"); f && *f) {
    const std::string v = f;
    OSLO_CHECK(v == "0" || v == "1", OSLO_ERR_CONFIG, "OSLO_FUSED_OPS is \"", v,
               "\": 1 (the backend's fused ops, the default) or 0 (always composed)");
    backend_->set_fused_enabled(v == "1");
  }
  // Packed weight copies: of float weights opt-in (measured, they cost the
  // weights' size again for about 1.5 % of a bf16 prefill, docs/BENCHMARKS.md
  // 7); of block-quantized ones on unless OSLO_PREPACK=0 (the CPU's
  // eight-row layout about halves a decode step's product time,
  // docs/BENCHMARKS.md 17, for the quantized weights' size again).
  // The config's "prepack" chooses; OSLO_PREPACK, when set, overrides it.
  bool prepack_dense = config.prepack == "all", prepack_quant = config.prepack != "none";
  if (const char* f = std::getenv("OSLO_PREPACK"); f && *f) {
    const std::string v = f;
    OSLO_CHECK(v == "0" || v == "1", OSLO_ERR_CONFIG, "OSLO_PREPACK is \"", v,
               "\": 1 (every weight packed where the backend offers it), 0 (none) or unset "
               "(the config's \"prepack\", by default block-quantized weights only)");
    prepack_dense = prepack_quant = v == "1";
  }
  backend_->set_prepack_enabled(prepack_dense, prepack_quant);

  log_.log(LogLevel::Info, "rank ", li.rank, " of ", world, " (from ", li.source, "), tp ", tp,
           " pp ", pp, " dp ", dp, ", backend ", backend_->name(), ", ", num_threads_,
           " threads, timeout ", config.timeout_seconds, " s");
  rendezvous_and_connect(config.init_method);
}

Context::~Context() = default;

Communicator& Context::comm(oslo_group g) const {
  OSLO_CHECK(g >= OSLO_GROUP_WORLD && g <= OSLO_GROUP_DATA, OSLO_ERR_INVALID_ARGUMENT,
             "unknown group ", static_cast<int>(g));
  return *comms_.at(g);
}

Control& Context::control(oslo_group g) const {
  OSLO_CHECK(g >= OSLO_GROUP_WORLD && g <= OSLO_GROUP_DATA, OSLO_ERR_INVALID_ARGUMENT,
             "unknown group ", static_cast<int>(g));
  return *controls_.at(g);
}

const char* Context::transport_name(oslo_group g) const {
  return comm(g).transport();
}

bool Context::host_transport(oslo_group g) const {
  OSLO_CHECK(g >= OSLO_GROUP_WORLD && g <= OSLO_GROUP_DATA, OSLO_ERR_INVALID_ARGUMENT,
             "unknown group ", static_cast<int>(g));
  return host_transport_.at(g);
}

void Context::abort() noexcept {
  for (auto& c : comms_)
    if (c) c->abort();
  if (grad_comm_) grad_comm_->abort();
}

void Context::rendezvous_and_connect(const std::string& init_method) {
  const Topology& t = *topo_;
  const int world = t.world_size(), rank = t.world_rank();
  comms_.resize(4);
  host_transport_.assign(4, false);
  if (world == 1) {
    if (config_.communicator == "backend") {
      // "backend" is the backend's own communicator for every group, a group
      // of one included (NCCL at world 1: its streams, timeouts and abort on
      // device buffers), bootstrapped through a store of this process's own.
      HashStore store;
      auto own = [&](const std::string& name) -> std::shared_ptr<Communicator> {
        GroupSpec spec;
        spec.name = name;
        spec.members = {0};
        spec.timeout_seconds = config_.timeout_seconds;
        std::shared_ptr<Communicator> c = backend_->create_communicator(store, spec);
        OSLO_CHECK(c, OSLO_ERR_NOT_SUPPORTED, "backend '", backend_->name(),
                   "' has no communicator of its own for group ", name,
                   " and the config asks for one (\"communicator\": \"backend\"; \"auto\" "
                   "or \"host\" connect a group of one by the backend's copies)");
        log_.log(LogLevel::Info, "group ", name, " (rank 0) uses ", c->transport());
        return c;
      };
      const std::shared_ptr<Communicator> c = own(t.group_name(OSLO_GROUP_WORLD));
      for (auto& x : comms_) x = c;
      grad_comm_ = own(t.group_name(OSLO_GROUP_DATA) + ".grad");
    } else {
      auto self = std::make_shared<SelfCommunicator>(self_copy(backend_));
      for (auto& c : comms_) c = self;
      grad_comm_ = self;
    }
    make_controls();
    return;
  }

  Deadline deadline(config_.timeout_seconds);
  InitMethod im = parse_init_method(init_method);
  std::unique_ptr<Store> store;
  std::string where;
  std::string local_address;
  if (im.kind == InitMethod::File) {
    where = "file://" + im.path;
    store = std::make_unique<FileStore>(im.path);
    const char* a = std::getenv("OSLO_LOCAL_ADDRESS");
    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    local_address = (a && *a) ? a : host;
  } else {
    where = str("tcp://", im.host, ":", im.port);
    log_.log(LogLevel::Debug, "rendezvous at ", where, rank == 0 ? " (serving)" : "");
    store = std::make_unique<TcpStore>(im.host, im.port, rank == 0, deadline);
    const char* a = std::getenv("OSLO_LOCAL_ADDRESS");
    local_address = (a && *a) ? a : local_address_towards(im.host, im.port);
  }

  // 1. Claim the rank (a second process with the same rank, or a stale file
  //    store from an earlier run, is caught here) and publish who we are.
  //    A rank whose claim is not the first still publishes its record and
  //    its verdict (step 2) before it fails, so that the other ranks report
  //    the same cause instead of tripping over the leftovers.
  const bool file_store = im.kind == InitMethod::File;
  const char* stale_hint =
      file_store ? ", or a stale store file from an earlier run: delete it" : "";
  const char* mismatch_hint =
      file_store ? " (or the store file is a stale one from an earlier run: delete it)" : "";
  int64_t claims = store->add(str("oslo/claim/", rank), 1);
  const std::string my_host = host_identity();
  json me = {{"host", my_host},           {"pid", static_cast<int>(getpid())},
             {"tp", t.tp_size()},         {"pp", t.pp_size()},
             {"dp", t.dp_size()},         {"world", world},
             {"backend", config_.backend}};
  if (claims != 1) {
    store->set(str("oslo/verdict/", rank), bytes_of(kVerdictTwice));
    store->set(str("oslo/join/", rank), bytes_of(me.dump()));
    fail(OSLO_ERR_CONFIG, "rendezvous at ", where, ": rank ", rank,
         " joined twice (two processes with the same rank", stale_hint, ")");
  }
  store->set(str("oslo/join/", rank), bytes_of(me.dump()));

  std::vector<std::string> keys;
  for (int r = 0; r < world; ++r) keys.push_back(str("oslo/join/", r));
  try {
    store->wait(keys, deadline);
  } catch (const Error& e) {
    if (e.status() != OSLO_ERR_TIMEOUT) throw;
    std::vector<int> missing;
    for (int r = 0; r < world; ++r)
      if (!store->check({keys[r]})) missing.push_back(r);
    fail(OSLO_ERR_TIMEOUT, "rendezvous at ", where, ": timed out after ", config_.timeout_seconds,
         " s waiting for rank", missing.size() == 1 ? " " : "s ", describe_ranks(missing), " of ",
         world, " to join");
  }

  // 2. Every rank checks that all agree on the layout, publishes its verdict
  //    and reads everyone's: a rank that claimed twice explains any mismatch
  //    (its record may be a leftover), and a group is never formed from
  //    records of another run.
  std::vector<std::string> hosts(world);
  oslo_status problem = OSLO_OK;
  std::string problem_msg;
  try {
    for (int r = 0; r < world; ++r) {
      json j;
      try {
        j = json::parse(string_of(store->get(keys[r], deadline)));
      } catch (const json::exception& e) {
        fail(OSLO_ERR_FORMAT, "rendezvous: rank ", r, " published invalid data: ", e.what());
      }
      hosts[r] = j.value("host", "");
      for (const char* k : {"tp", "pp", "dp", "world"}) {
        OSLO_CHECK(j.value(k, -1) == me[k].get<int>(), OSLO_ERR_CONFIG, "rendezvous: rank ", r,
                   " has ", k, "=", j.value(k, -1), " but rank ", rank, " has ", k, "=",
                   me[k].get<int>(), "; every rank must use the same parallel sizes",
                   mismatch_hint);
      }
      OSLO_CHECK(j.value("backend", "") == config_.backend, OSLO_ERR_CONFIG, "rendezvous: rank ", r,
                 " uses backend '", j.value("backend", ""), "' but rank ", rank, " uses '",
                 config_.backend, "'", mismatch_hint);
    }
  } catch (const Error& e) {
    problem = e.status();
    problem_msg = e.what();
  } catch (const json::exception& e) {
    problem = OSLO_ERR_FORMAT;
    problem_msg = str("rendezvous: a rank published invalid data: ", e.what());
  }
  store->set(str("oslo/verdict/", rank), bytes_of(problem == OSLO_OK ? "ok" : "bad"));
  std::vector<std::string> verdicts;
  for (int r = 0; r < world; ++r) verdicts.push_back(str("oslo/verdict/", r));
  try {
    store->wait(verdicts, deadline);
    for (int r = 0; r < world; ++r)
      if (string_of(store->get(verdicts[r], deadline)) == kVerdictTwice)
        fail(OSLO_ERR_CONFIG, "rendezvous at ", where, ": rank ", r,
             " joined twice (two processes with the same rank", stale_hint, "); seen by rank ",
             rank);
  } catch (const Error& e) {
    // Our own finding is the better report when the store went away (rank 0
    // serving it failed too) or a peer never got this far.
    if (problem != OSLO_OK && e.status() != OSLO_ERR_CONFIG) throw Error(problem, problem_msg);
    if (e.status() != OSLO_ERR_TIMEOUT) throw;
    std::vector<int> missing;
    for (int r = 0; r < world; ++r)
      if (!store->check({verdicts[r]})) missing.push_back(r);
    fail(OSLO_ERR_TIMEOUT, "rendezvous at ", where, ": timed out after ", config_.timeout_seconds,
         " s waiting for rank", missing.size() == 1 ? " " : "s ", describe_ranks(missing), " of ",
         world, " to check the layout");
  }
  if (problem != OSLO_OK) throw Error(problem, problem_msg);

  // 3. One communicator per distinct member list, created in a fixed group order.
  std::map<std::vector<int>, std::shared_ptr<Communicator>> by_members;
  std::set<const Communicator*> host_set;
  host_transport_.assign(4, false);
  auto connect = [&](const std::string& name, int group_rank, const std::vector<int>& members,
                     bool* host) -> std::shared_ptr<Communicator> {
    GroupSpec spec;
    spec.name = name;
    spec.rank = group_rank;
    spec.size = static_cast<int>(members.size());
    spec.members = members;
    spec.same_host = std::all_of(members.begin(), members.end(),
                                 [&](int m) { return hosts[m] == hosts[members[0]]; });
    spec.timeout_seconds = config_.timeout_seconds;
    spec.local_address = local_address;
    const std::string& mode = config_.communicator;
    std::shared_ptr<Communicator> c;
    if (mode != "host") c = backend_->create_communicator(*store, spec);
    *host = false;
    if (!c) {
      OSLO_CHECK(mode != "backend", OSLO_ERR_NOT_SUPPORTED, "backend '", backend_->name(),
                 "' has no communicator of its own for group ", spec.name,
                 " and the config asks for one (\"communicator\": \"backend\"; \"host\" "
                 "uses oslo's host transports)");
      std::unique_ptr<Communicator> h = connect_host_transport(*store, spec);
      if (backend_->host_accessible()) {
        c = std::move(h);
        *host = true;  // reads tensor memory directly: the queue drains first
      } else {
        c = std::make_shared<StagedCommunicator>(std::move(h), device_staging(backend_), spec.name);
      }
    }
    log_.log(LogLevel::Info, "group ", spec.name, " (ranks ", describe_ranks(members), ") uses ",
             c->transport());
    return c;
  };
  for (oslo_group g : {OSLO_GROUP_WORLD, OSLO_GROUP_TENSOR, OSLO_GROUP_DATA, OSLO_GROUP_PIPELINE}) {
    std::vector<int> members = t.members(g);
    auto it = by_members.find(members);
    if (it != by_members.end()) {
      comms_[g] = it->second;
      host_transport_[g] = host_set.count(it->second.get()) > 0;
      continue;
    }
    std::shared_ptr<Communicator> c;
    if (members.size() == 1) {
      c = std::make_shared<SelfCommunicator>(self_copy(backend_));
    } else {
      bool host = false;
      c = connect(t.group_name(g), t.rank(g), members, &host);
      if (host) host_set.insert(c.get());
    }
    by_members[members] = c;
    comms_[g] = c;
    host_transport_[g] = host_set.count(c.get()) > 0;
  }
  // The data-parallel group's second communicator (gradient reduction on a
  // background thread), connected after the others in the same order on
  // every rank.
  {
    const std::vector<int> members = t.members(OSLO_GROUP_DATA);
    if (members.size() == 1)
      grad_comm_ = std::make_shared<SelfCommunicator>(self_copy(backend_));
    else
      grad_comm_ = connect(t.group_name(OSLO_GROUP_DATA) + ".grad", t.rank(OSLO_GROUP_DATA),
                           members, &grad_host_transport_);
  }

  make_controls();

  // 4. Nobody needs the store any more once every rank has said so; rank 0
  //    serves it until then.
  store->set(str("oslo/done/", rank), bytes_of("1"));
  if (rank == 0) {
    std::vector<std::string> done;
    for (int r = 0; r < world; ++r) done.push_back(str("oslo/done/", r));
    store->wait(done, Deadline(config_.timeout_seconds));
    if (im.kind == InitMethod::File) {
      store.reset();
      FileStore::remove(im.path);
    }
  }
}

void Context::make_controls() {
  controls_.clear();
  for (int g = 0; g < 4; ++g) {
    if (backend_->host_accessible())
      controls_.push_back(std::make_unique<Control>(comms_[g]));
    else
      controls_.push_back(std::make_unique<Control>(comms_[g], control_staging(backend_)));
  }
}

}  // namespace oslo
