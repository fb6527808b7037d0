/*
 * oslo.h - the public C ABI of oslo.
 *
 * oslo runs transformer layers split across ranks (tensor, pipeline and data
 * parallelism). If it is not in this header, it is not API.
 *
 * Conventions (every function follows them unless its comment says otherwise):
 *  - Fallible functions return an oslo_status; OSLO_OK (0) is success. On
 *    failure a message naming the problem is available from oslo_last_error()
 *    on the same thread until the next failing oslo call on that thread.
 *  - Out-parameters come first. Objects returned through `T **out` are owned
 *    by the caller and freed with the matching *_destroy; on failure *out is
 *    set to NULL. Pointers returned through `const T **` or documented as
 *    "borrowed" stay owned by oslo and live as long as their owner.
 *  - Every *_destroy accepts NULL and does nothing.
 *  - No C++ exception, exit() or abort() ever crosses this ABI.
 *  - Thread-safety: distinct objects may be used from distinct threads at the
 *    same time. One context (and the layers, tensors and parameter sets made
 *    from it) is used by one thread at a time, except oslo_context_abort,
 *    which any thread may call at any time. Ranks may be threads of one
 *    process, each with its own context.
 *  - Every blocking call (context creation, collectives, layer forward and
 *    backward that communicate, checkpoint save and load) honours the
 *    context's timeout_seconds and returns OSLO_ERR_TIMEOUT or OSLO_ERR_COMM
 *    instead of hanging on a dead, frozen or missing peer.
 *
 * Stability: functions are only added. A changed meaning gets a new name
 * (a _v2 suffix); the old one keeps working for the whole 0.x series.
 *
 * This header is C99 and compiles with -std=c99 -pedantic -Werror.
 */
#ifndef OSLO_H
#define OSLO_H

#include <stddef.h>
#include <stdint.h>

#define OSLO_VERSION_MAJOR 0
#define OSLO_VERSION_MINOR 1
#define OSLO_VERSION_PATCH 0
#define OSLO_VERSION_STRING "0.1.0"
/* MAJOR * 10000 + MINOR * 100 + PATCH, for compile-time comparisons. */
#define OSLO_VERSION_NUMBER \
  (OSLO_VERSION_MAJOR * 10000 + OSLO_VERSION_MINOR * 100 + OSLO_VERSION_PATCH)

#if defined(__GNUC__) || defined(__clang__)
#define OSLO_API __attribute__((visibility("default")))
#else
#define OSLO_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Status, errors, version                                                   */
/* ------------------------------------------------------------------------ */

/** Result of every fallible call. Values are stable; new ones are appended. */
typedef enum oslo_status {
  OSLO_OK = 0,
  OSLO_ERR_INVALID_ARGUMENT = 1,           /**< NULL pointer, bad value, bad index */
  OSLO_ERR_OUT_OF_MEMORY = 2,              /**< allocation failed */
  OSLO_ERR_BACKEND_UNAVAILABLE = 3,        /**< backend not built or not loadable */
  OSLO_ERR_COMM = 4,                       /**< a peer died, a connection broke, aborted */
  OSLO_ERR_TIMEOUT = 5,                    /**< a blocking call passed timeout_seconds */
  OSLO_ERR_IO = 6,                         /**< file system error */
  OSLO_ERR_FORMAT = 7,                     /**< corrupt or invalid file or JSON */
  OSLO_ERR_SHAPE = 8,                      /**< tensor shapes do not match */
  OSLO_ERR_DTYPE = 9,                      /**< tensor dtype not allowed here */
  OSLO_ERR_CONFIG = 10,                    /**< invalid configuration key or value */
  OSLO_ERR_NOT_SUPPORTED = 11,             /**< valid request this build cannot do */
  OSLO_ERR_INTERNAL = 12,                  /**< a bug in oslo; please report it */
  OSLO_STATUS_COUNT,                       /**< number of codes; not a status */
  OSLO_STATUS_ENUM_MIN_ = -2147483647 - 1, /* not values: see oslo_dtype */
  OSLO_STATUS_ENUM_MAX_ = 2147483647
} oslo_status;

/**
 * Static, human-readable name of a status ("OSLO_ERR_TIMEOUT: timed out").
 * Never NULL; unknown values give "unknown status". Thread-safe.
 */
OSLO_API const char *oslo_status_string(oslo_status status);

