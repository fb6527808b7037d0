// The CPU backend: host memory, GEMM through oneDNN's dnnl_sgemm, simple
// element-wise kernels, shared memory between ranks on one host and gloo over
// TCP between hosts. It is the embedded default and the reference the other
// backends are tested against. Why oneDNN: see docs/BENCHMARKS.md (measured
// 1.1-1.4x OpenBLAS on square GEMMs on this machine kind, and as fast as
// OpenBLAS's GEMV for the single-row products of decoding).
#include <omp.h>

#include <cstdlib>
#include <cstring>
#include <new>

#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/gloo/gloo_communicator.hpp"
#include "backends/cpu/shm/shm_communicator.hpp"
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

  void* allocate(size_t bytes) override {
    // 64-byte alignment for AVX-512 loads.
    size_t rounded = (bytes + 63) / 64 * 64;
    if (rounded == 0) rounded = 64;
    void* p = std::aligned_alloc(64, rounded);
    if (!p) fail(OSLO_ERR_OUT_OF_MEMORY, "cpu: cannot allocate ", bytes, " bytes");
    return p;
  }
  void deallocate(void* p, size_t) noexcept override { std::free(p); }
  void copy(void* dst, const void* src, size_t bytes, CopyKind) override {
    if (bytes && dst != src) std::memmove(dst, src, bytes);
  }
  void fill_zero(void* p, size_t bytes) override {
    if (bytes) std::memset(p, 0, bytes);
  }
  void set_num_threads(int n) override { kernels_.set_num_threads(n); }
  Kernels& kernels() override { return kernels_; }

  std::unique_ptr<Communicator> create_communicator(Store& store, const GroupSpec& g) override {
    if (g.same_host)
      return create_shm_communicator(store, g.name, g.rank, g.size, g.timeout_seconds);
    return create_gloo_communicator(store, g.name, g.rank, g.size, g.timeout_seconds,
                                    g.local_address);
  }

 private:
  CpuKernels kernels_;
};

}  // namespace

std::unique_ptr<Backend> create_cpu_backend(const BackendOptions& options) {
  return std::make_unique<CpuBackend>(options);
}

}  // namespace oslo
