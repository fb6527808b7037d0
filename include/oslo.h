/*
 * oslo.h - the public C ABI of oslo.
 *
 * oslo runs transformer layers split across ranks (tensor, pipeline and data
 * parallelism). If it is not in this header, it is not API.
 *
 * Names and argument order (one rule; every function follows it):
 *  - Functions are oslo_<object>_<operation>, where <object> is the type the
 *    function acts on or creates, without its oslo_ prefix: oslo_context_*,
 *    oslo_tensor_*, oslo_parallel_linear_*, oslo_parallel_embedding_*,
 *    oslo_param_set_*, oslo_<object>_options_init, oslo_status_string.
 *    Collectives and the vocabulary-parallel loss run on a context's groups,
 *    so they are oslo_context_* too. Only the functions of the library as a
 *    whole take no object: oslo_version, oslo_version_string,
 *    oslo_last_error, oslo_clear_error.
 *  - Arguments come in this order:
 *      1. the object acted on (for a function that creates an object: the
 *         context it is made from), then, for context operations, the group;
 *      2. inputs: values, strings, options, tensors and memory only read;
 *      3. outputs: tensors and memory the call writes, including tensors
 *         updated in place (all_reduce, broadcast, recv);
 *      4. out-pointers: pointers through which the call returns values or
 *         objects, last; a new object is returned through `out`.
 *    A pointer to memory and its size in bytes count as one argument, the
 *    size following the pointer.
 *    Why: the first argument is the receiver of a method in the bindings
 *    (ctx.all_reduce(...), tensor.copy_to_host(...)); "what is read, then what
 *    is written" puts every written argument in one place, in place or not,
 *    so mirrored pairs have mirrored signatures (oslo_context_send/_recv,
 *    oslo_tensor_copy_from_host/_to_host, forward/backward).
 *  - Types are oslo_<name>. An options struct is named after what it
 *    configures and shares its stem: oslo_<object>_options for
 *    oslo_<object>_create (oslo_parallel_linear_options), oslo_<operation>_options
 *    for an operation (oslo_vocab_parallel_cross_entropy_options), with
 *    oslo_<stem>_options_init and OSLO_<STEM>_OPTIONS_VERSION (see "Options
 *    structs" below).
 *  - Enum values are OSLO_<PREFIX>_<NAME>, <PREFIX> being the enum's type name
 *    without oslo_ and without a trailing _op or _kind: OSLO_DTYPE_F32,
 *    OSLO_REDUCE_SUM, OSLO_GROUP_TENSOR, OSLO_LINEAR_COLUMN. The status codes
 *    OSLO_OK and OSLO_ERR_* keep the names they have had since 0.1.
 *
 * Conventions (every function follows them unless its comment says otherwise):
 *  - Fallible functions return an oslo_status; OSLO_OK (0) is success. On
 *    failure a message naming the problem is available from oslo_last_error()
 *    on the same thread until the next failing oslo call on that thread.
 *  - Objects returned through `T **out` are owned by the caller and freed
 *    with the matching *_destroy; on failure *out is set to NULL. Pointers
 *    returned through `const T **` or documented as "borrowed" stay owned by
 *    oslo and live as long as their owner. Handles and memory passed as
 *    arguments stay owned by the caller; oslo only uses them during the call
 *    unless the function says it keeps them (parameter sets, wrapped memory).
 *  - Every *_destroy accepts NULL and does nothing.
 *  - Lifetimes: the caller owns every handle it gets through `T **out` and
 *    destroys each exactly once, in any order. A handle keeps alive what it
 *    was made from: a tensor, layer, parameter set or model its context; an
 *    optimizer its model (and so the model's context). Destroying a context
 *    or a model while such dependants are alive releases only the caller's
 *    handle (it must not be used again): the object itself is freed when
 *    its last dependant is destroyed, each dependant's own part first, so an
 *    optimizer destroyed after its model or after its context, or a model
 *    after its context, never touches freed memory, and the dependants keep
 *    working until they are destroyed (a model still trains and runs,
 *    collectives of its context included). Tokenizers depend on nothing.
 *    Borrowed pointers (a layer's parameter tensors, strings) are the
 *    exception: they die with their owner. Thread-safety is unchanged: a
 *    context and everything made from it, its destruction included, are
 *    used by one thread at a time (see below), so the last dependant frees
 *    the context on whichever thread destroys it; the reference counts
 *    themselves are atomic.
 *  - No C++ exception, exit() or abort() ever crosses this ABI.
 *  - Thread-safety: distinct objects may be used from distinct threads at the
 *    same time. One context (and the layers, tensors and parameter sets made
 *    from it) is used by one thread at a time, except oslo_context_abort,
 *    which any thread may call at any time. Ranks may be threads of one
 *    process, each with its own context. A function documented
 *    "Thread-safety: per context" follows this rule: it must not overlap
 *    another call on the same context or on an object made from it.
 *  - Every blocking call (context creation, collectives, layer forward and
 *    backward that communicate, checkpoint save and load) honours the
 *    context's timeout_seconds and returns OSLO_ERR_TIMEOUT or OSLO_ERR_COMM
 *    instead of hanging on a dead, frozen or missing peer.
 *
 * Options structs: every struct passed as options starts with
 * `unsigned int version`, set (with every default) by its
 * oslo_<object>_options_init(&opts, OSLO_<OBJECT>_OPTIONS_VERSION). A struct
 * grows only by appending fields, and each growth bumps its VERSION macro, so
 * a program compiled against an older oslo.h keeps working with a newer
 * library: the library reads only the fields of the version the struct
 * declares and gives the later fields their defaults. A version of 0 (a
 * struct never initialised) or one newer than the library knows is refused
 * with OSLO_ERR_INVALID_ARGUMENT naming it. A version number rather than a
 * struct_size field because sizes do not identify layouts: a new field can
 * fit in the old struct's tail padding and leave sizeof unchanged.
 *
 * Stability: 0.x is pre-stable. 0.2 settled names, argument order and
 * options structs ahead of the Python, Java and Go bindings (CHANGELOG.md
 * lists every change from 0.1). 0.3 moved the training settings out of
 * oslo_optimizer_options into oslo_train_options and the pipeline
 * statistics from the optimizer to the model (tools/migrate-0.3.py
 * rewrites a 0.2 program). Otherwise functions are only added; a changed
 * meaning gets a new name (a _v2 suffix) and the old one keeps working;
 * options structs grow as described above.
 *
 * This header is C99 and compiles with -std=c99 -pedantic -Werror.
 */
#ifndef OSLO_H
#define OSLO_H

#include <stddef.h>
#include <stdint.h>

#define OSLO_VERSION_MAJOR 0
#define OSLO_VERSION_MINOR 3
#define OSLO_VERSION_PATCH 0
#define OSLO_VERSION_STRING "0.3.0"
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
 * Ownership: the string is static; never free it.
 * Errors: none; never NULL, unknown values give "unknown status".
 * Thread-safety: thread-safe.
 */
OSLO_API const char *oslo_status_string(oslo_status status);

/**
 * Message of the last failing oslo call on the calling thread, e.g.
 * "config: unknown key 'tensor_paralel_size'"; "" when no call has failed.
 * Ownership: the string is owned by oslo and valid until the next oslo call
 * on the same thread; copy it to keep it.
 * Errors: none; never NULL.
 * Thread-safety: thread-safe (the message is thread-local).
 */
OSLO_API const char *oslo_last_error(void);

/**
 * Clears the calling thread's last error message.
 * Ownership: nothing is passed. Errors: none.
 * Thread-safety: thread-safe (affects the calling thread only).
 */
OSLO_API void oslo_clear_error(void);

/**
 * Run-time version of the library (compare with OSLO_VERSION_* of the header
 * you compiled with). Any out-pointer may be NULL.
 * Ownership: writes the caller's ints. Errors: none.
 * Thread-safety: thread-safe.
 */
OSLO_API void oslo_version(int *major, int *minor, int *patch);

/**
 * Run-time version string, e.g. "0.2.0".
 * Ownership: the string is static; never free it. Errors: none; never NULL.
 * Thread-safety: thread-safe.
 */
OSLO_API const char *oslo_version_string(void);

/* ------------------------------------------------------------------------ */
/* Types                                                                     */
/* ------------------------------------------------------------------------ */

/** Element types. The CPU backend computes in f32; f16/bf16 are storage. */
typedef enum oslo_dtype {
  OSLO_DTYPE_F32 = 0,
  OSLO_DTYPE_F16 = 1,
  OSLO_DTYPE_BF16 = 2,
  OSLO_DTYPE_I32 = 3, /**< token ids and labels */
  OSLO_DTYPE_I64 = 4, /**< token ids and labels */
  /** Signed 8-bit integers: the storage of the int8 KV cache
   * (oslo_generate_options.kv_cache_dtype, oslo_engine_options.kv_dtype;
   * docs/QUANTIZATION.md), each row of head_dim values with its own f32
   * scale. Not an element type of the public calls: tensors, collectives and
   * activations refuse it with OSLO_ERR_DTYPE. */
  OSLO_DTYPE_I8 = 5,
  /* Block-quantized weight formats (docs/QUANTIZATION.md). The innermost
     dimension (a row) is stored as whole blocks, each a scale (and more)
     followed by packed integers, so there is no element size: a tensor of
     shape [..., K] takes rows * (K / block elements) * block bytes. They are
     storage for the weights of linear layers (and for the token table and
     LM head of a file that stores them so, e.g. GGUF): a model's or a
     checkpoint's "dtype" may name them;
     calls that take element data (tensors, collectives, activations) refuse
     them with OSLO_ERR_DTYPE. */
  OSLO_DTYPE_Q8_0 = 16,    /**< blocks of 32: f16 scale, 32 int8 (34 bytes); GGUF Q8_0 */
  OSLO_DTYPE_Q4_0 = 17,    /**< blocks of 32: f16 scale, 32 4-bit (18 bytes); GGUF Q4_0 */
  OSLO_DTYPE_Q4_K = 18,    /**< super-blocks of 256 (144 bytes); GGUF Q4_K */
  OSLO_DTYPE_Q6_K = 19,    /**< super-blocks of 256 (210 bytes); GGUF Q6_K */
  OSLO_DTYPE_Q4_G128 = 20, /**< groups of 128: f16 scale, u8 zero point, u8 0, 64 bytes of
                                4-bit (68 bytes); x = (q - zero) * scale; GPTQ/AWQ */
  /* Not values: they make every int a valid value of the type, so a bad value
     passed from C is reported as an error instead of being undefined in C++. */
  OSLO_DTYPE_ENUM_MIN_ = -2147483647 - 1,
  OSLO_DTYPE_ENUM_MAX_ = 2147483647
} oslo_dtype;

/**
 * Reduction of collectives, combined in group-rank order so every rank gets
 * the same bits. f16 and bf16 are combined in f32 and rounded once.
 *  - SUM: integer sums wrap around (two's complement).
 *  - AVG: SUM divided by the group size. For integers the exact sum is
 *    divided and the quotient truncated toward zero (C division: -7 / 2 is -3).
 *  - MAX, MIN: for floats a NaN wins.
 */
