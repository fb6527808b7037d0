// The libtorch backend's own communicators: c10d process groups built over
// the rendezvous store oslo lends (oslo_bk_store).
//
// - Host (CPU) tensors: comm_create declines by default (*comm = NULL), so
//   oslo's own shared-memory and gloo transports are used; they are faster
//   than c10d's Gloo over loopback. extra_json {"comm": "gloo"} asks for a
//   c10d ProcessGroupGloo anyway (built when libtorch has c10d with Gloo).
// - CUDA tensors: ProcessGroupNCCL (built only against a libtorch with CUDA
//   and NCCL; "auto" picks it there), else ProcessGroupGloo.
#include <torch/version.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "torch_backend.hpp"

#if defined(OSLO_TORCH_WITH_GLOO) || defined(OSLO_TORCH_WITH_NCCL)
#define OSLO_TORCH_WITH_C10D 1
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#endif
#ifdef OSLO_TORCH_WITH_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#ifdef OSLO_TORCH_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace oslo_torch {

#ifdef OSLO_TORCH_WITH_C10D
namespace {

// The lent store, shared by the c10d::Store objects over it; detached when
// comm_create returns (the store is only lent while a group connects), after
// which any use fails instead of touching freed memory.
struct LentState {
  std::mutex mutex;
  const oslo_bk_store* store = nullptr;
};

std::string store_error(const oslo_bk_store* s) {
  const char* e = s->last_error != nullptr ? s->last_error(s->self) : nullptr;
  return e != nullptr ? e : "unknown store error";
}

// c10d::Store over oslo_bk_store's set and (waiting) get. Keys get the prefix
// "torch/". add, deleteKey, getNumKeys and compareSet have no counterpart in
// the lent store and fail if c10d calls them. (No `override`s: clone() is
// virtual only in newer libtorch, and mixing would warn.)
class LentStore : public c10d::Store {
 public:
  LentStore(std::shared_ptr<LentState> state, std::chrono::milliseconds timeout)
      : c10d::Store(timeout), state_(std::move(state)) {}

  c10::intrusive_ptr<c10d::Store> clone() {
    return c10::make_intrusive<LentStore>(state_, timeout_);
  }

  using c10d::Store::set;
  void set(const std::string& key, const std::vector<uint8_t>& value) {
    std::lock_guard<std::mutex> lock(state_->mutex);
    const oslo_bk_store* s = lent("set");
    if (s->set(s->self, ("torch/" + key).c_str(), value.data(), value.size()) != OSLO_OK)
      TORCH_CHECK(false, "oslo store: set(", key, ") failed: ", store_error(s));
  }

  std::vector<uint8_t> get(const std::string& key) { return fetch(key, timeout_); }

  int64_t add(const std::string& key, int64_t) { unsupported("add", key); }
  bool deleteKey(const std::string& key) { unsupported("deleteKey", key); }
  int64_t getNumKeys() { unsupported("getNumKeys", ""); }
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>&,
                                  const std::vector<uint8_t>&) {
    unsupported("compareSet", key);
  }

  bool check(const std::vector<std::string>& keys) {
    std::lock_guard<std::mutex> lock(state_->mutex);
    const oslo_bk_store* s = lent("check");
    for (const std::string& k : keys) {
      size_t n = 0;
      if (s->get(s->self, ("torch/" + k).c_str(), nullptr, 0, &n, 0.0) != OSLO_OK) return false;
    }
    return true;
  }

  void wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
    for (const std::string& k : keys) fetch(k, timeout);
  }

 private:
  [[noreturn]] void unsupported(const char* what, const std::string& key) {
    TORCH_CHECK(false, "oslo store: ", what, "(", key,
                ") is not available through oslo_bk_store (set/get only)");
    std::abort();  // not reached
  }

  const oslo_bk_store* lent(const char* what) {
    TORCH_CHECK(state_->store != nullptr, "oslo store: ", what,
                " after comm_create returned (the store is only lent while a group connects)");
    return state_->store;
  }

  std::vector<uint8_t> fetch(const std::string& key, std::chrono::milliseconds timeout) {
    std::lock_guard<std::mutex> lock(state_->mutex);
    const oslo_bk_store* s = lent("get");
    const double seconds = timeout.count() > 0 ? timeout.count() / 1000.0 : 1e9;
    const std::string k = "torch/" + key;
    std::vector<uint8_t> value(256);
    for (;;) {
      size_t n = 0;
      if (s->get(s->self, k.c_str(), value.data(), value.size(), &n, seconds) != OSLO_OK)
        TORCH_CHECK(false, "oslo store: get(", key, ") failed: ", store_error(s));
      if (n <= value.size()) {
        value.resize(n);
        return value;
      }
      value.resize(n);  // larger than guessed: fetch again, now present
    }
  }

  std::shared_ptr<LentState> state_;
};

