// The interface a backend implements: device memory, the f32 compute kernels
// the layers are built from, and communicators for process groups. The core
// only talks to backends through this header, so a new device (CUDA + NCCL,
// libtorch) is a new implementation, never a change to the core.
//
// All pointers passed to Kernels are device pointers of this backend. Every
// kernel is deterministic for a given input and thread count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/comm/communicator.hpp"
#include "core/comm/group.hpp"
#include "core/rendezvous/store.hpp"
#include "oslo.h"

namespace oslo {

class Logger;

class Kernels {
 public:
  virtual ~Kernels() = default;

  // Row-major C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C.
  virtual void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                    const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                    int64_t ldc) = 0;
  // Element type conversion (any float dtype to any float dtype).
  virtual void convert(oslo_dtype dst_dtype, void* dst, oslo_dtype src_dtype, const void* src,
                       size_t n) = 0;
  // y[r, :] += b for r < rows.
  virtual void add_row_vector(float* y, const float* b, int64_t rows, int64_t cols) = 0;
  // out[c] += sum_r y[r, c], summed in row order.
  virtual void accumulate_column_sums(float* out, const float* y, int64_t rows, int64_t cols) = 0;
  // dst[r, 0:cols] = src[r, 0:cols] with leading dimensions dst_ld, src_ld.
  virtual void copy_2d(float* dst, int64_t dst_ld, const float* src, int64_t src_ld, int64_t rows,
                       int64_t cols) = 0;
  // y[i] += x[i]
  virtual void add(float* y, const float* x, size_t n) = 0;
  // x[i] *= s
  virtual void scale(float* x, size_t n, float s) = 0;
  // sum |x|^p (p > 0), or max |x| when p is infinite; accumulated in double.
  virtual double norm_accumulate(const float* x, size_t n, double p) = 0;

  // Embedding rows [start, start + rows) live on this rank: out[t] = table[id - start]
  // for ids in range, else 0. ids are I32 or I64; an id outside [0, vocab) throws.
  virtual void embedding_forward(float* out, const float* table, int64_t start, int64_t rows,
                                 int64_t hidden, const void* ids, oslo_dtype id_dtype, int64_t n,
                                 int64_t vocab) = 0;
  // grad_table[id - start] += grad_out[t] for ids in range, in token order.
  virtual void embedding_backward(float* grad_table, int64_t start, int64_t rows, int64_t hidden,
                                  const void* ids, oslo_dtype id_dtype, int64_t n,
                                  const float* grad_out) = 0;

  // Vocab-parallel cross-entropy pieces over logits [tokens, cols]; only the
  // first `valid` columns are real vocabulary (the rest is padding).
  // row_max[t] = max_c<valid logits[t, c] (-inf if valid == 0).
  virtual void xent_row_max(float* row_max, const float* logits, int64_t tokens, int64_t cols,
                            int64_t valid) = 0;
  // sums[t] = sum_c<valid exp(logits[t, c] - gmax[t]);
  // sums[tokens + t] = logits[t, label - start] if the label is local, else 0.
  // Labels equal to ignore_index contribute nothing; other labels outside
  // [0, vocab) throw.
  virtual void xent_local_sums(float* sums, const float* logits, const float* gmax,
                               const void* labels, oslo_dtype label_dtype, int64_t tokens,
                               int64_t cols, int64_t valid, int64_t start, int64_t vocab,
                               int64_t ignore_index) = 0;
  // grad[t, c] = scale * (exp(logits - gmax) / sumexp - onehot(label)) for real
  // columns of non-ignored tokens, 0 elsewhere.
  virtual void xent_grad(float* grad, const float* logits, const float* gmax, const float* sumexp,
                         const void* labels, oslo_dtype label_dtype, int64_t tokens, int64_t cols,
                         int64_t valid, int64_t start, int64_t ignore_index, float scale) = 0;
};

enum class CopyKind { HostToDevice, DeviceToHost, DeviceToDevice };

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  // DLPack device (DLDeviceType value and index) of this backend's memory.
  virtual int dlpack_device_type() const = 0;
  virtual int device_id() const = 0;

  // Uninitialised device memory (64-byte aligned, valid even for 0 bytes);
  // throws OSLO_ERR_OUT_OF_MEMORY.
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* p, size_t bytes) noexcept = 0;
  virtual void copy(void* dst, const void* src, size_t bytes, CopyKind kind) = 0;
  virtual void fill_zero(void* p, size_t bytes) = 0;

  // Threads the calling thread's compute may use (applied per call).
  virtual void set_num_threads(int n) = 0;
  virtual Kernels& kernels() = 0;

  // Collective over the group's members (size >= 2). nullptr: the backend's
  // memory is host memory and the group uses oslo's host transports.
  virtual std::unique_ptr<Communicator> create_communicator(Store& store,
                                                            const GroupSpec& group) = 0;
};

struct BackendOptions {
  int local_rank = 0;
  int num_threads = 1;
  Logger* logger = nullptr;
};

// "cpu" is built in; any other name is looked up as the plugin
// liboslo_backend_<name>.so exporting oslo_backend_plugin_create_v1.
// Throws OSLO_ERR_BACKEND_UNAVAILABLE naming the backend and the reason.
std::unique_ptr<Backend> create_backend(const std::string& name, const BackendOptions& options);

// A backend linked into liboslo.
struct BuiltinBackend {
  const char* name;
  std::unique_ptr<Backend> (*create)(const BackendOptions& options);
};
// The built-in backends, terminated by an entry with name == nullptr. Defined
// outside the core (backends/builtin.cpp), so the core never includes a
// backend.
const BuiltinBackend* builtin_backends();

}  // namespace oslo
