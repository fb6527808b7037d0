// Shared-memory communicator. Layout of the segment (all offsets in the header):
//
//   Header        magic, geometry, abort flag
//   RankCtrl[n]   per rank: sequence counter (+ futex sleepers, description of
//                 the collective it started), pid, failure flag
//   data          per rank: two slots (double buffering) of slot_bytes that
//                 the rank writes and peers read, and two result parts of
//                 part_bytes (all-reduce's second phase)
//   RingCtrl[n(n-1)], ring data   one byte ring per ordered (sender, receiver)
//                 pair for send/recv
//
// Collectives advance in "steps" numbered 1, 2, ... shared by the group. In
// step k a rank writes its slot k%2, then posts k to its counter; "I posted k"
// also means "I have finished reading everything of steps < k". Before writing
// slot k%2 again (step k+2) a rank makes sure every peer posted k+1, so no
// peer can still be reading it. That one rule gives double buffering without
// any per-buffer flags; a small collective is one step (copy in, post, wait,
// reduce), a large one a pipeline of chunks.
//
// Tuning knobs (environment, read once per communicator; the creator's values
// of the first two are stored in the header so all ranks agree):
//   OSLO_SHM_SLOT_KB   per-rank slot = pipeline chunk (default 768)
//   OSLO_SHM_SMALL_KB  largest one-step all-reduce (default 512 / ranks)
//   OSLO_SHM_SPIN_US   spin before sleeping on the futex (default 50; 0 when
//                      there are more ranks than CPUs)
//   OSLO_SHM_RING_KB   send/recv ring per ordered pair of ranks (default 4096
//                      for 2 ranks, less for more: 8 MB in all), a power of two
#include "transports/shm/shm_communicator.hpp"

#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "core/common/deadline.hpp"
#include "core/common/dtype.hpp"
#include "core/common/error.hpp"
#include "transports/common/reduce.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define OSLO_SHM_PAUSE() _mm_pause()
#else
#define OSLO_SHM_PAUSE() std::atomic_signal_fence(std::memory_order_seq_cst)
#endif

namespace oslo {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kMagic = 0x314d48534f4c534fULL;  // "OSLOSHM1"
constexpr uint32_t kVersion = 1;
constexpr size_t kPage = 4096;
// Default per-rank slot (one buffer of the double buffer): large messages move
// in pipeline chunks of this size, each rank reducing slot/n of it. Measured
// on Zen 4 (bench/allreduce/README.md): 768 KB moves 1-4 MB about 1.6x
// faster than 256 KB; 512 KB-1.5 MB are alike. Our reading of the phase
// timings: with small chunks the peer still holds the lines in its L2, so
// rewriting a slot or reading what the peer just wrote costs a core-to-core
// transfer per line (~18 GB/s here); once a step's working set outgrows the
// 1 MB L2 the lines come from the shared L3, which is faster.
constexpr size_t kDefaultSlotBytes = 768 << 10;
// All-reduces up to kSmallBytesTimesRanks / n bytes take the one-step path
// (every rank reduces the whole message from every slot), larger ones the
// two-phase pipeline. One step wins while reading n copies is cheaper than a
// second synchronisation: for 2 ranks up to 256 KB (1.5x faster at 16-256 KB
// than the pipeline, measured).
constexpr size_t kSmallBytesTimesRanks = 512 << 10;
// How long a waiter spins before it sleeps on the futex, when there are at
// least as many CPUs as ranks. A collective between ranks that arrive within
// this window never enters the kernel.
constexpr int64_t kDefaultSpinNs = 50'000;
// How often a sleeping waiter wakes to check that the peer it waits for is
// still alive (and the abort flag, if a wake-up was missed).
constexpr int64_t kLivenessPeriodNs = 50'000'000;
// A ring is drained and refilled in pieces of ring/kRingPieces bytes so that
// sender and receiver copy at the same time.
constexpr uint32_t kRingPieces = 4;

constexpr uint32_t kFailedLeft = 0x10000;  // RankCtrl::failed: communicator destroyed

// ShmCommunicator::pidfd_ values other than a descriptor.
constexpr int kPidUnknown = -3;    // the peer has not published its pid yet
constexpr int kPidFallback = -2;   // no pidfd: watch with kill(pid, 0) and /proc
constexpr int kPidUnwatched = -1;  // same process or other pid namespace

struct Header {
  std::atomic<uint64_t> magic;  // written last by the creator
  uint32_t version;
  int32_t group_size;
  uint64_t total_bytes;
  uint64_t slot_bytes;
  uint64_t part_bytes;
  uint64_t small_bytes;
  uint64_t rank_stride;
  uint64_t ring_bytes;
  uint64_t ctrl_off;
  uint64_t data_off;
  uint64_t ring_ctrl_off;
  uint64_t ring_data_off;
  // 0, or 1 + the rank that called abort(). Own cache line: polled by waiters.
  alignas(64) std::atomic<uint32_t> abort_flag;
};

// One per rank, 128 bytes so that the adjacent-line prefetcher does not make
// two ranks' counters share traffic. The first line is what peers poll.
struct alignas(128) RankCtrl {
  std::atomic<uint32_t> seq;       // last step this rank posted
  std::atomic<uint32_t> sleepers;  // waiters asleep on seq (futex)
  // (first step << 32) | description of the collective that began there;
  // lets peers detect mismatched calls instead of exchanging garbage.
  std::atomic<uint64_t> opdesc;
  alignas(64) std::atomic<int32_t> pid;
  std::atomic<uint32_t> failed;  // 0, 1 + oslo_status of the error it hit, or kFailedLeft
  std::atomic<uint64_t> pidns;   // inode of the rank's pid namespace
};
static_assert(sizeof(RankCtrl) == 128, "RankCtrl is two cache lines");

struct alignas(128) RingCtrl {
  std::atomic<uint32_t> written;  // bytes ever written, mod 2^32 (sender)
  std::atomic<uint32_t> written_sleepers;
  alignas(128) std::atomic<uint32_t> consumed;  // bytes ever read (receiver)
  std::atomic<uint32_t> consumed_sleepers;
};
static_assert(sizeof(RingCtrl) == 256, "RingCtrl is two separated lines");
static_assert(std::atomic<uint32_t>::is_always_lock_free &&
                  std::atomic<uint64_t>::is_always_lock_free,
              "atomics in shared memory must be lock-free");

size_t round_up(size_t v, size_t a) {
  return (v + a - 1) / a * a;
}
size_t ceil_div(size_t a, size_t b) {
  return (a + b - 1) / b;
}
// Step counters wrap around; compare them the way TCP compares sequence numbers.
bool seq_before(uint32_t a, uint32_t b) {
  return static_cast<int32_t>(a - b) < 0;
}

std::string errno_text(int err) {
  char buf[256];
  const char* s = strerror_r(err, buf, sizeof buf);
  return s ? std::string(s) : "errno " + std::to_string(err);
}

size_t env_size(const char* name, size_t def, size_t lo, size_t hi) {
  const char* v = std::getenv(name);
  if (!v || !*v) return def;
  char* end = nullptr;
  unsigned long long x = std::strtoull(v, &end, 10);
  if (end == v || *end) return def;
  return std::min<size_t>(std::max<size_t>(x, lo), hi);
}

long futex(std::atomic<uint32_t>* word, int op, uint32_t val, const timespec* ts) {
  // Not FUTEX_PRIVATE_FLAG: the word is in memory shared between processes.
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, val, ts, nullptr, 0);
}
void futex_wake_all(std::atomic<uint32_t>* word) {
  futex(word, FUTEX_WAKE, INT_MAX, nullptr);
}

