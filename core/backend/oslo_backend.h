/*
 * oslo_backend.h - the interface a device backend implements (backend ABI v2).
 *
 * A backend gives oslo memory on one device, an execution queue on it, the
 * compute ops layers and models are built from, and (optionally) its own
 * communicators. The CPU backend is linked into liboslo and registers this same
 * table; any other backend is a plugin, a shared library
 * liboslo_backend_<name>.so exporting
 *
 *   const oslo_backend_iface *oslo_backend_plugin_v2(void);
 *
 * (or, for a plugin written against ABI v1, oslo_backend_plugin_v1; see
 * "Versioning").
 *
 * Why a C table and not a C++ interface: a plugin may be built by another
 * compiler, against another C++ standard library ABI (the libtorch in a pip
 * wheel of torch 2.x before 2.7 uses the pre-C++11 std::string), and must not
 * link liboslo's hidden internals. A table of C function pointers with a
 * version and a size crosses all of that; the core wraps it in a C++ class
 * (core/backend/backend.hpp) that turns statuses into exceptions and supplies
 * the fallbacks of the optional entries.
 *
 * Versioning. The table only grows: entries are appended, never moved,
 * removed or changed in meaning (static asserts in oslo_backend_slots.h, included at the end, pin
 * every slot's offset, so a reordering fails to compile).
 *   - `abi_version` is the ABI the plugin was written against: 1 or 2.
 *     liboslo loads every version from 1 up to OSLO_BACKEND_ABI_VERSION and
 *     refuses a newer one (its entries may mean things this liboslo does not
 *     know; the message says to rebuild the backend).
 *   - `struct_size` is sizeof(oslo_backend_iface) as the plugin was built:
 *     at least OSLO_BACKEND_IFACE_V1_SIZE (every entry up to comm_abort). The
 *     core treats an entry beyond struct_size as NULL.
 *   - Every entry added after v1 is optional: NULL (or beyond struct_size)
 *     means "not provided" and the core uses the fallback written next to it
 *     (an asynchronous copy becomes copy(), which waits as v1 says; without
 *     events the host synchronizes; ...). So a v1 plugin keeps loading and
 *     computing unchanged.
 *   - The plugin symbol: liboslo looks up oslo_backend_plugin_v2 first, then
 *     oslo_backend_plugin_v1. The table returned decides (abi_version and
 *     struct_size), not the symbol's name. A v2 plugin that also wants to
 *     load into a v1 liboslo exports oslo_backend_plugin_v1 too, returning a
 *     copy of its table with abi_version 1 and struct_size
 *     OSLO_BACKEND_IFACE_V1_SIZE (a v1 liboslo refuses abi_version 2).
 *
 * Ordering model. Each backend instance (one per context) has ONE execution
 * queue (a CUDA stream on a GPU; program order on the CPU). Every op below is
 * enqueued on it in call order and may return before it ran; its inputs must
 * stay valid until then, which the core guarantees by keeping tensors alive
 * until the next wait point. The host waits only at these points:
 *   - copy() with kind DEVICE_TO_HOST (returns when `dst` holds the data),
 *   - copy() with kind HOST_TO_DEVICE (returns when `src` may be reused),
 *   - synchronize(), and event_synchronize() (v2) for the work before the
 *     event's record,
 *   - collectives of the backend's own communicators, which are ordered on
 *     the queue and return when the host may issue the next op.
 * copy_async() (v2) never waits: its host memory must stay valid (and, for
 * HOST_TO_DEVICE, unchanged) until a later wait point covers it.
 * Host transports (shm, gloo) used for host-memory backends call
 * synchronize() before they touch tensor memory.
 * An op that fails on the device after it returned (an id out of range found
 * by a kernel) reports at the next wait point.
 *
 * Several queues (v2). Two instances of the same backend created with the
 * same device (local_rank / options) are two queues on one device: memory
 * allocated by one may be used by the other's ops, and an event recorded on
 * one may be waited for by the other (event_wait). That is how a
 * communication queue overlaps a compute queue: the compute queue records an
 * event after producing a gradient, the communication queue waits for it and
 * reduces while compute goes on, then records an event the compute queue
 * waits for before it reads the result. Without events the core orders the
 * two queues by synchronizing the host (correct, without overlap).
 *
 * Errors: every fallible entry returns an oslo_status; on failure the backend
 * keeps a message for last_error(). Entries never throw, exit or abort.
 *
 * Threads: one backend instance is used by one thread at a time (its
 * context's), except free() and event_destroy() which may run on any thread
 * (memory exported through DLPack can outlive its context) and abort paths
 * of communicators.
 */
#ifndef OSLO_BACKEND_H
#define OSLO_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "oslo.h"