struct Comm {
  Instance* instance = nullptr;
  std::string name;
  std::string error = "no error";
  int rank = 0, size = 1;
  std::chrono::milliseconds timeout{0};
  std::atomic<bool> aborted{false};
#ifdef OSLO_TORCH_WITH_GLOO
  c10::intrusive_ptr<c10d::ProcessGroupGloo> gloo;
#endif
#ifdef OSLO_TORCH_WITH_NCCL
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> nccl;
#endif
};

// Calls f with the process group (whichever kind the communicator has).
template <class F>
c10::intrusive_ptr<c10d::Work> with_pg(Comm& c, F&& f) {
#ifdef OSLO_TORCH_WITH_NCCL
  if (c.nccl) return f(*c.nccl);
#endif
#ifdef OSLO_TORCH_WITH_GLOO
  if (c.gloo) return f(*c.gloo);
#endif
  fail(OSLO_ERR_INTERNAL, "communicator without a process group");
}

void wait_work(Comm& c, const c10::intrusive_ptr<c10d::Work>& work, const char* what) {
  try {
    work->wait(c.timeout);
  } catch (const std::exception& e) {
    const std::string m = e.what();
    const bool timed_out =
        m.find("imed out") != std::string::npos || m.find("imeout") != std::string::npos;
    fail(timed_out ? OSLO_ERR_TIMEOUT : OSLO_ERR_COMM,
         std::string(what) + " on " + c.name +
             " failed: " + m.substr(0, m.find("\nException raised from")));
  }
}

// Runs a collective's body for the communicator, catching everything.
template <class F>
oslo_status comm_guard(void* comm, const char* entry, F&& body) {
  if (comm == nullptr) return OSLO_ERR_INVALID_ARGUMENT;
  Comm& c = *static_cast<Comm*>(comm);
  try {
    if (c.aborted.load())
      fail(OSLO_ERR_COMM, std::string(entry) + ": communicator " + c.name + " was aborted");
    Scope scope(*c.instance);
    body(c);
    return OSLO_OK;
  } catch (...) {
    return status_of_current_exception(&c.error, entry);
  }
}

at::Tensor flat(Comm& c, const void* p, size_t count, oslo_dtype dtype, const char* entry) {
  const at::ScalarType st = scalar_type_of(dtype, entry, "buffer");
  const auto options = at::TensorOptions().dtype(st).device(c.instance->device);
  if (count == 0) return at::empty({0}, options);
  if (p == nullptr) fail(OSLO_ERR_INVALID_ARGUMENT, std::string(entry) + ": NULL buffer");
  return at::from_blob(const_cast<void*>(p), {static_cast<int64_t>(count)}, options);
}

c10d::ReduceOp reduce_op(oslo_reduce_op op, const char* entry) {
  switch (op) {
    case OSLO_REDUCE_SUM:
    case OSLO_REDUCE_AVG: return c10d::ReduceOp::SUM;  // AVG divides afterwards
    case OSLO_REDUCE_MAX: return c10d::ReduceOp::MAX;
    case OSLO_REDUCE_MIN: return c10d::ReduceOp::MIN;
    default:
      fail(OSLO_ERR_INVALID_ARGUMENT,
           std::string(entry) + ": unknown reduce op " + std::to_string(static_cast<int>(op)));
  }
}

