// The CPU backend: host memory, ops in program order on the calling thread
// (its queue is the program itself, so every op has finished when it
// returns), GEMM through oneDNN. It is the embedded default and the reference
// the other backends are tested against, and it implements the same C table
// (core/backend/oslo_backend.h, ABI v2) a plugin does. Its groups use oslo's
// host transports (it declines comm_create). Since every op has finished when
// it returns, its asynchronous copies are plain copies and its events are
// complete as soon as they are recorded.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "backends/common/oslo_backend_glue.hpp"
#include "backends/cpu/cpu_matmul.hpp"
#include "backends/cpu/cpu_ops.hpp"
#include "backends/cpu/cpu_quant.hpp"
#include "core/backend/oslo_backend.h"
#include "core/common/dtype.hpp"
#include "core/common/error.hpp"

namespace oslo {
namespace cpu {
namespace {

// Blocks of at least kBigBlock bytes are mapped and unmapped directly, so
// that a freed block goes back to the system instead of staying in malloc's
// heap (freed gradients of ZeRO-2 left 0.4 GiB there, measured), and are
// kept for reuse: layers allocate the same scratch sizes on every call, and
// a fresh mapping of tens of MB costs a page fault per 4 KB (measured 10x
// on a bf16 GEMV, see bench/linear).
//
// The cache never makes the footprint (live + cached bytes) exceed the
// largest live total seen so far: a miss that would evicts cached blocks,
// largest first, before it maps a new one. Reuse is free within the peak
// the program needs anyway; beyond it the memory is the program's, not
// the cache's.
constexpr size_t kBigBlock = size_t(1) << 20;
constexpr size_t kCacheMax = size_t(512) << 20;

struct Instance {
  int threads = 1;
  std::string error;
  Matmul matmul;
  // Memory may be freed from another thread (a DLPack export outliving its
  // context, the data-parallel communication thread), hence the lock.
  std::mutex cache_mu;
  std::multimap<size_t, void*> cache;  // by size
  size_t cached_bytes = 0;
  size_t live_bytes = 0;  // big blocks handed out and not freed
  size_t high_water = 0;  // largest live_bytes + cached_bytes so far

