// NCCL communicators on device memory. A group is bootstrapped through
// oslo's rendezvous store: every rank publishes its host and GPU (two ranks
// on one GPU are refused before NCCL sees them), rank 0 publishes
// ncclGetUniqueId's id, and the communicator is created non-blocking
// (ncclCommInitRankConfig). Every wait polls ncclCommGetAsyncError, the
// group's timeout and the abort flag, so a dead peer or oslo_context_abort
// ends in OSLO_ERR_COMM / OSLO_ERR_TIMEOUT (after ncclCommAbort), never a
// hang. Collectives run on the instance's stream and return once done on
// the device (the host waits polling, so a timeout is always noticed).
#include <nccl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "cuda_backend.hpp"

namespace oslo_cuda {
namespace {

struct Comm {
  Instance* in = nullptr;
  ncclComm_t nc = nullptr;
  cudaEvent_t done = nullptr;
  int rank = 0, size = 1;
  double timeout = 300;
  std::string name;
  std::string error = "no error";
  std::mutex mutex;  // serialises NCCL calls with comm_abort from another thread
  std::atomic<bool> abort_asked{false};
  bool aborted = false;  // ncclCommAbort ran (under mutex)
  void* scratch = nullptr;
};

using Clock = std::chrono::steady_clock;

std::string nccl_message(ncclResult_t r) {
  std::string m = ncclGetErrorString(r);
  const char* last = ncclGetLastError(nullptr);
  if (last && *last) m += std::string(": ") + last;
  return m;
}

// Aborts the NCCL communicator once (caller holds c.mutex).
void abort_locked(Comm& c) {
  if (c.aborted || c.nc == nullptr) return;
  c.aborted = true;
  ncclCommAbort(c.nc);
  c.nc = nullptr;
}

[[noreturn]] void fail_and_abort(Comm& c, oslo_status st, const std::string& msg) {
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    abort_locked(c);
  }
  fail(st, msg);
}

void sleep_a_little(Clock::time_point start) {
  if (Clock::now() - start < std::chrono::milliseconds(2))
    std::this_thread::yield();
  else
    std::this_thread::sleep_for(std::chrono::microseconds(50));
}

// Polls until NCCL's state of the communicator is no longer "in progress"
// (non-blocking calls), honouring the timeout and abort.
void settle(Comm& c, ncclResult_t r, const char* what, Clock::time_point deadline) {
  const auto start = Clock::now();
  while (true) {
    if (r == ncclSuccess) return;
    if (r != ncclInProgress)
      fail_and_abort(c, OSLO_ERR_COMM, std::string(what) + " failed: " + nccl_message(r));
    if (c.abort_asked.load()) fail_and_abort(c, OSLO_ERR_COMM, std::string(what) + ": aborted");
    if (Clock::now() > deadline)
      fail_and_abort(c, OSLO_ERR_TIMEOUT,
                     std::string(what) + ": timed out after " + std::to_string(c.timeout) + " s");
    sleep_a_little(start);
    std::lock_guard<std::mutex> lock(c.mutex);
    if (c.aborted) fail(OSLO_ERR_COMM, std::string(what) + ": aborted");
    ncclResult_t state = ncclSuccess;
    ncclCommGetAsyncError(c.nc, &state);
    r = state;
  }
}

Clock::time_point deadline_of(const Comm& c) {
  const double s = c.timeout > 0 && c.timeout < 1e7 ? c.timeout : 1e7;
  return Clock::now() + std::chrono::microseconds(static_cast<int64_t>(s * 1e6));
}

// Waits until the work enqueued so far on the stream is done, polling
// NCCL's asynchronous error, the abort flag and the timeout.
void wait_done(Comm& c, const char* what, Clock::time_point deadline) {
  check_cuda(cudaEventRecord(c.done, c.in->stream), "cudaEventRecord");
  const auto start = Clock::now();
  while (true) {
    const cudaError_t q = cudaEventQuery(c.done);
    if (q == cudaSuccess) return;
    if (q != cudaErrorNotReady) check_cuda(q, what);
    if (c.abort_asked.load()) fail_and_abort(c, OSLO_ERR_COMM, std::string(what) + ": aborted");
    {
      std::lock_guard<std::mutex> lock(c.mutex);
      if (c.aborted) fail(OSLO_ERR_COMM, std::string(what) + ": aborted");
      ncclResult_t state = ncclSuccess;
      ncclCommGetAsyncError(c.nc, &state);
      if (state != ncclSuccess && state != ncclInProgress) {
        abort_locked(c);
        fail(OSLO_ERR_COMM, std::string(what) + " failed on the device: " + nccl_message(state));
      }
    }
    if (Clock::now() > deadline)
      fail_and_abort(c, OSLO_ERR_TIMEOUT,
                     std::string(what) + ": timed out after " + std::to_string(c.timeout) +
                         " s (a peer may have died)");
    sleep_a_little(start);
  }
}

template <class F>
oslo_status comm_guard(void* comm, const char* entry, F&& body) {
  if (comm == nullptr) return OSLO_ERR_INVALID_ARGUMENT;
  Comm& c = *static_cast<Comm*>(comm);
  try {
    check_cuda(cudaSetDevice(c.in->device), "cudaSetDevice");
    if (c.aborted || c.abort_asked.load()) fail(OSLO_ERR_COMM, "the communicator was aborted");
    body(c);
    return OSLO_OK;
  } catch (...) {
    return status_of_current_exception(&c.error, entry);
  }
}

// Enqueues one NCCL call (under the mutex), then waits for it.
template <class F>
void run(Comm& c, const char* what, F&& call) {
  const auto deadline = deadline_of(c);
  ncclResult_t r;
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    if (c.aborted) fail(OSLO_ERR_COMM, std::string(what) + ": aborted");
    r = call();
  }
  settle(c, r, what, deadline);
  wait_done(c, what, deadline);
}