/**
 * Message of the last failing oslo call on the calling thread, e.g.
 * "config: unknown key 'tensor_paralel_size'". Never NULL ("" when no call
 * has failed). The pointer is owned by oslo and valid until the next oslo
 * call on the same thread. Thread-safe (the message is thread-local).
 */
OSLO_API const char *oslo_last_error(void);

/** Clears the calling thread's last error message. Thread-safe. */
OSLO_API void oslo_clear_error(void);

/**
 * Run-time version of the library (compare with OSLO_VERSION_* of the
 * header you compiled with). Any out-pointer may be NULL. Thread-safe.
 */
OSLO_API void oslo_version(int *major, int *minor, int *patch);

/** Run-time version string, e.g. "0.1.0". Static, never NULL. Thread-safe. */
OSLO_API const char *oslo_version_string(void);

/* ------------------------------------------------------------------------ */
/* Types                                                                     */
/* ------------------------------------------------------------------------ */

/** Element types. The CPU backend computes in f32; f16/bf16 are storage. */
typedef enum oslo_dtype {
  OSLO_F32 = 0,
  OSLO_F16 = 1,
  OSLO_BF16 = 2,
  OSLO_I32 = 3, /**< token ids and labels */
  OSLO_I64 = 4, /**< token ids and labels */
  /* Not values: they make every int a valid value of the type, so a bad value
     passed from C is reported as an error instead of being undefined in C++. */
  OSLO_DTYPE_ENUM_MIN_ = -2147483647 - 1,
  OSLO_DTYPE_ENUM_MAX_ = 2147483647
} oslo_dtype;

/** Reduction of collectives. AVG is SUM divided by the group size. */
typedef enum oslo_reduce_op {
  OSLO_SUM = 0,
  OSLO_AVG = 1,
  OSLO_MAX = 2,
  OSLO_MIN = 3,
  /* Not values: they make every int a valid value of the type, so a bad value
     passed from C is reported as an error instead of being undefined in C++. */
  OSLO_REDUCE_ENUM_MIN_ = -2147483647 - 1,
  OSLO_REDUCE_ENUM_MAX_ = 2147483647
} oslo_reduce_op;

/**
 * Process groups of a context. Ranks are ordered as in Megatron-LM: tensor
 * parallel fastest, then data parallel, then pipeline parallel:
 *   global = pp_rank * (dp * tp) + dp_rank * tp + tp_rank.
 * Worked example, world 8 = tp 2 x dp 2 x pp 2:
 *   tensor groups   {0,1} {2,3} {4,5} {6,7}
 *   data groups     {0,2} {1,3} {4,6} {5,7}
 *   pipeline groups {0,4} {1,5} {2,6} {3,7}
 * so global rank 5 has tp_rank 1, dp_rank 0, pp_rank 1.
 */
typedef enum oslo_group {
  OSLO_GROUP_WORLD = 0,
  OSLO_GROUP_TENSOR = 1,
  OSLO_GROUP_PIPELINE = 2,
  OSLO_GROUP_DATA = 3,
  /* Not values: they make every int a valid value of the type, so a bad value
     passed from C is reported as an error instead of being undefined in C++. */
  OSLO_GROUP_ENUM_MIN_ = -2147483647 - 1,
  OSLO_GROUP_ENUM_MAX_ = 2147483647
} oslo_group;

/** Most dimensions a tensor may have. */
#define OSLO_MAX_DIMS 8

typedef struct oslo_context oslo_context;
typedef struct oslo_tensor oslo_tensor;
typedef struct oslo_parallel_linear oslo_parallel_linear;
typedef struct oslo_parallel_embedding oslo_parallel_embedding;
typedef struct oslo_param_set oslo_param_set;
/* DLPack's tensor (dlpack.h, v0.x/1.x "DLManagedTensor"); include dlpack.h to use it. */
struct DLManagedTensor;

/* ------------------------------------------------------------------------ */
/* Context                                                                   */
/* ------------------------------------------------------------------------ */