// Stores v and wakes the waiters that went to sleep on it. The seq_cst store
// and load pair with the waiter's seq_cst increment and load (Dekker): either
// the waiter sees v and does not sleep, or we see it counted and wake it.
void post_word(std::atomic<uint32_t>& word, std::atomic<uint32_t>& sleepers, uint32_t v) {
  word.store(v, std::memory_order_seq_cst);
  if (sleepers.load(std::memory_order_seq_cst) != 0) futex_wake_all(&word);
}

uint64_t pid_namespace() {
  struct stat st;
  if (stat("/proc/self/ns/pid", &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_ino);
}

bool is_zombie(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  FILE* f = std::fopen(path, "r");
  if (!f) return false;
  char buf[512];
  size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = 0;
  // The state follows the last ')' (the command name may contain ')').
  const char* p = std::strrchr(buf, ')');
  return p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X');
}

std::string random_hex() {
  uint64_t r = 0;
  if (getrandom(&r, sizeof r, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof r)) {
    std::random_device rd;
    r = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(r));
  return buf;
}

// ---- descriptions of collectives (mismatch detection) -------------------

enum OpKind : uint32_t {
  kConnect = 1,
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kBroadcast,
  kBarrier
};
const char* kind_name(uint32_t k) {
  switch (k) {
    case kConnect: return "create";
    case kAllReduce: return "all_reduce";
    case kAllGather: return "all_gather";
    case kReduceScatter: return "reduce_scatter";
    case kBroadcast: return "broadcast";
    case kBarrier: return "barrier";
  }
  return "unknown";
}
const char* op_name(uint32_t op) {
  switch (op) {
    case OSLO_REDUCE_SUM: return "sum";
    case OSLO_REDUCE_AVG: return "avg";
    case OSLO_REDUCE_MAX: return "max";
    case OSLO_REDUCE_MIN: return "min";
  }
  return "?";
}
// kind:4 | dtype:4 | reduce op (broadcast: root mod 16):4 | 20-bit hash of
// (count, root).
uint32_t make_desc(uint32_t kind, int dt, int op, uint64_t count, int root) {
  uint64_t h =
      count * 0x9E3779B97F4A7C15ULL ^ (static_cast<uint64_t>(root) + 0x632BE59BD9B4E019ULL);
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ULL;
  h ^= h >> 32;
  return (kind & 0xf) | (static_cast<uint32_t>(dt & 0xf) << 4) |
         (static_cast<uint32_t>(op & 0xf) << 8) | (static_cast<uint32_t>(h & 0xfffff) << 12);
}
std::string describe(uint32_t desc, bool with_reduce_op) {
  uint32_t kind = desc & 0xf;
  std::string s = kind_name(kind);
  if (kind == kBarrier || kind == kConnect) return s;
  s += "(";
  s += dtype_valid(static_cast<int>((desc >> 4) & 0xf))
           ? dtype_name(static_cast<oslo_dtype>((desc >> 4) & 0xf))
           : "?";
  if (with_reduce_op) s += std::string(", ") + op_name((desc >> 8) & 0xf);
  return s + ")";
}

// ---- the communicator ------------------------------------------------------

class ShmCommunicator final : public Communicator {
 public:
  ShmCommunicator(int rank, int size, double timeout)
      : rank_(rank), size_(size), timeout_(timeout) {
    timeout_ns_ = static_cast<int64_t>(std::min(timeout, 1e9) * 1e9);
    srcs_.resize(size);
    pidfd_.assign(size, kPidUnknown);
    next_live_check_.assign(size, Clock::time_point());
    self_pid_ = getpid();
    pidns_ = pid_namespace();
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    // With more ranks than CPUs a spinning waiter would burn the time slice
    // that the peer it waits for needs; go to sleep at once instead.
    bool oversubscribed = cpus > 0 && size > cpus;
    spin_ns_ = oversubscribed ? 0
                              : static_cast<int64_t>(env_size("OSLO_SHM_SPIN_US",
                                                              kDefaultSpinNs / 1000, 0, 1000000)) *
                                    1000;
  }

  ~ShmCommunicator() override {
    if (ctrl_) {
      // Peers still waiting for this rank learn at once that it is gone.
      uint32_t expected = 0;
      ctrl_[rank_].failed.compare_exchange_strong(expected, kFailedLeft);
      wake_own_words();
    }
    for (int fd : pidfd_)
      if (fd >= 0) close(fd);
    if (!unlink_name_.empty()) shm_unlink(unlink_name_.c_str());
    if (base_) munmap(base_, map_bytes_);
  }

  void connect(Store& store, const std::string& prefix, const Deadline& deadline);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* transport() const override { return "shm"; }

  void all_reduce(const void* in, void* out, size_t count, oslo_dtype dt,
                  oslo_reduce_op op) override;
  void all_gather(const void* in, void* out, size_t count, oslo_dtype dt) override;
  void reduce_scatter(const void* in, void* out, size_t count, oslo_dtype dt,
                      oslo_reduce_op op) override;
  void broadcast(void* buf, size_t count, oslo_dtype dt, int root) override;
  void send(const void* buf, size_t bytes, int peer) override;
  void recv(void* buf, size_t bytes, int peer) override;
  void barrier() override;
  void abort() noexcept override;

 private:
  struct LazyDeadline {
    bool set = false;
    Clock::time_point end;
  };

  // ---- geometry ----
  uint8_t* slot(int r, uint32_t k) const {
    return data_ + static_cast<size_t>(r) * rank_stride_ + (k & 1u) * slot_bytes_;
  }
  uint8_t* result(int r, uint32_t k) const {
    return data_ + static_cast<size_t>(r) * rank_stride_ + 2 * slot_bytes_ + (k & 1u) * part_bytes_;
  }
  size_t ring_index(int src, int dst) const {
    return static_cast<size_t>(src) * (size_ - 1) + (dst < src ? dst : dst - 1);
  }
  RingCtrl& ring_ctrl(int src, int dst) const { return ring_ctrl_[ring_index(src, dst)]; }
  uint8_t* ring_data(int src, int dst) const {
    return ring_data_ + ring_index(src, dst) * ring_bytes_;
  }

  // ---- error handling ----
  template <typename Body>
  void guarded(const char* op, Body&& body);
  void mark_broken(oslo_status status, const std::string& msg) noexcept;
  void check_abort() const;
  void check_peer_failed(int peer) const;
  bool peer_alive(int peer);
  [[noreturn]] void peer_died(int peer) const;
  std::string who(int peer) const {
    int32_t pid = ctrl_[peer].pid.load(std::memory_order_relaxed);
    return pid > 0 ? str("rank ", peer, " (pid ", pid, ")")
                   : str("rank ", peer, " (never attached)");
  }
  void wake_own_words() noexcept;
  void watch_peer(int peer);

  // ---- waiting ----
  template <typename Ready>
  bool wait_word(std::atomic<uint32_t>& word, std::atomic<uint32_t>& sleepers, int peer,
                 Ready ready, LazyDeadline& dl);
  void wait_all(uint32_t k, LazyDeadline* dl = nullptr);
  void wait_one(int peer, uint32_t k);
  [[noreturn]] void timed_out_steps(uint32_t k, const std::vector<int>& missing);

  // ---- steps ----
  uint32_t begin_step() {
    uint32_t k = seq_ + 1;
    if (seq_before(all_ge_, k - 1)) wait_all(k - 1);
    return k;
  }
  void set_desc(uint32_t k, uint32_t desc) {
    ctrl_[rank_].opdesc.store((static_cast<uint64_t>(k) << 32) | desc, std::memory_order_relaxed);
  }
  void post(uint32_t k) {
    post_word(ctrl_[rank_].seq, ctrl_[rank_].sleepers, k);
    seq_ = k;
  }
  void check_desc(int peer, uint32_t k, uint32_t desc) const;
  void check_descs(uint32_t k, uint32_t desc) const {
    for (int p = 0; p < size_; ++p)
      if (p != rank_) check_desc(p, k, desc);
  }

  // ---- algorithms ----
  void all_reduce_one_step(const uint8_t* in, uint8_t* out, size_t count, oslo_dtype dt,
                           oslo_reduce_op op, uint32_t desc);
  void all_reduce_pipelined(const uint8_t* in, uint8_t* out, size_t count, oslo_dtype dt,
                            oslo_reduce_op op, uint32_t desc);
  void ring_write(int peer, const uint8_t* src, size_t n);
  void ring_read(int peer, uint8_t* dst, size_t n);
  bool wait_ring_space(int peer, uint32_t w, uint32_t need);
  bool wait_ring_data(int peer, uint32_t r, uint32_t need);

  // ---- argument checks (before anything is exchanged; they do not break) ----
  size_t checked_bytes(const char* op, size_t count, oslo_dtype dt, size_t times = 1) const;
  void check_op(const char* op, oslo_reduce_op rop) const {
    OSLO_CHECK(rop >= OSLO_REDUCE_SUM && rop <= OSLO_REDUCE_MIN, OSLO_ERR_INVALID_ARGUMENT,
               "shm: ", op, ": unknown reduce op ", static_cast<int>(rop));
  }
  void check_peer(const char* op, int peer) const {
    OSLO_CHECK(peer >= 0 && peer < size_ && peer != rank_, OSLO_ERR_INVALID_ARGUMENT, "shm: ", op,
               ": peer ", peer, " is not another rank of this group of ", size_, " (this rank is ",
               rank_, ")");
  }

  const int rank_;
  const int size_;
  const double timeout_;
  int64_t timeout_ns_ = 0;
  int64_t spin_ns_ = 0;
  pid_t self_pid_ = 0;
  uint64_t pidns_ = 0;

  uint8_t* base_ = nullptr;
  size_t map_bytes_ = 0;
  std::string name_;
  std::string unlink_name_;  // the name, until the group has formed (removed on failure)
  Header* hdr_ = nullptr;
  RankCtrl* ctrl_ = nullptr;
  uint8_t* data_ = nullptr;
  RingCtrl* ring_ctrl_ = nullptr;
  uint8_t* ring_data_ = nullptr;
  size_t slot_bytes_ = 0;
  size_t part_bytes_ = 0;
  size_t small_bytes_ = 0;
  size_t rank_stride_ = 0;
  uint32_t ring_bytes_ = 0;

  uint32_t seq_ = 0;     // last step this rank posted
  uint32_t all_ge_ = 0;  // every peer is known to have posted at least this
  const char* op_ = "create";
  std::vector<const void*> srcs_;
  std::vector<int> pidfd_;
  std::vector<Clock::time_point> next_live_check_;

  oslo_status broken_status_ = OSLO_OK;
  std::string broken_msg_;
};

// ---- setup -------------------------------------------------------------------

void ShmCommunicator::connect(Store& store, const std::string& prefix, const Deadline& deadline) {
  const std::string name_key = prefix + "/shm/name";
  int fd = -1;
  if (rank_ == 0) {
    // Geometry. Only the creator reads the tuning variables; the others take
    // the geometry from the header, so all agree on the algorithm choice.
    const size_t n = static_cast<size_t>(size_);
    slot_bytes_ =
        round_up(env_size("OSLO_SHM_SLOT_KB", kDefaultSlotBytes >> 10, 16, 16384) << 10, kPage);
    slot_bytes_ = std::max(slot_bytes_, round_up(n * 64 * 16, kPage));  // >= 1 KB per part
    part_bytes_ = slot_bytes_ / n / 64 * 64;
    small_bytes_ =
        std::min(env_size("OSLO_SHM_SMALL_KB", kSmallBytesTimesRanks / n >> 10, 0, 1 << 20) << 10,
                 slot_bytes_);
    rank_stride_ = round_up(2 * slot_bytes_ + 2 * part_bytes_, kPage);
    size_t pairs = n * (n - 1);
    // 4 MB per ordered pair for 2 ranks, less for bigger groups (8 MB in
    // all at most, 16 KB per pair at least); larger messages stream, their
    // sender waiting for the receiver to drain the ring. A pipeline stage's
    // activations (256 tokens x 4096 f32 values) fit, so its sends do not
    // wait for the next stage to reach its receive (issue 18's schedules
    // assume they do not). OSLO_SHM_RING_KB overrides, rounded down to a
    // power of two (the ring's positions wrap with a mask).
    size_t ring = 4u << 20;
    while (pairs && ring > (16u << 10) && pairs * ring > (8u << 20)) ring >>= 1;
    ring = env_size("OSLO_SHM_RING_KB", ring >> 10, 16, 65536) << 10;
    while (ring & (ring - 1)) ring &= ring - 1;  // the highest power of two <= ring
    ring_bytes_ = static_cast<uint32_t>(ring);
    size_t ctrl_off = round_up(sizeof(Header), 128);
    size_t data_off = round_up(ctrl_off + n * sizeof(RankCtrl), kPage);
    size_t ring_ctrl_off = data_off + n * rank_stride_;
    size_t ring_data_off = round_up(ring_ctrl_off + pairs * sizeof(RingCtrl), kPage);
    size_t total = ring_data_off + pairs * ring;

    // The name has the creator's pid and 64 random bits, so concurrent jobs
    // (and groups of one job) never collide; O_EXCL catches the impossible.
    for (int attempt = 0;; ++attempt) {
      name_ = "/oslo-shm-" + std::to_string(self_pid_) + "-" + random_hex();
      fd = shm_open(name_.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
      if (fd >= 0) break;
      int err = errno;
      if (err != EEXIST || attempt >= 8)
        fail(OSLO_ERR_IO, "shm: shm_open(", name_, ", O_CREAT) failed: ", errno_text(err));
    }
    unlink_name_ = name_;
    if (ftruncate(fd, static_cast<off_t>(total)) != 0) {
      int err = errno;
      close(fd);
      fail(OSLO_ERR_IO, "shm: ftruncate(", name_, ", ", total, ") failed: ", errno_text(err));
    }
    // Reserve the pages now: a full /dev/shm then fails here with a message
    // instead of killing a rank with SIGBUS in the middle of a collective.
    if (int err = posix_fallocate(fd, 0, static_cast<off_t>(total))) {
      close(fd);
      fail(OSLO_ERR_IO, "shm: posix_fallocate(", name_, ", ", total, ") failed: ", errno_text(err));
    }
    void* p = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    int err = errno;
    close(fd);
    if (p == MAP_FAILED)
      fail(OSLO_ERR_IO, "shm: mmap(", name_, ", ", total, ") failed: ", errno_text(err));
    base_ = static_cast<uint8_t*>(p);
    map_bytes_ = total;
    // The file is zero-filled; construct the shared objects in place.
    hdr_ = new (base_) Header();
    hdr_->version = kVersion;
    hdr_->group_size = size_;
    hdr_->total_bytes = total;
    hdr_->slot_bytes = slot_bytes_;
    hdr_->part_bytes = part_bytes_;
    hdr_->small_bytes = small_bytes_;
    hdr_->rank_stride = rank_stride_;
    hdr_->ring_bytes = ring;
    hdr_->ctrl_off = ctrl_off;
    hdr_->data_off = data_off;
    hdr_->ring_ctrl_off = ring_ctrl_off;
    hdr_->ring_data_off = ring_data_off;
    hdr_->abort_flag.store(0, std::memory_order_relaxed);
    for (size_t r = 0; r < n; ++r) new (base_ + ctrl_off + r * sizeof(RankCtrl)) RankCtrl();
    for (size_t i = 0; i < pairs; ++i)
      new (base_ + ring_ctrl_off + i * sizeof(RingCtrl)) RingCtrl();
    hdr_->magic.store(kMagic, std::memory_order_release);
  } else {
    std::vector<uint8_t> v = store.get(name_key, deadline);
    name_.assign(v.begin(), v.end());
    fd = shm_open(name_.c_str(), O_RDWR | O_CLOEXEC, 0);
    if (fd < 0)
      fail(OSLO_ERR_IO, "shm: shm_open(", name_, ") failed: ", errno_text(errno),
           " (was the segment of group '", prefix,
           "' already unlinked? group prefixes must be "
           "unique per job)");
    struct stat st;
    if (fstat(fd, &st) != 0) {
      int err = errno;
      close(fd);
      fail(OSLO_ERR_IO, "shm: fstat(", name_, ") failed: ", errno_text(err));
    }
    size_t total = static_cast<size_t>(st.st_size);
    if (total < kPage) {
      close(fd);
      fail(OSLO_ERR_IO, "shm: segment ", name_, " is too small (", total, " bytes)");
    }
    void* p = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    int err = errno;
    close(fd);
    if (p == MAP_FAILED)
      fail(OSLO_ERR_IO, "shm: mmap(", name_, ", ", total, ") failed: ", errno_text(err));
    base_ = static_cast<uint8_t*>(p);
    map_bytes_ = total;
    hdr_ = reinterpret_cast<Header*>(base_);
    OSLO_CHECK(hdr_->magic.load(std::memory_order_acquire) == kMagic && hdr_->version == kVersion,
               OSLO_ERR_IO, "shm: segment ", name_, " is not an oslo shm segment of version ",
               kVersion);
    OSLO_CHECK(hdr_->total_bytes == total, OSLO_ERR_IO, "shm: segment ", name_, " has ", total,
               " bytes but its header says ", hdr_->total_bytes);
    OSLO_CHECK(hdr_->group_size == size_, OSLO_ERR_INVALID_ARGUMENT, "shm: segment ", name_,
               " of group '", prefix, "' was created for ", hdr_->group_size,
               " ranks but this rank was told the group has ", size_);
    const size_t n = static_cast<size_t>(size_);
    slot_bytes_ = hdr_->slot_bytes;
    part_bytes_ = hdr_->part_bytes;
    small_bytes_ = hdr_->small_bytes;
    rank_stride_ = hdr_->rank_stride;
    ring_bytes_ = static_cast<uint32_t>(hdr_->ring_bytes);
    // A header that passed the magic check can still be inconsistent only if
    // something scribbled on it; refuse rather than read past the mapping.
    bool sane = part_bytes_ * n <= slot_bytes_ && part_bytes_ >= 64 &&
                rank_stride_ >= 2 * slot_bytes_ + 2 * part_bytes_ &&
                hdr_->ctrl_off + n * sizeof(RankCtrl) <= hdr_->data_off &&
                hdr_->data_off + n * rank_stride_ <= hdr_->ring_ctrl_off &&
                hdr_->ring_ctrl_off + n * (n - 1) * sizeof(RingCtrl) <= hdr_->ring_data_off &&
                hdr_->ring_data_off + n * (n - 1) * hdr_->ring_bytes <= total &&
                (ring_bytes_ & (ring_bytes_ - 1)) == 0 && ring_bytes_ >= 64;
    OSLO_CHECK(sane, OSLO_ERR_IO, "shm: segment ", name_, " has an inconsistent header");
    // It is ours. Until the group has formed, any member that fails removes
    // the name: the creator may be dead, and a failed group has no use for it.
    unlink_name_ = name_;
  }
  ctrl_ = reinterpret_cast<RankCtrl*>(base_ + hdr_->ctrl_off);
  data_ = base_ + hdr_->data_off;
  ring_ctrl_ = reinterpret_cast<RingCtrl*>(base_ + hdr_->ring_ctrl_off);
  ring_data_ = base_ + hdr_->ring_data_off;
  ctrl_[rank_].pidns.store(pidns_, std::memory_order_relaxed);
  ctrl_[rank_].pid.store(static_cast<int32_t>(self_pid_), std::memory_order_release);

  if (rank_ == 0) {
    store.set(name_key, std::vector<uint8_t>(name_.begin(), name_.end()));
    std::vector<std::string> keys;
    for (int r = 1; r < size_; ++r) keys.push_back(str(prefix, "/shm/attached/", r));
    try {
      if (!keys.empty()) store.wait(keys, deadline);
    } catch (const Error& e) {
      std::string missing;
      for (int r = 1; r < size_; ++r)
        if (!store.check({keys[r - 1]}))
          missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      // Ranks that did attach must not wait for a group that will never form.
      mark_broken(e.status(), e.what());
      if (e.status() == OSLO_ERR_TIMEOUT && !missing.empty())
        fail(OSLO_ERR_TIMEOUT, "shm: group '", prefix, "': rank(s) ", missing,
             " did not join within ", timeout_, " s");
      throw;
    }
    // Everybody has it mapped: remove the name now, so that the memory is
    // freed with the last mapping whatever happens to the job later.
    shm_unlink(unlink_name_.c_str());
    unlink_name_.clear();
  } else {
    store.set(str(prefix, "/shm/attached/", rank_), {'1'});
  }

  // First step: everyone has mapped the segment and published its pid.
  LazyDeadline dl;
  dl.set = true;
  dl.end = deadline.time_point();
  uint32_t desc = make_desc(kConnect, 0, 0, static_cast<uint64_t>(size_), 0);
  set_desc(1, desc);
  post(1);
  wait_all(1, &dl);
  check_descs(1, desc);
  // Rank 0 unlinked the name before posting step 1.
  unlink_name_.clear();
  // Take a handle on every peer process now, while its pid surely is its own.
  for (int p = 0; p < size_; ++p)
    if (p != rank_) watch_peer(p);
  op_ = "";
}

// Decides how to tell whether `peer` is alive, once its pid is known.
void ShmCommunicator::watch_peer(int peer) {
  if (pidfd_[peer] != kPidUnknown) return;
  pid_t pid = ctrl_[peer].pid.load(std::memory_order_acquire);
  if (pid <= 0) return;
  uint64_t ns = ctrl_[peer].pidns.load(std::memory_order_relaxed);
  // Same process (thread ranks): it cannot die without us. Another pid
  // namespace: the number means nothing here, so rely on the timeout.
  if (pid == self_pid_ || ns == 0 || ns != pidns_) {
    pidfd_[peer] = kPidUnwatched;
    return;
  }
  pidfd_[peer] = kPidFallback;
#ifdef SYS_pidfd_open
  long fd = syscall(SYS_pidfd_open, pid, 0);
  if (fd >= 0) pidfd_[peer] = static_cast<int>(fd);
#endif
}

// ---- errors ----------------------------------------------------------------

template <typename Body>
void ShmCommunicator::guarded(const char* op, Body&& body) {
  if (broken_status_ != OSLO_OK)
    fail(broken_status_, "shm: ", op,
         ": communicator is unusable after an earlier error: ", broken_msg_);
  op_ = op;
  try {
    check_abort();
    body();
  } catch (const Error& e) {
    mark_broken(e.status(), e.what());
    throw;
  } catch (const std::bad_alloc&) {
    mark_broken(OSLO_ERR_OUT_OF_MEMORY, "out of memory");
    fail(OSLO_ERR_OUT_OF_MEMORY, "shm: ", op, ": out of memory");
  } catch (const std::exception& e) {
    mark_broken(OSLO_ERR_INTERNAL, e.what());
    fail(OSLO_ERR_INTERNAL, "shm: ", op, ": ", e.what());
  }
}

void ShmCommunicator::mark_broken(oslo_status status, const std::string& msg) noexcept {
  try {
    broken_status_ = status;
    broken_msg_ = msg;
  } catch (...) {
  }
  if (!ctrl_) return;
  uint32_t expected = 0;
  ctrl_[rank_].failed.compare_exchange_strong(expected, 1u + static_cast<uint32_t>(status));
  wake_own_words();
}

// Wakes everyone sleeping on a word this rank writes: its step counter and
// the rings it sends or receives on. Used when it fails or leaves, so that
// waiters re-check and see the failure flag.
void ShmCommunicator::wake_own_words() noexcept {
  futex_wake_all(&ctrl_[rank_].seq);
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    futex_wake_all(&ring_ctrl(rank_, p).written);
    futex_wake_all(&ring_ctrl(p, rank_).consumed);
  }
}

void ShmCommunicator::abort() noexcept {
  if (!ctrl_) return;
  uint32_t expected = 0;
  hdr_->abort_flag.compare_exchange_strong(expected, static_cast<uint32_t>(rank_) + 1);
  // Wake every sleeper of the group, whatever word it sleeps on.
  for (int r = 0; r < size_; ++r) futex_wake_all(&ctrl_[r].seq);
  for (size_t i = 0; i < static_cast<size_t>(size_) * (size_ - 1); ++i) {
    futex_wake_all(&ring_ctrl_[i].written);
    futex_wake_all(&ring_ctrl_[i].consumed);
  }
}

void ShmCommunicator::check_abort() const {
  uint32_t a = hdr_->abort_flag.load(std::memory_order_acquire);
  if (a != 0)
    fail(OSLO_ERR_COMM, "shm: ", op_, ": aborted by rank ", a - 1,
         static_cast<int>(a - 1) == rank_ ? " (this rank)" : "");
}

void ShmCommunicator::check_peer_failed(int peer) const {
  uint32_t f = ctrl_[peer].failed.load(std::memory_order_acquire);
  if (f == 0) return;
  if (f == kFailedLeft)
    fail(OSLO_ERR_COMM, "shm: ", op_, ": ", who(peer), " destroyed its communicator");
  fail(OSLO_ERR_COMM, "shm: ", op_, ": ", who(peer), " left the group after an error (",
       oslo_status_string(static_cast<oslo_status>(f - 1)), ")");
}

bool ShmCommunicator::peer_alive(int peer) {
  watch_peer(peer);
  int fd = pidfd_[peer];
  if (fd == kPidUnknown || fd == kPidUnwatched) return true;
  if (fd >= 0) {
    // A pidfd becomes readable when the process exits, zombie or not.
    pollfd pf{fd, POLLIN, 0};
    return poll(&pf, 1, 0) <= 0;
  }
  pid_t pid = ctrl_[peer].pid.load(std::memory_order_relaxed);
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  // kill() succeeds on a zombie that its parent has not reaped yet.
  return !is_zombie(pid);
}

void ShmCommunicator::peer_died(int peer) const {
  fail(OSLO_ERR_COMM, "shm: ", who(peer), " died during ", op_);
}

// ---- waiting ---------------------------------------------------------------

// Waits until ready(word) holds. Spins first (the peer is usually a few
// hundred nanoseconds away), then sleeps on the futex in slices of at most
// kLivenessPeriodNs, checking between slices that the awaited peer is alive
// and has not failed and that nobody aborted. Returns false on timeout; throws
// on abort, death or failure of the peer.
template <typename Ready>
bool ShmCommunicator::wait_word(std::atomic<uint32_t>& word, std::atomic<uint32_t>& sleepers,
                                int peer, Ready ready, LazyDeadline& dl) {
  if (ready(word.load(std::memory_order_acquire))) return true;
  Clock::time_point start = Clock::now();
  if (!dl.set) {
    dl.set = true;
    dl.end = start + std::chrono::nanoseconds(timeout_ns_);
  }
  if (spin_ns_ > 0) {
    const Clock::time_point spin_end = start + std::chrono::nanoseconds(spin_ns_);
    for (;;) {
      for (int i = 0; i < 64; ++i) {
        OSLO_SHM_PAUSE();
        if (ready(word.load(std::memory_order_acquire))) return true;
      }
      check_abort();
      if (Clock::now() >= spin_end) break;
    }
  }
  for (;;) {
    check_abort();
    if (ctrl_[peer].failed.load(std::memory_order_acquire) != 0) {
      // Whatever it delivered before failing is still good.
      if (ready(word.load(std::memory_order_acquire))) return true;
      check_peer_failed(peer);
    }
    Clock::time_point now = Clock::now();
    if (now >= dl.end) return ready(word.load(std::memory_order_acquire));
    if (now >= next_live_check_[peer]) {
      next_live_check_[peer] = now + std::chrono::nanoseconds(kLivenessPeriodNs);
      if (!peer_alive(peer)) {
        if (ready(word.load(std::memory_order_acquire))) return true;
        peer_died(peer);
      }
    }
    int64_t slice = std::min<int64_t>(
        kLivenessPeriodNs,
        std::chrono::duration_cast<std::chrono::nanoseconds>(dl.end - now).count());
    timespec ts{static_cast<time_t>(slice / 1000000000), static_cast<long>(slice % 1000000000)};
    sleepers.fetch_add(1, std::memory_order_seq_cst);
    uint32_t v = word.load(std::memory_order_seq_cst);
    if (!ready(v)) futex(&word, FUTEX_WAIT, v, &ts);
    sleepers.fetch_sub(1, std::memory_order_seq_cst);
    if (ready(word.load(std::memory_order_acquire))) return true;
  }
}

void ShmCommunicator::wait_all(uint32_t k, LazyDeadline* dl_in) {
  LazyDeadline local;
  LazyDeadline& dl = dl_in ? *dl_in : local;
  auto reached = [k](uint32_t v) { return !seq_before(v, k); };
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    if (!wait_word(ctrl_[p].seq, ctrl_[p].sleepers, p, reached, dl)) {
      std::vector<int> missing;
      for (int q = 0; q < size_; ++q)
        if (q != rank_ && seq_before(ctrl_[q].seq.load(std::memory_order_acquire), k))
          missing.push_back(q);
      if (missing.empty()) continue;  // they all came just now
      timed_out_steps(k, missing);
    }
  }
  all_ge_ = k;
}