typedef enum oslo_reduce_op {
  OSLO_REDUCE_SUM = 0,
  OSLO_REDUCE_AVG = 1,
  OSLO_REDUCE_MAX = 2,
  OSLO_REDUCE_MIN = 3,
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
/* DLPack's managed tensors: DLManagedTensor (unversioned, DLPack 0.x and 1.x)
   and DLManagedTensorVersioned (DLPack 1.x). oslo.h needs neither defined;
   to use them include <oslo/dlpack.h>, the DLPack 1.1 header installed with
   oslo (upstream dlpack.h, unmodified, under oslo's include folder). It
   declares no typedef for DLManagedTensorVersioned: in C write the struct
   keyword. */
struct DLManagedTensor;
struct DLManagedTensorVersioned;

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
 *                             liboslo_backend_<name>.so such as "torch":
 *                             1 to 64 letters, digits or '_'
 *   "backend_options"         object handed to the backend (e.g. torch:
 *                             {"device": "cuda"}), default {}
 *   "communicator"            which communicators connect the groups:
 *                             "auto" (default: the backend's own, e.g.
 *                             NCCL for "cuda", else oslo's host
 *                             transports), "backend" (the backend's own
 *                             only, for every group, a group of one
 *                             included: NCCL at world size 1; refused
 *                             with OSLO_ERR_NOT_SUPPORTED for a backend
 *                             without them) or "host" (oslo's
 *                             host transports: shm on one host, gloo
 *                             across hosts; for a GPU backend every buffer
 *                             is checked to be device memory and staged
 *                             through page-locked host memory, which lets
 *                             several ranks share one GPU)
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
 *   "prepack"                 which weights a loaded model keeps a packed
 *                             copy of, where the backend offers one (its
 *                             fast layout; the copy costs those weights'
 *                             memory again): "quantized" (default:
 *                             block-quantized weights; the CPU packs q8_0,
 *                             q4_0, q4_k), "all" (float weights too) or
 *                             "none"; the environment's OSLO_PREPACK (1:
 *                             all, 0: none) overrides it
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
 * Ownership: `config` is read during the call only; the caller owns the new
 * context (*out) and frees it with oslo_context_destroy.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (out is NULL), OSLO_ERR_CONFIG (also:
 * a file:// store left by an earlier run, reported on every rank),
 * OSLO_ERR_FORMAT (invalid JSON, including numbers beyond the range of a
 * double), OSLO_ERR_IO (unreadable, non-regular or oversized config file, port
 * in use: the message names address and port), OSLO_ERR_TIMEOUT,
 * OSLO_ERR_COMM, OSLO_ERR_BACKEND_UNAVAILABLE, OSLO_ERR_OUT_OF_MEMORY.
 * Thread-safety: thread-safe; each rank thread creates its own context.
 */
OSLO_API oslo_status oslo_context_create(const char *config, oslo_context **out);

/**
 * Destroys a context and its communicators. Not collective. NULL is a no-op.
 * Ownership: takes the caller's handle back (it is invalid afterwards).
 * Models, layers and parameter sets still alive that were made from it keep
 * the context (its communicators included) alive and working until the
 * last of them is destroyed, which frees it (see Lifetimes in Conventions);
 * tensors and DLPack exports of its tensors may outlive it.
 * Errors: none.
 * Thread-safety: no other call may use the context, or an object made from
 * it, meanwhile.
 */
OSLO_API void oslo_context_destroy(oslo_context *ctx);

/**
 * Aborts the context's communication: pending and later collectives on this
 * rank fail with OSLO_ERR_COMM, and peers sharing memory with it fail too
 * instead of waiting for their timeout. The context must still be destroyed.
 * Ownership: the caller keeps the context.
 * Errors: OSLO_ERR_INVALID_ARGUMENT if ctx is NULL.
 * Thread-safety: thread-safe: may be called from any thread (e.g. a
 * watchdog) at any time, even while another thread is in a call on ctx.
 */
OSLO_API oslo_status oslo_context_abort(oslo_context *ctx);

/**
 * Rank of the calling process/thread within a group (0 .. size-1).
 * Ownership: writes *rank.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL pointer, unknown group).
 * Thread-safety: thread-safe (reads immutable topology).
 */
OSLO_API oslo_status oslo_context_rank(const oslo_context *ctx, oslo_group group, int *rank);

/**
 * Number of ranks in a group.
 * Ownership: writes *size. Errors: as oslo_context_rank.
 * Thread-safety: thread-safe (reads immutable topology).
 */
OSLO_API oslo_status oslo_context_size(const oslo_context *ctx, oslo_group group, int *size);

/**
 * Name of the context's backend ("cpu") and of the transport a group uses
 * ("self", "shm", "gloo"). `transport` may be NULL.
 * Ownership: both strings are borrowed from the context and live as long as it.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL ctx or backend, unknown group).
 * Thread-safety: thread-safe (reads immutable state).
 */
OSLO_API oslo_status oslo_context_backend(const oslo_context *ctx, oslo_group group,
                                          const char **backend, const char **transport);

/* ------------------------------------------------------------------------ */
/* Tensors                                                                   */
/* ------------------------------------------------------------------------ */

/**
 * Creates a zero-filled, contiguous row-major tensor on the context's device.
 * `shape` has `ndim` entries (0 <= ndim <= OSLO_MAX_DIMS, each >= 0).
 * Ownership: `shape` is read during the call only; the caller owns *out
 * (oslo_tensor_destroy), which may outlive ctx (its memory does not need it).
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL, bad ndim, negative extent, size
 * overflow), OSLO_ERR_DTYPE (unknown dtype), OSLO_ERR_OUT_OF_MEMORY.
 * Thread-safety: per context (see Conventions).
 */
OSLO_API oslo_status oslo_tensor_create(oslo_context *ctx, oslo_dtype dtype, int ndim,
                                        const int64_t *shape, oslo_tensor **out);

/**
 * Wraps caller memory without copying. `data` must be on the context's device
 * (host memory for "cpu") and hold the whole contiguous row-major tensor.
 * Ownership: oslo never frees `data`; it must stay valid while the tensor
 * (and any DLPack export of it) lives. The caller owns *out.
 * Errors: as oslo_tensor_create (data may be NULL only when the tensor has
 * 0 elements).
 * Thread-safety: per context (see Conventions).
 */
OSLO_API oslo_status oslo_tensor_wrap(oslo_context *ctx, void *data, oslo_dtype dtype, int ndim,
                                      const int64_t *shape, oslo_tensor **out);

/**
 * Destroys a tensor. NULL is a no-op.
 * Ownership: memory the tensor owns is freed once no DLPack export still
 * uses it; an imported DLPack tensor's deleter is called then.
 * Errors: none.
 * Thread-safety: per context (see Conventions).
 */
OSLO_API void oslo_tensor_destroy(oslo_tensor *tensor);

/**
 * Copies `bytes` bytes of host memory `src` into the tensor; `bytes` must
 * equal the tensor's size in bytes (numel * dtype size).
 * Ownership: `src` is read during the call only.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL tensor, NULL src with bytes > 0),
 * OSLO_ERR_SHAPE (size mismatch: the message names both sizes).
 * Thread-safety: per context (see Conventions).
 */
OSLO_API oslo_status oslo_tensor_copy_from_host(oslo_tensor *tensor, const void *src, size_t bytes);

/**
 * Copies the tensor into `bytes` bytes of host memory `dst`; `bytes` must
 * equal the tensor's size in bytes.
 * Ownership: `dst` is written during the call only.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL tensor, NULL dst with bytes > 0),
 * OSLO_ERR_SHAPE (size mismatch).
 * Thread-safety: per context (see Conventions).
 */
OSLO_API oslo_status oslo_tensor_copy_to_host(const oslo_tensor *tensor, void *dst, size_t bytes);

/**
 * Number of dimensions.
 * Ownership: writes *ndim. Errors: OSLO_ERR_INVALID_ARGUMENT (NULL).
 * Thread-safety: per context (see Conventions).
 */
OSLO_API oslo_status oslo_tensor_ndim(const oslo_tensor *tensor, int *ndim);

/**
 * Writes the extents into shape[0 .. ndim-1]; `shape` must have room for
 * OSLO_MAX_DIMS entries.
 * Ownership: writes the caller's array. Errors: OSLO_ERR_INVALID_ARGUMENT (NULL).
 * Thread-safety: per context (see Conventions).
 */
OSLO_API oslo_status oslo_tensor_shape(const oslo_tensor *tensor, int64_t *shape);

/**
 * Element type.
 * Ownership: writes *dtype. Errors: OSLO_ERR_INVALID_ARGUMENT (NULL).
 * Thread-safety: per context (see Conventions).
 */
OSLO_API oslo_status oslo_tensor_dtype(const oslo_tensor *tensor, oslo_dtype *dtype);

/**
 * Number of elements (1 for a 0-d tensor).
 * Ownership: writes *numel. Errors: OSLO_ERR_INVALID_ARGUMENT (NULL).
 * Thread-safety: per context (see Conventions).
 */
OSLO_API oslo_status oslo_tensor_numel(const oslo_tensor *tensor, int64_t *numel);

/**
 * Pointer to the tensor's data on its device.
 * Ownership: borrowed: valid while the tensor (or a DLPack export) lives.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL).
 * Thread-safety: per context (see Conventions).
 */
OSLO_API oslo_status oslo_tensor_data(const oslo_tensor *tensor, void **data);

/*
 * DLPack. Exports share the tensor's memory (no copy), are compact row-major
 * and always carry explicit strides. Imports take over a producer's tensor
 * without copying; it must be compact row-major (strides NULL or describing
 * that layout; an extent of 1 may have any stride, an empty tensor any
 * strides), on the context's device ("cpu": kDLCPU or kDLCUDAHost memory),
 * and of a supported type (float32, float16, bfloat16, int32, int64).
 * A binding implementing `__dlpack__(max_version=...)` (numpy 2, torch 2)
 * exports with oslo_tensor_to_dlpack_versioned when max_version >= (1, 0),
 * capsule "dltensor_versioned", and with oslo_tensor_to_dlpack otherwise,
 * capsule "dltensor"; importing, it asks for max_version=(1, 0) and calls
 * the function matching the capsule's name.
 */

/**
 * Exports the tensor as an unversioned DLPack DLManagedTensor (the struct of
 * DLPack 0.x, still accepted by 1.x consumers).
 * Ownership: the caller (or the framework it hands it to) owns *out and must
 * call its deleter once; the memory stays valid until then, even after
 * oslo_tensor_destroy and oslo_context_destroy.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL), OSLO_ERR_OUT_OF_MEMORY.
 * Thread-safety: per context (see Conventions); the deleter may be called
 * from any thread.
 */
OSLO_API oslo_status oslo_tensor_to_dlpack(oslo_tensor *tensor, struct DLManagedTensor **out);

/**
 * Exports the tensor as a DLPack 1.x DLManagedTensorVersioned: version
 * {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION} of <oslo/dlpack.h> (1.1),
 * flags 0 (writable, shared rather than copied).
 * Ownership: as oslo_tensor_to_dlpack.
 * Errors: as oslo_tensor_to_dlpack.
 * Thread-safety: as oslo_tensor_to_dlpack.
 */
OSLO_API oslo_status oslo_tensor_to_dlpack_versioned(oslo_tensor *tensor,
                                                     struct DLManagedTensorVersioned **out);

/**
 * Imports an unversioned DLPack tensor without copying (see "DLPack" above
 * for what it must be).
 * Ownership: on success oslo owns `managed` and calls its deleter once the
 * returned tensor (and every export of it) is gone; on failure the caller
 * still owns it and must call its deleter. The caller owns *out.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL, bad ndim or shape),
 * OSLO_ERR_DTYPE (unsupported type), OSLO_ERR_NOT_SUPPORTED (not compact
 * row-major, other device).
 * Thread-safety: per context (see Conventions).
 */
OSLO_API oslo_status oslo_tensor_from_dlpack(oslo_context *ctx, struct DLManagedTensor *managed,
                                             oslo_tensor **out);

/**
 * Imports a DLPack 1.x DLManagedTensorVersioned without copying. Its major
 * version must be 1 (any minor version). A read-only tensor
 * (DLPACK_FLAG_BITMASK_READ_ONLY) is refused: oslo tensors are writable and
 * collectives, loads and layer outputs write into them, so honouring the
 * flag would need a check on every call; import a writable copy instead. A
 * tensor flagged DLPACK_FLAG_BITMASK_IS_COPIED is accepted like any other.
 * Ownership: as oslo_tensor_from_dlpack (on failure, including a major
 * version mismatch, the caller keeps it; DLPack requires it then to call the
 * deleter).
 * Errors: as oslo_tensor_from_dlpack, and OSLO_ERR_NOT_SUPPORTED for another
 * major version or a read-only tensor.
 * Thread-safety: per context (see Conventions).
 */
OSLO_API oslo_status oslo_tensor_from_dlpack_versioned(oslo_context *ctx,
                                                       struct DLManagedTensorVersioned *managed,
                                                       oslo_tensor **out);

/* ------------------------------------------------------------------------ */
/* Collectives (blocking; every rank of the group must call them alike)     */
/* ------------------------------------------------------------------------ */

/**
 * In-place all-reduce of `tensor` over `group` with `op` (see oslo_reduce_op:
 * every op works on every dtype; integer AVG truncates toward zero). Results
 * are bitwise identical on every rank.
 * Ownership: the caller keeps the tensor.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL, unknown group or op),
 * OSLO_ERR_COMM, OSLO_ERR_TIMEOUT.
 * Thread-safety: per context (see Conventions).
 */
OSLO_API oslo_status oslo_context_all_reduce(oslo_context *ctx, oslo_group group, oslo_reduce_op op,
                                             oslo_tensor *tensor);

/**
 * Gathers every rank's `input` into `output`, concatenated along dimension 0
 * in group-rank order: output.numel == input.numel * group size, same dtype.
 * Ownership: the caller keeps both tensors.
 * Errors: OSLO_ERR_INVALID_ARGUMENT, OSLO_ERR_SHAPE, OSLO_ERR_DTYPE,
 * OSLO_ERR_COMM, OSLO_ERR_TIMEOUT.
 * Thread-safety: per context (see Conventions).
 */
OSLO_API oslo_status oslo_context_all_gather(oslo_context *ctx, oslo_group group,
                                             const oslo_tensor *input, oslo_tensor *output);

/**
 * Reduces `input` (numel = output.numel * group size, same dtype) over the
 * group with `op` and leaves block `rank` (along dimension 0) in `output`.
 * Ownership: the caller keeps both tensors.
 * Errors: as oslo_context_all_gather, and OSLO_ERR_INVALID_ARGUMENT for an
 * unknown op.
 * Thread-safety: per context (see Conventions).
 */
OSLO_API oslo_status oslo_context_reduce_scatter(oslo_context *ctx, oslo_group group,
                                                 oslo_reduce_op op, const oslo_tensor *input,
                                                 oslo_tensor *output);

/**
 * Copies `tensor` of group rank `root` into `tensor` on every other rank.
 * Every rank must name the same root, dtype and element count; a rank that
 * differs makes the call fail on every rank (OSLO_ERR_INVALID_ARGUMENT).
 * Ownership: the caller keeps the tensor.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL, unknown group, bad root,
 * mismatch), OSLO_ERR_COMM, OSLO_ERR_TIMEOUT.
 * Thread-safety: per context (see Conventions).
 */
OSLO_API oslo_status oslo_context_broadcast(oslo_context *ctx, oslo_group group, int root,
                                            oslo_tensor *tensor);

/**
 * Sends `tensor` to group rank `peer`, which must call oslo_context_recv with
 * a tensor of the same size in bytes. Messages between one pair arrive in
 * order. May return before the peer received (buffered).
 * Ownership: the caller keeps the tensor; the data is copied or sent before
 * the call returns.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL, unknown group, peer out of range
 * or self), OSLO_ERR_COMM, OSLO_ERR_TIMEOUT.
 * Thread-safety: per context (see Conventions).
 */
OSLO_API oslo_status oslo_context_send(oslo_context *ctx, oslo_group group, int peer,
                                       const oslo_tensor *tensor);

/**
 * Receives into `tensor` what group rank `peer` sent with oslo_context_send.
 * Ownership: the caller keeps the tensor.
 * Errors: as oslo_context_send.
 * Thread-safety: per context (see Conventions).
 */
OSLO_API oslo_status oslo_context_recv(oslo_context *ctx, oslo_group group, int peer,
                                       oslo_tensor *tensor);

/**
 * Blocks until every rank of the group arrived.
 * Ownership: nothing is passed.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL ctx, unknown group), OSLO_ERR_COMM,
 * OSLO_ERR_TIMEOUT.
 * Thread-safety: per context (see Conventions).
 */
OSLO_API oslo_status oslo_context_barrier(oslo_context *ctx, oslo_group group);

/* ------------------------------------------------------------------------ */
/* Tensor-parallel layers                                                    */
/* ------------------------------------------------------------------------ */

/** Which way a linear layer is split across the tensor-parallel group. */
typedef enum oslo_linear_kind {
  /** Output features split: each rank holds rows [r*out/tp, (r+1)*out/tp) of W. */
  OSLO_LINEAR_COLUMN = 0,
  /** Input features split: each rank holds columns [r*in/tp, (r+1)*in/tp) of W. */
  OSLO_LINEAR_ROW = 1,
  /* Not values: they make every int a valid value of the type, so a bad value
     passed from C is reported as an error instead of being undefined in C++. */
  OSLO_LINEAR_ENUM_MIN_ = -2147483647 - 1,
  OSLO_LINEAR_ENUM_MAX_ = 2147483647
} oslo_linear_kind;

/** Version of oslo_parallel_linear_options this header declares. */
#define OSLO_PARALLEL_LINEAR_OPTIONS_VERSION 1

/**
 * Options of a parallel linear layer y = x W^T + b (W is [out, in] as in
 * nn.Linear). Initialise with oslo_parallel_linear_options_init, then set
 * fields; see "Options structs" at the top for how it grows.
 */
typedef struct oslo_parallel_linear_options {
  unsigned int version;  /**< OSLO_PARALLEL_LINEAR_OPTIONS_VERSION; set by _init */
  oslo_linear_kind kind; /**< default OSLO_LINEAR_COLUMN */
  int64_t in_features;   /**< required, > 0 (default 0) */
  int64_t out_features;  /**< required, > 0 (default 0) */
  int bias;              /**< nonzero: the layer has a bias (default 1) */
  int gather_output;     /**< column only: all-gather the output (default 0) */
  int input_is_parallel; /**< row only: input already split along features (default 1) */
  oslo_dtype dtype;      /**< parameter dtype, f32/f16/bf16 (default OSLO_DTYPE_F32) */
} oslo_parallel_linear_options;

/**
 * Sets `options` to the defaults of `version` (pass
 * OSLO_PARALLEL_LINEAR_OPTIONS_VERSION): column-parallel, bias, no gather,
 * input_is_parallel, f32, sizes 0. Writes only the fields that version has.
 * Ownership: writes the caller's struct.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL, version 0 or newer than this
 * library knows: the message names it).
 * Thread-safety: thread-safe.
 */
OSLO_API oslo_status oslo_parallel_linear_options_init(oslo_parallel_linear_options *options,
                                                       unsigned int version);

/**
 * Creates a parallel linear layer with zero weights. The split dimension
 * (out_features for column, in_features for row) must be divisible by the
 * tensor-parallel size. Not collective.
 * Ownership: `options` is read during the call only; the caller owns *out
 * (oslo_parallel_linear_destroy), which keeps ctx alive until destroyed.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL, bad options version, non-positive
 * sizes, indivisible split, unknown kind), OSLO_ERR_DTYPE (non-float dtype),
 * OSLO_ERR_OUT_OF_MEMORY.
 * Thread-safety: per context (see Conventions).
 */
OSLO_API oslo_status oslo_parallel_linear_create(oslo_context *ctx,
                                                 const oslo_parallel_linear_options *options,
                                                 oslo_parallel_linear **out);

/**
 * Destroys a layer and its parameters and gradients. NULL is a no-op.
 * Ownership: the layer's tensors (oslo_parallel_linear_params) die with it;
 * a parameter set holding them must not be used afterwards.
 * Errors: none.
 * Thread-safety: per context (see Conventions).
 */
OSLO_API void oslo_parallel_linear_destroy(oslo_parallel_linear *layer);

/**
 * Loads the full, unsharded weight [out, in] (and bias [out], or NULL); each
 * rank copies its own slice. Any float dtype is converted. Not collective.
 * Ownership: the caller keeps the tensors; they are copied.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL layer or weight, a bias for a
 * layer without bias), OSLO_ERR_SHAPE, OSLO_ERR_DTYPE (non-float tensor).
 * Thread-safety: per context (see Conventions).
 */
OSLO_API oslo_status oslo_parallel_linear_load_full(oslo_parallel_linear *layer,
                                                    const oslo_tensor *weight,
                                                    const oslo_tensor *bias);

/**
 * Loads this rank's slice directly: weight [out/tp, in] (column) or
 * [out, in/tp] (row); bias [out/tp] (column) or [out] (row), or NULL.
 * Ownership: as oslo_parallel_linear_load_full.
 * Errors: as oslo_parallel_linear_load_full.
 * Thread-safety: per context (see Conventions).
 */
OSLO_API oslo_status oslo_parallel_linear_load_shard(oslo_parallel_linear *layer,
                                                     const oslo_tensor *weight,
                                                     const oslo_tensor *bias);

/**
 * The layer's local weight, bias, and their gradients (f32). Any out-pointer
 * may be NULL; the bias pointers are set to NULL for a layer without bias.
 * Ownership: borrowed: the tensors belong to the layer and die with it;
 * never destroy them.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL layer).
 * Thread-safety: per context (see Conventions).
 */
OSLO_API oslo_status oslo_parallel_linear_params(const oslo_parallel_linear *layer,
                                                 oslo_tensor **weight, oslo_tensor **bias,
                                                 oslo_tensor **grad_weight,
                                                 oslo_tensor **grad_bias);

/**
 * Forward pass. `input` is [..., in] (column, or row without
 * input_is_parallel) or [..., in/tp] (row with input_is_parallel); `output`
 * (caller-allocated) is [..., out/tp] (column) or [..., out] (column with
 * gather_output, row). Input, output and parameters may each have any float
 * dtype, independently (e.g. f16 input, f32 output): computation is f32 and
 * the output is rounded once to its dtype. Collective over the tensor group
 * when it communicates (column with gather_output; row).
 * Ownership: the caller keeps both tensors.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL), OSLO_ERR_SHAPE, OSLO_ERR_DTYPE
 * (non-float tensor), OSLO_ERR_OUT_OF_MEMORY, OSLO_ERR_COMM, OSLO_ERR_TIMEOUT.
 * Thread-safety: per context (see Conventions).
 */
OSLO_API oslo_status oslo_parallel_linear_forward(oslo_parallel_linear *layer,
                                                  const oslo_tensor *input, oslo_tensor *output);

/**
 * Backward pass for the forward that took `input` and produced an output of
 * `grad_output`'s shape. Adds the weight and bias gradients into the layer's
 * gradients (zero them with oslo_parallel_linear_zero_grad) and writes the
 * input gradient (same shape as `input`, any float dtype) into `grad_input`
 * unless it is NULL. Collective over the tensor group (column: all-reduce of
 * grad_input; row without input_is_parallel: all-gather of grad_input);
 * every rank must pass grad_input or every rank NULL.
 * Ownership: the caller keeps the tensors.
 * Errors: as oslo_parallel_linear_forward.
 * Thread-safety: per context (see Conventions).
 */
OSLO_API oslo_status oslo_parallel_linear_backward(oslo_parallel_linear *layer,
                                                   const oslo_tensor *input,
                                                   const oslo_tensor *grad_output,
                                                   oslo_tensor *grad_input);

/**
 * Sets the layer's gradients to zero.
 * Ownership: the caller keeps the layer.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL).
 * Thread-safety: per context (see Conventions).
 */
OSLO_API oslo_status oslo_parallel_linear_zero_grad(oslo_parallel_linear *layer);

/** Version of oslo_parallel_embedding_options this header declares. */
#define OSLO_PARALLEL_EMBEDDING_OPTIONS_VERSION 1

/**
 * Options of a vocabulary-parallel embedding [vocab_size, hidden_size].
 * Initialise with oslo_parallel_embedding_options_init, then set fields; see
 * "Options structs" at the top for how it grows.
 */
typedef struct oslo_parallel_embedding_options {
  unsigned int version; /**< OSLO_PARALLEL_EMBEDDING_OPTIONS_VERSION; set by _init */
  int64_t vocab_size;   /**< rows of the full table, required, > 0 (default 0) */
  int64_t hidden_size;  /**< columns (embedding dimension), required, > 0 (default 0) */
  oslo_dtype dtype;     /**< table dtype, f32/f16/bf16 (default OSLO_DTYPE_F32) */
} oslo_parallel_embedding_options;

/**
 * Sets `options` to the defaults of `version` (pass
 * OSLO_PARALLEL_EMBEDDING_OPTIONS_VERSION): sizes 0, f32. Writes only the
 * fields that version has.
 * Ownership: writes the caller's struct.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL, version 0 or newer than this
 * library knows: the message names it).
 * Thread-safety: thread-safe.
 */
OSLO_API oslo_status oslo_parallel_embedding_options_init(oslo_parallel_embedding_options *options,
                                                          unsigned int version);

/**
 * Creates a vocabulary-parallel embedding with a zero table. The vocabulary
 * is padded up to a multiple of the tensor-parallel size; rank r holds padded
 * rows [r*V_p/tp, (r+1)*V_p/tp). Padding rows are zero and never produce
 * output. Not collective.
 * Ownership: `options` is read during the call only; the caller owns *out
 * (oslo_parallel_embedding_destroy), which keeps ctx alive until destroyed.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL, bad options version, non-positive
 * sizes), OSLO_ERR_DTYPE (non-float dtype), OSLO_ERR_OUT_OF_MEMORY.
 * Thread-safety: per context (see Conventions).
 */
OSLO_API oslo_status oslo_parallel_embedding_create(oslo_context *ctx,
                                                    const oslo_parallel_embedding_options *options,
                                                    oslo_parallel_embedding **out);

/**
 * Destroys an embedding and its table and gradient. NULL is a no-op.
 * Ownership: as oslo_parallel_linear_destroy. Errors: none.
 * Thread-safety: per context (see Conventions).
 */
OSLO_API void oslo_parallel_embedding_destroy(oslo_parallel_embedding *emb);

/**
 * This rank's range of real vocabulary rows [*start, *end) (end <= vocab_size;
 * may be empty on the last ranks when padding is large) and the padded local
 * row count. Any out-pointer may be NULL.
 * Ownership: writes the caller's ints.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL emb).
 * Thread-safety: per context (see Conventions).
 */
OSLO_API oslo_status oslo_parallel_embedding_vocab_range(const oslo_parallel_embedding *emb,
                                                         int64_t *start, int64_t *end,
                                                         int64_t *local_rows);

/**
 * Loads the full table [vocab_size, hidden_size] (any float dtype, converted);
 * each rank keeps its rows. Not collective.
 * Ownership: the caller keeps the tensor; it is copied.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL), OSLO_ERR_SHAPE, OSLO_ERR_DTYPE.
 * Thread-safety: per context (see Conventions).
 */
OSLO_API oslo_status oslo_parallel_embedding_load_full(oslo_parallel_embedding *emb,
                                                       const oslo_tensor *weight);

/**
 * Loads this rank's padded rows [local_rows, hidden_size] directly (padding
 * rows are zeroed whatever the tensor holds there).
 * Ownership: as oslo_parallel_embedding_load_full.
 * Errors: as oslo_parallel_embedding_load_full.
 * Thread-safety: per context (see Conventions).
 */
OSLO_API oslo_status oslo_parallel_embedding_load_shard(oslo_parallel_embedding *emb,
                                                        const oslo_tensor *weight);

/**
 * The local table [local_rows, hidden_size] and its gradient (f32); either
 * out-pointer may be NULL.
 * Ownership: borrowed: the tensors belong to the embedding and die with it.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL emb).
 * Thread-safety: per context (see Conventions).
 */
OSLO_API oslo_status oslo_parallel_embedding_params(const oslo_parallel_embedding *emb,
                                                    oslo_tensor **weight,
                                                    oslo_tensor **grad_weight);

/**
 * Looks up `ids` (I32 or I64, any shape [...]) into `output` [..., hidden_size]
 * (any float dtype). Collective over the tensor group (one all-reduce).
 * Ownership: the caller keeps both tensors.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL; an id outside [0, vocab_size),
 * the message names it and its position), OSLO_ERR_DTYPE (ids not I32/I64,
 * output not float), OSLO_ERR_SHAPE (output not ids' shape + [hidden_size]),
 * OSLO_ERR_OUT_OF_MEMORY, OSLO_ERR_COMM, OSLO_ERR_TIMEOUT.
 * Thread-safety: per context (see Conventions).
 */
OSLO_API oslo_status oslo_parallel_embedding_forward(oslo_parallel_embedding *emb,
                                                     const oslo_tensor *ids, oslo_tensor *output);

/**
 * Adds d(loss)/d(weight) for `grad_output` [..., hidden_size] (any float
 * dtype) at the rows of `ids` (I32 or I64, shape [...]) into the embedding's
 * gradient; ids outside this rank's rows add nothing here. Not collective.
 * All ids are checked before anything is added: on failure the gradient is
 * unchanged.
 * Ownership: the caller keeps both tensors.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL; an id outside [0, vocab_size),
 * the message names it and its position), OSLO_ERR_DTYPE (ids not I32/I64,
 * grad_output not float), OSLO_ERR_SHAPE (grad_output not ids' shape +
 * [hidden_size]), OSLO_ERR_OUT_OF_MEMORY.
 * Thread-safety: per context (see Conventions).
 */
OSLO_API oslo_status oslo_parallel_embedding_backward(oslo_parallel_embedding *emb,
                                                      const oslo_tensor *ids,
                                                      const oslo_tensor *grad_output);

/**
 * Sets the embedding's gradient to zero.
 * Ownership: the caller keeps the embedding.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL).
 * Thread-safety: per context (see Conventions).
 */
OSLO_API oslo_status oslo_parallel_embedding_zero_grad(oslo_parallel_embedding *emb);

/** Version of oslo_vocab_parallel_cross_entropy_options this header declares. */
#define OSLO_VOCAB_PARALLEL_CROSS_ENTROPY_OPTIONS_VERSION 1

/**
 * Options of oslo_context_vocab_parallel_cross_entropy. Initialise with
 * oslo_vocab_parallel_cross_entropy_options_init, then set fields; see
 * "Options structs" at the top for how it grows.
 */
typedef struct oslo_vocab_parallel_cross_entropy_options {
  unsigned int version; /**< OSLO_VOCAB_PARALLEL_CROSS_ENTROPY_OPTIONS_VERSION; set by _init */
  int64_t vocab_size;   /**< the real (unpadded) vocabulary, required, > 0 (default 0) */
  int64_t ignore_index; /**< labels equal to it add no loss (default -100, as torch) */
} oslo_vocab_parallel_cross_entropy_options;

/**
 * Sets `options` to the defaults of `version` (pass
 * OSLO_VOCAB_PARALLEL_CROSS_ENTROPY_OPTIONS_VERSION): vocab_size 0,
 * ignore_index -100. Writes only the fields that version has.
 * Ownership: writes the caller's struct.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL, version 0 or newer than this
 * library knows: the message names it).
 * Thread-safety: thread-safe.
 */
OSLO_API oslo_status oslo_vocab_parallel_cross_entropy_options_init(
    oslo_vocab_parallel_cross_entropy_options *options, unsigned int version);

/**
 * Cross-entropy over logits split along the vocabulary: `logits` is this
 * rank's [tokens, V_p/tp] slice of the padded vocabulary (any float dtype;
 * as produced by a column-parallel head without gather_output or by the
 * embedding's layout), `labels` [tokens] (I32/I64); columns at or past
 * options->vocab_size are padding and never win. Writes per-token losses
 * [tokens] (f32; 0 for ignored) into `losses`, d(mean_loss)/d(logits) into
 * `grad_logits` (same shape as logits, any float dtype) and the mean over
 * non-ignored tokens into `*mean_loss` (NaN if all are ignored); each of the
 * three outputs may be NULL. Collective over the tensor group.
 * Ownership: the caller keeps every tensor; `options` is read during the
 * call only.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL ctx, logits, labels or options;
 * bad options version; vocab_size <= 0; a label out of range),
 * OSLO_ERR_SHAPE, OSLO_ERR_DTYPE, OSLO_ERR_OUT_OF_MEMORY, OSLO_ERR_COMM,
 * OSLO_ERR_TIMEOUT.
 * Thread-safety: per context (see Conventions).
 */
OSLO_API oslo_status oslo_context_vocab_parallel_cross_entropy(
    oslo_context *ctx, const oslo_tensor *logits, const oslo_tensor *labels,
    const oslo_vocab_parallel_cross_entropy_options *options, oslo_tensor *losses,
    oslo_tensor *grad_logits, float *mean_loss);

/* ------------------------------------------------------------------------ */
/* Parameter sets: gradient clipping and checkpoints                         */
/* ------------------------------------------------------------------------ */

/**
 * Creates an empty set of named parameters.
 * Ownership: the caller owns *out (oslo_param_set_destroy), which keeps ctx
 * alive until destroyed. A set borrows the
 * tensors added to it: they (and the layers that own them) must outlive
 * its use; it may be destroyed after them.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL), OSLO_ERR_OUT_OF_MEMORY.
 * Thread-safety: per context (see Conventions).
 */
OSLO_API oslo_status oslo_param_set_create(oslo_context *ctx, oslo_param_set **out);

/**
 * Destroys a set. NULL is a no-op.
 * Ownership: the tensors in it are not destroyed (the set only borrowed them).
 * Errors: none.
 * Thread-safety: per context (see Conventions).
 */
OSLO_API void oslo_param_set_destroy(oslo_param_set *set);

/**
 * Adds a tensor under a unique `name`. `split_dim` is the dimension along
 * which the tensor-parallel ranks hold equal consecutive slices of the global
 * tensor, or -1 if every tensor-parallel rank holds the same full tensor
 * (replicated). `grad` (same shape, may be NULL; f32 for
 * oslo_param_set_clip_grad_norm) is the tensor's gradient.
 * Ownership: `name` is copied; `tensor` and `grad` are borrowed until the
 * set is destroyed.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL, empty or duplicate name,
 * split_dim out of range), OSLO_ERR_SHAPE (grad shape), OSLO_ERR_OUT_OF_MEMORY.
 * Thread-safety: per context (see Conventions).
 */
OSLO_API oslo_status oslo_param_set_add(oslo_param_set *set, const char *name, oslo_tensor *tensor,
                                        oslo_tensor *grad, int split_dim);

/**
 * Adds a linear layer's parameters as "<prefix>.weight" and "<prefix>.bias"
 * with their gradients and split dimensions.
 * Ownership: `prefix` is copied; the layer is borrowed until the set is
 * destroyed.
 * Errors: as oslo_param_set_add.
 * Thread-safety: per context (see Conventions).
 */
OSLO_API oslo_status oslo_param_set_add_linear(oslo_param_set *set, const char *prefix,
                                               oslo_parallel_linear *layer);

/**
 * Adds an embedding's table as "<prefix>.weight" (its global shape is the
 * real, unpadded [vocab_size, hidden_size]).
 * Ownership: as oslo_param_set_add_linear.
 * Errors: as oslo_param_set_add.
 * Thread-safety: per context (see Conventions).
 */
OSLO_API oslo_status oslo_param_set_add_embedding(oslo_param_set *set, const char *prefix,
                                                  oslo_parallel_embedding *emb);

/**
 * Number of parameters in the set.
 * Ownership: writes *count. Errors: OSLO_ERR_INVALID_ARGUMENT (NULL).
 * Thread-safety: per context (see Conventions).
 */
OSLO_API oslo_status oslo_param_set_count(const oslo_param_set *set, size_t *count);

/**
 * Global gradient norm over the tensor-parallel group, as torch's
 * clip_grad_norm_ would compute on the unsharded model: sharded parameters
 * count on every rank, replicated ones once. `norm_type` is p >= 1 or
 * INFINITY (max norm). If max_norm > 0 and the norm exceeds it, every
 * gradient is scaled by max_norm / (norm + 1e-6). Parameters without a
 * gradient are skipped. `total_norm` may be NULL. Collective over the
 * tensor group.
 * Ownership: writes the set's gradients and *total_norm.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL set, norm_type < 1, NaN max_norm),
 * OSLO_ERR_DTYPE (a gradient that is not f32), OSLO_ERR_COMM, OSLO_ERR_TIMEOUT.
 * Thread-safety: per context (see Conventions).
 */
OSLO_API oslo_status oslo_param_set_clip_grad_norm(oslo_param_set *set, double max_norm,
                                                   double norm_type, double *total_norm);

/**
 * Saves the set under directory `dir` (created if missing): one safetensors
 * file per tensor-parallel x pipeline rank (data-parallel rank 0 writes;
 * replicated tensors are written once) plus `oslo_checkpoint.json`, a
 * manifest recording each tensor's global shape and every shard's slice.
 * Atomic: files are written to temporaries, fsync'ed and renamed, the
 * manifest last; a crash leaves the previous checkpoint loadable and never a
 * half-written one. Collective over the world group.
 * Ownership: `dir` is read during the call only.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL), OSLO_ERR_IO, OSLO_ERR_COMM,
 * OSLO_ERR_TIMEOUT.
 * Thread-safety: per context (see Conventions).
 */
OSLO_API oslo_status oslo_param_set_save_checkpoint(oslo_param_set *set, const char *dir);

/**
 * Loads every tensor of the set from a checkpoint saved by
 * oslo_param_set_save_checkpoint at any tensor-parallel size: each rank reads
 * only the byte ranges of its own slice and re-slices (padding rows are
 * zeroed). Dtypes are converted. Collective over the world group: every rank
 * loads, then all ranks agree on the outcome, so they all succeed or all
 * fail. If any rank failed, every rank returns the status of the lowest
 * failing world rank, with a message naming that rank and quoting its error
 * (the tensors may then hold loaded, partly loaded or previous values, on any
 * rank). The agreement honours timeout_seconds.
 * Ownership: writes the set's tensors; `dir` is read during the call only.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL), OSLO_ERR_IO (missing files),
 * OSLO_ERR_FORMAT (corrupt manifest or shard, missing tensor: the message
 * names it), OSLO_ERR_SHAPE (global shape differs), OSLO_ERR_DTYPE (a float
 * checkpoint loaded into an integer tensor), OSLO_ERR_COMM, OSLO_ERR_TIMEOUT.
 * Thread-safety: per context (see Conventions).
 */
OSLO_API oslo_status oslo_param_set_load_checkpoint(oslo_param_set *set, const char *dir);

/* ------------------------------------------------------------------------ */
/* Tokenizers                                                                */
/* ------------------------------------------------------------------------ */

/**
 * A tokenizer: text <-> token ids exactly as Hugging Face tokenizers and
 * transformers do it, from a tokenizer.json (byte-level BPE as GPT-2,
 * LLaMA-3, Qwen2; SentencePiece-style BPE; WordPiece as BERT) or a
 * SentencePiece tokenizer.model (as transformers' LlamaTokenizer).
 * docs/TOKENIZERS.md lists what is supported. Needs no context. A loaded
 * tokenizer never changes: every function taking a `const oslo_tokenizer *`
 * may be called from any number of threads at once.
 */
typedef struct oslo_tokenizer oslo_tokenizer;

/** Which special token oslo_tokenizer_special_id returns. */
typedef enum oslo_special_token {
  OSLO_SPECIAL_TOKEN_BOS = 0,                     /**< beginning of sequence */
  OSLO_SPECIAL_TOKEN_EOS = 1,                     /**< end of sequence */
  OSLO_SPECIAL_TOKEN_PAD = 2,                     /**< padding */
  OSLO_SPECIAL_TOKEN_UNK = 3,                     /**< unknown token */
  OSLO_SPECIAL_TOKEN_CLS = 4,                     /**< classifier token (BERT's [CLS]) */
  OSLO_SPECIAL_TOKEN_SEP = 5,                     /**< separator (BERT's [SEP]) */
  OSLO_SPECIAL_TOKEN_MASK = 6,                    /**< mask (BERT's [MASK]) */
  OSLO_SPECIAL_TOKEN_ENUM_MIN_ = -2147483647 - 1, /* not values: see oslo_dtype */
  OSLO_SPECIAL_TOKEN_ENUM_MAX_ = 2147483647
} oslo_special_token;

/**
 * Loads a tokenizer from `path`: a folder (its tokenizer.json, else its
 * tokenizer.model; tokenizer_config.json and special_tokens_map.json, when
 * present, name the special tokens), a tokenizer.json or .model file, or a
 * llama.cpp .gguf file (the tokenizer of its tokenizer.ggml.* metadata,
 * "llama" or "gpt2", giving llama.cpp's ids; its chat template).
 * Ownership: the caller owns *out and frees it with oslo_tokenizer_destroy;
 * `path` is read during the call only. On failure *out is NULL.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL path or out), OSLO_ERR_IO (missing
 * or unreadable file or folder), OSLO_ERR_FORMAT (invalid JSON or model,
 * inconsistent vocabulary or merges: the message names the file and the
 * field), OSLO_ERR_NOT_SUPPORTED (a valid configuration oslo does not
 * implement, such as a Unigram model: the message names it; or a .model
 * file when liboslo_sentencepiece.so, installed next to liboslo, cannot be
 * loaded: the message names it and the loader's error),
 * OSLO_ERR_OUT_OF_MEMORY.
 * Thread-safety: thread-safe.
 */
OSLO_API oslo_status oslo_tokenizer_load(const char *path, oslo_tokenizer **out);

/**
 * Frees a tokenizer. NULL does nothing.
 * Ownership: `tok` is invalid afterwards.
 * Errors: none.
 * Thread-safety: no other call may be using `tok`.
 */
OSLO_API void oslo_tokenizer_destroy(oslo_tokenizer *tok);

/**
 * Encodes `text_len` bytes of UTF-8 text (NUL bytes included; text may be
 * NULL when text_len is 0) into token ids. With add_special_tokens nonzero
 * the tokenizer's own special tokens are added (BOS; BERT's [CLS] ... [SEP]).
 * Special tokens written in the text are always recognised.
 * Writes at most `capacity` ids to `ids` (may be NULL when capacity is 0) and
 * always sets *count to the full number, so a first call with capacity 0
 * sizes the array; if *count > capacity the output is truncated and the call
 * still returns OSLO_OK.
 * Ownership: all memory stays the caller's.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL tok or count, NULL text with
 * text_len > 0, NULL ids with capacity > 0, text not valid UTF-8: the message
 * names the byte offset), OSLO_ERR_OUT_OF_MEMORY.
 * Thread-safety: thread-safe.
 */
OSLO_API oslo_status oslo_tokenizer_encode(const oslo_tokenizer *tok, const char *text,
                                           size_t text_len, int add_special_tokens, int64_t *ids,
                                           size_t capacity, size_t *count);

/**
 * Decodes `n` token ids into UTF-8 text (byte sequences that are not UTF-8
 * become U+FFFD, as Hugging Face does). With skip_special_tokens nonzero,
 * special tokens are left out. Ids that name no token are skipped, as
 * Hugging Face does. Writes at most `capacity` bytes to `out` (may be NULL
 * when capacity is 0), followed by a terminating NUL when it fits
 * (length < capacity), and always sets *length to the full length in bytes
 * without the NUL: call with capacity 0 to size the buffer, then with
 * *length + 1. Truncated output still returns OSLO_OK.
 * Ownership: all memory stays the caller's.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL tok or length, NULL ids with n > 0,
 * NULL out with capacity > 0, a negative id), OSLO_ERR_OUT_OF_MEMORY.
 * Thread-safety: thread-safe.
 */
OSLO_API oslo_status oslo_tokenizer_decode(const oslo_tokenizer *tok, const int64_t *ids, size_t n,
                                           int skip_special_tokens, char *out, size_t capacity,
                                           size_t *length);

/**
 * Number of tokens, added and special tokens included (Hugging Face's
 * len(tokenizer)).
 * Ownership: writes *size.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL).
 * Thread-safety: thread-safe.
 */
OSLO_API oslo_status oslo_tokenizer_vocab_size(const oslo_tokenizer *tok, size_t *size);

/**
 * The id of the token spelled by `token_len` bytes at `token` (the
 * vocabulary's spelling, e.g. "Ġthe" for byte-level BPE, "##ing" for
 * WordPiece), or -1 if there is no such token.
 * Ownership: writes *id; `token` is read during the call only.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL tok or id, NULL token with
 * token_len > 0).
 * Thread-safety: thread-safe.
 */
OSLO_API oslo_status oslo_tokenizer_token_to_id(const oslo_tokenizer *tok, const char *token,
                                                size_t token_len, int64_t *id);

/**
 * The vocabulary's spelling of token `id`. Writes at most `capacity` bytes
 * to `out` with the same sizing rule as oslo_tokenizer_decode (NUL when it
 * fits; *length is always the full length).
 * Ownership: all memory stays the caller's.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL tok or length, NULL out with
 * capacity > 0, an id that names no token).
 * Thread-safety: thread-safe.
 */
OSLO_API oslo_status oslo_tokenizer_id_to_token(const oslo_tokenizer *tok, int64_t id, char *out,
                                                size_t capacity, size_t *length);

/**
 * The id of a special token (BOS, EOS, PAD, ...) as the tokenizer's files
 * define it, or -1 if they define none.
 * Ownership: writes *id.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL, unknown `which`).
 * Thread-safety: thread-safe.
 */
OSLO_API oslo_status oslo_tokenizer_special_id(const oslo_tokenizer *tok, oslo_special_token which,
                                               int64_t *id);

/** Which end of a row padding fills or truncation cuts. */
typedef enum oslo_side {
  OSLO_SIDE_RIGHT = 0,                   /**< after the tokens; truncation drops the last ids */
  OSLO_SIDE_LEFT = 1,                    /**< before the tokens; truncation drops the first ids */
  OSLO_SIDE_ENUM_MIN_ = -2147483647 - 1, /* not values: see oslo_dtype */
  OSLO_SIDE_ENUM_MAX_ = 2147483647
} oslo_side;

#define OSLO_TOKENIZER_ENCODE_BATCH_OPTIONS_VERSION 1

/**
 * Options of oslo_tokenizer_encode_batch (versioned; see "Options structs").
 * The defaults are Hugging Face's tokenizer(texts, padding=True): special
 * tokens added, rows padded on the right to the longest with the
 * tokenizer's padding token, nothing truncated.
 */
typedef struct oslo_tokenizer_encode_batch_options {
  unsigned int version;   /**< OSLO_TOKENIZER_ENCODE_BATCH_OPTIONS_VERSION; set by _init */
  int add_special_tokens; /**< nonzero (default 1): BOS, [CLS] ... [SEP] as oslo_tokenizer_encode */
  oslo_side padding_side; /**< OSLO_SIDE_RIGHT (default; encoders) or LEFT (generation) */
  /** The id under padding, >= 0; -1 (default): the tokenizer's padding token
   * (OSLO_SPECIAL_TOKEN_PAD), an error when it has none. */
  int64_t pad_id;
  /** 0 (default): no limit. Else the most ids a row may hold: a longer row
   * is cut (truncation nonzero) or refused. */
  size_t max_length;
  /** 0 (default): a row longer than max_length is an error. Nonzero: it is
   * cut to max_length as Hugging Face's truncation=True does: the text's ids
   * are cut, its special tokens ([CLS] ... [SEP], BOS) kept. */
  int truncation;
  oslo_side truncation_side; /**< RIGHT (default): drop the last ids; LEFT: the first */
  /** 0 (default): pad to the longest row (padding=True). Nonzero: pad every
   * row to max_length (padding="max_length"). */
  int pad_to_max_length;
} oslo_tokenizer_encode_batch_options;

/**
 * Sets `options` to the defaults of `version` (pass
 * OSLO_TOKENIZER_ENCODE_BATCH_OPTIONS_VERSION).
 * Ownership: writes the caller's struct.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL, version 0 or unknown).
 * Thread-safety: thread-safe.
 */
OSLO_API oslo_status oslo_tokenizer_encode_batch_options_init(
    oslo_tokenizer_encode_batch_options *options, unsigned int version);

/**
 * Encodes `n` texts at once into a padded matrix of token ids and its
 * attention mask, as Hugging Face's tokenizer(texts, padding=True,
 * truncation=..., max_length=...) does: row i holds text i's ids (each as
 * oslo_tokenizer_encode gives them, cut to max_length when truncation is
 * set) and pad_id elsewhere, on the options' padding side; mask row i holds
 * 1 on its ids and 0 on padding. Every row has the same length L: the
 * longest row's, or max_length with pad_to_max_length.
 * Texts: texts[i] holds text_lens[i] bytes of UTF-8 (NUL bytes included;
 * texts[i] may be NULL when text_lens[i] is 0), or, with text_lens NULL,
 * is a NUL-terminated string.
 * `options` NULL: the defaults (oslo_tokenizer_encode_batch_options_init).
 * Outputs, with oslo_tokenizer_encode's sizing rule made for a matrix: the
 * call always sets *length to L; when n * L <= capacity it writes the ids,
 * row-major [n, L], to `ids` and the mask, likewise, to `mask` (may be
 * NULL: no mask), and otherwise writes neither and still returns OSLO_OK.
 * So a first call with capacity 0 (ids and mask may be NULL) sizes the
 * arrays, and a second with capacity n * L fills them.
 * Ownership: all memory stays the caller's (texts, text_lens and options
 * are read during the call only; ids and mask hold `capacity` int64 each).
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL tok or length; n == 0; NULL
 * texts; a NULL text with a nonzero length or without text_lens; NULL ids
 * with capacity > 0; an options version of 0 or newer than the library's;
 * a side other than RIGHT or LEFT; pad_id below -1; no pad_id and no
 * padding token; max_length 0 with truncation or pad_to_max_length; a row
 * longer than max_length without truncation, or max_length shorter than a
 * row's special tokens with it; a text not valid UTF-8: every message
 * names the text by index), OSLO_ERR_NOT_SUPPORTED (truncating a row whose
 * post-processor changes the text's ids), OSLO_ERR_OUT_OF_MEMORY.
 * Thread-safety: thread-safe.
 */
OSLO_API oslo_status oslo_tokenizer_encode_batch(const oslo_tokenizer *tok,
                                                 const char *const *texts, const size_t *text_lens,
                                                 size_t n,
                                                 const oslo_tokenizer_encode_batch_options *options,
                                                 int64_t *ids, int64_t *mask, size_t capacity,
                                                 size_t *length);

#define OSLO_PAD_BATCH_OPTIONS_VERSION 1

/**
 * Options of oslo_pad_batch (versioned; see "Options structs"): the
 * padding and truncation fields of oslo_tokenizer_encode_batch_options,
 * with the same meanings, for rows of ids that are already tokens. The
 * defaults are Hugging Face's tokenizer.pad(rows) (DataCollatorWithPadding):
 * rows padded on the right to the longest, nothing truncated; pad_id has
 * no default (there is no tokenizer to take it from).
 */
typedef struct oslo_pad_batch_options {
  unsigned int version;   /**< OSLO_PAD_BATCH_OPTIONS_VERSION; set by _init */
  oslo_side padding_side; /**< OSLO_SIDE_RIGHT (default) or LEFT */
  /** The id under padding, >= 0; -1 (default) is an error: set it (e.g. to
   * oslo_tokenizer_special_id's PAD, or a model's pad_token_id). */
  int64_t pad_id;
  /** 0 (default): no limit. Else the most ids a row may hold: a longer row
   * is cut (truncation nonzero) or refused. */
  size_t max_length;
  /** 0 (default): a row longer than max_length is an error. Nonzero: it is
   * cut to max_length ids (the rows hold no special tokens to keep). */
  int truncation;
  oslo_side truncation_side; /**< RIGHT (default): drop the last ids; LEFT: the first */
  /** 0 (default): pad to the longest row. Nonzero: pad every row to
   * max_length (Hugging Face's padding="max_length"). */
  int pad_to_max_length;
} oslo_pad_batch_options;

/**
 * Sets `options` to the defaults of `version` (pass
 * OSLO_PAD_BATCH_OPTIONS_VERSION).
 * Ownership: writes the caller's struct.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL, version 0 or unknown).
 * Thread-safety: thread-safe.
 */
OSLO_API oslo_status oslo_pad_batch_options_init(oslo_pad_batch_options *options,
                                                 unsigned int version);

/**
 * Pads `n` rows of token ids of any lengths into one [n, L] matrix and its
 * attention mask, as Hugging Face's tokenizer.pad (DataCollatorWithPadding)
 * does, with oslo_tokenizer_encode_batch's truncation: row i holds rows[i]
 * (cut to max_length when truncation is set) and pad_id elsewhere, on the
 * options' padding side; mask row i holds 1 on its ids and 0 on padding.
 * L is the longest (cut) row's length, or max_length with
 * pad_to_max_length. Needs no tokenizer: the ids are not checked against
 * any vocabulary.
 * Rows: rows[i] holds row_lens[i] ids (rows[i] may be NULL when
 * row_lens[i] is 0; an empty row is all padding).
 * `options` NULL: the defaults, which have no pad_id, so pass options.
 * Outputs: oslo_tokenizer_encode_batch's sizing rule: the call always sets
 * *length to L; when n * L <= capacity it writes the ids, row-major
 * [n, L], to `ids` and the mask to `mask` (may be NULL: no mask), and
 * otherwise writes neither and still returns OSLO_OK.
 * Ownership: all memory stays the caller's (rows, row_lens and options are
 * read during the call only; ids and mask hold `capacity` int64 each).
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL length, rows or row_lens; n == 0;
 * a NULL row with a nonzero length; NULL ids with capacity > 0; an options
 * version of 0 or newer than the library's; a side other than RIGHT or
 * LEFT; pad_id below 0; max_length 0 with truncation or pad_to_max_length;
 * a row longer than max_length without truncation: the messages name the
 * row by index), OSLO_ERR_OUT_OF_MEMORY (n * L overflows the address space).
 * Thread-safety: thread-safe.
 */
OSLO_API oslo_status oslo_pad_batch(const int64_t *const *rows, const size_t *row_lens, size_t n,
                                    const oslo_pad_batch_options *options, int64_t *ids,
                                    int64_t *mask, size_t capacity, size_t *length);

/* Chat templates ---------------------------------------------------------- */

/**
 * Whether the tokenizer came with a chat template: *has is 1 when its folder
 * held chat_template.jinja, additional_chat_templates/NAME.jinja or a
 * "chat_template" in tokenizer_config.json (a string or a list of
 * {"name", "template"}), else 0. A template that does not parse still
 * counts: applying it returns the parse error.
 * Ownership: writes *has.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL).
 * Thread-safety: thread-safe.
 */
OSLO_API oslo_status oslo_tokenizer_has_chat_template(const oslo_tokenizer *tok, int *has);

/**
 * The source text of one of the tokenizer's chat templates: `name` NULL
 * for the one oslo_tokenizer_apply_chat_template uses, else a template's
 * name ("default", "tool_use", ...). Writes at most `capacity` bytes with
 * oslo_tokenizer_decode's sizing rule (NUL when it fits; *length is always
 * the full length).
 * Ownership: all memory stays the caller's.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL tok or length, NULL out with
 * capacity > 0, no chat template, no template of that name, several
 * templates and none named "default" with name NULL).
 * Thread-safety: thread-safe.
 */
OSLO_API oslo_status oslo_tokenizer_get_chat_template(const oslo_tokenizer *tok, const char *name,
                                                      char *out, size_t capacity, size_t *length);

/**
 * Renders a conversation with the tokenizer's chat template into the
 * prompt text, exactly as transformers'
 * tokenizer.apply_chat_template(messages, tokenize=False,
 * add_generation_prompt=...) does (Jinja2 as transformers configures it:
 * trim_blocks, lstrip_blocks, raise_exception, strftime_now, namespace,
 * tojson; the variables messages, add_generation_prompt, tools = None,
 * documents = None, and bos_token, eos_token, unk_token, pad_token,
 * cls_token, sep_token, mask_token for those the tokenizer has).
 * `messages_json`: a NUL-terminated JSON array of message objects
 * ({"role": "user", "content": "..."}; any other keys are passed on, keys
 * whose value is null are dropped as transformers drops them). Encode the
 * result with add_special_tokens 0: the template writes the special tokens.
 * docs/TOKENIZERS.md lists the Jinja2 subset implemented.
 * Output: at most `capacity` bytes with oslo_tokenizer_decode's sizing rule
 * (NUL when it fits; *length is always the full length, so a first call
 * with capacity 0 sizes the buffer).
 * Ownership: all memory stays the caller's.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL tok, messages_json or length;
 * NULL out with capacity > 0; no chat template; messages_json not a
 * non-empty JSON array of objects; the template failed while rendering:
 * raise_exception("...") from the template (the message holds its text),
 * an undefined value used, a type error, or a limit passed (20 million
 * evaluation steps, a million loop iterations, 64 MiB of output, nesting
 * 250 deep): the message gives the template's line and column),
 * OSLO_ERR_FORMAT (the template does not parse or uses a Jinja2 feature
 * oslo lacks: the message gives the line and column; JSON nested deeper
 * than 64 levels), OSLO_ERR_NOT_SUPPORTED (a construct oslo evaluates
 * only partly, named in the message), OSLO_ERR_OUT_OF_MEMORY.
 * Thread-safety: thread-safe.
 */
OSLO_API oslo_status oslo_tokenizer_apply_chat_template(const oslo_tokenizer *tok,
                                                        const char *messages_json,
                                                        int add_generation_prompt, char *out,
                                                        size_t capacity, size_t *length);

#define OSLO_CHAT_TEMPLATE_OPTIONS_VERSION 1

/**
 * Options of oslo_chat_template_apply (versioned; see "Options structs").
 * The defaults are oslo_tokenizer_apply_chat_template's with
 * add_generation_prompt 0.
 */
typedef struct oslo_chat_template_options {
  unsigned int version;      /**< OSLO_CHAT_TEMPLATE_OPTIONS_VERSION; set by _init */
  int add_generation_prompt; /**< nonzero: end with the assistant's header (default 0) */
  /** NULL (default): the tokenizer's template ("tool_use" when the
   * variables hold tools and the tokenizer has one, else "default"); the
   * name of one of the tokenizer's templates; or a template's own source
   * text (transformers' chat_template= argument). */
  const char *chat_template;
  /** NULL (default), or a NUL-terminated JSON object of more variables:
   * "tools" (a list of JSON schemas), "documents", or anything a template
   * reads (date_string, enable_thinking, ...); they replace the special
   * tokens of the same name (transformers' **kwargs). May not set
   * "messages" or "add_generation_prompt". */
  const char *variables_json;
  /** nonzero: the render ends inside the last message, so the model
   * continues it (a prefilled assistant answer), as transformers'
   * continue_final_message=True: the text after the last message's content
   * is cut. Not with add_generation_prompt. Default 0. */
  int continue_final_message;
} oslo_chat_template_options;

/**
 * Sets `options` to the defaults of `version` (pass
 * OSLO_CHAT_TEMPLATE_OPTIONS_VERSION).
 * Ownership: writes the caller's struct.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL, version 0 or unknown).
 * Thread-safety: thread-safe.
 */
OSLO_API oslo_status oslo_chat_template_options_init(oslo_chat_template_options *options,
                                                     unsigned int version);

/**
 * oslo_tokenizer_apply_chat_template with options: a template of the
 * caller's (or one of the tokenizer's by name), more variables (tools ...).
 * `tok` may be NULL when options->chat_template is a template's source: the
 * special tokens are then only what variables_json sets. `options` NULL:
 * the defaults. Output with oslo_tokenizer_decode's sizing rule.
 * Ownership: all memory stays the caller's (options and its strings are
 * read during the call only).
 * Errors: those of oslo_tokenizer_apply_chat_template, and
 * OSLO_ERR_INVALID_ARGUMENT for NULL tok without options->chat_template, an
 * options version of 0 or newer than the library's, variables_json not a
 * JSON object or setting messages / add_generation_prompt,
 * continue_final_message with add_generation_prompt, or a final message
 * whose content the template does not render).
 * Thread-safety: thread-safe.
 */
OSLO_API oslo_status oslo_chat_template_apply(const oslo_tokenizer *tok, const char *messages_json,
                                              const oslo_chat_template_options *options, char *out,
                                              size_t capacity, size_t *length);

/* ======================================================================
 * Models: Hugging Face transformers split over the tensor-parallel group.
 *
 * A model is loaded from a Hugging Face folder (config.json plus
 * model.safetensors, or model-*.safetensors with model.safetensors.index.json)
 * or from a parallel checkpoint written by oslo_model_save; every rank reads
 * only its own slices. Supported model_type values: gpt2 (GPT2LMHeadModel),
 * bert (BertModel), llama, mistral, qwen2, gpt_neox (…ForCausalLM; the list
 * is core/model/arch/registry.cpp, docs/MODELS.md). Attention is split
 * by heads (key/value heads are replicated when the tensor-parallel size
 * exceeds them, never split inside a head), MLPs by columns then rows,
 * embeddings and the language-model head by vocabulary (padded when the
 * vocabulary is not divisible). docs/MODELS.md has the sharding rules.
 *
 * Every call that computes (forward, embed, generate, save) is collective
 * over the model's context: every rank of the tensor group calls it with the
 * same arguments, and every rank gets the same result. Inputs and outputs are
 * plain host arrays, row-major.
 * ====================================================================== */

/** A loaded model (opaque). */
typedef struct oslo_model oslo_model;

#define OSLO_MODEL_OPTIONS_VERSION 2

/** Options of oslo_model_load (versioned; see "Options structs"). */
typedef struct oslo_model_options {
  unsigned int version; /**< OSLO_MODEL_OPTIONS_VERSION; set by _init */
  /** Dtype of the weight matrices and embedding tables: -1 (default) keeps
   * the checkpoint's (config.json's torch_dtype; weights a file holds
   * block-quantized stay so, the token table and the LM head of a GGUF
   * file or quantized oslo checkpoint included: the head then multiplies
   * from its blocks and the lookup dequantizes only the rows it reads),
   * else OSLO_DTYPE_F32, OSLO_DTYPE_F16 or OSLO_DTYPE_BF16 (everything
   * dequantized at load), or a block-quantized dtype (OSLO_DTYPE_Q8_0,
   * OSLO_DTYPE_Q4_0, ...; docs/QUANTIZATION.md): the weights of the blocks'
   * linear layers are then quantized at load, each rank only its own slice
   * (OSLO_ERR_SHAPE naming the tensor when a slice's rows are not whole
   * blocks), while the embeddings and the head are held in the
   * checkpoint's float dtype (dequantized when the file stores them
   * quantized). A model holding any block-quantized tensor runs inference
   * but cannot train (OSLO_ERR_NOT_SUPPORTED). Norms and biases are always
   * f32; activations are f32, products accumulate in f32. */
  int dtype;
  /* Version 2: pipeline stages. */
  /** Model chunks per pipeline rank (Megatron-LM's virtual pipeline size;
   * default 1): the blocks are cut into P x V virtual stages, virtual stage
   * c P + r on rank r, so rank r holds stages r, r + P, ...; the
   * activations go round the ranks V times. Training then runs the
   * interleaved 1F1B schedule (micro_batches must be a multiple of P), with
   * a bubble of about (P - 1) / (V x micro_batches). */
  int32_t pipeline_virtual_stages;
  /** Blocks per virtual stage, in virtual-stage order (NULL, the default:
   * split as evenly as possible, Colossal-AI's partition_uniform, which
   * needs the blocks to be a multiple of V): exactly P x V counts, each at
   * least 1, summing to the model's blocks (OSLO_ERR_INVALID_ARGUMENT
   * naming the bad count). Balances stages whose ends differ (the last
   * stage's head costs about vocab / (12 hidden) blocks). Read during the
   * call. */
  const int32_t *pipeline_layers;
  /** Entries of pipeline_layers (0 with NULL). */
  int32_t pipeline_layers_count;
} oslo_model_options;

/**
 * Sets `options` to the defaults of `version` (pass OSLO_MODEL_OPTIONS_VERSION).
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL, unknown version).
 * Thread-safety: thread-safe.
 * Ownership: writes the caller's struct.
 */
OSLO_API oslo_status oslo_model_options_init(oslo_model_options *options, unsigned int version);

/**
 * Loads the model at `path` (a Hugging Face folder, an oslo parallel
 * checkpoint directory, or a llama.cpp .gguf file of a "llama", "qwen2" or
 * "gpt2" model: its config and tokenizer come from its metadata, Q8_0/Q4_0/Q4_K/
 * Q6_K weights stay quantized unless options' dtype asks for a float dtype;
 * docs/QUANTIZATION.md "GGUF files") into this rank's share of the tensor
 * group. Each rank
 * reads only the byte ranges of its own slices. With a pipeline-parallel
 * size P > 1 the blocks are split over the P stages as evenly as possible
 * (Colossal-AI's partition_uniform; later stages take the remainder) or by
 * the options' pipeline_layers, the
 * first stage also holding the embeddings and the last the final norm and
 * head (a tied head: a copy of the token table, saved by the first stage
 * only); each rank loads only its stage's weights. Forward, embed and
 * generate then run stage by stage and return the same results on every
 * rank; training runs the stages as a pipeline (oslo_model_train_step with
 * the train options' micro_batches), and a model with fewer blocks than stages fails to load
 * (OSLO_ERR_INVALID_ARGUMENT). Collective over the world
 * group: if any rank fails, every rank returns the status of the lowest
 * failing rank with a message naming it.
 * Ownership: `path` and `options` (may be NULL: defaults) are read during the
 * call; the caller owns *out (oslo_model_destroy), which keeps ctx alive
 * until destroyed.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL ctx/path/out, bad options),
 * OSLO_ERR_IO (missing folder or files), OSLO_ERR_FORMAT (bad config.json,
 * index, safetensors or GGUF, missing tensor: named), OSLO_ERR_SHAPE (a tensor's
 * shape differs from the config's: both named), OSLO_ERR_DTYPE,
 * OSLO_ERR_NOT_SUPPORTED (model type, option, or heads not divisible by the
 * tensor-parallel size), OSLO_ERR_OUT_OF_MEMORY, OSLO_ERR_COMM,
 * OSLO_ERR_TIMEOUT.
 * Thread-safety: per context (see Conventions).
 */
OSLO_API oslo_status oslo_model_load(oslo_context *ctx, const char *path,
                                     const oslo_model_options *options, oslo_model **out);

/**
 * Frees a model (NULL is a no-op). Not collective.
 * Ownership: `model` is invalid afterwards; its context stays the caller's.
 * Optimizers still alive that were created over it keep the model (and
 * its context) alive and training until the last of them is destroyed,
 * which frees it (see Lifetimes in Conventions).
 * Errors: none.
 * Thread-safety: per model (no other call on it, or on an optimizer over
 * it, may run).
 */
OSLO_API void oslo_model_destroy(oslo_model *model);

/** Sizes of a loaded model, as in its config.json. */
typedef struct oslo_model_info {
  int64_t vocab_size;
  int64_t hidden_size;
  int64_t num_layers;
  int64_t num_heads;
  int64_t num_kv_heads;
  int64_t max_positions;
  int is_causal;        /**< 1 for language models (generate works), 0 for encoders */
  oslo_dtype dtype;     /**< dtype of the weight matrices */
  int64_t eos_token_id; /**< first EOS id of the config, -1 if none */
  int64_t pad_token_id; /**< -1 if none */
} oslo_model_info;

/**
 * Fills *info and, if model_type is not NULL, points it at the model's
 * model_type string ("gpt2", ...; owned by the model, valid while it lives).
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL model or info).
 * Thread-safety: thread-safe.
 * Ownership: writes *info; *model_type is owned by the model.
 */
OSLO_API oslo_status oslo_model_get_info(const oslo_model *model, oslo_model_info *info,
                                         const char **model_type);

/** What oslo_model_forward returns. */
typedef enum oslo_model_output {
  OSLO_MODEL_OUTPUT_LOGITS = 0, /**< [batch, seq, vocab_size] (causal models) */
  OSLO_MODEL_OUTPUT_HIDDEN = 1, /**< [batch, seq, hidden_size], after the final norm */
  OSLO_MODEL_OUTPUT_ENUM_MIN_ = -2147483647 - 1,
  OSLO_MODEL_OUTPUT_ENUM_MAX_ = 2147483647
} oslo_model_output;

/**
 * Runs the model on `batch` sequences of `seq` token ids (ids [batch, seq])
 * with an attention mask (mask [batch, seq] of 0/1; NULL: all 1) and, for
 * BERT, segment ids (token_type_ids [batch, seq]; NULL: all 0; must be NULL
 * for models without token types). Padding may
 * be on the left or the right: positions count the real tokens (as Hugging
 * Face generate computes position_ids), so a padded row gives the same
 * values at its real positions as the row alone. Values at padded positions
 * are unspecified. Writes batch*seq*(vocab_size or hidden_size) floats.
 * Collective over the tensor group (same arguments on every rank; every
 * rank receives the full result).
 * Ownership: reads ids/mask, writes out (capacity in floats) during the call.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL, non-positive sizes, id outside the
 * vocabulary or position beyond max_positions: named), OSLO_ERR_SHAPE
 * (capacity too small: the message gives the size needed),
 * OSLO_ERR_NOT_SUPPORTED (logits of an encoder), OSLO_ERR_COMM,
 * OSLO_ERR_TIMEOUT.
 * Thread-safety: per context.
 */
OSLO_API oslo_status oslo_model_forward(oslo_model *model, const int64_t *ids, const int64_t *mask,
                                        const int64_t *token_type_ids, int64_t batch, int64_t seq,
                                        oslo_model_output output, float *out, size_t capacity);

/**
 * Sentence embeddings as sentence-transformers computes them: the mean of the
 * last hidden states over the attention mask, L2-normalised if `normalize`
 * is nonzero. ids and mask are [batch, seq] (mask NULL: all 1); writes
 * batch*hidden_size floats. Collective over the tensor group.
 * Errors: as oslo_model_forward.
 * Thread-safety: per context.
 * Ownership: reads ids/mask, writes out (capacity in floats) during the call.
 */
OSLO_API oslo_status oslo_model_embed(oslo_model *model, const int64_t *ids, const int64_t *mask,
                                      int64_t batch, int64_t seq, int normalize, float *out,
                                      size_t capacity);

#define OSLO_GENERATE_OPTIONS_VERSION 3

/** Options of oslo_model_generate (versioned). Defaults are Hugging Face's. */
typedef struct oslo_generate_options {
  unsigned int version;   /**< OSLO_GENERATE_OPTIONS_VERSION; set by _init */
  int64_t max_new_tokens; /**< tokens to generate at most (default 20) */
  int do_sample;          /**< 0 (default): greedy or beam search; 1: sample */
  float temperature;      /**< sampling temperature > 0 (default 1) */
  int64_t top_k;          /**< keep the k most likely tokens; 0 disables (default 50) */
  float top_p;            /**< nucleus sampling mass in (0, 1] (default 1: off) */
  uint64_t seed;          /**< sampling seed: same seed, same tokens (default 0) */
  int64_t num_beams;      /**< beam search when > 1 (default 1) */
  float length_penalty;   /**< beam score = logprob sum / length^penalty (default 1) */
  int early_stopping;     /**< beams: 0 HF's False (default), 1 True, -1 "never" */
  /** EOS ids (a row stops after emitting one); NULL: the model config's. */
  const int64_t *eos_token_ids;
  size_t num_eos_token_ids;
  /** Id fed after EOS and used for left padding; -1 (default): the config's
   * pad_token_id, else its first EOS id. */
  int64_t pad_token_id;
  /* version 2 */
  /** Hugging Face's repetition_penalty (> 0; default 1: off): the score of
   * every token already in the row (prompt and generated) is divided by it
   * when positive, multiplied when negative. */
  float repetition_penalty;
  /** EOS cannot be chosen before this many new tokens (default 0; needs EOS
   * ids). */
  int64_t min_new_tokens;
  /* version 3 */
  /** The KV cache's storage: OSLO_DTYPE_F32 (default) or OSLO_DTYPE_I8 (each
   * key and value row of one token and KV head as int8 with one f32 scale,
   * max |x| / 127: 3.8x less cache memory at head_dim 64, logits within the
   * bound docs/QUANTIZATION.md states). Others: OSLO_ERR_DTYPE. A serving
   * engine's requests use the engine's oslo_engine_options.kv_dtype: the
   * default f32 here means "the engine's", and OSLO_DTYPE_I8 on an engine
   * with an f32 cache fails with OSLO_ERR_INVALID_ARGUMENT. */
  oslo_dtype kv_cache_dtype;
} oslo_generate_options;

/**
 * Sets `options` to the defaults of `version` (pass OSLO_GENERATE_OPTIONS_VERSION).
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL, unknown version).
 * Thread-safety: thread-safe.
 * Ownership: writes the caller's struct.
 */
OSLO_API oslo_status oslo_generate_options_init(oslo_generate_options *options,
                                                unsigned int version);

/**
 * Generates continuations of `batch` prompts with the KV cache: greedy,
 * sampling (temperature, top-k, top-p, seeded) or beam search, as configured.
 * Prompt b is prompt_ids[offset_b .. offset_b + prompt_lengths[b]) where
 * offset_b is the sum of the previous lengths (prompts are batched with left
 * padding). Row b of out_tokens ([batch, max_new_tokens]) receives
 * out_lengths[b] new tokens (ending with EOS if one was emitted), then -1s.
 * out_scores (may be NULL) receives each row's beam score (beam search) or
 * the sum of the chosen tokens' log-probabilities.
 * Every tensor-parallel rank returns the same tokens: rank 0's choices are
 * broadcast at each step. Collective over the tensor group.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL, empty prompt, bad options: named),
 * OSLO_ERR_NOT_SUPPORTED (an encoder model), OSLO_ERR_COMM, OSLO_ERR_TIMEOUT.
 * Thread-safety: per context.
 * Ownership: every array is read or written during the call only; out_tokens
 * holds batch * max_new_tokens ids, out_lengths and out_scores batch entries.
 */
OSLO_API oslo_status oslo_model_generate(oslo_model *model, const int64_t *prompt_ids,
                                         const int64_t *prompt_lengths, int64_t batch,
                                         const oslo_generate_options *options, int64_t *out_tokens,
                                         int64_t *out_lengths, float *out_scores);

/* ------------------------------------------------------------------------ */
/* Serving engine (docs/SERVING.md)                                          */
/* ------------------------------------------------------------------------ */

/**
 * A request-level serving engine over a loaded causal model: requests are
 * added at any time and run together, one model step at a time over every
 * running request (continuous batching: a step mixes one decode token of
 * each running request with chunks of new prompts), with a paged KV cache
 * (fixed-size blocks from a pool, a block table per request), prefix reuse
 * (requests sharing a prompt prefix share its full blocks) and streaming
 * output. A request's tokens are the tokens oslo_model_generate gives that
 * request alone (greedy, and sampling with the same seed).
 *
 * When the pool runs out of blocks, the youngest running request is
 * preempted: its blocks are freed and it is recomputed later (its tokens
 * do not change); a request that could never fit is refused when added.
 *
 * Two ways to drive it (pick one per engine; mixing them is refused):
 *  - Stepping by hand: oslo_engine_step runs one step on the calling thread
 *    and oslo_engine_get_event reads what it produced.
 *  - Driven: oslo_engine_run steps on a thread of the caller's until the
 *    engine is shut down, and any thread reads a request's output with
 *    oslo_engine_next (which steps the engine itself when nothing runs
 *    oslo_engine_run, so one thread alone can use it); or, with
 *    options.on_event, every event goes to that callback.
 *
 * Ranks: under tensor and pipeline parallelism every rank of the world
 * group creates an engine over its model and drives it (oslo_engine_run, or
 * oslo_engine_step in a loop); requests are added, cancelled and read on
 * world rank 0 only, which decides every step, and the others follow. A
 * rank that fails or dies fails every rank's step with a named error
 * (OSLO_ERR_COMM or OSLO_ERR_TIMEOUT after the context's timeout), never a
 * hang. oslo_engine_shutdown on rank 0 ends every rank's engine.
 * Data-parallel size must be 1 (one engine per replica).
 *
 * While an engine lives, its model and context belong to the thread that
 * steps it (oslo_engine_step, oslo_engine_run, or oslo_engine_next when it
 * steps): make no other call on them meanwhile.
 */
typedef struct oslo_engine oslo_engine;

/** Why a request finished. */
typedef enum oslo_finish_reason {
  OSLO_FINISH_NONE = 0,      /**< not finished: more output follows */
  OSLO_FINISH_LENGTH = 1,    /**< max_new_tokens generated */
  OSLO_FINISH_EOS = 2,       /**< an EOS id was generated (it is the last token) */
  OSLO_FINISH_STOP = 3,      /**< a stop string appeared (the text ends before it) */
  OSLO_FINISH_CANCELLED = 4, /**< oslo_engine_cancel or oslo_engine_shutdown */
  OSLO_FINISH_ERROR = 5,     /**< the step failed: see the event's status and error */
  OSLO_FINISH_ENUM_MIN_ = -2147483647 - 1,
  OSLO_FINISH_ENUM_MAX_ = 2147483647
} oslo_finish_reason;

/** Where a request is (oslo_engine_request_state). */
typedef enum oslo_request_state {
  OSLO_REQUEST_UNKNOWN = 0,  /**< never added, or finished and its last output read */
  OSLO_REQUEST_WAITING = 1,  /**< added; waiting for KV blocks or a place in a step */
  OSLO_REQUEST_RUNNING = 2,  /**< its prompt is being computed or it is generating */
  OSLO_REQUEST_FINISHED = 3, /**< finished; output left to read with oslo_engine_next */
  OSLO_REQUEST_STATE_ENUM_MIN_ = -2147483647 - 1,
  OSLO_REQUEST_STATE_ENUM_MAX_ = 2147483647
} oslo_request_state;

/**
 * What one step did for one request. Its pointers are owned by the engine:
 * valid until the next oslo_engine_step on it (for oslo_engine_get_event), or
 * until the callback returns (options.on_event).
 */
typedef struct oslo_engine_event {
  int64_t request_id;
  const int64_t *tokens; /**< the request's new tokens (usually 1; 0 when it only finished) */
  size_t num_tokens;
  /** Their text, NUL-terminated, whole UTF-8 characters only (bytes of a
   * character not yet complete, or of a possible stop string, come with a
   * later event); "" without a tokenizer. */
  const char *text;
  size_t text_length;
  oslo_finish_reason finish; /**< OSLO_FINISH_NONE while the request runs */
  oslo_status status;        /**< OSLO_FINISH_ERROR: the failure's status; else OSLO_OK */
  const char *error;         /**< OSLO_FINISH_ERROR: the failure's message; else "" */
} oslo_engine_event;

/** Called once per event, on the thread that steps, before the step returns.
 * It must not call back into the engine except oslo_engine_add,
 * oslo_engine_cancel, oslo_engine_shutdown and oslo_engine_stats. */
typedef void (*oslo_engine_callback)(void *user_data, const oslo_engine_event *event);

#define OSLO_ENGINE_OPTIONS_VERSION 2

/** Options of oslo_engine_create (versioned). */
typedef struct oslo_engine_options {
  unsigned int version;    /**< OSLO_ENGINE_OPTIONS_VERSION; set by _init */
  int64_t num_blocks;      /**< KV blocks on each rank; 0 (default): what kv_memory_bytes holds */
  int64_t kv_memory_bytes; /**< KV memory per rank when num_blocks is 0 (default 1 GiB) */
  int64_t block_size;      /**< tokens per KV block, [1, 4096] (default 16) */
  int64_t max_seqs;        /**< running requests at most (default 64) */
  int64_t max_step_tokens; /**< tokens per step, decode and prompt chunks (default 512) */
  int prefix_caching;      /**< 1 (default): share full blocks of equal prompt prefixes */
  int64_t idle_wait_ms;    /**< how long a step with nothing to do waits for work (default 20) */
  /** Decodes the output to text and enables stop strings and
   * oslo_engine_add_text; NULL (default): token ids only. The engine keeps
   * its own reference: the tokenizer may be destroyed first. */
  const oslo_tokenizer *tokenizer;
  /** NULL (default): events go to oslo_engine_get_event (stepping by hand) or to
   * each request's queue (oslo_engine_next). Else every event goes to it. */
  oslo_engine_callback on_event;
  void *user_data; /**< passed to on_event */
  /* version 2 */
  /** The paged KV cache's storage: OSLO_DTYPE_F32 (default) or OSLO_DTYPE_I8
   * (int8 rows with one f32 scale per token and KV head, as
   * oslo_generate_options.kv_cache_dtype; the same kv_memory_bytes then
   * holds 4 x head_dim / (head_dim + 4) times the blocks). Others:
   * OSLO_ERR_DTYPE. */
  oslo_dtype kv_dtype;
} oslo_engine_options;

/**
 * Sets `options` to the defaults of `version` (pass OSLO_ENGINE_OPTIONS_VERSION).
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL, unknown version).
 * Thread-safety: thread-safe.
 * Ownership: writes the caller's struct.
 */
OSLO_API oslo_status oslo_engine_options_init(oslo_engine_options *options, unsigned int version);

/**
 * Creates an engine over `model` (a causal language model; any tensor and
 * pipeline layout, CPU or CUDA) and allocates its KV pool on each rank.
 * Collective over the world group only in its later steps: creation itself
 * communicates nothing.
 * Ownership: the caller owns *out (oslo_engine_destroy); the engine keeps
 * the model (and its context) and the tokenizer alive. On failure *out is
 * NULL.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL, bad options: named),
 * OSLO_ERR_NOT_SUPPORTED (an encoder model, data-parallel size above 1),
 * OSLO_ERR_OUT_OF_MEMORY (the KV pool).
 * Thread-safety: per context.
 */
OSLO_API oslo_status oslo_engine_create(oslo_model *model, const oslo_engine_options *options,
                                        oslo_engine **out);

/**
 * Destroys an engine. On world rank 0 of an engine not yet shut down it
 * shuts it down first, so the other ranks' engines end too (their steps
 * return; a failing rank is not waited for beyond the context's timeout).
 * Live requests end; NULL does nothing.
 * Ownership: `engine` is invalid afterwards.
 * Errors: none.
 * Thread-safety: no other call may use the engine meanwhile (shut it down
 * and let oslo_engine_run return first).
 */
OSLO_API void oslo_engine_destroy(oslo_engine *engine);

/**
 * Queues a request: `prompt_length` token ids, continued as `options` says
 * (NULL: oslo_generate_options' defaults; num_beams must be 1; EOS ids
 * NULL: the model config's), stopped early by any of `num_stop` stop
 * strings (needs the engine's tokenizer). Sets *out_request_id (1, 2, ...).
 * World rank 0 only.
 * Ownership: every argument is read during the call only.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL, an empty prompt, a token outside
 * the vocabulary, bad options, stop strings without a tokenizer or empty,
 * prompt + max_new_tokens beyond the model's positions or the whole KV
 * pool, not rank 0, an engine shut down: each named).
 * Thread-safety: thread-safe (any thread, also while another steps).
 */
OSLO_API oslo_status oslo_engine_add(oslo_engine *engine, const int64_t *prompt_ids,
                                     size_t prompt_length, const oslo_generate_options *options,
                                     const char *const *stop, size_t num_stop,
                                     int64_t *out_request_id);

/**
 * oslo_engine_add with a text prompt (NUL-terminated UTF-8), encoded by the
 * engine's tokenizer (its special tokens added when add_special_tokens is
 * nonzero, as Hugging Face's pipelines do).
 * Errors: as oslo_engine_add; OSLO_ERR_INVALID_ARGUMENT also when the engine
 * has no tokenizer or the text is not UTF-8.
 * Thread-safety: thread-safe.
 * Ownership: `prompt` and every other argument are read during the call only.
 */
OSLO_API oslo_status oslo_engine_add_text(oslo_engine *engine, const char *prompt,
                                          int add_special_tokens,
                                          const oslo_generate_options *options,
                                          const char *const *stop, size_t num_stop,
                                          int64_t *out_request_id);

/**
 * Cancels a waiting or running request: its KV blocks are freed at the next
 * step, which reports it finished with OSLO_FINISH_CANCELLED. *found (may be
 * NULL) is 1 when the request was live, 0 when not (unknown, or already
 * finished: nothing happens). World rank 0 only.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL engine, not rank 0).
 * Thread-safety: thread-safe.
 * Ownership: the caller keeps the engine; writes *found.
 */
OSLO_API oslo_status oslo_engine_cancel(oslo_engine *engine, int64_t request_id, int *found);

/**
 * Shuts the engine down on every rank at the next step: live requests
 * finish with OSLO_FINISH_CANCELLED, later adds are refused, oslo_engine_run
 * returns and later steps do nothing. World rank 0 only.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL, not rank 0).
 * Thread-safety: thread-safe.
 * Ownership: the caller keeps the engine (destroy it after every stepping call
 * has returned).
 */
OSLO_API oslo_status oslo_engine_shutdown(oslo_engine *engine);

/**
 * Runs one step on every rank together: new requests and cancels are taken
 * in, then one model step over what the scheduler picked. Sets
 * *num_events (may be NULL) to the number of events it produced, read with
 * oslo_engine_get_event (with options.on_event they also go to the callback).
 * With nothing to do, rank 0 first waits up to idle_wait_ms for work.
 * A failure (the model, a rank) finishes every live request with
 * OSLO_FINISH_ERROR (in this step's events) and returns its status.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL, the engine driven by
 * oslo_engine_run / oslo_engine_next), OSLO_ERR_COMM, OSLO_ERR_TIMEOUT,
 * OSLO_ERR_OUT_OF_MEMORY.
 * Thread-safety: one thread at a time (the model's).
 * Ownership: the events are the engine's, valid until its next step.
 */
OSLO_API oslo_status oslo_engine_step(oslo_engine *engine, size_t *num_events);

/**
 * Event `index` of the last oslo_engine_step (in the step's order; a
 * finished request's event is its last).
 * Ownership: *event's pointers are the engine's, valid until its next step.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL, index out of range).
 * Thread-safety: the stepping thread.
 */
OSLO_API oslo_status oslo_engine_get_event(const oslo_engine *engine, size_t index,
                                           oslo_engine_event *event);

/**
 * Steps the engine until it is shut down (then returns OSLO_OK), delivering
 * each event to options.on_event or to its request's queue
 * (oslo_engine_next). The usual way to drive every rank other than 0, and
 * rank 0 from a thread of its own.
 * A failed step finishes every live request with OSLO_FINISH_ERROR and
 * returns its status (run it again to go on, if the cause has gone).
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL, the engine stepped by hand, run
 * already running), OSLO_ERR_COMM, OSLO_ERR_TIMEOUT, OSLO_ERR_OUT_OF_MEMORY.
 * Thread-safety: one thread at a time (the model's).
 * Ownership: the caller keeps the engine; events go to the callback or the queues.
 */
OSLO_API oslo_status oslo_engine_run(oslo_engine *engine);

/**
 * Waits for output of request `request_id` and takes it: the tokens and
 * text it produced since the last call, and *finish. At most
 * tokens_capacity tokens and text_capacity - 1 bytes of text (whole UTF-8
 * characters, then a NUL) are taken; the rest stays for the next call, and
 * *finish is OSLO_FINISH_NONE until everything has been taken. After the
 * call that returns a finish reason the request is forgotten.
 * When no output is there, the call waits up to timeout_ms (>= 0; 0 only
 * looks), and when no thread is in oslo_engine_run and none is stepping in
 * another oslo_engine_next, it steps the engine itself meanwhile (the
 * events of other requests go to their queues).
 * A request that failed returns its failure's status and message (after
 * its last output), with *finish = OSLO_FINISH_ERROR.
 * Ownership: writes the caller's arrays (tokens may be NULL when
 * tokens_capacity is 0, text NULL when text_capacity is 0: then nothing of
 * that kind is taken). num_tokens, text_length (without the NUL) and finish
 * are required.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL, a request not live, the engine
 * stepped by hand or with options.on_event, not rank 0), OSLO_ERR_TIMEOUT
 * (no output within timeout_ms: nothing taken; call again), and the
 * request's failure.
 * Thread-safety: thread-safe: any number of threads, each reading its own
 * requests (two threads reading one request share its output).
 */
OSLO_API oslo_status oslo_engine_next(oslo_engine *engine, int64_t request_id, int64_t timeout_ms,
                                      int64_t *tokens, size_t tokens_capacity, size_t *num_tokens,
                                      char *text, size_t text_capacity, size_t *text_length,
                                      oslo_finish_reason *finish);

/**
 * Where request `request_id` is (OSLO_REQUEST_UNKNOWN for ids never added or
 * forgotten).
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL).
 * Thread-safety: thread-safe.
 * Ownership: writes *state.
 */
OSLO_API oslo_status oslo_engine_request_state(const oslo_engine *engine, int64_t request_id,
                                               oslo_request_state *state);

/** What oslo_engine_get_stats reports (counts since creation, or now). */
typedef struct oslo_engine_stats {
  int64_t running;          /**< requests running now */
  int64_t waiting;          /**< requests waiting now */
  int64_t blocks_used;      /**< KV blocks in use (this rank) */
  int64_t blocks_total;     /**< KV blocks in the pool (this rank) */
  int64_t block_size;       /**< tokens per block */
  int64_t cached_tokens;    /**< tokens in the KV cache of running requests */
  int64_t kv_bytes_used;    /**< bytes of the blocks in use (this rank) */
  int64_t steps;            /**< steps that ran the model */
  int64_t prompt_tokens;    /**< prompt tokens computed (prefix hits not counted) */
  int64_t generated_tokens; /**< tokens generated */
  int64_t prefix_queries;   /**< full prompt blocks looked up in the prefix index */
  int64_t prefix_hits;      /**< of which found (shared, not recomputed) */
} oslo_engine_stats;

/**
 * Fills *stats. The numbers are those of the last step's end.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL).
 * Thread-safety: thread-safe.
 * Ownership: writes the caller's *stats.
 */
OSLO_API oslo_status oslo_engine_get_stats(const oslo_engine *engine, oslo_engine_stats *stats);

/**
 * Saves the model as a parallel checkpoint in `dir`: one safetensors file per
 * (tensor, pipeline) rank named by their zero-padded ranks, each holding the
 * slices that rank owns under their Hugging Face names and layout, plus the
 * manifest (layout, config.json, global shapes, slices, sizes, checksums),
 * written last and atomically (docs/MODELS.md). Tokenizer files of the
 * source folder are copied along. Collective over the world group.
 * Errors: OSLO_ERR_INVALID_ARGUMENT, OSLO_ERR_IO, OSLO_ERR_COMM,
 * OSLO_ERR_TIMEOUT.
 * Thread-safety: per context.
 * Ownership: `dir` is read during the call; files are created in it.
 */
OSLO_API oslo_status oslo_model_save(oslo_model *model, const char *dir);

#define OSLO_MERGE_OPTIONS_VERSION 1

/** Options of oslo_model_merge (versioned). */
typedef struct oslo_merge_options {
  unsigned int version;     /**< OSLO_MERGE_OPTIONS_VERSION; set by _init */
  int dtype;                /**< -1 (default): keep; else the float dtype to write */
  uint64_t max_shard_bytes; /**< 0 (default): one model.safetensors; else shards + index */
  int overwrite;            /**< nonzero: replace an existing non-empty dst (default 0) */
} oslo_merge_options;

/**
 * Sets `options` to the defaults of `version` (pass OSLO_MERGE_OPTIONS_VERSION).
 * Errors: OSLO_ERR_INVALID_ARGUMENT. Thread-safety: thread-safe.
 * Ownership: writes the caller's struct.
 */
OSLO_API oslo_status oslo_merge_options_init(oslo_merge_options *options, unsigned int version);

/**
 * Merges a parallel checkpoint (or re-writes any Hugging Face folder) into
 * one ordinary Hugging Face folder `dst` (model.safetensors or shards with
 * model.safetensors.index.json, config.json, tokenizer files) that
 * transformers' from_pretrained loads. Not collective, needs no context;
 * streams tensor by tensor; `dst` appears atomically.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL, bad options, dst an existing
 * non-empty folder without overwrite), OSLO_ERR_IO (unreadable source,
 * unwritable dst), OSLO_ERR_FORMAT (corrupt source: named).
 * Thread-safety: thread-safe for distinct paths.
 * Ownership: paths and options are read during the call only.
 */
OSLO_API oslo_status oslo_model_merge(const char *src, const char *dst,
                                      const oslo_merge_options *options);

/**
 * Rewrites the checkpoint or Hugging Face folder `src` as a parallel
 * checkpoint `dst` for tensor-parallel size `tensor_parallel_size`, offline
 * (one process, no context), reading only the slices each new rank needs.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL, size < 1), OSLO_ERR_NOT_SUPPORTED
 * (heads not divisible by the size), OSLO_ERR_IO, OSLO_ERR_FORMAT.
 * Thread-safety: thread-safe for distinct paths.
 * Ownership: paths are read during the call only.
 */
OSLO_API oslo_status oslo_model_reshard(const char *src, const char *dst, int tensor_parallel_size);

/**
 * Describes any checkpoint: a Hugging Face folder, an oslo parallel
 * checkpoint or a safetensors file (format, layout, config summary, and per
 * tensor its dtype, shape and slices), as aligned text or, if `json` is
 * nonzero, JSON. Writes at most `capacity` bytes including the terminating
 * NUL and always sets *length to the full length (without the NUL): call
 * with capacity 0 to size the buffer.
 * Errors: OSLO_ERR_INVALID_ARGUMENT, OSLO_ERR_IO, OSLO_ERR_FORMAT.
 * Thread-safety: thread-safe.
 * Ownership: writes the caller's buffer `out` and *length.
 */
OSLO_API oslo_status oslo_checkpoint_inspect(const char *path, int json, char *out, size_t capacity,
                                             size_t *length);

/* ======================================================================
 * Training: an optimizer over a model's parameters, the train step, and
 * training checkpoints.
 *
 * oslo_model_train_step runs the forward, the causal-LM loss (as
 * transformers computes it: labels shifted inside, -100 ignored, the mean
 * over the labels kept) and the backward on one micro-batch, adding to the
 * model's gradients. With an optimizer it also takes the optimizer step
 * after every grad_accum_steps (oslo_train_options) micro-batches: unscale (loss scaling),
 * global gradient norm, skip on non-finite gradients, clip, learning rate
 * from the schedule, AdamW or SGD update, zero the gradients. Hugging Face
 * Trainer's semantics; every rank takes every decision alike. Models train
 * without dropout. Causal families with pre-norm blocks (GPT-2, LLaMA,
 * Mistral, Qwen2, Gemma, GPT-NeoX, Phi-3).
 *
 * Every call here is collective over the model's tensor group (training
 * checkpoints: over the world group), like oslo_model_forward.
 * ====================================================================== */

/** An optimizer with its schedule, clipping and loss scaler (opaque). */
typedef struct oslo_optimizer oslo_optimizer;

/** The update rule of an optimizer. */
typedef enum oslo_optimizer_kind {
  OSLO_OPTIMIZER_ADAMW = 0, /**< torch.optim.AdamW: decoupled weight decay, bias correction */
  OSLO_OPTIMIZER_SGD = 1,   /**< torch.optim.SGD: momentum, dampening, Nesterov */
  OSLO_OPTIMIZER_KIND_ENUM_MIN_ = -2147483647 - 1,
  OSLO_OPTIMIZER_KIND_ENUM_MAX_ = 2147483647
} oslo_optimizer_kind;

/** Learning-rate schedules, as transformers' get_scheduler. */
typedef enum oslo_lr_schedule {
  OSLO_LR_CONSTANT = 0,             /**< lr throughout (warmup ignored) */
  OSLO_LR_CONSTANT_WITH_WARMUP = 1, /**< linear warmup, then lr */
  OSLO_LR_LINEAR = 2,               /**< linear warmup, then linear decay to 0 at total_steps */
  OSLO_LR_COSINE = 3,               /**< linear warmup, then half a cosine to 0 at total_steps */
  OSLO_LR_SCHEDULE_ENUM_MIN_ = -2147483647 - 1,
  OSLO_LR_SCHEDULE_ENUM_MAX_ = 2147483647
} oslo_lr_schedule;

/* Version 1 is oslo 0.3's layout: the update rule only. oslo 0.2's
 * versions 2 to 4, which also held the training settings now in
 * oslo_train_options, are refused with OSLO_ERR_INVALID_ARGUMENT naming
 * tools/migrate-0.3.py. */
#define OSLO_OPTIMIZER_OPTIONS_VERSION 1

/** Options of the update rule of oslo_optimizer_create (versioned), as
 * torch.optim's constructor arguments, its LR scheduler and
 * torch.amp.GradScaler's. Defaults are PyTorch's (optimizers, GradScaler)
 * and Hugging Face Trainer's (parameter groups). How the training runs
 * (accumulation, data and pipeline parallelism) is in oslo_train_options. */
typedef struct oslo_optimizer_options {
  unsigned int version;     /**< OSLO_OPTIMIZER_OPTIONS_VERSION; set by _init */
  oslo_optimizer_kind kind; /**< default OSLO_OPTIMIZER_ADAMW */
  double lr;                /**< base learning rate (default 1e-3) */
  double weight_decay;      /**< default 0 */
  double beta1, beta2, eps; /**< AdamW (defaults 0.9, 0.999, 1e-8) */
  double momentum;          /**< SGD (default 0) */
  double dampening;         /**< SGD (default 0) */
  int nesterov;             /**< SGD: nonzero for Nesterov momentum (default 0) */
  /** Nonzero: weight decay for 1-D parameters (norm weights, biases) too;
   * 0 (default): none for them, as Hugging Face's Trainer groups them. */
  int decay_1d;
  oslo_lr_schedule schedule; /**< default OSLO_LR_CONSTANT */
  int64_t warmup_steps;      /**< optimizer steps of linear warmup (default 0) */
  int64_t total_steps;       /**< the schedule's length (linear, cosine need > 0) */
  double max_grad_norm;      /**< > 0: clip the global gradient norm to it (default 0: off) */
  /** Dynamic loss scaling (torch.amp.GradScaler): -1 (default) on for f16
   * models, off otherwise; 0 off; 1 on. */
  int loss_scaling;
  double init_scale;       /**< default 65536 */
  double growth_factor;    /**< default 2 */
  double backoff_factor;   /**< default 0.5 */
  int64_t growth_interval; /**< default 2000 */
} oslo_optimizer_options;

/**
 * Sets `options` to the defaults of `version` (pass OSLO_OPTIMIZER_OPTIONS_VERSION).
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL, unknown version, one of oslo
 * 0.2's versions 2 to 4: named, with the migration tool).
 * Thread-safety: thread-safe.
 * Ownership: writes the caller's struct.
 */
OSLO_API oslo_status oslo_optimizer_options_init(oslo_optimizer_options *options,
                                                 unsigned int version);

#define OSLO_TRAIN_OPTIONS_VERSION 1

/** How oslo_model_train_step trains with an optimizer (versioned):
 * gradient accumulation, data parallelism (DeepSpeed's ZeRO stages,
 * PyTorch DDP's buckets) and pipeline parallelism (Megatron-LM's
 * micro-batches). The parallel sizes themselves are the context's
 * (oslo_context_options). Passed to oslo_optimizer_create (NULL: the
 * defaults, plain DDP-style training without accumulation). */
typedef struct oslo_train_options {
  unsigned int version;     /**< OSLO_TRAIN_OPTIONS_VERSION; set by _init */
  int64_t grad_accum_steps; /**< micro-batches per optimizer step (default 1) */
  /* Data parallelism. When the context's data-parallel size is above 1,
   * the optimizer averages the gradients over the data-parallel group as
   * PyTorch's DistributedDataParallel does: in buckets, in the order the
   * backward finishes them, each reduced on a communication thread while
   * the backward goes on, only on the last micro-batch of an accumulation
   * window. */
  /** ZeRO stage (DeepSpeed's): 0 (default) none; 1 optimizer state and f32
   * masters partitioned over the data-parallel group; 2 gradients too
   * (reduce-scattered); 3 parameters of two or more dimensions too (each
   * block gathered just before its forward and backward and freed after;
   * from then on the model refuses inference and oslo_model_save, even
   * after the optimizer is destroyed: its parameters live in the
   * optimizer's partitions, so save a training checkpoint and load that). */
  int zero_stage;
  /** Bytes of f32 gradient per bucket (default 25 MiB, as DDP's
   * bucket_cap_mb). */
  int64_t bucket_bytes;
  /* Pipeline parallelism. */
  /** Micro-batches each oslo_model_train_step's batch is cut into (it must
   * divide the batch; default 1). With pipeline stages (the context's
   * pipeline-parallel size above 1) they run through the stages in
   * Megatron-LM's 1F1B order (at most P micro-batches' activations alive
   * on a stage; the bubble is (P - 1) / (micro_batches + P - 1) of the
   * step); on one stage one after the other. Each micro-batch's loss is its
   * mean over its labels; the step's loss and gradient are the mean over
   * the micro-batches (as Megatron and DDP). One call is still one
   * micro-batch of grad_accum_steps. Needs zero_stage 0 or 1 when above 1
   * or with pipeline stages (OSLO_ERR_NOT_SUPPORTED otherwise). */
  int64_t micro_batches;
  /** With pipeline stages and tied word embeddings (GPT-2 and the like;
   * with or without virtual stages): the first stage, which holds the same token
   * table, also runs the head and the loss of the first tokens of every
   * micro-batch, so that the head (GPT-2 small's is worth about 5 blocks)
   * no longer forces whole-block stages to be unequal. The last stage sends
   * it those tokens' final hidden states and gets their gradient back;
   * the ranks' orders come from a list scheduling of the pipeline (at most
   * P - r + 1 + V micro-batches alive on rank r, against 1F1B's P - r). 0
   * (default): off, Megatron-LM's order; a fraction in (0, 1]: that share
   * of each micro-batch's tokens; -1: the share that makes the first and
   * the last rank's products per token equal (none when the first rank
   * is the heavier). Losses and gradients are the same as without it up to
   * rounding. Errors at oslo_optimizer_create: OSLO_ERR_INVALID_ARGUMENT
   * (another value), OSLO_ERR_NOT_SUPPORTED (no pipeline stages); at the
   * train step: OSLO_ERR_NOT_SUPPORTED (an untied head). */
  double pipeline_head_split;
} oslo_train_options;

/**
 * Sets `options` to the defaults of `version` (pass OSLO_TRAIN_OPTIONS_VERSION).
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL, unknown version).
 * Thread-safety: thread-safe.
 * Ownership: writes the caller's struct.
 */
OSLO_API oslo_status oslo_train_options_init(oslo_train_options *options, unsigned int version);

/**
 * Creates an optimizer over every parameter of `model` (this rank's
 * slices), with the update rule of `options` and the training settings of
 * `train` (either NULL: its defaults). Optimizer state (AdamW's moments,
 * SGD's momentum, f32 master weights of a bf16/f16 model) is f32 and
 * sliced like its parameter (with ZeRO: only this data-parallel rank's
 * part of it). Makes the model's gradients (zero); with data parallelism
 * starts the communication thread. Not collective.
 * Ownership: the caller owns *out (oslo_optimizer_destroy), which keeps
 * `model` (and its context) alive until destroyed: it may be destroyed
 * after them; `options` and `train` are read during the call.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL model or out, a bad option:
 * named), OSLO_ERR_NOT_SUPPORTED (a training setting the model's context
 * cannot run: named), OSLO_ERR_OUT_OF_MEMORY.
 * Thread-safety: per model.
 */
OSLO_API oslo_status oslo_optimizer_create(oslo_model *model, const oslo_optimizer_options *options,
                                           const oslo_train_options *train, oslo_optimizer **out);

/**
 * Frees an optimizer (NULL is a no-op); its model keeps its parameters and
 * gradients. Not collective. Safe in any order with its model and context:
 * after oslo_model_destroy (or oslo_context_destroy) it frees the model
 * (and the context) it kept alive, after itself.
 * Ownership: `optimizer` is invalid afterwards.
 * Errors: none.
 * Thread-safety: per model.
 */
OSLO_API void oslo_optimizer_destroy(oslo_optimizer *optimizer);

/** What oslo_model_train_step and oslo_optimizer_step report. */
typedef struct oslo_train_step_result {
  double loss;       /**< this micro-batch's loss (train step only) */
  int stepped;       /**< 1 when an optimizer step ran (applied or skipped) */
  int skipped;       /**< 1 when that step was skipped: non-finite gradients */
  double mean_loss;  /**< stepped: mean loss of the accumulated micro-batches */
  double grad_norm;  /**< stepped: global gradient norm before clipping (NaN if neither
                          clipping nor loss scaling asked for it) */
  double lr;         /**< stepped: the learning rate applied (0 when skipped) */
  double loss_scale; /**< the loss scale in force afterwards (1 without scaling) */
  int64_t step;      /**< optimizer updates applied so far */
} oslo_train_step_result;

/**
 * One micro-batch: forward, causal-LM loss and backward on ids [batch, seq]
 * with labels [batch, seq] (NULL: the ids, with -100 where the mask is 0)
 * and an attention mask (NULL: all 1; padding may be on either side).
 * Gradients accumulate in the model. With `optimizer` (over this model),
 * the loss is scaled by its loss scale / its train options'
 * grad_accum_steps and the optimizer
 * steps when the micro-batch completes an accumulation window; with NULL,
 * gradients of the plain loss accumulate and nothing steps. Fills *result
 * (may be NULL); the loss is the same on every rank.
 * With data parallelism (an optimizer, a context whose data-parallel size
 * is above 1) each data-parallel rank passes its own batch; the gradients
 * are averaged over them and the loss reported is their mean.
 * Collective over the tensor group (same arguments on every rank; the
 * group first checks that every rank holds the same batch), and over the
 * data-parallel group with an optimizer (a batch refused on one data rank
 * fails them all).
 * With pipeline stages (pipeline-parallel size above 1) every stage passes
 * the same batch (checked over the pipeline group too); it runs as the
 * optimizer's micro_batches (oslo_train_options) micro-batches through
 * the stages (one without
 * an optimizer), the loss comes from the last stage to every rank, and a
 * tied embedding's two copies (first and last stage) get the sum of their
 * gradients before each update, so they stay equal. A schedule that fails
 * part-way (a stage dies: OSLO_ERR_COMM or OSLO_ERR_TIMEOUT on every
 * stage within the communicator's timeout; a non-finite loss) drops the
 * accumulation window's gradients.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL, sizes, a token or label outside
 * the vocabulary, a batch that differs between ranks, a non-finite loss,
 * non-finite gradients without loss scaling, an optimizer over another
 * model: named; every rank returns it), OSLO_ERR_NOT_SUPPORTED (an encoder
 * or post-norm model), OSLO_ERR_COMM, OSLO_ERR_TIMEOUT.
 * Thread-safety: per context.
 * Ownership: arrays are read during the call; writes *result.
 */
OSLO_API oslo_status oslo_model_train_step(oslo_model *model, oslo_optimizer *optimizer,
                                           const int64_t *ids, const int64_t *labels,
                                           const int64_t *mask, int64_t batch, int64_t seq,
                                           oslo_train_step_result *result);

/**
 * The pipeline schedule of `model`'s last oslo_model_train_step (with or
 * without an optimizer): this rank's seconds of compute (its forwards and
 * backwards) and of wall time (also its waits for other stages and the
 * transfers), and the bubble over all stages, 1 - (the stages' compute
 * seconds summed) / (stages x the longest stage's wall time): (P - 1) /
 * (M + P - 1) in theory for P equal stages and M micro-batches. Zeros
 * before a train step, after a step that failed, and after one that ran no
 * pipeline schedule (one stage and micro_batches 1). Any output pointer
 * may be NULL.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL model).
 * Thread-safety: per context. Ownership: writes the non-NULL outputs.
 */
OSLO_API oslo_status oslo_model_pipeline_stats(const oslo_model *model, double *compute_s,
                                               double *wall_s, double *bubble);

/**
 * One micro-batch of any model (encoders included) trained from a loss the
 * caller computes from the hidden states: the forward on ids [batch, seq]
 * (mask NULL: all 1; token_type_ids NULL: all 0, models with token types
 * only), then the backward from grad_hidden, d loss / d hidden states, as
 * oslo_model_forward's OSLO_MODEL_OUTPUT_HIDDEN lays them out ([batch, seq,
 * hidden_size], `count` floats; zeros at padded positions), the same on
 * every rank. Gradients accumulate in the model; with `optimizer` they are
 * scaled and the optimizer steps as in oslo_model_train_step (result->loss
 * is 0). Collective over the tensor group.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL, sizes, a token or token type
 * outside its table, a non-finite gradient, a gradient that differs
 * between ranks, an optimizer over another model: named, on every rank),
 * OSLO_ERR_SHAPE (count is not batch * seq * hidden_size), OSLO_ERR_COMM,
 * OSLO_ERR_TIMEOUT.
 * Thread-safety: per context.
 * Ownership: arrays are read during the call; writes *result.
 */
OSLO_API oslo_status oslo_model_backward(oslo_model *model, oslo_optimizer *optimizer,
                                         const int64_t *ids, const int64_t *mask,
                                         const int64_t *token_type_ids, int64_t batch, int64_t seq,
                                         const float *grad_hidden, size_t count,
                                         oslo_train_step_result *result);

/**
 * The optimizer step now, from the gradients accumulated so far (however
 * many micro-batches), then zeroes them. Fills *result (may be NULL).
 * Collective over the tensor group.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL; non-finite gradients without
 * loss scaling), OSLO_ERR_COMM, OSLO_ERR_TIMEOUT.
 * Thread-safety: per context.
 * Ownership: writes *result.
 */
OSLO_API oslo_status oslo_optimizer_step(oslo_optimizer *optimizer, oslo_train_step_result *result);

/**
 * Zeroes the model's gradients and restarts the accumulation window.
 * Not collective.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL).
 * Thread-safety: per model.
 * Ownership: none.
 */
OSLO_API oslo_status oslo_optimizer_zero_grad(oslo_optimizer *optimizer);

/**
 * Activation checkpointing for the model's train steps: keep only each
 * block's input from the forward and recompute the block in the backward
 * (gradients bitwise equal, activation memory about 1/layers).
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL). Not collective.
 * Thread-safety: per model.
 * Ownership: none.
 */
OSLO_API oslo_status oslo_model_set_activation_checkpointing(oslo_model *model, int enabled);

/** Where the caller's data loop stands; saved in and restored from a
 * training checkpoint (oslo itself draws no random numbers in training). */
typedef struct oslo_train_state {
  uint64_t seed;         /**< the seed the data order derives from */
  int64_t epoch;         /**< passes over the data completed */
  int64_t data_position; /**< samples consumed in the current epoch */
} oslo_train_state;

/**
 * Saves a training checkpoint into `dir`: the model's shards as
 * oslo_model_save writes them (f32 master weights for a bf16/f16 model),
 * the optimizer state sliced like its parameters, the step count, the
 * schedule, the loss scaler and `state` (may be NULL: zeros), under one
 * manifest, atomically (the previous checkpoint in `dir` stays loadable
 * until the new one is complete), every file CRC-checked. oslo_model_load
 * and oslo_model_merge read it as a model checkpoint (weights only).
 * Call after an optimizer step (no micro-batch pending).
 * Collective over the world group.
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL, micro-batches pending),
 * OSLO_ERR_IO, OSLO_ERR_COMM, OSLO_ERR_TIMEOUT.
 * Thread-safety: per context.
 * Ownership: `dir` and `state` are read during the call.
 */
OSLO_API oslo_status oslo_checkpoint_save(oslo_optimizer *optimizer, const char *dir,
                                          const oslo_train_state *state);

/**
 * Restores a training checkpoint written by oslo_checkpoint_save into the
 * optimizer's model (weights), the optimizer (state, step count, loss
 * scaler) and *state (may be NULL). At the tensor-parallel size it was
 * saved at, training resumes bit-exactly; at another size, weights and
 * optimizer state are re-sliced. Collective over the world group: if any
 * rank fails, every rank returns the error and the optimizer must not be
 * used further (weights may be partly restored).
 * Errors: OSLO_ERR_INVALID_ARGUMENT (NULL, another optimizer kind),
 * OSLO_ERR_IO, OSLO_ERR_FORMAT (not a training checkpoint, corrupt file or
 * checksum: named), OSLO_ERR_SHAPE (a checkpoint of another model: the
 * tensor named), OSLO_ERR_COMM, OSLO_ERR_TIMEOUT.
 * Thread-safety: per context.
 * Ownership: `dir` is read during the call; writes *state.
 */
OSLO_API oslo_status oslo_checkpoint_load(oslo_optimizer *optimizer, const char *dir,
                                          oslo_train_state *state);

#ifdef __cplusplus
}
#endif

#endif /* OSLO_H */