/**
 * Creates a context: joins the job's rendezvous, builds the tensor, data,
 * pipeline and world groups and their communicators. Collective: every rank
 * of the job must call it; it blocks until all ranks have joined or
 * timeout_seconds passed (the error then names the ranks that never came).
 *
 * `config` is JSON text, a path to a JSON file, or NULL/"" for all defaults.
 * A config file must be a regular file of at most 16 MiB (a FIFO, device or
 * directory is refused without reading it). Each key may appear once per
 * object; nesting deeper than 64 levels is refused.
 * Keys (all optional):
 *   "backend"                 "cpu" (default), or the name of a plugin
 *                             liboslo_backend_<name>.so: 1 to 64 letters,
 *                             digits or '_'
 *   "tensor_parallel_size"    int > 0, default 1
 *   "pipeline_parallel_size"  int > 0, default 1
 *   "data_parallel_size"      int > 0, default world / (tp * pp)
 *   "init_method"             "env://" (default), "tcp://host:port",
 *                             "file:///path/to/store"
 *   "rank", "world_size"      explicit rank and world size (ranks that are
 *                             threads of one process; overrides environment)
 *   "local_rank", "local_world_size"  rank within the host and ranks on it
 *   "timeout_seconds"         number > 0 and <= 1e7 (about 116 days),
 *                             default 300
 *   "num_threads"             compute threads per rank, default
 *                             max(1, cores / local_world_size)
 *   "model_parallelism"       object holding any of the *_parallel_size keys
 *                             (OSLO's {"model_parallelism":
 *                             {"tensor_parallel_size": 2}} form)
 * Unknown or repeated keys, wrong types, out-of-range values and sizes whose
 * product does not divide the world size fail with OSLO_ERR_CONFIG naming the
 * key. Messages quote only the start of a long key or value.
 *
 * Rank and world size come from, in this order of precedence: the config's
 * "rank"/"world_size"; torchrun/oslo-run (RANK, WORLD_SIZE, LOCAL_RANK,
 * LOCAL_WORLD_SIZE); Open MPI (OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK,
 * _LOCAL_SIZE); Slurm (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID); otherwise
 * a single rank (rank 0 of 1). env:// reads MASTER_ADDR (default 127.0.0.1)
 * and MASTER_PORT (default 29500).
 *
 * Errors: OSLO_ERR_INVALID_ARGUMENT (out is NULL), OSLO_ERR_CONFIG (also:
 * a file:// store left by an earlier run, reported on every rank),
 * OSLO_ERR_FORMAT (invalid JSON, including numbers beyond the range of a
 * double), OSLO_ERR_IO (unreadable, non-regular or oversized config file, port
 * in use: the message names address and port), OSLO_ERR_TIMEOUT,
 * OSLO_ERR_COMM, OSLO_ERR_BACKEND_UNAVAILABLE.
 * Thread-safety: each rank thread creates its own context.
 */
OSLO_API oslo_status oslo_context_create(oslo_context **out, const char *config);

/**
 * Destroys a context and its communicators. Not collective; tensors, layers
 * and parameter sets made from the context must be destroyed first (the
 * context outlives them). NULL is a no-op.
 */
OSLO_API void oslo_context_destroy(oslo_context *ctx);

/**
 * Aborts the context's communication: pending and later collectives on this
 * rank fail with OSLO_ERR_COMM, and peers sharing memory with it fail too
 * instead of waiting for their timeout. The context must still be destroyed.
 * Thread-safe: may be called from any thread (e.g. a watchdog) at any time.
 * Errors: OSLO_ERR_INVALID_ARGUMENT if ctx is NULL.
 */
OSLO_API oslo_status oslo_context_abort(oslo_context *ctx);

/**
 * Rank of the calling process/thread within a group (0 .. size-1).
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL pointer, unknown group).
 */
OSLO_API oslo_status oslo_context_rank(int *rank, const oslo_context *ctx, oslo_group group);

/**
 * Number of ranks in a group. Errors: as oslo_context_rank.
 */
OSLO_API oslo_status oslo_context_size(int *size, const oslo_context *ctx, oslo_group group);

/**
 * Name of the context's backend ("cpu") and of the transport a group uses
 * ("self", "shm", "gloo"). Both strings are borrowed from the context.
 * `transport` may be NULL. Errors: OSLO_ERR_INVALID_ARGUMENT.
 */
OSLO_API oslo_status oslo_context_backend(const char **backend, const char **transport,
                                          const oslo_context *ctx, oslo_group group);

/* ------------------------------------------------------------------------ */
/* Tensors                                                                   */
/* ------------------------------------------------------------------------ */

/**
 * Creates a zero-filled, contiguous row-major tensor on the context's device.
 * `shape` has `ndim` entries (0 <= ndim <= OSLO_MAX_DIMS, each >= 0).
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL, bad ndim or negative extent),
 * OSLO_ERR_DTYPE (unknown dtype), OSLO_ERR_OUT_OF_MEMORY.
 */