void ShmCommunicator::wait_one(int peer, uint32_t k) {
  LazyDeadline dl;
  if (!wait_word(
          ctrl_[peer].seq, ctrl_[peer].sleepers, peer,
          [k](uint32_t v) { return !seq_before(v, k); }, dl))
    timed_out_steps(k, {peer});
}

void ShmCommunicator::timed_out_steps(uint32_t k, const std::vector<int>& missing) {
  std::string names;
  for (int q : missing) names += (names.empty() ? "" : ", ") + who(q);
  fail(OSLO_ERR_TIMEOUT, "shm: ", op_, " timed out after ", timeout_, " s: ", names,
       " did not arrive (step ", k, ")");
}

void ShmCommunicator::check_desc(int peer, uint32_t k, uint32_t desc) const {
  uint64_t d = ctrl_[peer].opdesc.load(std::memory_order_acquire);
  uint32_t step = static_cast<uint32_t>(d >> 32);
  uint32_t theirs = static_cast<uint32_t>(d);
  if (step == k && theirs == desc) return;
  if (seq_before(k, step)) return;  // it has already moved on: it checked us
  bool reduce = (desc & 0xf) == kAllReduce || (desc & 0xf) == kReduceScatter;
  if (step == k) {
    // Same kind and dtype: the op differs (a broadcast's root mod 16), or
    // the hash of count and root does.
    const uint32_t diff = theirs ^ desc;
    const char* why = "";
    if ((diff & 0xff) == 0 && (desc & 0xf) == kBroadcast && (diff & 0xf00) != 0)
      why = " with a different root";
    else if ((diff & 0xfff) == 0)
      why = " with a different count or root";
    fail(OSLO_ERR_INVALID_ARGUMENT, "shm: collective mismatch: this rank (", rank_, ") called ",
         describe(desc, reduce), " but rank ", peer, " called ",
         describe(theirs, (theirs & 0xf) == kAllReduce || (theirs & 0xf) == kReduceScatter), why);
  }
  fail(OSLO_ERR_INVALID_ARGUMENT, "shm: collective mismatch: this rank (", rank_, ") called ",
       describe(desc, reduce), " while rank ", peer,
       " is still inside an earlier collective that needs more steps (a different count?)");
}