// All-reduce of t in place: f16/bf16 reduce in f32 (then round once).
void all_reduce_tensor(Comm& c, at::Tensor t, oslo_reduce_op op, const char* entry) {
  const c10d::ReduceOp rop = reduce_op(op, entry);
  at::Tensor work_t =
      (t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16) ? t.to(at::kFloat) : t;
  std::vector<at::Tensor> v{work_t};
  c10d::AllreduceOptions opts;
  opts.reduceOp = rop;
  opts.timeout = c.timeout;
  wait_work(c, with_pg(c, [&](auto& pg) { return pg.allreduce(v, opts); }), entry);
  if (op == OSLO_REDUCE_AVG) {
    if (at::isFloatingType(work_t.scalar_type()))
      work_t.div_(static_cast<double>(c.size));
    else
      work_t.div_(c.size, "trunc");
  }
  if (!work_t.is_same(t)) t.copy_(work_t);
}

}  // namespace
#endif  // OSLO_TORCH_WITH_C10D

oslo_status comm_create(void* self, void** comm, const oslo_bk_group* group,
                        const oslo_bk_store* store) {
  return guard(self, "comm_create", [&](Instance& in) {
    if (comm == nullptr || group == nullptr)
      fail(OSLO_ERR_INVALID_ARGUMENT, "comm_create: comm or group is NULL");
    *comm = nullptr;
    std::string mode = in.comm_mode;
    if (mode == "auto") {
      if (in.is_cpu()) return;  // decline: oslo's host transports are faster
#ifdef OSLO_TORCH_WITH_NCCL
      mode = "nccl";
#else
      mode = "gloo";
#endif
    }
    if (mode == "none") {
      if (!in.is_cpu())
        fail(OSLO_ERR_CONFIG, "comm_create: \"comm\": \"none\" but device memory (" +
                                  in.device.str() + ") needs a backend communicator");
      return;
    }
#ifndef OSLO_TORCH_WITH_C10D
    (void)store;
    fail(OSLO_ERR_NOT_SUPPORTED,
         "comm_create: \"comm\": \"" + mode +
             "\" asked, but this plugin was built without c10d (libtorch without distributed "
             "support or without its Gloo headers)");
#else
    if (store == nullptr || store->set == nullptr || store->get == nullptr)
      fail(OSLO_ERR_INVALID_ARGUMENT, "comm_create: a store is needed to connect a group");
    if (group->size < 1 || group->rank < 0 || group->rank >= group->size)
      fail(OSLO_ERR_INVALID_ARGUMENT, "comm_create: rank " + std::to_string(group->rank) +
                                          " of size " + std::to_string(group->size));
    auto c = std::make_unique<Comm>();
    c->instance = &in;
    c->rank = group->rank;
    c->size = group->size;
    const double secs = group->timeout_seconds > 0 ? group->timeout_seconds : 300.0;
    c->timeout = std::chrono::milliseconds(static_cast<int64_t>(secs * 1000.0));
    const std::string gname = group->name != nullptr ? group->name : "group";
    auto state = std::make_shared<LentState>();
    state->store = store;
    auto cstore = c10::make_intrusive<LentStore>(state, c->timeout);
    struct Detach {  // the store is lent only until we return
      std::shared_ptr<LentState> s;
      ~Detach() {
        std::lock_guard<std::mutex> lock(s->mutex);
        s->store = nullptr;
      }
    } detach{state};
    if (mode == "gloo") {
#ifdef OSLO_TORCH_WITH_GLOO
      c->name = "torch-gloo:" + gname;
      auto opts = c10d::ProcessGroupGloo::Options::create(c->timeout);
      std::string addr = in.gloo_address;
      if (addr.empty()) {
        const char* env = std::getenv("OSLO_LOCAL_ADDRESS");
        if (env != nullptr && *env != '\0')
          addr = env;
        else if (group->same_host)
          addr = "127.0.0.1";
      }
      opts->devices.push_back(addr.empty()
                                  ? c10d::ProcessGroupGloo::createDefaultDevice()
                                  : c10d::ProcessGroupGloo::createDeviceForHostname(addr));
      try {
        c->gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(cstore, c->rank, c->size, opts);
      } catch (const std::exception& e) {
        std::string m = e.what();
        fail(OSLO_ERR_COMM, "comm_create: connecting " + c->name + " (rank " +
                                std::to_string(c->rank) + " of " + std::to_string(c->size) +
                                ", address " + (addr.empty() ? "default" : addr) +
                                ") failed: " + m.substr(0, m.find("\nException raised from")));
      }
#else
      fail(OSLO_ERR_NOT_SUPPORTED,
           "comm_create: \"comm\": \"gloo\" asked, but this plugin was built without c10d Gloo");
#endif
    } else {  // nccl
#ifdef OSLO_TORCH_WITH_NCCL
      if (in.is_cpu())
        fail(OSLO_ERR_CONFIG, "comm_create: \"comm\": \"nccl\" needs \"device\": \"cuda\"");
      c->name = "torch-nccl:" + gname;
      auto opts = c10d::ProcessGroupNCCL::Options::create();
      opts->timeout = c->timeout;
      c->nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(cstore, c->rank, c->size, opts);
      // NCCL connects lazily at the first collective; run one now, while the
      // store is lent.
      at::Tensor one = at::zeros({1}, at::TensorOptions().dtype(at::kFloat).device(in.device));
      all_reduce_tensor(*c, one, OSLO_REDUCE_SUM, "comm_create");
      if (in.stream) in.stream->synchronize();
#else
      fail(OSLO_ERR_NOT_SUPPORTED,
           "comm_create: \"comm\": \"nccl\" asked, but this plugin was built without NCCL "
           "(libtorch without CUDA)");
#endif
    }
    *comm = c.release();
#endif  // OSLO_TORCH_WITH_C10D
  });
}