OSLO_API oslo_status oslo_tensor_create(oslo_tensor **out, oslo_context *ctx, oslo_dtype dtype,
                                        int ndim, const int64_t *shape);

/**
 * Wraps caller memory without copying. `data` must be on the context's device
 * (host memory for "cpu"), hold the whole contiguous row-major tensor, and
 * outlive the returned tensor; it is never freed by oslo. Errors: as
 * oslo_tensor_create (data may be NULL only when the tensor has 0 elements).
 */
OSLO_API oslo_status oslo_tensor_wrap(oslo_tensor **out, oslo_context *ctx, void *data,
                                      oslo_dtype dtype, int ndim, const int64_t *shape);

/** Destroys a tensor (memory it owns is freed when no DLPack export still uses it). NULL is a
 * no-op. */
OSLO_API void oslo_tensor_destroy(oslo_tensor *tensor);

/**
 * Copies `bytes` bytes of host memory into the tensor; `bytes` must equal the
 * tensor's size in bytes (numel * dtype size). Errors: OSLO_ERR_INVALID_ARGUMENT,
 * OSLO_ERR_SHAPE (size mismatch).
 */
OSLO_API oslo_status oslo_tensor_copy_from_host(oslo_tensor *dst, const void *src, size_t bytes);

/** Copies the tensor into host memory; `bytes` must equal its size in bytes. Errors as above. */
OSLO_API oslo_status oslo_tensor_copy_to_host(void *dst, size_t bytes, const oslo_tensor *src);

/** Number of dimensions. Errors: OSLO_ERR_INVALID_ARGUMENT. */
OSLO_API oslo_status oslo_tensor_ndim(int *ndim, const oslo_tensor *tensor);

/**
 * Writes the extents into shape[0 .. ndim-1]; `shape` must have room for
 * OSLO_MAX_DIMS entries. Errors: OSLO_ERR_INVALID_ARGUMENT.
 */
OSLO_API oslo_status oslo_tensor_shape(int64_t *shape, const oslo_tensor *tensor);

/** Element type. Errors: OSLO_ERR_INVALID_ARGUMENT. */
OSLO_API oslo_status oslo_tensor_dtype(oslo_dtype *dtype, const oslo_tensor *tensor);

/** Number of elements (1 for a 0-d tensor). Errors: OSLO_ERR_INVALID_ARGUMENT. */
OSLO_API oslo_status oslo_tensor_numel(int64_t *numel, const oslo_tensor *tensor);

/**
 * Pointer to the tensor's data on its device (borrowed: valid while the
 * tensor lives). Errors: OSLO_ERR_INVALID_ARGUMENT.
 */
OSLO_API oslo_status oslo_tensor_data(void **data, const oslo_tensor *tensor);

/**
 * Exports the tensor as a DLPack DLManagedTensor sharing its memory (no copy).
 * The caller (or the framework it hands it to) owns the result and must call
 * its deleter once; the memory stays valid until then, even after
 * oslo_tensor_destroy. Errors: OSLO_ERR_INVALID_ARGUMENT, OSLO_ERR_OUT_OF_MEMORY.
 */
OSLO_API oslo_status oslo_tensor_to_dlpack(struct DLManagedTensor **out, oslo_tensor *tensor);

/**
 * Imports a DLPack tensor without copying. On success oslo owns `managed`
 * and calls its deleter when the returned tensor is destroyed; on failure the
 * caller still owns it. The tensor must be contiguous row-major (or have NULL
 * strides), on the context's device, and of a supported type (float32,
 * float16, bfloat16, int32, int64). Errors: OSLO_ERR_INVALID_ARGUMENT,
 * OSLO_ERR_DTYPE, OSLO_ERR_NOT_SUPPORTED (strided or other device).
 */
OSLO_API oslo_status oslo_tensor_from_dlpack(oslo_tensor **out, oslo_context *ctx,
                                             struct DLManagedTensor *managed);

/* ------------------------------------------------------------------------ */
/* Collectives (blocking; every rank of the group must call them alike)     */
/* ------------------------------------------------------------------------ */