// ---- collectives -----------------------------------------------------------

size_t ShmCommunicator::checked_bytes(const char* op, size_t count, oslo_dtype dt,
                                      size_t times) const {
  OSLO_CHECK(dtype_valid(static_cast<int>(dt)), OSLO_ERR_DTYPE, "shm: ", op, ": unknown dtype ",
             static_cast<int>(dt));
  size_t es = dtype_size(dt);
  OSLO_CHECK(count <= SIZE_MAX / es / times, OSLO_ERR_INVALID_ARGUMENT, "shm: ", op, ": count ",
             count, " is too large");
  return count * es;
}

void ShmCommunicator::all_reduce(const void* in, void* out, size_t count, oslo_dtype dt,
                                 oslo_reduce_op op) {
  size_t bytes = checked_bytes("all_reduce", count, dt);
  check_op("all_reduce", op);
  OSLO_CHECK(count == 0 || (in && out), OSLO_ERR_INVALID_ARGUMENT, "shm: all_reduce: null buffer");
  guarded("all_reduce", [&] {
    if (count == 0) return;
    uint32_t desc = make_desc(kAllReduce, dt, op, count, 0);
    auto i = static_cast<const uint8_t*>(in);
    auto o = static_cast<uint8_t*>(out);
    if (bytes <= small_bytes_)
      all_reduce_one_step(i, o, count, dt, op, desc);
    else
      all_reduce_pipelined(i, o, count, dt, op, desc);
  });
}

