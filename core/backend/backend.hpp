// The core's side of the backend seam: a C++ handle over a backend's C table
// (core/backend/oslo_backend.h). Every entry's status becomes an oslo::Error
// naming the backend and the op, so layers read like ordinary C++. The core
// reaches a backend only through this class and the registry below; it never
// includes a backend's folder.
//
// Ordering: ops are enqueued on the backend's one queue in call order; the
// host waits only in copy (HostToDevice / DeviceToHost), synchronize,
// Event::synchronize and in collectives (see oslo_backend.h).
//
// The entries of backend ABI v2 are optional; each wrapper below supplies the
// fallback oslo_backend.h names when the backend lacks one (a v1 plugin lacks
// them all), so callers use them unconditionally.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/backend/oslo_backend.h"
#include "core/comm/communicator.hpp"
#include "core/comm/group.hpp"
#include "core/rendezvous/store.hpp"
#include "oslo.h"

namespace oslo {

// A strided view (see oslo_bk_view); built from tensors by core/tensor/view.hpp.
struct View : oslo_bk_view {
  View() : oslo_bk_view{} {}
  int64_t rows() const;  // product of all dimensions but the last (1 for ndim 0)
  int64_t cols() const;  // last dimension (1 for ndim 0)
  int64_t numel() const;
  bool contiguous() const;
};

// A contiguous row-major view of `shape` at data.
View make_view(void* data, oslo_dtype dtype, const std::vector<int64_t>& shape);

enum class CopyKind { HostToDevice, DeviceToHost, DeviceToDevice };

struct BackendOptions {
  int local_rank = 0;
  int num_threads = 1;
  std::string extra_json = "{}";
};

class Event;
class PackedWeight;

class Backend {
 public:
  // Takes the (already validated) table and an instance it created.
  Backend(const oslo_backend_iface& table, void* self);
  ~Backend();
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  const char* name() const { return t_.name; }
  // The backend ABI the table implements (1 or 2).
  uint32_t abi_version() const { return t_.abi_version; }
  int dlpack_device_type() const;
  int device_id() const;
  bool host_accessible() const;

  // Uninitialised memory (64-byte aligned, valid for 0 bytes); throws
  // OSLO_ERR_OUT_OF_MEMORY.
  void* allocate(size_t bytes);
  void deallocate(void* p, size_t bytes) noexcept;
  void copy(void* dst, const void* src, size_t bytes, CopyKind kind);
  void synchronize();
  void set_num_threads(int n);

  // -- ABI v2, with fallbacks ---------------------------------------------
  // Enqueued copy that does not wait (host memory must stay valid until a
  // wait point); without copy_async: copy(), which waits.
  void copy_async(void* dst, const void* src, size_t bytes, CopyKind kind);
  // Stream-ordered memory; without the entries: allocate / deallocate.
  void* allocate_async(size_t bytes);
  void deallocate_async(void* p, size_t bytes) noexcept;
  // Whether the backend has events (else Event falls back to host waits).
  bool has_events() const { return t_.event_create != nullptr; }
  // The device's name (without device_name: the backend's name).
  std::string device_name() const;
  // Free and total bytes of the device's memory; throws
  // OSLO_ERR_NOT_SUPPORTED when the backend cannot tell.
  void memory_info(size_t* free_bytes, size_t* total_bytes);
  // Whether the backend implements op for dtype (without op_supported: yes
  // for the required ops, no for fused ones).
  bool op_supported(oslo_bk_op op, oslo_dtype dtype) const;
  // The queue as DLPack's stream argument spells it, 0 if not a native stream.
  int64_t native_stream() const;
  // Makes the foreign native stream (a DLPack stream value of this device
  // type) wait for the work enqueued so far on this queue: an event recorded
  // here and stream_wait_event; without it the host waits for the event;
  // without events it synchronizes.
  void make_stream_wait(int64_t stream);