#ifdef OSLO_TORCH_WITH_C10D

void comm_destroy(void* comm) {
  Comm* c = static_cast<Comm*>(comm);
  if (c == nullptr) return;
  try {
    delete c;
  } catch (...) {
  }
}

const char* comm_name(void* comm) {
  return comm != nullptr ? static_cast<Comm*>(comm)->name.c_str() : "torch";
}

const char* comm_last_error(void* comm) {
  return comm != nullptr ? static_cast<Comm*>(comm)->error.c_str() : "torch: no communicator";
}

oslo_status comm_all_reduce(void* comm, const void* in, void* out, size_t count, oslo_dtype dtype,
                            oslo_reduce_op op) {
  return comm_guard(comm, "comm_all_reduce", [&](Comm& c) {
    at::Tensor o = flat(c, out, count, dtype, "comm_all_reduce");
    if (in != out) o.copy_(flat(c, in, count, dtype, "comm_all_reduce"));
    if (count > 0) all_reduce_tensor(c, o, op, "comm_all_reduce");
  });
}

oslo_status comm_all_gather(void* comm, const void* in, void* out, size_t count, oslo_dtype dtype) {
  return comm_guard(comm, "comm_all_gather", [&](Comm& c) {
    at::Tensor i = flat(c, in, count, dtype, "comm_all_gather");
    at::Tensor o = flat(c, out, count * static_cast<size_t>(c.size), dtype, "comm_all_gather");
    if (count == 0) return;
    const int64_t n = static_cast<int64_t>(count);
    std::vector<std::vector<at::Tensor>> outs(1);
    for (int r = 0; r < c.size; ++r) outs[0].push_back(o.narrow(0, r * n, n));
    std::vector<at::Tensor> ins{i};
    c10d::AllgatherOptions opts;
    opts.timeout = c.timeout;
    wait_work(c, with_pg(c, [&](auto& pg) { return pg.allgather(outs, ins, opts); }), "all_gather");
  });
}

oslo_status comm_reduce_scatter(void* comm, const void* in, void* out, size_t count,
                                oslo_dtype dtype, oslo_reduce_op op) {
  return comm_guard(comm, "comm_reduce_scatter", [&](Comm& c) {
    at::Tensor i = flat(c, in, count * static_cast<size_t>(c.size), dtype, "comm_reduce_scatter");
    at::Tensor o = flat(c, out, count, dtype, "comm_reduce_scatter");
    if (count == 0) return;
    // c10d's Gloo has no reduce_scatter: all-reduce a copy of the whole
    // input and keep this rank's part (size times the traffic).
    at::Tensor all = i.clone();
    all_reduce_tensor(c, all, op, "comm_reduce_scatter");
    const int64_t n = static_cast<int64_t>(count);
    o.copy_(all.narrow(0, c.rank * n, n));
  });
}