  ~Instance() {
    for (auto& kv : cache) munmap(kv.second, kv.first);
  }
};

size_t round_size(size_t bytes) {
  return bytes == 0 ? 64 : (bytes + 63) / 64 * 64;
}
size_t page_round(size_t bytes) {
  const size_t page = 4096;
  return (bytes + page - 1) / page * page;
}

Instance* inst(void* self) {
  return static_cast<Instance*>(self);
}

// The core's errors keep their status and text; everything else is mapped by
// the glue every backend shares (backends/common/oslo_backend_glue.hpp).
struct Messages : oslo_backend_glue::Messages {
  static bool translate(const std::string& where, std::string* message, oslo_status* status) {
    try {
      throw;
    } catch (const Error& e) {
      *message = where + e.what();
      *status = e.status();
      return true;
    } catch (...) {
      return false;
    }
  }
};

// Runs body, turning exceptions into a status and the instance's message.
template <typename Body>
oslo_status guard(void* self, Body&& body) {
  return oslo_backend_glue::guard<Messages, Instance>(self, nullptr, std::forward<Body>(body));
}

oslo_status create(void** self, const oslo_backend_options* o, const char** error) {
  return oslo_backend_glue::create_instance<Messages, Instance>(
      self, error, [&](Instance& I) { I.threads = o && o->num_threads > 0 ? o->num_threads : 1; });
}
void destroy(void* self) {
  delete inst(self);
}
const char* last_error(void* self) {
  return inst(self)->error.c_str();
}
int32_t device_type(void*) {
  return 1; /* kDLCPU */
}
int32_t device_id(void*) {
  return 0;
}
int host_accessible(void*) {
  return 1;
}

oslo_status alloc(void* self, size_t bytes, void** out) {
  return guard(self, [&](Instance& I) {
    const size_t rounded = round_size(bytes);
    if (rounded < kBigBlock) {
      // 64-byte alignment for AVX-512 loads.
      void* p = std::aligned_alloc(64, rounded);
      if (!p) fail(OSLO_ERR_OUT_OF_MEMORY, "cannot allocate ", bytes, " bytes");
      *out = p;
      return;
    }
    const size_t size = page_round(rounded);
    std::vector<std::pair<void*, size_t>> evicted;
    {
      std::lock_guard<std::mutex> lk(I.cache_mu);
      auto it = I.cache.find(size);
      if (it != I.cache.end()) {
        *out = it->second;
        I.cache.erase(it);
        I.cached_bytes -= size;
        I.live_bytes += size;
        return;
      }
      while (!I.cache.empty() && I.live_bytes + I.cached_bytes + size > I.high_water) {
        auto last = std::prev(I.cache.end());
        evicted.emplace_back(last->second, last->first);
        I.cached_bytes -= last->first;
        I.cache.erase(last);
      }
    }
    for (const auto& e : evicted) munmap(e.first, e.second);
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) fail(OSLO_ERR_OUT_OF_MEMORY, "cannot allocate ", bytes, " bytes");
    std::lock_guard<std::mutex> lk(I.cache_mu);
    I.live_bytes += size;
    I.high_water = std::max(I.high_water, I.live_bytes + I.cached_bytes);
    *out = p;
  });
}
void free_(void* self, void* p, size_t bytes) {
  if (!p) return;
  Instance& I = *inst(self);
  const size_t rounded = round_size(bytes);
  if (rounded < kBigBlock) {
    std::free(p);
    return;
  }
  const size_t size = page_round(rounded);
  {
    std::lock_guard<std::mutex> lk(I.cache_mu);
    I.live_bytes -= size;
    if (I.cached_bytes + size <= kCacheMax) {
      try {
        I.cache.emplace(size, p);
        I.cached_bytes += size;
        return;
      } catch (...) {
        // fall through and unmap it
      }
    }
  }
  munmap(p, size);
}
oslo_status copy(void* self, void* dst, const void* src, size_t bytes, oslo_bk_copy_kind) {
  return guard(self, [&](Instance&) {
    if (bytes && dst != src) std::memmove(dst, src, bytes);
  });
}
oslo_status copy_async(void* self, void* dst, const void* src, size_t bytes,
                       oslo_bk_copy_kind kind) {
  return copy(self, dst, src, bytes, kind);  // done when it returns, as every op here
}
oslo_status synchronize(void*) {
  return OSLO_OK;
}
oslo_status set_num_threads(void* self, int n) {
  inst(self)->threads = n > 0 ? n : 1;
  return OSLO_OK;
}

oslo_status convert(void* self, const V* out, const V* x) {
  return guard(self, [&](Instance& I) { cpu::convert(I.threads, *out, *x); });
}
oslo_status fill(void* self, const V* out, double value) {
  return guard(self, [&](Instance& I) { cpu::fill(I.threads, *out, value); });
}
oslo_status matmul(void* self, const V* c, const V* a, const V* b, const V* bias, float alpha,
                   float beta) {
  return guard(self, [&](Instance& I) { I.matmul.run(I.threads, *c, *a, *b, bias, alpha, beta); });
}
oslo_status binary(void* self, oslo_bk_binary op, const V* out, const V* a, const V* b) {
  return guard(self, [&](Instance& I) { cpu::binary(I.threads, op, *out, *a, *b); });
}
oslo_status unary(void* self, oslo_bk_unary op, const V* out, const V* x, float alpha) {
  return guard(self, [&](Instance& I) { cpu::unary(I.threads, op, *out, *x, alpha); });
}
oslo_status unary_backward(void* self, oslo_bk_unary op, const V* gx, const V* x, const V* gy,
                           float alpha) {
  return guard(self, [&](Instance& I) { cpu::unary_backward(I.threads, op, *gx, *x, *gy, alpha); });
}
oslo_status reduce(void* self, oslo_bk_reduce op, const V* out, const V* x, const V* shift,
                   int64_t valid, int accumulate) {
  return guard(self, [&](Instance& I) {
    cpu::reduce(I.threads, op, *out, *x, shift, valid, accumulate != 0);
  });
}
oslo_status sum_rows(void* self, const V* out, const V* x, int accumulate) {
  return guard(self, [&](Instance& I) { cpu::sum_rows(I.threads, *out, *x, accumulate != 0); });
}
oslo_status softmax(void* self, const V* out, const V* x, const V* mask, float scale, int causal,
                    int64_t offset) {
  return guard(self, [&](Instance& I) {
    cpu::softmax(I.threads, *out, *x, mask, scale, causal != 0, offset);
  });
}
oslo_status softmax_backward(void* self, const V* gx, const V* y, const V* gy, float scale) {
  return guard(self, [&](Instance& I) { cpu::softmax_backward(I.threads, *gx, *y, *gy, scale); });
}
oslo_status norm(void* self, const V* out, const V* x, const V* gamma, const V* beta, float eps,
                 int rms) {
  return guard(self,
               [&](Instance& I) { cpu::norm(I.threads, *out, *x, gamma, beta, eps, rms != 0); });
}
oslo_status gather_rows(void* self, const V* out, const V* table, const V* ids, int64_t offset,
                        int64_t limit) {
  return guard(
      self, [&](Instance& I) { cpu::gather_rows(I.threads, *out, *table, *ids, offset, limit); });
}
oslo_status scatter_add_rows(void* self, const V* table, const V* ids, const V* src,
                             int64_t offset) {
  return guard(self,
               [&](Instance& I) { cpu::scatter_add_rows(I.threads, *table, *ids, *src, offset); });
}
oslo_status gather_cols(void* self, const V* out, const V* x, const V* idx, int64_t offset,
                        int64_t limit, int64_t ignore) {
  return guard(self, [&](Instance& I) {
    cpu::gather_cols(I.threads, *out, *x, *idx, offset, limit, ignore);
  });
}
// -- ABI v2 ------------------------------------------------------------------

// An event on a queue where every op is done when it returns: nothing to
// capture, but a real object, so creation and destruction are exercised.
struct CpuEvent {
  int recorded = 0;
};
oslo_status event_create(void* self, void** event) {
  return guard(self, [&](Instance&) { *event = new CpuEvent; });
}
void event_destroy(void*, void* event) {
  delete static_cast<CpuEvent*>(event);
}
oslo_status event_record(void*, void* event) {
  static_cast<CpuEvent*>(event)->recorded = 1;
  return OSLO_OK;
}
oslo_status event_wait(void*, void*) {
  return OSLO_OK;  // the recorded work has finished
}
oslo_status event_synchronize(void*, void*) {
  return OSLO_OK;
}
oslo_status alloc_async(void* self, size_t bytes, void** out) {
  return alloc(self, bytes, out);
}
void free_async(void* self, void* p, size_t bytes) {
  free_(self, p, bytes);
}

// "model name" of /proc/cpuinfo, read once ("cpu" where there is none).
const char* device_name(void*) {
  static const std::string name = [] {
    std::string out = "cpu";
    if (FILE* f = std::fopen("/proc/cpuinfo", "r")) {
      char line[512];
      while (std::fgets(line, sizeof line, f)) {
        if (std::strncmp(line, "model name", 10) != 0) continue;
        const char* colon = std::strchr(line, ':');
        if (!colon) break;
        std::string v = colon + 1;
        while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.erase(v.begin());
        while (!v.empty() && (v.back() == '\n' || v.back() == ' ')) v.pop_back();
        if (!v.empty()) out = v;
        break;
      }
      std::fclose(f);
    }
    return out;
  }();
  return name.c_str();
}
// The host's memory: MemAvailable of /proc/meminfo (else free pages) and
// the physical total.
oslo_status memory_info(void* self, size_t* free_bytes, size_t* total_bytes) {
  return guard(self, [&](Instance&) {
    long page = sysconf(_SC_PAGESIZE), total = sysconf(_SC_PHYS_PAGES);
    long avail = sysconf(_SC_AVPHYS_PAGES);
    if (page <= 0 || total <= 0) fail(OSLO_ERR_NOT_SUPPORTED, "the host's memory size is unknown");
    size_t avail_bytes = avail > 0 ? size_t(avail) * size_t(page) : 0;
    if (FILE* f = std::fopen("/proc/meminfo", "r")) {
      char line[256];
      unsigned long long kb = 0;
      while (std::fgets(line, sizeof line, f))
        if (std::sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
          avail_bytes = size_t(kb) * 1024;
          break;
        }
      std::fclose(f);
    }
    *free_bytes = avail_bytes;
    *total_bytes = size_t(total) * size_t(page);
  });
}
// Every required op in every dtype the core uses, and every fused op
// (attention, residual norm, rotary embedding, product + activation,
// argmax, norm backward, attention backward, paged attention, the int8
// cache's rows and attention over them; AdamW in f32)
// in the float dtypes; dequantize and matmul_quant for the block dtypes.
int op_supported(void* self, oslo_bk_op op, oslo_dtype dtype) {
  if (op >= OSLO_BK_OP_CONVERT && op < OSLO_BK_OP_FUSED_FIRST) return 1;
  if (op == OSLO_BK_OP_DEQUANTIZE || op == OSLO_BK_OP_MATMUL_QUANT)
    return cpu::quant_supported(dtype) ? 1 : 0;
  if (op == OSLO_BK_OP_PACKED_MATMUL) {
    if (dtype_is_block(dtype)) return cpu::quant_packs(dtype) ? 1 : 0;
    int yes = 0;
    guard(self, [&](Instance& I) { yes = I.matmul.can_pack(dtype) ? 1 : 0; });
    return yes;
  }
  if (op == OSLO_BK_OP_ADAMW) return dtype == OSLO_DTYPE_F32 ? 1 : 0;
  // f32 activations against bf16/f16 weights: rounded inside matmul.
  if (op == OSLO_BK_OP_MATMUL_MIXED)
    return dtype == OSLO_DTYPE_BF16 || dtype == OSLO_DTYPE_F16 ? 1 : 0;
  const bool flt = dtype == OSLO_DTYPE_F32 || dtype == OSLO_DTYPE_BF16 || dtype == OSLO_DTYPE_F16;
  return flt && (op == OSLO_BK_OP_ATTENTION || op == OSLO_BK_OP_RESIDUAL_NORM ||
                 op == OSLO_BK_OP_ROPE || op == OSLO_BK_OP_MATMUL_ACT || op == OSLO_BK_OP_ARGMAX ||
                 op == OSLO_BK_OP_NORM_BACKWARD || op == OSLO_BK_OP_ATTENTION_BACKWARD ||
                 op == OSLO_BK_OP_PAGED_ATTENTION || op == OSLO_BK_OP_ATTENTION_KV8 ||
                 op == OSLO_BK_OP_PAGED_ATTENTION_KV8 || op == OSLO_BK_OP_QUANTIZE_ROWS ||
                 op == OSLO_BK_OP_DEQUANTIZE_ROWS)
             ? 1
             : 0;
}
oslo_status matmul_act(void* self, const V* c, const V* a, const V* b, const V* bias,
                       oslo_bk_unary act, const V* gate) {
  return guard(self, [&](Instance& I) {
    const cpu::Matmul::Activation epi{act, gate};
    I.matmul.run(I.threads, *c, *a, *b, bias, 1.f, 0.f, &epi);
  });
}
// Prepacked weights: the handle is a PackedHandle, holding oneDNN's layout of a
// bf16 weight or the eight-row layout of a block-quantized one
// (cpu_quant.hpp's QuantPacked).
struct PackedHandle {
  std::unique_ptr<cpu::Matmul::Packed> dense;
  std::unique_ptr<cpu::QuantPacked> quant;
};
// A packed copy's memory: the instance's allocator (its big blocks are
// mapped, and a model that frees the plain weights for the copies gets the
// plain weights' blocks back for them).
void* packed_alloc(void* self, size_t bytes) {
  void* p = nullptr;
  const oslo_status st = alloc(self, bytes, &p);
  OSLO_CHECK(st == OSLO_OK, st, inst(self)->error);
  return p;
}
oslo_status pack_weight(void* self, const V* w, void** packed, size_t* bytes) {
  return guard(self, [&](Instance& I) {
    OSLO_CHECK(w && packed && bytes, OSLO_ERR_INVALID_ARGUMENT, "pack_weight: NULL argument");
    OSLO_CHECK(w->data || numel(*w) == 0, OSLO_ERR_INVALID_ARGUMENT, "pack_weight: w has no data");
    auto p = std::make_unique<PackedHandle>();
    if (dtype_is_block(w->dtype)) {
      const cpu::QuantMemory mem{packed_alloc, free_, self};
      p->quant = cpu::pack_quant(I.threads, *w, &mem);
      OSLO_CHECK(p->quant, OSLO_ERR_NOT_SUPPORTED, "pack_weight: no packed layout for ",
                 dtype_name(w->dtype), " ", shape_of(*w), " (q8_0, q4_0 and q4_k, 8 rows or more)");
      *bytes = p->quant->bytes();
    } else {
      p->dense = I.matmul.pack(I.threads, *w);
      OSLO_CHECK(p->dense, OSLO_ERR_NOT_SUPPORTED, "pack_weight: no packed layout for ",
                 dtype_name(w->dtype), " ", shape_of(*w), " on this CPU");
      *bytes = p->dense->md.get_size();
    }
    *packed = p.release();
  });
}
oslo_status matmul_packed(void* self, const V* c, const V* a, const V* b, const void* packed,
                          const V* bias, int act_on, oslo_bk_unary act, const V* gate) {
  return guard(self, [&](Instance& I) {
    OSLO_CHECK(c && a && b && packed, OSLO_ERR_INVALID_ARGUMENT, "matmul_packed: NULL argument");
    OSLO_CHECK(act_on || !gate, OSLO_ERR_INVALID_ARGUMENT,
               "matmul_packed: a gate without an activation");
    const auto* h = static_cast<const PackedHandle*>(packed);
    const cpu::Matmul::Activation epi{act, gate};
    if (h->quant) {
      cpu::matmul_quant(I.threads, *c, *a, *b, bias, act_on ? &epi : nullptr, -1, h->quant.get());
      return;
    }
    const cpu::Matmul::Packed* p = h->dense.get();
    OSLO_CHECK(
        b->ndim == 2 && b->dtype == OSLO_DTYPE_BF16 && b->shape[0] == p->K && b->shape[1] == p->N,
        OSLO_ERR_INVALID_ARGUMENT, "matmul_packed: b ", dtype_name(b->dtype), " ", shape_of(*b),
        " is not the bf16 [", p->K, ", ", p->N, "] weight the packed copy was made from");
    I.matmul.run(I.threads, *c, *a, *b, bias, 1.f, 0.f, act_on ? &epi : nullptr, p);
  });
}
void packed_free(void*, void* packed) {
  delete static_cast<PackedHandle*>(packed);
}
// The block-quantized copies hold the whole weight (the groups and the rows
// past them); oneDNN's bf16 ones do not (products of some row counts read b).
oslo_status unpack_weight(void* self, const void* packed, const V* w) {
  return guard(self, [&](Instance& I) {
    OSLO_CHECK(packed, OSLO_ERR_INVALID_ARGUMENT, "unpack_weight: NULL packed copy");
    const auto* h = static_cast<const PackedHandle*>(packed);
    OSLO_CHECK(h->quant, OSLO_ERR_NOT_SUPPORTED,
               "unpack_weight: a bf16 packed copy does not hold the whole weight");
    if (w) cpu::unpack_quant(I.threads, *h->quant, *w);
  });
}
oslo_status argmax(void* self, const V* index, const V* value, const V* x, int64_t valid) {
  return guard(self, [&](Instance& I) { cpu::argmax(I.threads, *index, *value, *x, valid); });
}
oslo_status adamw(void* self, const V* p, const V* g, const V* m, const V* v, float decay,
                  float beta1, float beta2, float step_size, float bc2_sqrt, float eps) {
  return guard(self, [&](Instance& I) {
    cpu::adamw(I.threads, *p, *g, *m, *v, decay, beta1, beta2, step_size, bc2_sqrt, eps);
  });
}
oslo_status norm_backward(void* self, const V* gx, const V* ggamma, const V* gbeta, const V* x,
                          const V* gamma, const V* dy, float eps, int rms) {
  return guard(self, [&](Instance& I) {
    cpu::norm_backward(I.threads, *gx, ggamma, gbeta, *x, gamma, *dy, eps, rms != 0);
  });
}
oslo_status attention(void* self, const V* out, const V* q, const V* k, const V* v, const V* mask,
                      float scale, int causal, int64_t offset) {
  return guard(self, [&](Instance& I) {
    cpu::attention(I.threads, *out, *q, *k, *v, mask, scale, causal != 0, offset);
  });
}
oslo_status quantize_rows(void* self, const V* q, const V* scale, const V* x) {
  return guard(self, [&](Instance& I) {
    OSLO_CHECK(q && scale && x, OSLO_ERR_INVALID_ARGUMENT, "quantize_rows: NULL argument");
    cpu::quantize_rows(I.threads, *q, *scale, *x);
  });
}
oslo_status dequantize_rows(void* self, const V* out, const V* q, const V* scale) {
  return guard(self, [&](Instance& I) {
    OSLO_CHECK(out && q && scale, OSLO_ERR_INVALID_ARGUMENT, "dequantize_rows: NULL argument");
    cpu::dequantize_rows(I.threads, *out, *q, *scale);
  });
}
oslo_status attention_kv8(void* self, const V* out, const V* q, const V* k, const V* k_scale,
                          const V* v, const V* v_scale, const V* mask, float scale, int causal,
                          int64_t offset) {
  return guard(self, [&](Instance& I) {
    OSLO_CHECK(out && q && k && k_scale && v && v_scale, OSLO_ERR_INVALID_ARGUMENT,
               "attention_kv8: NULL argument");
    cpu::attention_kv8(I.threads, *out, *q, *k, *k_scale, *v, *v_scale, mask, scale, causal != 0,
                       offset);
  });
}
oslo_status attention_backward(void* self, const V* dq, const V* dk, const V* dv, const V* q,
                               const V* k, const V* v, const V* dout, const V* mask, float scale,
                               int causal, int64_t offset) {
  return guard(self, [&](Instance& I) {
    cpu::attention_backward(I.threads, *dq, *dk, *dv, *q, *k, *v, *dout, mask, scale, causal != 0,
                            offset);
  });
}
oslo_status paged_attention(void* self, const V* out, const V* q, const V* k_pool, const V* v_pool,
                            const V* block_table, const int64_t* chunks, int64_t num_chunks,
                            float scale) {
  return guard(self, [&](Instance& I) {
    cpu::paged_attention(I.threads, *out, *q, *k_pool, *v_pool, *block_table, chunks, num_chunks,
                         scale);
  });
}
oslo_status paged_attention_kv8(void* self, const V* out, const V* q, const V* k_pool,
                                const V* k_scale, const V* v_pool, const V* v_scale,
                                const V* block_table, const int64_t* chunks, int64_t num_chunks,
                                float scale) {
  return guard(self, [&](Instance& I) {
    OSLO_CHECK(out && q && k_pool && k_scale && v_pool && v_scale && block_table,
               OSLO_ERR_INVALID_ARGUMENT, "paged_attention_kv8: NULL argument");
    cpu::paged_attention_kv8(I.threads, *out, *q, *k_pool, *k_scale, *v_pool, *v_scale,
                             *block_table, chunks, num_chunks, scale);
  });
}
// Block-quantized weights (cpu_quant.cpp).
oslo_status dequantize(void* self, const V* out, const V* w) {
  return guard(self, [&](Instance& I) {
    OSLO_CHECK(out && w, OSLO_ERR_INVALID_ARGUMENT, "dequantize: NULL argument");
    cpu::dequantize(I.threads, *out, *w);
  });
}
oslo_status matmul_quant(void* self, const V* c, const V* a, const V* w, const V* bias, int act_on,
                         oslo_bk_unary act, const V* gate) {
  return guard(self, [&](Instance& I) {
    OSLO_CHECK(c && a && w, OSLO_ERR_INVALID_ARGUMENT, "matmul_quant: NULL argument");
    OSLO_CHECK(act_on || !gate, OSLO_ERR_INVALID_ARGUMENT,
               "matmul_quant: a gate without an activation");
    const cpu::Matmul::Activation epi{act, gate};
    cpu::matmul_quant(I.threads, *c, *a, *w, bias, act_on ? &epi : nullptr);
  });
}
oslo_status residual_norm(void* self, const V* out, const V* x, const V* y, const V* bias,
                          const V* gamma, const V* beta, float eps, int rms) {
  return guard(self, [&](Instance& I) {
    cpu::residual_norm(I.threads, *out, *x, y, bias, gamma, beta, eps, rms != 0);
  });
}
oslo_status rope(void* self, const V* x, const V* cos, const V* sin) {
  return guard(self, [&](Instance& I) { cpu::rope(I.threads, *x, *cos, *sin); });
}
int64_t native_stream(void*) {
  return 0;  // program order, no native stream
}
oslo_status stream_wait_event(void*, int64_t, void*) {
  return OSLO_OK;  // the work before the event has finished: any stream sees it
}

oslo_status scatter_add_cols(void* self, const V* x, const V* idx, int64_t offset, int64_t ignore,
                             float value) {
  return guard(self, [&](Instance& I) {
    cpu::scatter_add_cols(I.threads, *x, *idx, offset, ignore, value);
  });
}

// The table (no comm_* entries: host transports; no staging entries: its
// memory is host memory).
struct Table {
  static constexpr const char* name = "cpu";
  OSLO_BACKEND_ENTRIES(REQUIRED, )
  OSLO_BACKEND_ENTRIES(V2_QUEUE, )
  OSLO_BACKEND_ENTRIES(FUSED, )
  OSLO_BACKEND_ENTRIES(PACKED, )
  OSLO_BACKEND_ENTRIES(TRAIN, )
  OSLO_BACKEND_ENTRIES(SERVE, )
  OSLO_BACKEND_ENTRIES(QUANT, )
  OSLO_BACKEND_ENTRIES(KV8, )
  OSLO_BACKEND_ENTRIES(KV8_ATTENTION, )
  OSLO_BACKEND_ENTRIES(UNPACK, )
  OSLO_BACKEND_ENTRIES(PAGED_KV8, )
};

}  // namespace
}  // namespace cpu

const oslo_backend_iface* cpu_backend_table() {
  static const oslo_backend_iface table = oslo_backend_glue::make_table<cpu::Table>();
  return &table;
}

}  // namespace oslo