  // Ops (see oslo_backend.h for their exact meaning).
  void convert(const View& out, const View& x);
  void fill(const View& out, double value);
  void matmul(const View& c, const View& a, const View& b, const View* bias = nullptr,
              float alpha = 1.f, float beta = 0.f);
  void binary(oslo_bk_binary op, const View& out, const View& a, const View& b);
  void unary(oslo_bk_unary op, const View& out, const View& x, float alpha = 0.f);
  void unary_backward(oslo_bk_unary op, const View& grad_x, const View& x, const View& grad_out,
                      float alpha = 0.f);
  void reduce(oslo_bk_reduce op, const View& out, const View& x, const View* shift = nullptr,
              int64_t valid = -1, bool accumulate = false);
  void sum_rows(const View& out, const View& x, bool accumulate);
  void softmax(const View& out, const View& x, const View* mask, float scale, bool causal,
               int64_t causal_offset);
  void softmax_backward(const View& grad_x, const View& y, const View& grad_y, float scale);
  void norm(const View& out, const View& x, const View* gamma, const View* beta, float eps,
            bool rms);
  void gather_rows(const View& out, const View& table, const View& ids, int64_t offset,
                   int64_t limit);
  void scatter_add_rows(const View& table, const View& ids, const View& src, int64_t offset);
  void gather_cols(const View& out, const View& x, const View& idx, int64_t offset, int64_t limit,
                   int64_t ignore);
  void scatter_add_cols(const View& x, const View& idx, int64_t offset, int64_t ignore,
                        float value);