/**
 * In-place all-reduce of `tensor` over `group`. Results are bitwise identical
 * on every rank. Errors: OSLO_ERR_INVALID_ARGUMENT, OSLO_ERR_DTYPE (MAX/MIN
 * and AVG on integers are allowed; all ops are), OSLO_ERR_COMM, OSLO_ERR_TIMEOUT.
 */
OSLO_API oslo_status oslo_all_reduce(oslo_context *ctx, oslo_group group, oslo_tensor *tensor,
                                     oslo_reduce_op op);

/**
 * Gathers every rank's `input` into `output`, concatenated along dimension 0
 * in group-rank order: output.numel == input.numel * group size, same dtype.
 * Errors: OSLO_ERR_INVALID_ARGUMENT, OSLO_ERR_SHAPE, OSLO_ERR_DTYPE,
 * OSLO_ERR_COMM, OSLO_ERR_TIMEOUT.
 */
OSLO_API oslo_status oslo_all_gather(oslo_tensor *output, oslo_context *ctx, oslo_group group,
                                     const oslo_tensor *input);

/**
 * Reduces `input` (numel = output.numel * group size) over the group and
 * leaves block `rank` (along dimension 0) in `output`. Errors: as oslo_all_gather.
 */
OSLO_API oslo_status oslo_reduce_scatter(oslo_tensor *output, oslo_context *ctx, oslo_group group,
                                         const oslo_tensor *input, oslo_reduce_op op);

/**
 * Copies `tensor` of group rank `root` into `tensor` on every other rank.
 * Every rank must name the same root, dtype and element count; a rank that
 * differs makes the call fail on every rank (OSLO_ERR_INVALID_ARGUMENT).
 * Errors: OSLO_ERR_INVALID_ARGUMENT (bad root, mismatch), OSLO_ERR_COMM,
 * OSLO_ERR_TIMEOUT.
 */
OSLO_API oslo_status oslo_broadcast(oslo_context *ctx, oslo_group group, oslo_tensor *tensor,
                                    int root);

/**
 * Sends `tensor` to group rank `peer`, which must call oslo_recv with a tensor
 * of the same size. Messages between one pair arrive in order. May return
 * before the peer received (buffered). Errors: OSLO_ERR_INVALID_ARGUMENT
 * (peer out of range or self), OSLO_ERR_COMM, OSLO_ERR_TIMEOUT.
 */
OSLO_API oslo_status oslo_send(oslo_context *ctx, oslo_group group, const oslo_tensor *tensor,
                               int peer);

/** Receives into `tensor` from group rank `peer`. Errors: as oslo_send. */
OSLO_API oslo_status oslo_recv(oslo_tensor *tensor, oslo_context *ctx, oslo_group group, int peer);

/** Blocks until every rank of the group arrived. Errors: OSLO_ERR_COMM, OSLO_ERR_TIMEOUT. */
OSLO_API oslo_status oslo_barrier(oslo_context *ctx, oslo_group group);

/* ------------------------------------------------------------------------ */
/* Tensor-parallel layers                                                    */
/* ------------------------------------------------------------------------ */

/** Which way a linear layer is split across the tensor-parallel group. */
typedef enum oslo_linear_kind {
  /** Output features split: each rank holds rows [r*out/tp, (r+1)*out/tp) of W. */
  OSLO_COLUMN_PARALLEL = 0,
  /** Input features split: each rank holds columns [r*in/tp, (r+1)*in/tp) of W. */
  OSLO_ROW_PARALLEL = 1,
  /* Not values: they make every int a valid value of the type, so a bad value
     passed from C is reported as an error instead of being undefined in C++. */
  OSLO_LINEAR_ENUM_MIN_ = -2147483647 - 1,
  OSLO_LINEAR_ENUM_MAX_ = 2147483647
} oslo_linear_kind;

/** Options of a parallel linear layer y = x W^T + b (W is [out, in] as in nn.Linear). */
typedef struct oslo_linear_options {
  oslo_linear_kind kind;
  int64_t in_features;
  int64_t out_features;
  int bias;              /**< nonzero: the layer has a bias (default 1) */
  int gather_output;     /**< column only: all-gather the output (default 0) */
  int input_is_parallel; /**< row only: input already split along features (default 1) */
  oslo_dtype dtype;      /**< parameter dtype (default OSLO_F32) */
} oslo_linear_options;

/** Default options (column-parallel, bias, no gather, input_is_parallel, f32, sizes 0). */
OSLO_API oslo_linear_options oslo_linear_default_options(void);

