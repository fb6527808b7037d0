/*
 * oslo_backend.h - the interface a device backend implements (backend ABI v1).
 *
 * A backend gives oslo memory on one device, an execution queue on it, the
 * compute ops layers and models are built from, and (optionally) its own
 * communicators. The CPU backend is linked into liboslo and registers this same
 * table; any other backend is a plugin, a shared library
 * liboslo_backend_<name>.so exporting
 *
 *   const oslo_backend_iface *oslo_backend_plugin_v1(void);
 *
 * Why a C table and not a C++ interface: a plugin may be built by another
 * compiler, against another C++ standard library ABI (the libtorch in a pip
 * wheel of torch 2.x before 2.7 uses the pre-C++11 std::string), and must not
 * link liboslo's hidden internals. A table of C function pointers with a
 * version and a size crosses all of that; the core wraps it in a C++ class
 * (core/backend/backend.hpp) that turns statuses into exceptions.
 *
 * Versioning: `abi_version` must equal OSLO_BACKEND_ABI_VERSION's major part;
 * `struct_size` is sizeof(oslo_backend_iface) the plugin was built with. New
 * entries are only appended; the core treats an entry beyond struct_size as
 * NULL (not provided), so an old plugin keeps working with a newer liboslo.
 *
 * Ordering model. Each backend instance (one per context) has ONE execution
 * queue (a CUDA stream on a GPU; program order on the CPU). Every op below is
 * enqueued on it in call order and may return before it ran; its inputs must
 * stay valid until then, which the core guarantees by keeping tensors alive
 * until the next wait point. The host waits only at these points:
 *   - copy() with kind DEVICE_TO_HOST (returns when `dst` holds the data),
 *   - copy() with kind HOST_TO_DEVICE (returns when `src` may be reused),
 *   - synchronize(),
 *   - collectives of the backend's own communicators, which are ordered on
 *     the queue and return when the host may issue the next op.
 * Host transports (shm, gloo) used for host-memory backends call
 * synchronize() before they touch tensor memory.
 * An op that fails on the device after it returned (an id out of range found
 * by a kernel) reports at the next wait point.
 *
 * Errors: every fallible entry returns an oslo_status; on failure the backend
 * keeps a message for last_error(). Entries never throw, exit or abort.
 *
 * Threads: one backend instance is used by one thread at a time (its
 * context's), except free() which may run on any thread (memory exported
 * through DLPack can outlive its context) and abort paths of communicators.
 */
#ifndef OSLO_BACKEND_H
#define OSLO_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "oslo.h"

#ifdef __cplusplus
extern "C" {
#endif

#define OSLO_BACKEND_ABI_VERSION 1

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
   * in element order with an f32 or wider (the CPU: f64) accumulator.
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
   * j > i + causal_offset (query i attends keys up to i + offset).
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
} oslo_backend_iface;

/** The symbol a plugin exports. */
typedef const oslo_backend_iface *(*oslo_backend_plugin_fn)(void);
#define OSLO_BACKEND_PLUGIN_SYMBOL "oslo_backend_plugin_v1"

#ifdef __cplusplus
}
#endif

#endif /* OSLO_BACKEND_H */