  // -- fused ops (oslo_backend.h): the backend's entry when op_supported()
  // says yes for the dtype and fused ops are enabled, else the composition
  // of the required ops in core/backend/fused.cpp (the reference).
  void attention(const View& out, const View& q, const View& k, const View& v, const View* mask,
                 float scale, bool causal, int64_t causal_offset);
  void residual_norm(const View& out, const View& x, const View* y, const View* bias,
                     const View* gamma, const View* beta, float eps, bool rms);
  void rope(const View& x, const View& cos, const View& sin);
  // c = act(a @ b + bias) * gate (gate may be c itself; bias, gate nullable).
  void matmul_act(const View& c, const View& a, const View& b, const View* bias, oslo_bk_unary act,
                  const View* gate);
  // Per row of x [rows, n]: index (i64 [rows]) and value (f32 [rows]) of the
  // largest of the first `valid` elements (NaN wins; ties: lowest index).
  void argmax(const View& index, const View& value, const View& x, int64_t valid = -1);
  // The gradient of norm(): grad_x (may be dy itself) overwritten; grad_gamma
  // and grad_beta ([H] f32, nullable) accumulated.
  void norm_backward(const View& grad_x, const View* grad_gamma, const View* grad_beta,
                     const View& x, const View* gamma, const View& dy, float eps, bool rms);
  // The gradients of attention() (oslo_backend.h's attention_backward): dq
  // [B, Hq, S, D], dk and dv [B, Hkv, T, D] overwritten.
  void attention_backward(const View& dq, const View& dk, const View& dv, const View& q,
                          const View& k, const View& v, const View& dout, const View* mask,
                          float scale, bool causal, int64_t causal_offset);
  // One serving step's causal attention over a paged KV cache
  // (oslo_backend.h's paged_attention): out and q [tokens, Hq, D], the
  // pools [num_blocks, Hkv, block_size, D] (each block contiguous),
  // block_table [num_chunks, M] I64 in the backend's memory, and chunks the
  // host array of num_chunks triples (row, start, n). Throws OSLO_ERR_SHAPE,
  // OSLO_ERR_DTYPE or OSLO_ERR_INVALID_ARGUMENT (a block id outside the
  // pools, overlapping chunks) naming the problem.
  void paged_attention(const View& out, const View& q, const View& k_pool, const View& v_pool,
                       const View& block_table, const int64_t* chunks, int64_t num_chunks,
                       float scale);
  // paged_attention() over an int8 paged cache (oslo_backend.h's
  // paged_attention_kv8): pools [num_blocks, Hkv, block_size, D] I8 and
  // their scales [num_blocks, Hkv, block_size] f32, all contiguous. The
  // backend's entry, else the composition: the blocks the chunks read (the
  // table read back to the host) dequantized into scratch pools of q's
  // dtype, then paged_attention() with the table renumbered. Throws as
  // paged_attention(), and OSLO_ERR_DTYPE / OSLO_ERR_SHAPE for the pools'
  // and scales' dtypes and shapes.
  void paged_attention_kv8(const View& out, const View& q, const View& k_pool, const View& k_scale,
                           const View& v_pool, const View& v_scale, const View& block_table,
                           const int64_t* chunks, int64_t num_chunks, float scale);
  // Its composed path, unchecked (bench_paged_attention times the entry
  // against it).
  void compose_paged_attention_kv8(const View& out, const View& q, const View& k_pool,
                                   const View& k_scale, const View& v_pool, const View& v_scale,
                                   const View& block_table, const int64_t* chunks,
                                   int64_t num_chunks, float scale);
  // The values of a block-quantized weight w [N, K] (oslo_backend.h's
  // dequantize) into out [N, K], any float dtype: the backend's entry, else
  // the host reference of core/quant (through copy() when the backend's
  // memory is not the host's). Throws OSLO_ERR_DTYPE (w not block-quantized,
  // out not float) or OSLO_ERR_SHAPE (shapes differ, rows not whole blocks,
  // w's row stride not whole blocks or its column stride not 1).
  void dequantize(const View& out, const View& w);
  // c = act(a @ w^T + bias) * gate (act null: c = a @ w^T + bias, gate must
  // be null) with w [N, K] block-quantized (oslo_backend.h's matmul_quant):
  // a [M, K] f32, c [M, N] f32, bias [N] and gate [M, N] f32. The backend's
  // entry (which may quantize a to 8 bits per block, within the bound
  // oslo_backend.h states), else w dequantized into f32 scratch and
  // matmul_act/matmul. Throws OSLO_ERR_DTYPE or OSLO_ERR_SHAPE naming the
  // operand.
  void matmul_quant(const View& c, const View& a, const View& w, const View* bias,
                    const oslo_bk_unary* act, const View* gate);
  // The composed path of matmul_quant (what the conformance suite compares
  // the entry with).
  void compose_matmul_quant(const View& c, const View& a, const View& w, const View* bias,
                            const oslo_bk_unary* act, const View* gate);
  // The int8 KV cache's rows (oslo_backend.h's quantize_rows and
  // dequantize_rows): x / out [..., D] float (2-4 dimensions, unit last
  // stride), q the same shape i8, scale [...] f32. quantize_rows writes q
  // and scale (one f32 scale per row: max |x| / 127); dequantize_rows
  // writes out = q * scale. The backend's entries, else the host reference
  // (core/backend/fused_kv8.cpp), exact either way. Throws OSLO_ERR_DTYPE or
  // OSLO_ERR_SHAPE naming the operand.
  void quantize_rows(const View& q, const View& scale, const View& x);
  void dequantize_rows(const View& out, const View& q, const View& scale);
  // attention() over an int8 KV cache (oslo_backend.h's attention_kv8): k
  // and v [B, Hkv, T, D] i8, k_scale and v_scale [B, Hkv, T] f32, the rest
  // as attention(). The backend's entry, else the rows dequantized to q's
  // dtype (dequantize_rows) and attention().
  void attention_kv8(const View& out, const View& q, const View& k, const View& k_scale,
                     const View& v, const View& v_scale, const View* mask, float scale, bool causal,
                     int64_t causal_offset);
  // One AdamW update in place (oslo_backend.h's adamw: f32, contiguous).
  void adamw(const View& p, const View& g, const View& m, const View& v, float decay, float beta1,
             float beta2, float step_size, float bc2_sqrt, float eps);
  // Whether the fused entries may be used (default: yes). Off, every fused op
  // is composed: how tests and benchmarks compare the two paths.
  void set_fused_enabled(bool on) { fused_ = on; }
  bool fused_enabled() const { return fused_; }
  // Whether the backend's own fused entry runs `op` for dtype.
  bool uses_fused(oslo_bk_op op, oslo_dtype dtype) const;