/**
 * Creates a parallel linear layer with zero weights. The split dimension
 * (out_features for column, in_features for row) must be divisible by the
 * tensor-parallel size. Not collective. Errors: OSLO_ERR_INVALID_ARGUMENT
 * (NULL, non-positive sizes, indivisible split, unknown kind), OSLO_ERR_DTYPE,
 * OSLO_ERR_OUT_OF_MEMORY.
 */
OSLO_API oslo_status oslo_parallel_linear_create(oslo_parallel_linear **out, oslo_context *ctx,
                                                 const oslo_linear_options *options);

/** Destroys a layer and its parameters and gradients. NULL is a no-op. */
OSLO_API void oslo_parallel_linear_destroy(oslo_parallel_linear *layer);

/**
 * Loads the full, unsharded weight [out, in] (and bias [out], or NULL); each
 * rank copies its own slice. Any float dtype is converted. Errors:
 * OSLO_ERR_INVALID_ARGUMENT, OSLO_ERR_SHAPE, OSLO_ERR_DTYPE.
 */
OSLO_API oslo_status oslo_parallel_linear_load_full(oslo_parallel_linear *layer,
                                                    const oslo_tensor *weight,
                                                    const oslo_tensor *bias);

/**
 * Loads this rank's slice directly: weight [out/tp, in] (column) or
 * [out, in/tp] (row); bias [out/tp] (column) or [out] (row), or NULL.
 * Errors: as oslo_parallel_linear_load_full.
 */
OSLO_API oslo_status oslo_parallel_linear_load_shard(oslo_parallel_linear *layer,
                                                     const oslo_tensor *weight,
                                                     const oslo_tensor *bias);

/**
 * Borrowed pointers to the layer's local weight, bias, and their gradients
 * (any out-pointer may be NULL; bias pointers are NULL without bias).
 * Errors: OSLO_ERR_INVALID_ARGUMENT.
 */
OSLO_API oslo_status oslo_parallel_linear_params(oslo_tensor **weight, oslo_tensor **bias,
                                                 oslo_tensor **grad_weight, oslo_tensor **grad_bias,
                                                 const oslo_parallel_linear *layer);

/**
 * Forward pass. `input` is [..., in] (column, or row without
 * input_is_parallel) or [..., in/tp] (row with input_is_parallel); `output`
 * (caller-allocated, same dtype as input) is [..., out/tp] (column) or
 * [..., out] (column with gather_output, row). Collective over the tensor
 * group when it communicates (column with gather_output; row).
 * Errors: OSLO_ERR_INVALID_ARGUMENT, OSLO_ERR_SHAPE, OSLO_ERR_DTYPE,
 * OSLO_ERR_COMM, OSLO_ERR_TIMEOUT.
 */
OSLO_API oslo_status oslo_parallel_linear_forward(oslo_tensor *output, oslo_parallel_linear *layer,
                                                  const oslo_tensor *input);

/**
 * Backward pass for the forward that took `input` and produced an output of
 * `grad_output`'s shape. Adds the weight and bias gradients into the layer's
 * gradients (zero them with oslo_parallel_linear_zero_grad) and writes the
 * input gradient (same shape as `input`) into `grad_input` unless it is NULL.
 * Collective over the tensor group (column: all-reduce of grad_input; row
 * without input_is_parallel: all-gather of grad_input). Errors: as forward.
 */
OSLO_API oslo_status oslo_parallel_linear_backward(oslo_tensor *grad_input,
                                                   oslo_parallel_linear *layer,
                                                   const oslo_tensor *input,
                                                   const oslo_tensor *grad_output);

/** Sets the layer's gradients to zero. Errors: OSLO_ERR_INVALID_ARGUMENT. */
OSLO_API oslo_status oslo_parallel_linear_zero_grad(oslo_parallel_linear *layer);

/**
 * Creates a vocabulary-parallel embedding [vocab_size, hidden]. The vocabulary
 * is padded up to a multiple of the tensor-parallel size; rank r holds padded
 * rows [r*V_p/tp, (r+1)*V_p/tp). Padding rows are zero and never produce
 * output. Errors: OSLO_ERR_INVALID_ARGUMENT, OSLO_ERR_DTYPE, OSLO_ERR_OUT_OF_MEMORY.
 */
OSLO_API oslo_status oslo_parallel_embedding_create(oslo_parallel_embedding **out,
                                                    oslo_context *ctx, int64_t vocab_size,
                                                    int64_t hidden_size, oslo_dtype dtype);