// Every rank copies its input into its slot, and after one step every rank
// reduces all slots itself, in rank order: one synchronisation, the latency
// floor for small messages.
void ShmCommunicator::all_reduce_one_step(const uint8_t* in, uint8_t* out, size_t count,
                                          oslo_dtype dt, oslo_reduce_op op, uint32_t desc) {
  const size_t bytes = count * dtype_size(dt);
  uint32_t k = begin_step();
  std::memcpy(slot(rank_, k), in, bytes);
  set_desc(k, desc);
  post(k);
  wait_all(k);
  check_descs(k, desc);
  for (int p = 0; p < size_; ++p) srcs_[p] = p == rank_ ? in : slot(p, k);
  transport::reduce(out, srcs_.data(), size_, count, dt, op, size_);
}

// Large messages: chunk c of the message is split into n parts; rank q owns
// part q. In step c each rank copies the parts it does not own into its slot,
// then reduces its own part from its input and the peers' slots into its
// result buffer, and copies the peers' results of chunk c-1 (computed during
// step c-1) into its output. One step per chunk plus one to drain: reduce-
// scatter and all-gather are pipelined, each rank copies in (n-1)/n of the
// data and reduces 1/n of it, and every element is reduced by exactly one
// rank, so all ranks end with the same bits.
void ShmCommunicator::all_reduce_pipelined(const uint8_t* in, uint8_t* out, size_t count,
                                           oslo_dtype dt, oslo_reduce_op op, uint32_t desc) {
  const size_t es = dtype_size(dt);
  const size_t n = static_cast<size_t>(size_);
  const size_t part_cap = part_bytes_ / es;  // elements per part of a full chunk
  const size_t chunk = part_cap * n;
  const size_t nchunks = ceil_div(count, chunk);
  const size_t align = 64 / es;  // keep parts cache-line aligned
  auto part = [&](size_t c, size_t q, size_t* off, size_t* len) {
    const size_t c0 = c * chunk;
    const size_t L = std::min(chunk, count - c0);
    const size_t pl = L == chunk ? part_cap : std::min(part_cap, round_up(ceil_div(L, n), align));
    const size_t s = std::min(q * pl, L);
    const size_t e = std::min((q + 1) * pl, L);
    *off = c0 + s;
    *len = e - s;
  };
  size_t off, len;
  for (size_t c = 0; c <= nchunks; ++c) {
    uint32_t k = begin_step();
    if (c < nchunks) {
      for (size_t q = 0; q < n; ++q) {
        if (static_cast<int>(q) == rank_) continue;
        part(c, q, &off, &len);
        if (len) std::memcpy(slot(rank_, k) + q * part_bytes_, in + off * es, len * es);
      }
    }
    if (c == 0) set_desc(k, desc);
    post(k);
    wait_all(k);
    if (c == 0) check_descs(k, desc);
    if (c < nchunks) {
      part(c, rank_, &off, &len);
      if (len) {
        for (int p = 0; p < size_; ++p)
          srcs_[p] = p == rank_ ? in + off * es : slot(p, k) + rank_ * part_bytes_;
        transport::reduce(result(rank_, k), srcs_.data(), size_, len, dt, op, size_);
        std::memcpy(out + off * es, result(rank_, k), len * es);
      }
    }
    if (c > 0) {
      for (size_t q = 0; q < n; ++q) {
        if (static_cast<int>(q) == rank_) continue;
        part(c - 1, q, &off, &len);
        if (len) std::memcpy(out + off * es, result(static_cast<int>(q), k - 1), len * es);
      }
    }
  }
}

