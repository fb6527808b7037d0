// The CPU backend: host memory, GEMM through oneDNN's dnnl_sgemm, simple
// element-wise kernels, shared memory between ranks on one host and gloo over
// TCP between hosts. It is the embedded default and the reference the other
// backends are tested against. Why oneDNN: see docs/BENCHMARKS.md (measured
// 1.1-1.4x OpenBLAS on square GEMMs on this machine kind, and as fast as
// OpenBLAS's GEMV for the single-row products of decoding).
#include <omp.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>

#include "backends/cpu/cpu_kernels.hpp"
#include "core/backend/backend.hpp"
#include "core/common/error.hpp"

namespace oslo {
namespace {

class CpuBackend : public Backend {
 public:
  explicit CpuBackend(const BackendOptions& o) : kernels_(o.num_threads) {}

  const char* name() const override { return "cpu"; }
  int dlpack_device_type() const override { return 1; /* kDLCPU */ }
  int device_id() const override { return 0; }

  ~CpuBackend() override {
    for (auto& kv : cache_) std::free(kv.second);
  }

  void* allocate(size_t bytes) override {
    const size_t rounded = round(bytes);
    if (rounded >= kCacheMin) {
      std::lock_guard<std::mutex> lk(cache_mu_);
      auto it = cache_.find(rounded);
      if (it != cache_.end()) {
        void* p = it->second;
        cache_.erase(it);
        cached_bytes_ -= rounded;
        return p;
      }
    }
    // 64-byte alignment for AVX-512 loads.
    void* p = std::aligned_alloc(64, rounded);
    if (!p) fail(OSLO_ERR_OUT_OF_MEMORY, "cpu: cannot allocate ", bytes, " bytes");
    return p;
  }
  // Large blocks are kept for reuse: layers allocate the same scratch sizes on
  // every call, and a fresh mapping of tens of MB costs a page fault per 4 KB
  // (measured 10x on a bf16 GEMV, see bench/linear). Memory may be freed from
  // another thread (a DLPack export outliving its context), hence the lock.
  void deallocate(void* p, size_t bytes) noexcept override {
    if (!p) return;
    const size_t rounded = round(bytes);
    if (rounded >= kCacheMin) {
      std::lock_guard<std::mutex> lk(cache_mu_);
      if (cached_bytes_ + rounded <= kCacheMax) {
        try {
          cache_.emplace(rounded, p);
          cached_bytes_ += rounded;
          return;
        } catch (...) {
          // fall through and free it
        }
      }
    }
    std::free(p);
  }
  void copy(void* dst, const void* src, size_t bytes, CopyKind) override {
    if (bytes && dst != src) std::memmove(dst, src, bytes);
  }
  void fill_zero(void* p, size_t bytes) override {
    if (bytes) std::memset(p, 0, bytes);
  }
  void set_num_threads(int n) override { kernels_.set_num_threads(n); }
  Kernels& kernels() override { return kernels_; }

  // Host memory: groups use oslo's host transports.
  std::unique_ptr<Communicator> create_communicator(Store&, const GroupSpec&) override {
    return nullptr;
  }

 private:
  static size_t round(size_t bytes) { return bytes == 0 ? 64 : (bytes + 63) / 64 * 64; }
  static constexpr size_t kCacheMin = size_t(1) << 20;
  static constexpr size_t kCacheMax = size_t(512) << 20;

  CpuKernels kernels_;
  std::mutex cache_mu_;
  std::multimap<size_t, void*> cache_;  // free blocks by size
  size_t cached_bytes_ = 0;
};

}  // namespace

std::unique_ptr<Backend> create_cpu_backend(const BackendOptions& options) {
  return std::make_unique<CpuBackend>(options);
}

}  // namespace oslo