oslo_status comm_broadcast(void* comm, void* buf, size_t count, oslo_dtype dtype, int root) {
  return comm_guard(comm, "comm_broadcast", [&](Comm& c) {
    if (root < 0 || root >= c.size)
      fail(OSLO_ERR_INVALID_ARGUMENT, "comm_broadcast: root " + std::to_string(root) +
                                          " outside the group of " + std::to_string(c.size));
    at::Tensor b = flat(c, buf, count, dtype, "comm_broadcast");
    if (count == 0) return;
    std::vector<at::Tensor> v{b};
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    opts.timeout = c.timeout;
    wait_work(c, with_pg(c, [&](auto& pg) { return pg.broadcast(v, opts); }), "broadcast");
  });
}

namespace {
void check_peer(const Comm& c, int peer, const char* entry) {
  if (peer < 0 || peer >= c.size || peer == c.rank)
    fail(OSLO_ERR_INVALID_ARGUMENT, std::string(entry) + ": peer " + std::to_string(peer) +
                                        " (rank " + std::to_string(c.rank) + " of " +
                                        std::to_string(c.size) + ")");
}
}  // namespace

oslo_status comm_send(void* comm, const void* buf, size_t bytes, int peer) {
  return comm_guard(comm, "comm_send", [&](Comm& c) {
    check_peer(c, peer, "comm_send");
    if (bytes == 0) return;
    std::vector<at::Tensor> v{
        at::from_blob(const_cast<void*>(buf), {static_cast<int64_t>(bytes)},
                      at::TensorOptions().dtype(at::kByte).device(c.instance->device))};
    wait_work(c, with_pg(c, [&](auto& pg) { return pg.send(v, peer, 0); }), "send");
  });
}

oslo_status comm_recv(void* comm, void* buf, size_t bytes, int peer) {
  return comm_guard(comm, "comm_recv", [&](Comm& c) {
    check_peer(c, peer, "comm_recv");
    if (bytes == 0) return;
    std::vector<at::Tensor> v{
        at::from_blob(buf, {static_cast<int64_t>(bytes)},
                      at::TensorOptions().dtype(at::kByte).device(c.instance->device))};
    wait_work(c, with_pg(c, [&](auto& pg) { return pg.recv(v, peer, 0); }), "recv");
  });
}

oslo_status comm_barrier(void* comm) {
  return comm_guard(comm, "comm_barrier", [&](Comm& c) {
    c10d::BarrierOptions opts;
    opts.timeout = c.timeout;
    wait_work(c, with_pg(c, [&](auto& pg) { return pg.barrier(opts); }), "barrier");
  });
}

void comm_abort(void* comm) {
  // c10d's Gloo cannot interrupt a collective in flight: later calls fail at
  // once with OSLO_ERR_COMM; one in flight ends at its timeout or when a
  // peer's connection closes. (ProcessGroupNCCL's abort is not public API
  // across libtorch versions; the same applies there.)
  if (comm != nullptr) static_cast<Comm*>(comm)->aborted.store(true);
}

#else  // no c10d: comm_create never makes a communicator, so these are not reached

void comm_destroy(void*) {}
const char* comm_name(void*) {
  return "torch";
}
const char* comm_last_error(void*) {
  return "torch: built without c10d";
}
oslo_status comm_all_reduce(void*, const void*, void*, size_t, oslo_dtype, oslo_reduce_op) {
  return OSLO_ERR_NOT_SUPPORTED;
}
oslo_status comm_all_gather(void*, const void*, void*, size_t, oslo_dtype) {
  return OSLO_ERR_NOT_SUPPORTED;
}
oslo_status comm_reduce_scatter(void*, const void*, void*, size_t, oslo_dtype, oslo_reduce_op) {
  return OSLO_ERR_NOT_SUPPORTED;
}
oslo_status comm_broadcast(void*, void*, size_t, oslo_dtype, int) {
  return OSLO_ERR_NOT_SUPPORTED;
}
oslo_status comm_send(void*, const void*, size_t, int) {
  return OSLO_ERR_NOT_SUPPORTED;
}
oslo_status comm_recv(void*, void*, size_t, int) {
  return OSLO_ERR_NOT_SUPPORTED;
}
oslo_status comm_barrier(void*) {
  return OSLO_ERR_NOT_SUPPORTED;
}
void comm_abort(void*) {}

#endif

}  // namespace oslo_torch