void ShmCommunicator::reduce_scatter(const void* in, void* out, size_t count, oslo_dtype dt,
                                     oslo_reduce_op op) {
  checked_bytes("reduce_scatter", count, dt, static_cast<size_t>(size_));
  check_op("reduce_scatter", op);
  OSLO_CHECK(count == 0 || (in && out), OSLO_ERR_INVALID_ARGUMENT,
             "shm: reduce_scatter: null buffer");
  guarded("reduce_scatter", [&] {
    if (count == 0) return;
    const uint32_t desc = make_desc(kReduceScatter, dt, op, count, 0);
    const size_t es = dtype_size(dt);
    const size_t part_cap = part_bytes_ / es;
    auto i = static_cast<const uint8_t*>(in);
    auto o = static_cast<uint8_t*>(out);
    for (size_t base = 0; base < count; base += part_cap) {
      const size_t len = std::min(part_cap, count - base);
      uint32_t k = begin_step();
      for (int q = 0; q < size_; ++q)
        if (q != rank_)
          std::memcpy(slot(rank_, k) + q * part_bytes_, i + (q * count + base) * es, len * es);
      if (base == 0) set_desc(k, desc);
      post(k);
      wait_all(k);
      if (base == 0) check_descs(k, desc);
      for (int p = 0; p < size_; ++p)
        srcs_[p] = p == rank_ ? i + (rank_ * count + base) * es : slot(p, k) + rank_ * part_bytes_;
      transport::reduce(o + base * es, srcs_.data(), size_, len, dt, op, size_);
    }
  });
}