/** Destroys an embedding. NULL is a no-op. */
OSLO_API void oslo_parallel_embedding_destroy(oslo_parallel_embedding *emb);

/**
 * This rank's range of real vocabulary rows [*start, *end) (end <= vocab_size;
 * may be empty on the last ranks when padding is large) and the padded local
 * row count. Any out-pointer may be NULL. Errors: OSLO_ERR_INVALID_ARGUMENT.
 */
OSLO_API oslo_status oslo_parallel_embedding_vocab_range(int64_t *start, int64_t *end,
                                                         int64_t *local_rows,
                                                         const oslo_parallel_embedding *emb);

/**
 * Loads the full table [vocab_size, hidden]; each rank keeps its rows.
 * Errors: OSLO_ERR_INVALID_ARGUMENT, OSLO_ERR_SHAPE, OSLO_ERR_DTYPE.
 */
OSLO_API oslo_status oslo_parallel_embedding_load_full(oslo_parallel_embedding *emb,
                                                       const oslo_tensor *weight);

/** Loads this rank's padded rows [local_rows, hidden] directly. Errors: as load_full. */
OSLO_API oslo_status oslo_parallel_embedding_load_shard(oslo_parallel_embedding *emb,
                                                        const oslo_tensor *weight);

/** Borrowed local weight and its gradient (either may be NULL). */
OSLO_API oslo_status oslo_parallel_embedding_params(oslo_tensor **weight, oslo_tensor **grad_weight,
                                                    const oslo_parallel_embedding *emb);

/**
 * Looks up `ids` (I32 or I64, any shape [...]) into `output` [..., hidden]
 * (float dtype). Collective over the tensor group (one all-reduce). An id
 * outside [0, vocab_size) fails with OSLO_ERR_INVALID_ARGUMENT naming it.
 */
OSLO_API oslo_status oslo_parallel_embedding_forward(oslo_tensor *output,
                                                     oslo_parallel_embedding *emb,
                                                     const oslo_tensor *ids);

/** Adds d(loss)/d(weight) for `grad_output` [..., hidden] into the gradient. Not collective. */
OSLO_API oslo_status oslo_parallel_embedding_backward(oslo_parallel_embedding *emb,
                                                      const oslo_tensor *ids,
                                                      const oslo_tensor *grad_output);

/** Sets the embedding's gradient to zero. */
OSLO_API oslo_status oslo_parallel_embedding_zero_grad(oslo_parallel_embedding *emb);

/**
 * Cross-entropy over logits split along the vocabulary: `logits` is this
 * rank's [tokens, V_p/tp] slice of the padded vocabulary (as produced by a
 * column-parallel head without gather_output or by the embedding's layout),
 * `labels` [tokens] (I32/I64), `vocab_size` the real vocabulary (columns
 * at or past it are padding and never win). Labels equal to `ignore_index`
 * contribute no loss. Writes per-token losses [tokens] (f32; 0 for ignored)
 * into `losses` and the mean over non-ignored tokens into `*mean_loss` (NaN
 * if all are ignored), and d(mean_loss)/d(logits) into `grad_logits`
 * (same shape as logits); each of the three outputs may be NULL.
 * Collective over the tensor group. Errors: OSLO_ERR_INVALID_ARGUMENT (label
 * out of range), OSLO_ERR_SHAPE, OSLO_ERR_DTYPE, OSLO_ERR_COMM, OSLO_ERR_TIMEOUT.
 */
OSLO_API oslo_status oslo_vocab_parallel_cross_entropy(oslo_tensor *losses, float *mean_loss,
                                                       oslo_tensor *grad_logits, oslo_context *ctx,
                                                       const oslo_tensor *logits,
                                                       const oslo_tensor *labels,
                                                       int64_t vocab_size, int64_t ignore_index);

/* ------------------------------------------------------------------------ */
/* Parameter sets: gradient clipping and checkpoints                         */
/* ------------------------------------------------------------------------ */

/**
 * Creates an empty set of named parameters. A set borrows the tensors added
 * to it: they (and the layers that own them) must outlive the set.
 * Errors: OSLO_ERR_INVALID_ARGUMENT, OSLO_ERR_OUT_OF_MEMORY.
 */
OSLO_API oslo_status oslo_param_set_create(oslo_param_set **out, oslo_context *ctx);