  // Prepacked weights (oslo_backend.h's pack_weight/matmul_packed/
  // packed_free). pack_weight() returns the backend's packed copy of w (a
  // [K, N] matmul b operand, or a block-quantized weight [N, K] as
  // matmul_quant() takes it), or nullptr when the backend keeps none for it
  // (no entries, op_supported says no, fused ops or packing of w's kind
  // switched off, or the backend declines the shape). `self` must own this
  // backend: the copy keeps it alive and frees itself through it.
  static std::unique_ptr<PackedWeight> pack_weight(const std::shared_ptr<Backend>& self,
                                                   const View& w);
  // c = act(a @ b + bias) * gate (act nullptr: c = a @ b + bias) through the
  // packed copy p of b; the checks of matmul_act(). With a block-quantized
  // b [N, K]: matmul_quant()'s product, checks and error bound.
  void matmul_packed(const View& c, const View& a, const View& b, const PackedWeight& p,
                     const View* bias, const oslo_bk_unary* act, const View* gate);
  // Whether pack_weight() may pack float weights and block-quantized ones
  // (default: yes; a context sets them from OSLO_PREPACK: float weights
  // only with 1, block-quantized ones unless 0).
  void set_prepack_enabled(bool dense, bool quant) {
    prepack_ = dense;
    prepack_quant_ = quant;
  }
  bool prepack_enabled(bool quant = false) const { return quant ? prepack_quant_ : prepack_; }

  // Recorded work (oslo_backend.h's graph_begin/graph_end). graph_begin()
  // returns false, recording nothing, when the backend has no graphs or has
  // them switched off: the caller then issues the step directly.
  // graph_end(true) enqueues what was recorded; graph_end(false) discards it.
  bool graph_begin();
  void graph_end(bool launch);

  // Staging for host communicators (oslo_backend.h's check_memory,
  // host_alloc, host_free). check_memory() returns "" when [p, p + bytes) is
  // this backend's device memory (or the backend cannot tell: no entry),
  // else the backend's reason it is not. Any thread.
  std::string check_memory(const void* p, size_t bytes) const;
  bool has_memory_check() const { return t_.check_memory != nullptr; }
  // Page-locked host memory where the backend offers it, else ordinary
  // (64-byte aligned) host memory; throws OSLO_ERR_OUT_OF_MEMORY. Release
  // with host_deallocate(); any thread.
  void* host_allocate(size_t bytes);
  void host_deallocate(void* p) noexcept;

  // The backend's own communicator for a group (collective over its
  // members), or nullptr: the group then uses oslo's host transports.
  std::unique_ptr<Communicator> create_communicator(Store& store, const GroupSpec& group);

 private:
  friend class Event;
  [[noreturn]] void raise(oslo_status st, const char* op) const;
  void check(oslo_status st, const char* op) const {
    if (st != OSLO_OK) raise(st, op);
  }

  void compose_attention(const View& out, const View& q, const View& k, const View& v,
                         const View* mask, float scale, bool causal, int64_t causal_offset);
  void compose_residual_norm(const View& out, const View& x, const View* y, const View* bias,
                             const View* gamma, const View* beta, float eps, bool rms);
  void compose_rope(const View& x, const View& cos, const View& sin);
  void compose_matmul_act(const View& c, const View& a, const View& b, const View* bias,
                          oslo_bk_unary act, const View* gate);
  void compose_argmax(const View& index, const View& value, const View& x, int64_t valid);
  void compose_norm_backward(const View& grad_x, const View* grad_gamma, const View* grad_beta,
                             const View& x, const View* gamma, const View& dy, float eps, bool rms);
  void compose_attention_backward(const View& dq, const View& dk, const View& dv, const View& q,
                                  const View& k, const View& v, const View& dout, const View* mask,
                                  float scale, bool causal, int64_t causal_offset);
  void compose_paged_attention(const View& out, const View& q, const View& k_pool,
                               const View& v_pool, const View& block_table, const int64_t* chunks,
                               int64_t num_chunks, float scale);
  void compose_adamw(const View& p, const View& g, const View& m, const View& v, float decay,
                     float beta1, float beta2, float step_size, float bc2_sqrt, float eps);