void ShmCommunicator::all_gather(const void* in, void* out, size_t count, oslo_dtype dt) {
  const size_t bytes = checked_bytes("all_gather", count, dt, static_cast<size_t>(size_));
  OSLO_CHECK(count == 0 || (in && out), OSLO_ERR_INVALID_ARGUMENT, "shm: all_gather: null buffer");
  guarded("all_gather", [&] {
    if (count == 0) return;
    const uint32_t desc = make_desc(kAllGather, dt, 0, count, 0);
    auto i = static_cast<const uint8_t*>(in);
    auto o = static_cast<uint8_t*>(out);
    for (size_t base = 0; base < bytes; base += slot_bytes_) {
      const size_t len = std::min(slot_bytes_, bytes - base);
      uint32_t k = begin_step();
      std::memcpy(slot(rank_, k), i + base, len);
      if (base == 0) set_desc(k, desc);
      post(k);
      wait_all(k);
      if (base == 0) check_descs(k, desc);
      for (int p = 0; p < size_; ++p)
        if (p != rank_) std::memcpy(o + p * bytes + base, slot(p, k), len);
    }
    // Own part last: when in is not out + rank*count the caller may still
    // have it anywhere, and memmove is a no-op when it is.
    if (o + rank_ * bytes != i) std::memmove(o + rank_ * bytes, i, bytes);
  });
}

void ShmCommunicator::broadcast(void* buf, size_t count, oslo_dtype dt, int root) {
  const size_t bytes = checked_bytes("broadcast", count, dt);
  OSLO_CHECK(root >= 0 && root < size_, OSLO_ERR_INVALID_ARGUMENT, "shm: broadcast: root ", root,
             " is outside this group of ", size_);
  OSLO_CHECK(count == 0 || buf, OSLO_ERR_INVALID_ARGUMENT, "shm: broadcast: null buffer");
  guarded("broadcast", [&] {
    if (count == 0) return;
    const uint32_t desc = make_desc(kBroadcast, dt, root & 0xf, count, root);
    auto b = static_cast<uint8_t*>(buf);
    for (size_t base = 0; base < bytes; base += slot_bytes_) {
      const size_t len = std::min(slot_bytes_, bytes - base);
      if (rank_ == root) {
        // Only the root writes, so only it needs the peers to be done with
        // the buffer; after the first chunk it does not wait for them.
        uint32_t k = begin_step();
        std::memcpy(slot(root, k), b + base, len);
        if (base == 0) set_desc(k, desc);
        post(k);
        // The first step is a full exchange of descriptions, so that a rank
        // that names another root (and would otherwise also think itself the
        // root and return at once) is caught on every rank.
        if (base == 0) {
          wait_all(k);
          check_descs(k, desc);
        }
      } else {
        // Posting before reading is allowed: a post promises only that the
        // earlier steps' reads are done, and the root writes the other buffer
        // of the pair next.
        uint32_t k = seq_ + 1;
        if (base == 0) set_desc(k, desc);
        post(k);
        if (base == 0) {
          wait_all(k);
          check_descs(k, desc);
        } else {
          wait_one(root, k);
        }
        std::memcpy(b + base, slot(root, k), len);
      }
    }
  });
}

void ShmCommunicator::barrier() {
  guarded("barrier", [&] {
    const uint32_t desc = make_desc(kBarrier, 0, 0, 0, 0);
    uint32_t k = seq_ + 1;
    set_desc(k, desc);
    post(k);
    wait_all(k);
    check_descs(k, desc);
  });
}

// ---- point to point ----------------------------------------------------------
//
// One byte ring per (sender, receiver). A message is an 8-byte length header
// and the payload. The sender copies as much as fits and returns (eager for
// anything up to the ring size); larger messages stream through the ring in
// pieces while the receiver drains it.

bool ShmCommunicator::wait_ring_space(int peer, uint32_t w, uint32_t need) {
  RingCtrl& rc = ring_ctrl(rank_, peer);
  LazyDeadline dl;
  const uint32_t cap = ring_bytes_;
  return wait_word(
      rc.consumed, rc.consumed_sleepers, peer,
      [w, need, cap](uint32_t c) { return cap - (w - c) >= need; }, dl);
}

bool ShmCommunicator::wait_ring_data(int peer, uint32_t r, uint32_t need) {
  RingCtrl& rc = ring_ctrl(peer, rank_);
  LazyDeadline dl;
  return wait_word(
      rc.written, rc.written_sleepers, peer, [r, need](uint32_t w) { return w - r >= need; }, dl);
}