/** Destroys a set (not the tensors in it). NULL is a no-op. */
OSLO_API void oslo_param_set_destroy(oslo_param_set *set);

/**
 * Adds a tensor under a unique `name` (copied). `split_dim` is the dimension
 * along which the tensor-parallel ranks hold equal consecutive slices of the
 * global tensor, or -1 if every tensor-parallel rank holds the same full
 * tensor (replicated). `grad` (same shape, may be NULL) is used by
 * oslo_clip_grad_norm. Errors: OSLO_ERR_INVALID_ARGUMENT (NULL, duplicate
 * name, split_dim out of range), OSLO_ERR_SHAPE (grad shape).
 */
OSLO_API oslo_status oslo_param_set_add(oslo_param_set *set, const char *name, oslo_tensor *tensor,
                                        oslo_tensor *grad, int split_dim);

/**
 * Adds a linear layer's parameters as "<prefix>.weight" and "<prefix>.bias"
 * with their gradients and split dimensions. Errors: as oslo_param_set_add.
 */
OSLO_API oslo_status oslo_param_set_add_linear(oslo_param_set *set, const char *prefix,
                                               oslo_parallel_linear *layer);

/**
 * Adds an embedding's table as "<prefix>.weight" (global shape is the real,
 * unpadded [vocab_size, hidden]). Errors: as oslo_param_set_add.
 */
OSLO_API oslo_status oslo_param_set_add_embedding(oslo_param_set *set, const char *prefix,
                                                  oslo_parallel_embedding *emb);

/** Number of parameters in the set. */
OSLO_API oslo_status oslo_param_set_count(size_t *count, const oslo_param_set *set);

/**
 * Global gradient norm over the tensor-parallel group, as torch's
 * clip_grad_norm_ would compute on the unsharded model: sharded parameters
 * count on every rank, replicated ones once. `norm_type` is p >= 1 or
 * INFINITY (max norm). If max_norm > 0 and the norm exceeds it, every
 * gradient is scaled by max_norm / (norm + 1e-6). Parameters without a
 * gradient are skipped. Collective over the tensor group.
 * Errors: OSLO_ERR_INVALID_ARGUMENT, OSLO_ERR_COMM, OSLO_ERR_TIMEOUT.
 */
OSLO_API oslo_status oslo_clip_grad_norm(double *total_norm, oslo_param_set *set, double max_norm,
                                         double norm_type);

/**
 * Saves the set under directory `dir` (created if missing): one safetensors
 * file per tensor-parallel x pipeline rank (data-parallel rank 0 writes;
 * replicated tensors are written once) plus `oslo_checkpoint.json`, a
 * manifest recording each tensor's global shape and every shard's slice.
 * Atomic: files are written to temporaries, fsync'ed and renamed, the
 * manifest last; a crash leaves the previous checkpoint loadable and never a
 * half-written one. Collective over the world group.
 * Errors: OSLO_ERR_INVALID_ARGUMENT, OSLO_ERR_IO, OSLO_ERR_COMM, OSLO_ERR_TIMEOUT.
 */
OSLO_API oslo_status oslo_checkpoint_save(oslo_param_set *set, const char *dir);

/**
 * Loads every tensor of the set from a checkpoint saved by
 * oslo_checkpoint_save at any tensor-parallel size: each rank reads only the
 * byte ranges of its own slice and re-slices (padding rows are zeroed).
 * Dtypes are converted. Collective over the world group: every rank loads,
 * then all ranks agree on the outcome, so they all succeed or all fail. If
 * any rank failed, every rank returns the status of the lowest failing world
 * rank, with a message naming that rank and quoting its error (the tensors
 * may then hold loaded, partly loaded or previous values, on any rank). The
 * agreement honours timeout_seconds. Errors: OSLO_ERR_INVALID_ARGUMENT,
 * OSLO_ERR_IO (missing files), OSLO_ERR_FORMAT (corrupt manifest or shard,
 * missing tensor: the message names it), OSLO_ERR_SHAPE (global shape
 * differs), OSLO_ERR_DTYPE (a float checkpoint loaded into an integer
 * tensor), OSLO_ERR_COMM, OSLO_ERR_TIMEOUT.
 */
OSLO_API oslo_status oslo_checkpoint_load(oslo_param_set *set, const char *dir);

#ifdef __cplusplus
}
#endif

#endif /* OSLO_H */