  void check_matmul_act(const View& c, const View& a, const View& b, const oslo_bk_unary* act,
                        const View* gate) const;
  // matmul_quant()'s checks; false when there is nothing to compute.
  bool check_matmul_quant(const View& c, const View& a, const View& w, const View* bias,
                          const oslo_bk_unary* act, const View* gate) const;

  oslo_backend_iface t_;  // the plugin's table, entries past its struct_size NULL
  void* self_;
  bool fused_ = true;
  bool prepack_ = true;
  bool prepack_quant_ = true;
  friend class PackedWeight;
};

// A weight's packed copy made by Backend::pack_weight(): what it was made
// from (data, dtype, shape) and the backend's handle, freed on destruction.
// Not copyable; not thread-safe (one owner).
class PackedWeight {
 public:
  PackedWeight(std::shared_ptr<Backend> be, void* handle, size_t bytes, const View& w)
      : be_(std::move(be)), handle_(handle), bytes_(bytes), w_(w) {}
  ~PackedWeight();
  PackedWeight(const PackedWeight&) = delete;
  PackedWeight& operator=(const PackedWeight&) = delete;
  const void* handle() const { return handle_; }
  size_t bytes() const { return bytes_; }
  // Whether b is the view this copy was made from.
  bool made_from(const View& b) const;
  // Whether the copy holds the whole weight (oslo_backend.h's unpack_weight):
  // its products never read the plain weight, whose memory the owner may
  // then free. Not thread-safe with products through the copy (the two
  // below change the view it was made from).
  bool whole() const { return whole_; }
  // The plain weight's memory is gone: products pass it with data NULL.
  // OSLO_ERR_INTERNAL unless whole().
  void plain_released();
  // Writes the weight back into data (new memory of the plain weight's
  // bytes, same dtype, shape and strides) and makes it the plain weight
  // again. OSLO_ERR_INTERNAL unless whole(); the backend's errors.
  void restore_plain(void* data);

 private:
  friend class Backend;
  std::shared_ptr<Backend> be_;
  void* handle_;
  size_t bytes_;
  View w_;
  bool whole_ = false;
};

// An event of a backend (ABI v2's events, see oslo_backend.h): record() on
// one instance's queue, wait() by the same or another instance of the same
// backend on the same device, synchronize() from the host. Without events in
// the backend it falls back to host waits: record() synchronizes the
// recording queue, so wait() and synchronize() have nothing left to wait for.
// The backend instance must outlive the event.
class Event {
 public:
  explicit Event(Backend& owner);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  // Captures the work enqueued on the owner's queue so far.
  void record();
  // `queue` (the owner or another instance of its backend) waits on the
  // device for the captured work; the host does not block.
  void wait(Backend& queue);
  // The host waits for the captured work.
  void synchronize();
  // The backend's event (nullptr without events).
  void* native() const { return ev_; }

 private:
  Backend& b_;
  void* ev_ = nullptr;
};

// A backend linked into liboslo.
struct BuiltinBackend {
  const char* name;
  const oslo_backend_iface* (*table)();
};
// The built-in backends, terminated by an entry with name == nullptr. Defined
// outside the core (backends/builtin.cpp), so the core never includes a
// backend.
const BuiltinBackend* builtin_backends();

// Checks a table's version, size and required entries and copies it with
// entries past its struct_size set to NULL. Throws
// OSLO_ERR_BACKEND_UNAVAILABLE naming what is wrong.
oslo_backend_iface validate_backend_table(const oslo_backend_iface* table, const std::string& from);

// "cpu" is built in; any other name is looked up as the plugin
// liboslo_backend_<name>.so (OSLO_BACKEND_PATH, next to liboslo, then the
// loader's search path) exporting oslo_backend_plugin_v2 or
// oslo_backend_plugin_v1. Throws OSLO_ERR_CONFIG for a malformed
// name and OSLO_ERR_BACKEND_UNAVAILABLE naming the backend and the reason.
std::shared_ptr<Backend> create_backend(const std::string& name, const BackendOptions& options);

}  // namespace oslo