void ShmCommunicator::ring_write(int peer, const uint8_t* src, size_t n) {
  RingCtrl& rc = ring_ctrl(rank_, peer);
  uint8_t* data = ring_data(rank_, peer);
  const uint32_t cap = ring_bytes_;
  const uint32_t piece = std::max<uint32_t>(cap / kRingPieces, 1);
  while (n > 0) {
    uint32_t w = rc.written.load(std::memory_order_relaxed);
    uint32_t space = cap - (w - rc.consumed.load(std::memory_order_acquire));
    if (space == 0) {
      if (!wait_ring_space(
              peer, w, std::min<uint32_t>(piece, static_cast<uint32_t>(std::min<size_t>(n, cap)))))
        fail(OSLO_ERR_TIMEOUT, "shm: send to rank ", peer, " timed out after ", timeout_,
             " s: ", who(peer), " did not receive (its ring of ", cap, " bytes stayed full)");
      continue;
    }
    uint32_t m = static_cast<uint32_t>(std::min<size_t>(std::min(space, piece), n));
    uint32_t pos = w & (cap - 1);
    uint32_t first = std::min(m, cap - pos);
    std::memcpy(data + pos, src, first);
    if (first < m) std::memcpy(data, src + first, m - first);
    post_word(rc.written, rc.written_sleepers, w + m);
    src += m;
    n -= m;
  }
}

void ShmCommunicator::ring_read(int peer, uint8_t* dst, size_t n) {
  RingCtrl& rc = ring_ctrl(peer, rank_);
  const uint8_t* data = ring_data(peer, rank_);
  const uint32_t cap = ring_bytes_;
  const uint32_t piece = std::max<uint32_t>(cap / kRingPieces, 1);
  while (n > 0) {
    uint32_t r = rc.consumed.load(std::memory_order_relaxed);
    uint32_t avail = rc.written.load(std::memory_order_acquire) - r;
    if (avail == 0) {
      if (!wait_ring_data(peer, r, 1))
        fail(OSLO_ERR_TIMEOUT, "shm: recv from rank ", peer, " timed out after ", timeout_,
             " s: ", who(peer), " did not send the rest of the message");
      continue;
    }
    uint32_t m = static_cast<uint32_t>(std::min<size_t>(std::min(avail, piece), n));
    uint32_t pos = r & (cap - 1);
    uint32_t first = std::min(m, cap - pos);
    std::memcpy(dst, data + pos, first);
    if (first < m) std::memcpy(dst + first, data, m - first);
    post_word(rc.consumed, rc.consumed_sleepers, r + m);
    dst += m;
    n -= m;
  }
}

void ShmCommunicator::send(const void* buf, size_t bytes, int peer) {
  check_peer("send", peer);
  OSLO_CHECK(bytes == 0 || buf, OSLO_ERR_INVALID_ARGUMENT, "shm: send: null buffer");
  guarded("send", [&] {
    const uint64_t hdr = bytes;
    RingCtrl& rc = ring_ctrl(rank_, peer);
    const uint32_t cap = ring_bytes_;
    uint32_t w = rc.written.load(std::memory_order_relaxed);
    uint32_t space = cap - (w - rc.consumed.load(std::memory_order_acquire));
    if (space >= sizeof hdr && bytes <= space - sizeof hdr) {
      // Eager: header and payload in place, one post.
      uint8_t* data = ring_data(rank_, peer);
      auto put = [&](uint32_t at, const uint8_t* src, uint32_t m) {
        uint32_t pos = at & (cap - 1);
        uint32_t first = std::min(m, cap - pos);
        std::memcpy(data + pos, src, first);
        if (first < m) std::memcpy(data, src + first, m - first);
      };
      put(w, reinterpret_cast<const uint8_t*>(&hdr), sizeof hdr);
      if (bytes)
        put(w + sizeof hdr, static_cast<const uint8_t*>(buf), static_cast<uint32_t>(bytes));
      post_word(rc.written, rc.written_sleepers, w + static_cast<uint32_t>(sizeof hdr + bytes));
      return;
    }
    ring_write(peer, reinterpret_cast<const uint8_t*>(&hdr), sizeof hdr);
    ring_write(peer, static_cast<const uint8_t*>(buf), bytes);
  });
}

void ShmCommunicator::recv(void* buf, size_t bytes, int peer) {
  check_peer("recv", peer);
  OSLO_CHECK(bytes == 0 || buf, OSLO_ERR_INVALID_ARGUMENT, "shm: recv: null buffer");
  guarded("recv", [&] {
    RingCtrl& rc = ring_ctrl(peer, rank_);
    const uint32_t cap = ring_bytes_;
    const uint8_t* data = ring_data(peer, rank_);
    uint32_t r = rc.consumed.load(std::memory_order_relaxed);
    if (rc.written.load(std::memory_order_acquire) - r < sizeof(uint64_t) &&
        !wait_ring_data(peer, r, sizeof(uint64_t)))
      fail(OSLO_ERR_TIMEOUT, "shm: recv from rank ", peer, " timed out after ", timeout_,
           " s: ", who(peer), " sent nothing");
    uint64_t hdr;
    uint8_t* h = reinterpret_cast<uint8_t*>(&hdr);
    uint32_t pos = r & (cap - 1);
    uint32_t first = std::min<uint32_t>(sizeof hdr, cap - pos);
    std::memcpy(h, data + pos, first);
    if (first < sizeof hdr) std::memcpy(h + first, data, sizeof hdr - first);
    OSLO_CHECK(hdr == bytes, OSLO_ERR_INVALID_ARGUMENT, "shm: recv: rank ", peer, " sent ", hdr,
               " bytes but this rank expects ", bytes, " (sends and recvs must match in order)");
    uint32_t avail = rc.written.load(std::memory_order_acquire) - r;
    if (avail >= sizeof hdr + bytes) {
      // The whole message is there (the eager case): one copy, one post.
      uint32_t at = (r + sizeof hdr) & (cap - 1);
      uint32_t m = static_cast<uint32_t>(bytes);
      uint32_t f = std::min(m, cap - at);
      if (m) {
        std::memcpy(buf, data + at, f);
        if (f < m) std::memcpy(static_cast<uint8_t*>(buf) + f, data, m - f);
      }
      post_word(rc.consumed, rc.consumed_sleepers, r + static_cast<uint32_t>(sizeof hdr + bytes));
      return;
    }
    post_word(rc.consumed, rc.consumed_sleepers, r + static_cast<uint32_t>(sizeof hdr));
    ring_read(peer, static_cast<uint8_t*>(buf), bytes);
  });
}

}  // namespace

std::unique_ptr<Communicator> create_shm_communicator(Store& store, const std::string& prefix,
                                                      int rank, int size, double timeout_seconds) {
  OSLO_CHECK(size >= 1, OSLO_ERR_INVALID_ARGUMENT, "shm: group size ", size, " must be >= 1");
  OSLO_CHECK(rank >= 0 && rank < size, OSLO_ERR_INVALID_ARGUMENT, "shm: rank ", rank,
             " is outside a group of ", size);
  OSLO_CHECK(timeout_seconds > 0, OSLO_ERR_INVALID_ARGUMENT, "shm: timeout ", timeout_seconds,
             " s must be > 0");
  OSLO_CHECK(!prefix.empty(), OSLO_ERR_INVALID_ARGUMENT, "shm: empty group prefix");
  Deadline deadline(timeout_seconds);
  auto comm = std::make_unique<ShmCommunicator>(rank, size, timeout_seconds);
  comm->connect(store, prefix, deadline);
  return comm;
}

}  // namespace oslo