ncclDataType_t nccl_type(oslo_dtype dt) {
  switch (dt) {
    case OSLO_DTYPE_F32: return ncclFloat32;
    case OSLO_DTYPE_F16: return ncclFloat16;
    case OSLO_DTYPE_BF16: return ncclBfloat16;
    case OSLO_DTYPE_I32: return ncclInt32;
    case OSLO_DTYPE_I64: return ncclInt64;
    default: fail(OSLO_ERR_DTYPE, "unknown dtype " + std::to_string(static_cast<int>(dt)));
  }
}

ncclRedOp_t nccl_op(oslo_reduce_op op_arg) {
  switch (enum_value(op_arg)) {
    case OSLO_REDUCE_SUM: return ncclSum;
    case OSLO_REDUCE_AVG: return ncclAvg;
    case OSLO_REDUCE_MAX: return ncclMax;
    case OSLO_REDUCE_MIN: return ncclMin;
    default:
      fail(OSLO_ERR_INVALID_ARGUMENT, "unknown reduce op " + std::to_string(enum_value(op_arg)));
  }
}

void check_ptr(const void* p, size_t count, const char* what) {
  if (count > 0 && p == nullptr) fail(OSLO_ERR_INVALID_ARGUMENT, std::string(what) + " is NULL");
}

void store_set(const oslo_bk_store* s, const std::string& key, const void* v, size_t n) {
  if (s->set(s->self, key.c_str(), v, n) != OSLO_OK)
    fail(OSLO_ERR_COMM, "store set " + key + ": " + s->last_error(s->self));
}

std::string store_get(const oslo_bk_store* s, const std::string& key, double timeout) {
  std::string v(256, '\0');
  size_t n = 0;
  const oslo_status st = s->get(s->self, key.c_str(), &v[0], v.size(), &n, timeout);
  if (st != OSLO_OK) fail(st, "store get " + key + ": " + s->last_error(s->self));
  v.resize(std::min(n, v.size()));
  return v;
}

}  // namespace