#ifdef __cplusplus
extern "C" {
#endif

/** The newest backend ABI this header describes (see "Versioning"). */
#define OSLO_BACKEND_ABI_VERSION 2
/** The oldest backend ABI liboslo still loads. */
#define OSLO_BACKEND_ABI_VERSION_MIN 1

/** A strided view of device memory. Strides are in elements; a stride of 0
 * broadcasts that dimension (only allowed for inputs). The innermost
 * dimension is the last. 0-d views have ndim 0 and one element. */
typedef struct oslo_bk_view {
  void *data; /**< address of element [0, ..., 0] */
  oslo_dtype dtype;
  int32_t ndim;
  int64_t shape[OSLO_MAX_DIMS];
  int64_t strides[OSLO_MAX_DIMS];
} oslo_bk_view;

typedef enum oslo_bk_copy_kind {
  OSLO_BK_HOST_TO_DEVICE = 0,
  OSLO_BK_DEVICE_TO_HOST = 1,
  OSLO_BK_DEVICE_TO_DEVICE = 2,
  /* Not values: they make every int a valid value of the type (see oslo.h). */
  OSLO_BK_COPY_ENUM_MIN_ = -2147483647 - 1,
  OSLO_BK_COPY_ENUM_MAX_ = 2147483647
} oslo_bk_copy_kind;

/** Element-wise binary ops: out = a OP b (with broadcasting through strides). */
typedef enum oslo_bk_binary {
  OSLO_BK_ADD = 0,
  OSLO_BK_SUB = 1,
  OSLO_BK_MUL = 2,
  OSLO_BK_DIV = 3,
  OSLO_BK_MAXIMUM = 4,
  OSLO_BK_MINIMUM = 5,
  /* Not values: they make every int a valid value of the type (see oslo.h). */
  OSLO_BK_BINARY_ENUM_MIN_ = -2147483647 - 1,
  OSLO_BK_BINARY_ENUM_MAX_ = 2147483647
} oslo_bk_binary;

/** Element-wise unary ops: out = f(x). SCALE multiplies by alpha. The GELUs are
 * PyTorch's: erf form and tanh approximation. */
typedef enum oslo_bk_unary {
  OSLO_BK_SCALE = 0,
  OSLO_BK_EXP = 1,
  OSLO_BK_GELU = 2,
  OSLO_BK_GELU_TANH = 3,
  OSLO_BK_SILU = 4,
  OSLO_BK_RELU = 5,
  OSLO_BK_TANH = 6,
  OSLO_BK_SQUARE = 7,
  OSLO_BK_ABS_POW = 8, /**< |x|^alpha */
  OSLO_BK_ABS = 9,
  OSLO_BK_LOG = 10,
  OSLO_BK_RSQRT = 11,
  /* Not values: they make every int a valid value of the type (see oslo.h). */
  OSLO_BK_UNARY_ENUM_MIN_ = -2147483647 - 1,
  OSLO_BK_UNARY_ENUM_MAX_ = 2147483647
} oslo_bk_unary;

/** Reductions along the last dimension (out has the input's shape without it). */
typedef enum oslo_bk_reduce {
  OSLO_BK_REDUCE_SUM = 0,
  OSLO_BK_REDUCE_MAX = 1,     /**< NaN wins; -inf for an empty row */
  OSLO_BK_REDUCE_SUM_EXP = 2, /**< sum exp(x - shift[row]) */
  OSLO_BK_REDUCE_MAX_ABS = 3,
  /* Not values: they make every int a valid value of the type (see oslo.h). */
  OSLO_BK_REDUCE_ENUM_MIN_ = -2147483647 - 1,
  OSLO_BK_REDUCE_ENUM_MAX_ = 2147483647
} oslo_bk_reduce;

/** Op ids for op_supported() (v2). The compute entries of the table have
 * ids 0..14 (every backend provides them; a backend may still answer 0 for a
 * dtype it does not implement). Fused ops (one entry doing what the core
 * otherwise composes from several, e.g. attention over a KV cache) get ids
 * from OSLO_BK_OP_FUSED_FIRST on, each appended with its own optional entry:
 * the core calls a fused entry only when op_supported() says yes and else
 * composes the op from the entries above, so declining is always allowed. */
typedef enum oslo_bk_op {
  OSLO_BK_OP_CONVERT = 0,
  OSLO_BK_OP_FILL = 1,
  OSLO_BK_OP_MATMUL = 2,
  OSLO_BK_OP_BINARY = 3,
  OSLO_BK_OP_UNARY = 4,
  OSLO_BK_OP_UNARY_BACKWARD = 5,
  OSLO_BK_OP_REDUCE = 6,
  OSLO_BK_OP_SUM_ROWS = 7,
  OSLO_BK_OP_SOFTMAX = 8,
  OSLO_BK_OP_SOFTMAX_BACKWARD = 9,
  OSLO_BK_OP_NORM = 10,
  OSLO_BK_OP_GATHER_ROWS = 11,
  OSLO_BK_OP_SCATTER_ADD_ROWS = 12,
  OSLO_BK_OP_GATHER_COLS = 13,
  OSLO_BK_OP_SCATTER_ADD_COLS = 14,
  /** First id of the fused ops. */
  OSLO_BK_OP_FUSED_FIRST = 1024,
  /** attention(): softmax(q k^T) v over a key/value cache, all heads. */
  OSLO_BK_OP_ATTENTION = 1024,
  /** residual_norm(): x += y (+ bias), then a norm of x. */
  OSLO_BK_OP_RESIDUAL_NORM = 1025,
  /** rope(): rotary position embedding in place. */
  OSLO_BK_OP_ROPE = 1026,
  /** matmul_act(): c = act(a @ b + bias), times a gate if given. */
  OSLO_BK_OP_MATMUL_ACT = 1027,
  /** argmax(): index and value of each row's largest element. */
  OSLO_BK_OP_ARGMAX = 1028,
  /** norm_backward(): the gradient of norm() (layer or RMS). */
  OSLO_BK_OP_NORM_BACKWARD = 1029,
  /** adamw(): one AdamW update of a parameter in place. */
  OSLO_BK_OP_ADAMW = 1030,
  /** Not an entry: a capability of matmul(). Yes for a 16-bit dtype (bf16,
   * f16) means matmul() also accepts `a` in f32 with `b` in that dtype,
   * computing as if `a` were first converted to it (rounded to nearest even)
   * and accumulating in f32; the core then hands activations to products
   * with 16-bit weights without converting them first (one op and one pass
   * fewer per linear). Other pairings stay refused. */
  OSLO_BK_OP_MATMUL_MIXED = 1031,
  /** pack_weight() / matmul_packed() / packed_free(): products against a
   * weight kept in the backend's preferred layout (dtype: the weight's). */
  OSLO_BK_OP_PACKED_MATMUL = 1032,
  /** attention_backward(): the gradients of attention() (training). */
  OSLO_BK_OP_ATTENTION_BACKWARD = 1033,
  /** paged_attention(): causal attention of a ragged batch of chunks over a
   * paged key/value cache, read through block tables (serving). */
  OSLO_BK_OP_PAGED_ATTENTION = 1034,
  /** dequantize(): a block-quantized weight's values in a float dtype. */
  OSLO_BK_OP_DEQUANTIZE = 1035,
  /** matmul_quant(): c = act(a @ w^T + bias) * gate with w block-quantized. */
  OSLO_BK_OP_MATMUL_QUANT = 1036,
  /** quantize_rows(): float rows to int8 with one f32 scale per row (the
   * int8 KV cache). */
  OSLO_BK_OP_QUANTIZE_ROWS = 1037,
  /** dequantize_rows(): int8 rows and their scales back to a float dtype. */
  OSLO_BK_OP_DEQUANTIZE_ROWS = 1038,
  /** attention_kv8(): attention() over an int8 KV cache, read as it is. */
  OSLO_BK_OP_ATTENTION_KV8 = 1039,
  /** paged_attention_kv8(): paged_attention() over int8 pools, read as
   * they are. */
  OSLO_BK_OP_PAGED_ATTENTION_KV8 = 1040,
  /* Not values: they make every int a valid value of the type (see oslo.h). */
  OSLO_BK_OP_ENUM_MIN_ = -2147483647 - 1,
  OSLO_BK_OP_ENUM_MAX_ = 2147483647
} oslo_bk_op;

/** A process group handed to a backend's own communicator. */
typedef struct oslo_bk_group {
  size_t struct_size;
  const char *name; /**< unique within the job, e.g. "tensor.1" */
  int rank;         /**< this rank's index in the group */
  int size;
  const int *members; /**< global ranks in group-rank order (size entries) */
  int same_host;
  double timeout_seconds;
} oslo_bk_group;

/** The job's rendezvous store, lent to a backend while it connects a group
 * (e.g. to hand NCCL's unique id around). Keys are scoped by the caller. */
typedef struct oslo_bk_store {
  void *self;
  oslo_status (*set)(void *self, const char *key, const void *value, size_t bytes);
  /** Waits for the key (up to timeout_seconds), then copies at most cap
   * bytes into value and the full length into *bytes. */
  oslo_status (*get)(void *self, const char *key, void *value, size_t cap, size_t *bytes,
                     double timeout_seconds);
  /** Last error message of this store on the calling thread. */
  const char *(*last_error)(void *self);
} oslo_bk_store;

typedef struct oslo_backend_options {
  size_t struct_size;
  int local_rank; /**< device index hint (rank within the host) */
  int num_threads;
  const char *extra_json; /**< backend-specific config object as JSON text ("{}" if none) */
} oslo_backend_options;

/**
 * The table. Entries marked (optional) may be NULL. `self` is the instance
 * create() returned.
 */
typedef struct oslo_backend_iface {
  size_t struct_size;
  uint32_t abi_version;
  const char *name;

  /** Creates an instance (one per context). On failure writes a message
   * (static or owned by the plugin, valid until the next call) to *error. */
  oslo_status (*create)(void **self, const oslo_backend_options *options, const char **error);
  void (*destroy)(void *self);
  /** Message of the last failing call on this instance. Never NULL. */
  const char *(*last_error)(void *self);

  /** DLPack device type (kDLCPU = 1, kDLCUDA = 2) and index of the memory. */
  int32_t (*device_type)(void *self);
  int32_t (*device_id)(void *self);
  /** Nonzero if the host may dereference this backend's memory (then groups
   * without a backend communicator use oslo's host transports). */
  int (*host_accessible)(void *self);

  /* -- memory and queue ------------------------------------------------ */
  /** Uninitialised memory, 64-byte aligned, valid for 0 bytes. */
  oslo_status (*alloc)(void *self, size_t bytes, void **out);
  /** Any thread. */
  void (*free)(void *self, void *ptr, size_t bytes);
  oslo_status (*copy)(void *self, void *dst, const void *src, size_t bytes, oslo_bk_copy_kind kind);
  oslo_status (*synchronize)(void *self);
  /** Threads the instance's compute may use from now on. */
  oslo_status (*set_num_threads)(void *self, int n);

  /* -- compute (enqueued; f32 accumulation for f16/bf16) -------------- */
  /** out = x with out's dtype (any float <-> float, int <-> int; also a
   * strided copy: shapes must match, x may broadcast). */
  oslo_status (*convert)(void *self, const oslo_bk_view *out, const oslo_bk_view *x);
  /** Every element of out = value (converted to out's dtype). */
  oslo_status (*fill)(void *self, const oslo_bk_view *out, double value);
  /**
   * c = alpha * a @ b + beta * c (+ bias broadcast over rows, if not NULL).
   * 2-D: a [M,K], b [K,N], c [M,N]; 3-D: batched over dimension 0 (a or b
   * may have batch 1 or batch stride 0: shared by every batch). Transposes are expressed by strides
   * (a view of W [N,K] with swapped shape and strides is W^T). a and b share one float dtype; c and
   * bias may be any float dtype; products accumulate in f32. beta == 0 ignores c's previous
   * contents (even NaN).
   */
  oslo_status (*matmul)(void *self, const oslo_bk_view *c, const oslo_bk_view *a,
                        const oslo_bk_view *b, const oslo_bk_view *bias, float alpha, float beta);
  oslo_status (*binary)(void *self, oslo_bk_binary op, const oslo_bk_view *out,
                        const oslo_bk_view *a, const oslo_bk_view *b);
  oslo_status (*unary)(void *self, oslo_bk_unary op, const oslo_bk_view *out, const oslo_bk_view *x,
                       float alpha);
  /** grad_x = grad_out * f'(x) for GELU, GELU_TANH, SILU, RELU, TANH, SCALE. */
  oslo_status (*unary_backward)(void *self, oslo_bk_unary op, const oslo_bk_view *grad_x,
                                const oslo_bk_view *x, const oslo_bk_view *grad_out, float alpha);
  /**
   * out[r] = reduce over the first `valid` elements of row r of x (the last
   * dimension; valid < 0 means all). shift [rows] is used by SUM_EXP only.
   * If accumulate is nonzero the result is combined with out[r] by the op's
   * own combiner (+ for SUM and SUM_EXP, max for MAX and MAX_ABS). Rows reduce
   * with an f32 or wider accumulator (the CPU: f64, over 16 interleaved lanes
   * combined in a fixed order, whatever the thread count).
   */
  oslo_status (*reduce)(void *self, oslo_bk_reduce op, const oslo_bk_view *out,
                        const oslo_bk_view *x, const oslo_bk_view *shift, int64_t valid,
                        int accumulate);
  /** Column sums: out[c] (+)= sum over rows r of x[r, c] (x 2-D), rows in order. */
  oslo_status (*sum_rows)(void *self, const oslo_bk_view *out, const oslo_bk_view *x,
                          int accumulate);
  /**
   * Softmax along the last dimension: out = softmax(scale * x + mask) where
   * mask is an optional additive view broadcastable to x (NULL: none), and,
   * if causal is nonzero, element [..., i, j] is masked when
   * j > i + causal_offset (query i attends keys up to i + offset). A row
   * whose every element is masked (by the causal limit or a -inf mask)
   * comes out all 0.
   */
  oslo_status (*softmax)(void *self, const oslo_bk_view *out, const oslo_bk_view *x,
                         const oslo_bk_view *mask, float scale, int causal, int64_t causal_offset);
  /** grad_x = scale * y * (grad_y - sum(grad_y * y, last dim)). */
  oslo_status (*softmax_backward)(void *self, const oslo_bk_view *grad_x, const oslo_bk_view *y,
                                  const oslo_bk_view *grad_y, float scale);
  /** Layer norm (gamma/beta [H], either may be NULL) or, with rms nonzero,
   * RMS norm (beta ignored) over the last dimension. */
  oslo_status (*norm)(void *self, const oslo_bk_view *out, const oslo_bk_view *x,
                      const oslo_bk_view *gamma, const oslo_bk_view *beta, float eps, int rms);
  /**
   * Row gather: out[t, :] = table[ids[t] - offset, :] when offset <= ids[t] <
   * offset + rows(table), else 0. ids (I32/I64, 1-D) must lie in [0, limit):
   * any other id fails with OSLO_ERR_INVALID_ARGUMENT naming it.
   */
  oslo_status (*gather_rows)(void *self, const oslo_bk_view *out, const oslo_bk_view *table,
                             const oslo_bk_view *ids, int64_t offset, int64_t limit);
  /** table[ids[t] - offset, :] += src[t, :] for ids in this table's range, in t order. */
  oslo_status (*scatter_add_rows)(void *self, const oslo_bk_view *table, const oslo_bk_view *ids,
                                  const oslo_bk_view *src, int64_t offset);
  /**
   * Per-row column pick: out[t] = x[t, idx[t] - offset] when that column is
   * in [0, cols(x)), else 0; rows whose idx equals ignore are 0 too. idx
   * outside [0, limit) (and not ignore) fails with OSLO_ERR_INVALID_ARGUMENT.
   */
  oslo_status (*gather_cols)(void *self, const oslo_bk_view *out, const oslo_bk_view *x,
                             const oslo_bk_view *idx, int64_t offset, int64_t limit,
                             int64_t ignore);
  /** x[t, idx[t] - offset] += value for in-range columns and idx != ignore. */
  oslo_status (*scatter_add_cols)(void *self, const oslo_bk_view *x, const oslo_bk_view *idx,
                                  int64_t offset, int64_t ignore, float value);

  /* -- the backend's own communicators (optional) ---------------------- */
  /** (optional) Connects a group whose tensors host transports cannot reach
   * (or for which the backend has a better engine). Collective over the
   * group. *comm = NULL (and OSLO_OK) declines: oslo uses a host transport. */
  oslo_status (*comm_create)(void *self, void **comm, const oslo_bk_group *group,
                             const oslo_bk_store *store);
  void (*comm_destroy)(void *comm);
  const char *(*comm_name)(void *comm);
  const char *(*comm_last_error)(void *comm);
  oslo_status (*comm_all_reduce)(void *comm, const void *in, void *out, size_t count,
                                 oslo_dtype dtype, oslo_reduce_op op);
  oslo_status (*comm_all_gather)(void *comm, const void *in, void *out, size_t count,
                                 oslo_dtype dtype);
  oslo_status (*comm_reduce_scatter)(void *comm, const void *in, void *out, size_t count,
                                     oslo_dtype dtype, oslo_reduce_op op);
  oslo_status (*comm_broadcast)(void *comm, void *buf, size_t count, oslo_dtype dtype, int root);
  oslo_status (*comm_send)(void *comm, const void *buf, size_t bytes, int peer);
  oslo_status (*comm_recv)(void *comm, void *buf, size_t bytes, int peer);
  oslo_status (*comm_barrier)(void *comm);
  /** Any thread. */
  void (*comm_abort)(void *comm);

  /* ==== ABI v2 ========================================================
   * Every entry from here on is optional (NULL: the fallback written next to
   * it). A v1 table ends above this line (OSLO_BACKEND_IFACE_V1_SIZE). */

  /* -- asynchronous copies on the queue ---------------------------------- */
  /** Enqueues a copy of any kind on the instance's queue and returns without
   * waiting. Host memory it reads (HOST_TO_DEVICE) must stay valid and
   * unchanged, and host memory it writes (DEVICE_TO_HOST) must not be read,
   * until a wait point covers the copy (synchronize(), or event_synchronize()
   * of an event recorded after it). Fallback: copy(), which waits. */
  oslo_status (*copy_async)(void *self, void *dst, const void *src, size_t bytes,
                            oslo_bk_copy_kind kind);

  /* -- events -------------------------------------------------------------- */
  /** A new event, not yet recorded (waiting for it returns at once).
   * Fallback when NULL: the core synchronizes the host where it would record
   * an event, and waits for nothing where it would wait for one. The five
   * event entries come together: a table with event_create provides
   * event_destroy, event_record, event_wait and event_synchronize. */
  oslo_status (*event_create)(void *self, void **event);
  /** Any thread; NULL is ignored. */
  void (*event_destroy)(void *self, void *event);
  /** Captures the work enqueued on this instance's queue so far: the event
   * completes when all of it has. Recording again re-captures. */
  oslo_status (*event_record)(void *self, void *event);
  /** This instance's queue waits, on the device, for the event (recorded by
   * this instance or another instance of the same backend on the same
   * device); the host does not block. */
  oslo_status (*event_wait)(void *self, void *event);
  /** The host waits until the event completed; reports the errors of the
   * work it covers, like synchronize(). */
  oslo_status (*event_synchronize)(void *self, void *event);

  /* -- stream-ordered memory ---------------------------------------------- */
  /** Memory usable by work enqueued on this queue after the call (64-byte
   * aligned, valid for 0 bytes). alloc_async and free_async come together.
   * Fallback: alloc(). */
  oslo_status (*alloc_async)(void *self, size_t bytes, void **out);
  /** Returns memory from alloc_async() (or alloc()) to the backend once the
   * work enqueued on this queue before the call has completed; the host does
   * not wait. The instance's thread. Fallback: free(). */
  void (*free_async)(void *self, void *ptr, size_t bytes);

  /* -- device queries ------------------------------------------------------ */
  /** The device's name, e.g. "NVIDIA H100 80GB HBM3" (static or owned by the
   * instance, valid while it lives). Fallback: the backend's name. */
  const char *(*device_name)(void *self);
  /** Bytes of the device's memory free now and in total (for the CPU: the
   * host's available and total memory). Fallback: the core reports the query
   * as OSLO_ERR_NOT_SUPPORTED. */
  oslo_status (*memory_info)(void *self, size_t *free_bytes, size_t *total_bytes);

  /* -- optional capabilities ----------------------------------------------- */
  /** Nonzero if the backend implements op (see oslo_bk_op) for dtype (the
   * dtype of the op's output, or of a and b for MATMUL). Answering 0 for a
   * fused op makes the core compose it from the required entries. Fallback:
   * yes for the required entries' ops (ids below OSLO_BK_OP_FUSED_FIRST), no
   * for the fused ones. */
  int (*op_supported)(void *self, oslo_bk_op op, oslo_dtype dtype);

  /* -- the native queue, for DLPack ----------------------------------------- */
  /** The queue's handle as DLPack's `stream` argument spells it for this
   * device type (CUDA: the cudaStream_t as an integer, 1 for the legacy
   * default stream, 2 for the per-thread default stream), or 0 when the
   * queue is not a native stream (the CPU: program order). A consumer of
   * tensors on this queue passes it to a producer's __dlpack__(stream=...).
   * Fallback: 0. */
  int64_t (*native_stream)(void *self);
  /** Makes the foreign native stream `stream` (a DLPack stream value of this
   * device type, as native_stream() describes) wait, on the device, for the
   * event (recorded by this instance); the host does not block. Used when a
   * DLPack consumer passes its stream to an export. Fallback:
   * event_synchronize() (the host waits), or synchronize() without events. */
  oslo_status (*stream_wait_event)(void *self, int64_t stream, void *event);

  /* -- fused ops ------------------------------------------------------------
   * Each is called only when op_supported() answers yes for its id and the
   * dtype named; otherwise (and when NULL) the core composes it from the
   * required entries above (core/backend/fused.cpp: the reference every
   * fused entry is tested against, in the conformance suite). Contracts are
   * exactly those of the composition. */

  /** OSLO_BK_OP_ATTENTION (op_supported's dtype: q's, k's and v's, which
   * they share). Scaled dot-product attention of every query head over a
   * key/value cache:
   *   out[b, h, i, :] = sum_j p[j] v[b, h / g, j, :],
   *   p = softmax_j(scale * q[b, h, i, :] . k[b, h / g, j, :] + mask[b, j])
   * with q and out [B, Hq, S, D], k and v [B, Hkv, T, D], g = Hq / Hkv
   * (grouped-query attention; Hq a multiple of Hkv), mask [B, T] additive
   * (NULL: none). With causal nonzero, key j is left out for query i when
   * j > i + causal_offset. A query with no key left, or whose every key is
   * masked by -inf, gets 0. Any strides; out any float dtype; f32
   * accumulation, the probabilities kept in f32. */
  oslo_status (*attention)(void *self, const oslo_bk_view *out, const oslo_bk_view *q,
                           const oslo_bk_view *k, const oslo_bk_view *v, const oslo_bk_view *mask,
                           float scale, int causal, int64_t causal_offset);
  /** OSLO_BK_OP_RESIDUAL_NORM (dtype: x's). The residual step of a
   * transformer block: x += y + bias (x, y [rows, H]; bias [H] broadcast over
   * rows; y and bias may each be NULL), rounded to x's dtype, then out =
   * norm(x) exactly as norm() with gamma, beta, eps and rms. out may not
   * overlap x. */
  oslo_status (*residual_norm)(void *self, const oslo_bk_view *out, const oslo_bk_view *x,
                               const oslo_bk_view *y, const oslo_bk_view *bias,
                               const oslo_bk_view *gamma, const oslo_bk_view *beta, float eps,
                               int rms);
  /** OSLO_BK_OP_ROPE (dtype: x's). Rotary position embedding in place, in
   * the rotate-half layout: x [rows, heads, D], cos and sin [rows, R] f32
   * with 2R <= D; for each head, x1 = x[..., 0:R] and x2 = x[..., R:2R]
   * become x1 cos - x2 sin and x2 cos + x1 sin (products rounded to x's
   * dtype as the composition does); x[..., 2R:] is left as is. */
  oslo_status (*rope)(void *self, const oslo_bk_view *x, const oslo_bk_view *cos,
                      const oslo_bk_view *sin);
  /** OSLO_BK_OP_MATMUL_ACT (dtype: a's). A product with its activation in
   * the epilogue (an MLP's first half):
   *   c = act(a @ b + bias) * gate
   * with a [M, K], b [K, N], c [M, N] and bias [N] as matmul() (2-D only;
   * alpha 1, beta 0; bias may be NULL); act one of OSLO_BK_GELU,
   * OSLO_BK_GELU_TANH, OSLO_BK_SILU, OSLO_BK_RELU, OSLO_BK_TANH (any other:
   * OSLO_ERR_INVALID_ARGUMENT); gate NULL (none) or a float [M, N] view,
   * which may be c itself (the same view: a gated MLP multiplies into its
   * up projection) but may not otherwise overlap c. The product, bias and
   * activation are computed in f32 and rounded once to c's dtype; the
   * composition rounds after each step, so in f32 both agree to the
   * activation's few ulp. */
  oslo_status (*matmul_act)(void *self, const oslo_bk_view *c, const oslo_bk_view *a,
                            const oslo_bk_view *b, const oslo_bk_view *bias, oslo_bk_unary act,
                            const oslo_bk_view *gate);
  /** OSLO_BK_OP_ARGMAX (dtype: x's). For every row r of x [rows, n] (any
   * float dtype, any strides): index[r] (i64 [rows]) = the position of the
   * largest of the first `valid` elements (valid < 0: all n), the lowest
   * position among equal ones, and value[r] (f32 [rows]) = that element. A
   * NaN counts as larger than everything (the first NaN wins, value NaN), so
   * a caller sees NaN logits instead of a silent choice. An empty row gives
   * index -1 and value -inf. What greedy decoding needs without copying the
   * logits to the host. */
  oslo_status (*argmax)(void *self, const oslo_bk_view *index, const oslo_bk_view *value,
                        const oslo_bk_view *x, int64_t valid);
  /** OSLO_BK_OP_NORM_BACKWARD (dtype: x's). The backward of norm(out, x,
   * gamma, beta, eps, rms) over rows of x [rows, H]: given dy = dL/dout
   * [rows, H] (any float dtype), with xhat = (x - mean) * rstd (rms: x *
   * rstd), rstd = 1 / sqrt(var + eps) (rms: mean of squares) and
   * g = dy * gamma (gamma NULL: 1),
   *   grad_x = rstd * (g - mean(g) - xhat * mean(g * xhat))   (layer norm)
   *   grad_x = rstd * (g - xhat * mean(g * xhat))             (rms)
   * overwrites grad_x [rows, H] (any float dtype; it may be dy itself, the
   * same view), and adds sum over rows of dy * xhat to grad_gamma and of dy
   * to grad_beta ([H] f32; either may be NULL; grad_beta is ignored for
   * rms). Row statistics as norm() computes them, f32 results. */
  oslo_status (*norm_backward)(void *self, const oslo_bk_view *grad_x,
                               const oslo_bk_view *grad_gamma, const oslo_bk_view *grad_beta,
                               const oslo_bk_view *x, const oslo_bk_view *gamma,
                               const oslo_bk_view *dy, float eps, int rms);
  /** OSLO_BK_OP_ADAMW (dtype: p's; p, g, m and v f32, contiguous, one
   * shape). One torch.optim.AdamW update, element-wise and in place:
   *   p = p * (1 - decay)
   *   m = beta1 m + (1 - beta1) g
   *   v = beta2 v + (1 - beta2) g^2
   *   p = p - step_size * m / (sqrt(v) / bc2_sqrt + eps)
   * where the caller passes decay = lr * weight_decay, step_size =
   * lr / (1 - beta1^t) and bc2_sqrt = sqrt(1 - beta2^t) for step t. f32
   * arithmetic. */
  oslo_status (*adamw)(void *self, const oslo_bk_view *p, const oslo_bk_view *g,
                       const oslo_bk_view *m, const oslo_bk_view *v, float decay, float beta1,
                       float beta2, float step_size, float bc2_sqrt, float eps);

  /* -- recorded work (graphs) ------------------------------------------------
   * Optional and past OSLO_BACKEND_IFACE_V2_SIZE: a table whose struct_size
   * does not reach them has none. What a device backend offers so that a
   * step the core repeats (one decode step) costs one launch instead of one
   * per op: the core calls graph_begin(), issues the step's ops as usual, and
   * graph_end() runs them. */

  /** Starts recording the work enqueued on the instance's queue instead of
   * running it (CUDA: stream capture). Until graph_end(), nothing recorded
   * has run, so entries that wait for the device (copy() to the host,
   * synchronize(), checks that read a result back) fail with
   * OSLO_ERR_NOT_SUPPORTED naming the recording; copy() from the host takes
   * its bytes at once (src may be reused on return). Returns
   * OSLO_ERR_NOT_SUPPORTED, recording nothing, when the instance has
   * recording switched off; the caller then runs the step directly.
   * Not re-entrant: one recording per instance at a time. */
  oslo_status (*graph_begin)(void *self);
  /** Ends the recording. With launch nonzero, enqueues the recorded work on
   * the queue as one unit and returns (the results are ready at the next
   * wait point, as for any op); a backend may update the executable it made
   * for the previous recording when only arguments changed, which is what
   * makes a repeated step cheap. With launch 0 the recording is discarded:
   * how a caller ends one after an error. An error during the recording is
   * reported here too (and nothing runs). */
  oslo_status (*graph_end)(void *self, int launch);

  /* -- prepacked weights -------------------------------------------------------
   * Optional and past OSLO_BACKEND_IFACE_V2_GRAPHS_SIZE (all three or none).
   * A backend whose fast products want the weight in a layout of its own
   * (oneDNN: the blocked layout its primitive picks for format_tag::any) can
   * keep such a copy, made once when a model is loaded, instead of
   * rearranging the weight inside every product. op_supported(
   * OSLO_BK_OP_PACKED_MATMUL, dtype) says for which weight dtypes it is worth
   * it (a backend may answer no everywhere). The plain weight stays where it
   * is and stays the truth: checkpoints read and write it, and a packed copy
   * does not follow later writes to it (the caller packs again); unless the
   * backend offers unpack_weight() for the copy (below). */

  /** Makes a packed copy of the weight w, a 2-D [K, N] view (the b operand
   * of matmul(): typically the transpose of an nn.Linear weight [N, K]),
   * for products a @ w; or, in a block-quantized dtype, the weight [N, K]
   * as matmul_quant() takes it (the CPU backend packs q8_0, q4_0 and q4_k
   * weights of 8 rows or more in blocks of eight interleaved rows). On
   * OSLO_OK *packed is an opaque handle owned by the caller (released with
   * packed_free(), before the instance is destroyed)
   * and *bytes the memory it holds. OSLO_ERR_NOT_SUPPORTED (nothing made)
   * when the backend keeps no packed form for this dtype or shape; the
   * caller then keeps calling matmul(). OSLO_ERR_OUT_OF_MEMORY when the
   * copy does not fit. Reads w; thread-safe as the other entries. */
  oslo_status (*pack_weight)(void *self, const oslo_bk_view *w, void **packed, size_t *bytes);
  /** As matmul_act() (act an activation) or matmul() with alpha 1, beta 0
   * (act_on 0: act and gate ignored, gate must be NULL):
   *   c = act(a @ b + bias) * gate
   * where b is the plain weight view packed was made from (same data,
   * shape, dtype and strides; OSLO_ERR_INVALID_ARGUMENT when its shape or
   * dtype differ) and a as matmul() takes it (f32 with 16-bit b only
   * where the backend claims OSLO_BK_OP_MATMUL_MIXED). The backend chooses per call between the
   * packed copy and b itself (few rows of a: a product that streams b may
   * be faster), so both must hold the same values. With a block-quantized
   * b (the [N, K] weight packed was made from): matmul_quant()'s product,
   * argument rules and error bound. */
  oslo_status (*matmul_packed)(void *self, const oslo_bk_view *c, const oslo_bk_view *a,
                               const oslo_bk_view *b, const void *packed, const oslo_bk_view *bias,
                               int act_on, oslo_bk_unary act, const oslo_bk_view *gate);
  /** Releases a handle of pack_weight() (NULL: nothing). Never fails. */
  void (*packed_free)(void *self, void *packed);

  /* -- staging for host communicators -------------------------------------------
   * Optional and past OSLO_BACKEND_IFACE_V2_PACKED_SIZE. When a group runs
   * on one of oslo's host transports (shm, gloo) for a backend whose memory
   * the host cannot read ("communicator": "host" in the context's config, or
   * a backend without communicators), the core's staged communicator moves
   * every buffer through host memory with copy(); these entries let it check
   * what it is handed and stage through page-locked memory. */

  /** OSLO_OK when [ptr, ptr + bytes) is memory of this instance's device
   * (what alloc() or alloc_async() handed out, or other memory of the same
   * device); otherwise OSLO_ERR_INVALID_ARGUMENT, with last_error() saying
   * what the pointer is instead (host memory, another device's memory). The
   * core asks before every buffer a staged communicator reads or writes, so
   * host memory handed to a collective is refused by name instead of read
   * as device memory. Any thread (it only inspects the pointer). Fallback:
   * no check. */
  oslo_status (*check_memory)(void *self, const void *ptr, size_t bytes);
  /** Page-locked host memory of at least `bytes` (64-byte aligned; valid for
   * 0 bytes) for staging copies to and from the device (CUDA:
   * cudaMallocHost), released with host_free(). Host memory: the host reads
   * and writes it directly, and copy() accepts it as the host end.
   * OSLO_ERR_OUT_OF_MEMORY when none is left. host_alloc and host_free come
   * together. Fallback: ordinary host memory. */
  oslo_status (*host_alloc)(void *self, size_t bytes, void **out);
  /** Releases memory of host_alloc() (NULL: nothing). Any thread. */
  void (*host_free)(void *self, void *ptr);

  /* -- training ------------------------------------------------------------------
   * Optional and past OSLO_BACKEND_IFACE_V2_STAGING_SIZE; a fused op as those
   * above (called only when op_supported() says yes, else composed in
   * core/backend/fused_attention.cpp, the reference). */

  /** OSLO_BK_OP_ATTENTION_BACKWARD (op_supported's dtype: q's, k's, v's and
   * dout's, which they share). The gradients of attention(out, q, k, v, mask,
   * scale, causal, causal_offset) (same shapes, grouped queries and mask
   * rule) given dout = dL/dout [B, Hq, S, D]: with p the probabilities
   * attention() computes (recomputed from q and k, kept in f32),
   *   dp[i, j] = dout[i] . v[j],  ds[i, j] = scale p[i, j] (dp[i, j] - sum_j p dp)
   *   dq[i] = sum_j ds[i, j] k[j],  dk[j] = sum_{i, heads of the group} ds q[i],
   *   dv[j] = sum_{i, heads of the group} p[i, j] dout[i]
   * dq [B, Hq, S, D], dk and dv [B, Hkv, T, D], any float dtype and strides,
   * overwritten (not accumulated); they may not overlap the inputs or each
   * other. A query whose every key is left out or masked by -inf has p = 0.
   * f32 accumulation. */
  oslo_status (*attention_backward)(void *self, const oslo_bk_view *dq, const oslo_bk_view *dk,
                                    const oslo_bk_view *dv, const oslo_bk_view *q,
                                    const oslo_bk_view *k, const oslo_bk_view *v,
                                    const oslo_bk_view *dout, const oslo_bk_view *mask, float scale,
                                    int causal, int64_t causal_offset);

  /* -- serving -------------------------------------------------------------------
   * Optional and past OSLO_BACKEND_IFACE_V2_TRAIN_SIZE; a fused op as those
   * above (called only when op_supported() says yes, else composed in
   * core/backend/fused_paged.cpp: the blocks gathered, then attention()). */

  /** OSLO_BK_OP_PAGED_ATTENTION (op_supported's dtype: q's, k_pool's and
   * v_pool's, which they share). One serving step's attention over a paged
   * KV cache. The pools k_pool and v_pool are [num_blocks, Hkv, bs, D]
   * (bs: the block size), each block contiguous (strides[1..3] = bs * D, D,
   * 1; blocks any stride apart). chunks, in HOST memory (read before the
   * call returns), holds num_chunks triples (row_c, start_c, n_c): chunk c
   * continues one sequence with n_c queries, rows row_c .. row_c + n_c - 1
   * of q [tokens, Hq, D] (any strides), at positions start_c ..
   * start_c + n_c - 1. Its keys are K_c[kh, t] = k_pool[b, kh, t % bs]
   * with b = block_table[c, t / bs] (block_table: [num_chunks, M] I64 in
   * device memory; entries past ceil((start_c + n_c) / bs) are not read),
   * V_c likewise, and for query i (position p = start_c + i) and head h:
   *   out[row_c + i, h, :] = sum_{t <= p} s_t V_c[h / g, t, :],
   *   s = softmax_{t <= p}(scale * q[row_c + i, h, :] . K_c[h / g, t, :])
   * (causal; g = Hq / Hkv, grouped queries). Keys [0, start_c + n_c) must be
   * in the pools already, the chunk's own included (the caller stores them
   * first). out [tokens, Hq, D], any float dtype and strides; rows of no
   * chunk are left as they are; chunks' rows may not overlap. A block id
   * outside [0, num_blocks) fails with OSLO_ERR_INVALID_ARGUMENT naming it
   * (a device backend may read the ids back to check them, a wait point).
   * f32 accumulation, the probabilities kept in f32. */
  oslo_status (*paged_attention)(void *self, const oslo_bk_view *out, const oslo_bk_view *q,
                                 const oslo_bk_view *k_pool, const oslo_bk_view *v_pool,
                                 const oslo_bk_view *block_table, const int64_t *chunks,
                                 int64_t num_chunks, float scale);

  /* -- quantized weights -----------------------------------------------------------
   * Optional and past OSLO_BACKEND_IFACE_V2_SERVE_SIZE (each on its own); fused
   * ops as those above (called only when op_supported(op, w's dtype) says
   * yes; else the core dequantizes on the host through copy(), its reference
   * in core/quant, and multiplies with matmul()). A weight in a
   * block-quantized dtype (oslo.h's OSLO_DTYPE_Q8_0, Q4_0, Q4_K, Q6_K; byte
   * layouts in docs/QUANTIZATION.md) is a 2-D view w [N, K] with strides
   * {S, 1}: S (elements, >= K) and K are multiples of the dtype's block
   * elements, and row n starts n * S / block_elems * block_bytes bytes after
   * w.data. */

  /** OSLO_BK_OP_DEQUANTIZE (op_supported's dtype: w's). out [N, K], any
   * float dtype and strides = the values of w [N, K], each computed as
   * llama.cpp's dequantize_row_* does (f32, no fused multiply-add) and
   * rounded once to out's dtype. Any bytes are valid input (a NaN or inf
   * scale gives NaN or inf values). */
  oslo_status (*dequantize)(void *self, const oslo_bk_view *out, const oslo_bk_view *w);
  /** OSLO_BK_OP_MATMUL_QUANT (op_supported's dtype: w's). With act_on 0
   * (act ignored, gate NULL)   c = a @ dequantize(w)^T + bias;
   * with act_on 1              c = act(a @ dequantize(w)^T + bias) * gate;
   * a [M, K] f32 (unit column stride), w [N, K] as above, bias [N] f32 or
   * NULL, gate [M, N] f32 or NULL, c [M, N] f32 (unit column stride; may
   * not overlap a). The backend may quantize each block of 32 values of a
   * row of a to 8 bits (llama.cpp's Q8_0/Q8_K activations) and accumulate
   * integer dot products: each output then differs from the exact product
   * of a and dequantize(w) by at most sum over the blocks b of the row of
   * (max_b |a| / 254) * sum_{k in b} |w[n, k]| (+ f32 rounding), the bound
   * the conformance suite checks. */
  oslo_status (*matmul_quant)(void *self, const oslo_bk_view *c, const oslo_bk_view *a,
                              const oslo_bk_view *w, const oslo_bk_view *bias, int act_on,
                              oslo_bk_unary act, const oslo_bk_view *gate);

  /* -- the int8 KV cache ---------------------------------------------------------
   * Optional and past OSLO_BACKEND_IFACE_V2_QUANT_SIZE (both or neither); fused
   * ops as those above (else the core runs its reference on the host, through
   * copy() when the backend's memory is not the host's). Rows are the last
   * dimension: x and q are views [d0, ..., D] of 2 to 4 dimensions with unit
   * last stride, scale [d0, ...] (one dimension fewer, any strides) f32; q is
   * OSLO_DTYPE_I8. */

  /** OSLO_BK_OP_QUANTIZE_ROWS (op_supported's dtype: x's; x f32, f16 or
   * bf16). Per row, in f32: a = the largest |x| (NaN when the row holds a
   * NaN), d = a / 127, id = d != 0 ? 1 / d : 0; scale = d and each
   * q = round-half-away(x * id) clamped to [-127, 127], 0 where x * id is
   * NaN. Exact: every backend writes the same bytes. */
  oslo_status (*quantize_rows)(void *self, const oslo_bk_view *q, const oslo_bk_view *scale,
                               const oslo_bk_view *x);
  /** OSLO_BK_OP_DEQUANTIZE_ROWS (op_supported's dtype: out's; f32, f16 or
   * bf16). out = (float)q * scale of its row, rounded once to out's dtype. */
  oslo_status (*dequantize_rows)(void *self, const oslo_bk_view *out, const oslo_bk_view *q,
                                 const oslo_bk_view *scale);

  /** OSLO_BK_OP_ATTENTION_KV8 (op_supported's dtype: q's). Optional and past
   * OSLO_BACKEND_IFACE_V2_KV8_SIZE; a fused op as those above (else the core
   * dequantizes the rows to q's dtype with dequantize_rows() and calls
   * attention(), core/backend/fused_kv8.cpp). attention() with its keys and
   * values an int8 cache: k and v [B, Hkv, T, D] OSLO_DTYPE_I8 (unit last
   * stride), k_scale and v_scale [B, Hkv, T] f32 (any strides), key row j
   * meaning k[.., j, :] * k_scale[.., j] (likewise v). Everything else
   * (shapes, mask, causal, out) as attention(); the result within f32
   * rounding of attention() over the dequantized rows. */
  oslo_status (*attention_kv8)(void *self, const oslo_bk_view *out, const oslo_bk_view *q,
                               const oslo_bk_view *k, const oslo_bk_view *k_scale,
                               const oslo_bk_view *v, const oslo_bk_view *v_scale,
                               const oslo_bk_view *mask, float scale, int causal,
                               int64_t causal_offset);

  /** Optional, past OSLO_BACKEND_IFACE_V2_KV8_ATTENTION_SIZE, with the packed
   * entries. With w NULL: OSLO_OK when the packed copy holds the whole
   * weight, so matmul_packed() never reads b's data for it (b may then have
   * data NULL, its dtype, shape and strides as before: the caller may free
   * the plain weight while the copy lives); else OSLO_ERR_NOT_SUPPORTED.
   * With w: writes the weight's bytes back into w (its dtype and shape, any
   * row stride matmul_packed() takes); OSLO_ERR_DTYPE / OSLO_ERR_SHAPE when
   * w is not that weight's. Reads the copy; thread-safe as the others. */
  oslo_status (*unpack_weight)(void *self, const void *packed, const oslo_bk_view *w);

  /** OSLO_BK_OP_PAGED_ATTENTION_KV8 (op_supported's dtype: q's). Optional,
   * past OSLO_BACKEND_IFACE_V2_UNPACK_SIZE; a fused op (else the core
   * dequantizes the blocks the chunks read into scratch pools of q's dtype
   * with dequantize_rows() and calls paged_attention()). paged_attention()
   * with int8 pools: k_pool, v_pool [blocks, Hkv, bs, D] OSLO_DTYPE_I8,
   * k_scale, v_scale [blocks, Hkv, bs] f32, all contiguous; slot j of
   * block b, head kh means k_pool[b, kh, j, :] * k_scale[b, kh, j] (likewise
   * v). The rest, errors included, as paged_attention(). */
  oslo_status (*paged_attention_kv8)(void *self, const oslo_bk_view *out, const oslo_bk_view *q,
                                     const oslo_bk_view *k_pool, const oslo_bk_view *k_scale,
                                     const oslo_bk_view *v_pool, const oslo_bk_view *v_scale,
                                     const oslo_bk_view *block_table, const int64_t *chunks,
                                     int64_t num_chunks, float scale);
} oslo_backend_iface;

/* The sizes of the table's versions (OSLO_BACKEND_IFACE_V1_SIZE, ...) and
 * every entry's slot, pinned by static asserts (oslo_backend_slots.h). */
#include "oslo_backend_slots.h" /* next to this file */

/** The symbols a plugin exports (see "Versioning"): liboslo looks up the v2
 * one first, then the v1 one. */
typedef const oslo_backend_iface *(*oslo_backend_plugin_fn)(void);
#define OSLO_BACKEND_PLUGIN_SYMBOL "oslo_backend_plugin_v2"
#define OSLO_BACKEND_PLUGIN_SYMBOL_V1 "oslo_backend_plugin_v1"

#ifdef __cplusplus
}
#endif

#endif /* OSLO_BACKEND_H */