oslo_status comm_create(void* self, void** comm, const oslo_bk_group* group,
                        const oslo_bk_store* store) {
  return guard(self, "comm_create", [&](Instance& in) {
    if (comm == nullptr || group == nullptr || store == nullptr)
      fail(OSLO_ERR_INVALID_ARGUMENT, "NULL argument");
    *comm = nullptr;
    if (group->size < 1 || group->rank < 0 || group->rank >= group->size)
      fail(OSLO_ERR_INVALID_ARGUMENT,
           "rank " + std::to_string(group->rank) + " of a group of " + std::to_string(group->size));
    auto c = std::make_unique<Comm>();
    c->in = &in;
    c->rank = group->rank;
    c->size = group->size;
    c->timeout = group->timeout_seconds > 0 ? group->timeout_seconds : 300;
    c->name = std::string("nccl (") + (group->name ? group->name : "group") + ")";
    const auto deadline = deadline_of(*c);
    // One GPU per rank: each rank names its host and its device's PCI bus id.
    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    char bus[64] = {0};
    check_cuda(cudaDeviceGetPCIBusId(bus, sizeof bus, in.device), "cudaDeviceGetPCIBusId");
    const std::string mine = std::string(host) + " " + bus;
    store_set(store, "cuda/dev/" + std::to_string(group->rank), mine.data(), mine.size());
    for (int r = 0; r < group->size; ++r) {
      if (r == group->rank) continue;
      const std::string theirs = store_get(store, "cuda/dev/" + std::to_string(r), c->timeout);
      if (theirs == mine)
        fail(OSLO_ERR_NOT_SUPPORTED,
             "ranks " + std::to_string(std::min(r, group->rank)) + " and " +
                 std::to_string(std::max(r, group->rank)) + " of group " +
                 (group->name ? group->name : "?") + " both use CUDA device " +
                 std::to_string(in.device) + " (" + bus + ") on host " + host +
                 ": NCCL needs one GPU per rank (give each rank its own device: local_rank, "
                 "or the backend option \"device\")");
    }
    ncclUniqueId id;
    if (group->rank == 0) {
      const ncclResult_t r = ncclGetUniqueId(&id);
      if (r != ncclSuccess) fail(OSLO_ERR_COMM, "ncclGetUniqueId failed: " + nccl_message(r));
      store_set(store, "cuda/nccl_id", &id, sizeof id);
    } else {
      const std::string v = store_get(store, "cuda/nccl_id", c->timeout);
      if (v.size() != sizeof id) fail(OSLO_ERR_COMM, "bad NCCL id in the store");
      std::memcpy(&id, v.data(), sizeof id);
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t r = ncclCommInitRankConfig(&c->nc, group->size, id, group->rank, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      if (c->nc) ncclCommAbort(c->nc);
      fail(OSLO_ERR_COMM, "ncclCommInitRankConfig failed: " + nccl_message(r));
    }
    if (r == ncclInProgress) settle(*c, r, "ncclCommInitRankConfig", deadline);
    check_cuda(cudaEventCreateWithFlags(&c->done, cudaEventDisableTiming), "cudaEventCreate");
    c->scratch = in.mem->allocate(sizeof(float), in.stream);
    *comm = c.release();
  });
}

void comm_destroy(void* comm) {
  Comm* c = static_cast<Comm*>(comm);
  if (c == nullptr) return;
  (void)cudaSetDevice(c->in->device);
  {
    std::lock_guard<std::mutex> lock(c->mutex);
    if (!c->aborted && c->nc) {
      // Finalize waits for outstanding work; the stream is idle after each
      // collective, so this returns promptly. A broken one is aborted.
      ncclResult_t r = ncclCommFinalize(c->nc);
      const auto start = Clock::now();
      while (r == ncclInProgress && Clock::now() - start < std::chrono::seconds(10)) {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
        ncclCommGetAsyncError(c->nc, &r);
      }
      if (r == ncclSuccess)
        ncclCommDestroy(c->nc);
      else
        ncclCommAbort(c->nc);
      c->nc = nullptr;
    }
  }
  if (c->done) (void)cudaEventDestroy(c->done);
  if (c->scratch) c->in->mem->release(c->scratch);
  delete c;
}

const char* comm_name(void* comm) {
  return comm != nullptr ? static_cast<Comm*>(comm)->name.c_str() : "nccl";
}

const char* comm_last_error(void* comm) {
  return comm != nullptr ? static_cast<Comm*>(comm)->error.c_str() : "cuda: no communicator";
}

oslo_status comm_all_reduce(void* comm, const void* in, void* out, size_t count, oslo_dtype dtype,
                            oslo_reduce_op op) {
  return comm_guard(comm, "comm_all_reduce", [&](Comm& c) {
    check_ptr(in, count, "in");
    check_ptr(out, count, "out");
    const ncclDataType_t t = nccl_type(dtype);
    const ncclRedOp_t o = nccl_op(op);
    if (count == 0) return;
    run(c, "ncclAllReduce",
        [&] { return ncclAllReduce(in, out, count, t, o, c.nc, c.in->stream); });
  });
}

oslo_status comm_all_gather(void* comm, const void* in, void* out, size_t count, oslo_dtype dtype) {
  return comm_guard(comm, "comm_all_gather", [&](Comm& c) {
    check_ptr(in, count, "in");
    check_ptr(out, count, "out");
    const ncclDataType_t t = nccl_type(dtype);
    if (count == 0) return;
    run(c, "ncclAllGather", [&] { return ncclAllGather(in, out, count, t, c.nc, c.in->stream); });
  });
}

oslo_status comm_reduce_scatter(void* comm, const void* in, void* out, size_t count,
                                oslo_dtype dtype, oslo_reduce_op op) {
  return comm_guard(comm, "comm_reduce_scatter", [&](Comm& c) {
    check_ptr(in, count, "in");
    check_ptr(out, count, "out");
    const ncclDataType_t t = nccl_type(dtype);
    const ncclRedOp_t o = nccl_op(op);
    if (count == 0) return;
    run(c, "ncclReduceScatter",
        [&] { return ncclReduceScatter(in, out, count, t, o, c.nc, c.in->stream); });
  });
}

oslo_status comm_broadcast(void* comm, void* buf, size_t count, oslo_dtype dtype, int root) {
  return comm_guard(comm, "comm_broadcast", [&](Comm& c) {
    check_ptr(buf, count, "buf");
    const ncclDataType_t t = nccl_type(dtype);
    if (root < 0 || root >= c.size)
      fail(OSLO_ERR_INVALID_ARGUMENT, "root " + std::to_string(root) + " outside the group");
    if (count == 0) return;
    run(c, "ncclBroadcast",
        [&] { return ncclBroadcast(buf, buf, count, t, root, c.nc, c.in->stream); });
  });
}

oslo_status comm_send(void* comm, const void* buf, size_t bytes, int peer) {
  return comm_guard(comm, "comm_send", [&](Comm& c) {
    check_ptr(buf, bytes, "buf");
    if (peer < 0 || peer >= c.size || peer == c.rank)
      fail(OSLO_ERR_INVALID_ARGUMENT, "peer " + std::to_string(peer) + " is not another rank");
    if (bytes == 0) return;
    run(c, "ncclSend", [&] { return ncclSend(buf, bytes, ncclUint8, peer, c.nc, c.in->stream); });
  });
}

oslo_status comm_recv(void* comm, void* buf, size_t bytes, int peer) {
  return comm_guard(comm, "comm_recv", [&](Comm& c) {
    check_ptr(buf, bytes, "buf");
    if (peer < 0 || peer >= c.size || peer == c.rank)
      fail(OSLO_ERR_INVALID_ARGUMENT, "peer " + std::to_string(peer) + " is not another rank");
    if (bytes == 0) return;
    run(c, "ncclRecv", [&] { return ncclRecv(buf, bytes, ncclUint8, peer, c.nc, c.in->stream); });
  });
}

oslo_status comm_barrier(void* comm) {
  return comm_guard(comm, "comm_barrier", [&](Comm& c) {
    run(c, "ncclAllReduce (barrier)", [&] {
      return ncclAllReduce(c.scratch, c.scratch, 1, ncclFloat32, ncclSum, c.nc, c.in->stream);
    });
  });
}

void comm_abort(void* comm) {
  Comm* c = static_cast<Comm*>(comm);
  if (c == nullptr) return;
  c->abort_asked.store(true);
  // A waiter notices the flag and aborts; with none, abort here (the mutex
  // is only held around short non-blocking NCCL calls).
  std::lock_guard<std::mutex> lock(c->mutex);
  abort_locked(*c);
}

}  // namespace oslo_cuda
