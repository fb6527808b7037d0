/*
 * oslo.i - the SWIG interface of oslo for Python, Java and Go.
 *
 * It wraps include/oslo.h only (never the C++ core). What is exposed is an
 * explicit list: every function of oslo.h is hidden by the rule below, and
 * the handles become classes whose methods are the %extend blocks of this
 * file; the enums are exposed without their *_ENUM_MIN_/*_ENUM_MAX_
 * sentinels and without OSLO_STATUS_COUNT.
 *
 * Errors: every wrapped call that can fail records its oslo_status in a
 * thread-local (oslo_bind_status) and the one %exception block of each
 * language turns a failed status plus its message into the language's native
 * error. The message (oslo_last_error(), thread-local in oslo, or the
 * binding's own for an argument it refuses) is read inside the same C
 * wrapper call, on the same thread, before anything else can overwrite it.
 *
 * Ownership: constructors (oslo_*_create, oslo_*_load), tensor_wrap,
 * tensor_from_dlpack and the DLPack exports return owned objects
 * (%newobject or constructors; the class destructor calls the matching
 * *_destroy, a capsule the DLPack deleter). The layers' param getters
 * (oslo_*_params) return borrowed tensors, never destroyed by the wrapper.
 * The language layers keep what a handle depends on alive: its context, a
 * borrowed tensor's layer, what a parameter set holds (Python:
 * oslo/__init__.py, class _Handle); the C ABI also keeps a model's context
 * and an optimizer's model alive, so its *_destroy run in any order. Python
 * closes a handle through release_<handle> (python/oslo_python.i), which
 * destroys the C object at once and empties the SWIG object, whatever
 * still references it (a frame a traceback keeps).
 *
 * Files (one common interface plus one per language, as GDAL does): this
 * file holds what every language shares (the support code, what is exposed,
 * the %extend methods); each language's own part lives next to its package
 * and is included from here, before oslo.h:
 *   python/oslo_python.i  Python's %exception and typemaps (and, after
 *                         oslo.h, python/oslo_python_extend.i: DLPack and
 *                         the numpy-array calls);
 *   java/oslo_java.i      Java's %exception, names, Javadoc, typemaps and
 *                         the hand-written methods of the generated classes;
 *   go/oslo_go.i          Go's %exception and typemaps.
 * The serving engine's methods, shared by every language, are in
 * engine.i (included just before oslo.h); Java's own part of it is
 * java/oslo_java_engine.i (included by java/oslo_java.i). The chat
 * templates' raw methods, shared likewise, are in chat_template.i (included
 * just before engine.i; it declares the tokenizer's handle); Java's names
 * and methods of the tokenizer are in java/oslo_java_tokenizer.i.
 * Each language file gives the three kinds of argument that need a typemap
 * one: a shape (int ndim, const int64_t *shape), a read-only memory block
 * (const void *INBUF, size_t INBYTES) and a writable one (void *OUTBUF,
 * size_t OUTBYTES). SWIG finds the included files relative to this one.
 */
#if defined(SWIGPYTHON)
%module(package="oslo") capi
#else
%module capi
#endif

%{
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oslo.h"
#include <oslo/dlpack.h>

/* DLPack exports, told apart by type so each language maps them. */
typedef struct DLManagedTensorVersioned *bind_dlpack_versioned;
typedef struct DLManagedTensor *bind_dlpack_unversioned;

/* The status of the last wrapped call on this thread and, for errors the
   binding itself finds (a buffer of the wrong size), its message. */
#if defined(__cplusplus) && __cplusplus >= 201103L
#define OSLO_BIND_TLS thread_local
#elif defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#define OSLO_BIND_TLS _Thread_local
#else
#define OSLO_BIND_TLS __thread
#endif
static OSLO_BIND_TLS oslo_status oslo_bind_status;
static OSLO_BIND_TLS char oslo_bind_message[512];

/* Records a status from oslo; its message is oslo_last_error(). */
static int oslo_bind_check(oslo_status st) {
  oslo_bind_status = st;
  oslo_bind_message[0] = 0;
  return st == OSLO_OK;
}

/* Records an error the binding found, with its own message. */
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static void oslo_bind_fail(oslo_status st, const char *fmt, ...) {
  va_list ap;
  oslo_bind_status = st;
  va_start(ap, fmt);
  vsnprintf(oslo_bind_message, sizeof oslo_bind_message, fmt, ap);
  va_end(ap);
}

/* The message of the failure just recorded (call on the failing thread). */
static const char *oslo_bind_error_message(void) {
  return oslo_bind_message[0] ? oslo_bind_message : oslo_last_error();
}

/* Checks that a memory block holds exactly `want` bytes. */
static int oslo_bind_bytes(const char *what, size_t have, unsigned long long want) {
  if ((unsigned long long)have == want) return 1;
  oslo_bind_status = OSLO_ERR_SHAPE;
  snprintf(oslo_bind_message, sizeof oslo_bind_message,
           "%s: the buffer holds %llu bytes, the call needs %llu", what,
           (unsigned long long)have, want);
  return 0;
}

/* A zeroed train step result for the caller to own (freed by the class's
   destructor). */
static oslo_train_step_result *oslo_bind_train_step_result(void) {
  oslo_train_step_result *r = (oslo_train_step_result *)calloc(1, sizeof *r);
  if (!r)
    oslo_bind_fail(OSLO_ERR_OUT_OF_MEMORY, "train step result: %llu bytes",
                   (unsigned long long)sizeof *r);
  return r;
}

static unsigned long long oslo_bind_model_width(const oslo_model *m, oslo_model_output output) {
  oslo_model_info info;
  if (oslo_model_get_info(m, &info, NULL) != OSLO_OK) return 0;
  return (unsigned long long)(output == OSLO_MODEL_OUTPUT_LOGITS ? info.vocab_size
                                                                  : info.hidden_size);
}
%}

/* ------------------------------------------------------------------------ */
/* What is exposed                                                           */
/* ------------------------------------------------------------------------ */

/* No function of oslo.h is wrapped as such: the classes below call them. */
%rename("$ignore", %$isfunction, %$not %$ismember) "";
/* Not values. */
%rename("$ignore", regextarget=1) "_ENUM_M(IN|AX)_$";
%ignore OSLO_STATUS_COUNT;
/* Macros of the header that are no part of a binding's API. */
%ignore OSLO_API;
%ignore OSLO_H;
/* Options structs the classes fill themselves (the language layers take
   keyword arguments); oslo_generate_options, oslo_optimizer_options and
   oslo_train_options are exposed (see below), and oslo_train_step_result
   as a result struct. */
%ignore oslo_parallel_linear_options;
%ignore oslo_parallel_embedding_options;
%ignore oslo_vocab_parallel_cross_entropy_options;
%ignore oslo_model_options;
%ignore oslo_merge_options;
%ignore OSLO_PARALLEL_LINEAR_OPTIONS_VERSION;
%ignore OSLO_PARALLEL_EMBEDDING_OPTIONS_VERSION;
%ignore OSLO_VOCAB_PARALLEL_CROSS_ENTROPY_OPTIONS_VERSION;
%ignore OSLO_MODEL_OPTIONS_VERSION;
%ignore OSLO_MERGE_OPTIONS_VERSION;
%ignore OSLO_OPTIMIZER_OPTIONS_VERSION;
%ignore oslo_optimizer_options::version;
%ignore OSLO_TRAIN_OPTIONS_VERSION;
%ignore oslo_train_options::version;
/* The train state travels as three integers (Optimizer save/load_checkpoint). */
%ignore oslo_train_state;
%ignore OSLO_GENERATE_OPTIONS_VERSION;
/* Tokenizer.encode_batch takes the batch options as arguments, the sides
   as ints (each language has its own padding names). */
%ignore oslo_tokenizer_encode_batch_options;
%ignore OSLO_TOKENIZER_ENCODE_BATCH_OPTIONS_VERSION;
/* pad_batch likewise takes its options as arguments. */
%ignore oslo_pad_batch_options;
%ignore OSLO_PAD_BATCH_OPTIONS_VERSION;
%ignore oslo_side;
%ignore OSLO_SIDE_RIGHT;
%ignore OSLO_SIDE_LEFT;
/* The EOS list is passed to Model.generate, not kept in the struct (a
   pointer into a language's memory must not outlive the call). */
%ignore oslo_generate_options::version;
%ignore oslo_generate_options::eos_token_ids;
%ignore oslo_generate_options::num_eos_token_ids;
/* The serving engine (engine.i): its options without the version, the
   callback (every language reads output through oslo_engine_next or
   Engine.step) and the tokenizer (an argument of the constructor); events
   are read field by field (Engine.step's raw form). */
%ignore OSLO_ENGINE_OPTIONS_VERSION;
%ignore oslo_engine_options::version;
%ignore oslo_engine_options::tokenizer;
%ignore oslo_engine_options::on_event;
%ignore oslo_engine_options::user_data;
%ignore oslo_engine_event;
%ignore oslo_engine_callback;
/* Chat templates (chat_template.i): their options are arguments of
   Tokenizer.apply_chat_template and chat_template_apply. */
%ignore oslo_chat_template_options;
%ignore OSLO_CHAT_TEMPLATE_OPTIONS_VERSION;
/* Method names are written m_<name> (so the generated C helper, named
   <struct>_<method>, never clashes with oslo.h's oslo_<object>_<name>). */
%rename("%(strip:[m_])s", %$ismember, %$isfunction) "";

%rename(Context) oslo_context;
%rename(Tensor) oslo_tensor;
%rename(Model) oslo_model;
%rename(Tokenizer) oslo_tokenizer;
%rename(GenerateOptions) oslo_generate_options;
%rename(ParallelLinear) oslo_parallel_linear;
%rename(ParallelEmbedding) oslo_parallel_embedding;
%rename(ParamSet) oslo_param_set;
%rename(ModelInfo) oslo_model_info;
%rename(Optimizer) oslo_optimizer;
%rename(OptimizerOptions) oslo_optimizer_options;
%rename(TrainOptions) oslo_train_options;
%rename(TrainStepResult) oslo_train_step_result;
%rename(Engine) oslo_engine;
%rename(EngineOptions) oslo_engine_options;
%rename(EngineStats) oslo_engine_stats;
%rename(FinishReason) oslo_finish_reason;
%rename(RequestState) oslo_request_state;
%rename(version_string) bind_version_string;
%rename(status_string) bind_status_string;
%rename(model_merge) bind_model_merge;
%rename(model_reshard) bind_model_reshard;
%rename(checkpoint_inspect) bind_checkpoint_inspect;
%rename(pad_batch) bind_pad_batch;
%rename(chat_template_apply) bind_chat_template_apply;
%include "stdint.i"

/* Objects returned to the caller, freed by the class's destructor. */
%newobject bind_checkpoint_inspect;

/* ------------------------------------------------------------------------ */
/* Errors and typemaps: one file per language                               */
/* ------------------------------------------------------------------------ */

#if defined(SWIGPYTHON)
%include "python/oslo_python.i"
#elif defined(SWIGJAVA)
%include "java/oslo_java.i"
#elif defined(SWIGGO)
%include "go/oslo_go.i"
#endif

%apply (const void *INBUF, size_t INBYTES) {
  (const void *src, size_t src_bytes),
  (const void *ids, size_t ids_bytes),
  (const void *labels, size_t labels_bytes),
  (const void *grad_hidden, size_t grad_hidden_bytes),
  (const void *mask, size_t mask_bytes),
  (const void *token_type_ids, size_t token_type_ids_bytes),
  (const void *prompt_ids, size_t prompt_ids_bytes),
  (const void *prompt_lengths, size_t prompt_lengths_bytes),
  (const void *eos_token_ids, size_t eos_token_ids_bytes),
  (const void *text, size_t text_bytes),
  (const void *lengths, size_t lengths_bytes),
  (const void *token, size_t token_bytes),
  (const void *stop, size_t stop_bytes),
  (const void *stop_lengths, size_t stop_lengths_bytes)
};
%apply (void *OUTBUF, size_t OUTBYTES) {
  (void *dst, size_t dst_bytes),
  (void *out, size_t out_bytes),
  (void *out_tokens, size_t out_tokens_bytes),
  (void *out_lengths, size_t out_lengths_bytes),
  (void *out_scores, size_t out_scores_bytes),
  (void *out_mask, size_t out_mask_bytes),
  (void *out_text, size_t out_text_bytes)
};

/* ------------------------------------------------------------------------ */
/* The enums and constants of oslo.h, and the structs exposed as they are    */
/* ------------------------------------------------------------------------ */

/* The handles, declared to SWIG only (the real types stay opaque). */
%nodefaultctor oslo_context;
%nodefaultctor oslo_tensor;
%nodefaultctor oslo_model;
%nodefaultctor oslo_tokenizer;
%nodefaultctor oslo_parallel_linear;
%nodefaultctor oslo_parallel_embedding;
%nodefaultctor oslo_param_set;
%nodefaultctor oslo_model_info;
%nodefaultctor oslo_optimizer;
%nodefaultctor oslo_train_step_result;
%nodefaultctor oslo_engine;
%nodefaultctor oslo_engine_stats;
struct oslo_context {};
struct oslo_tensor {};
struct oslo_model {};
struct oslo_parallel_linear {};
struct oslo_parallel_embedding {};
struct oslo_param_set {};
struct oslo_optimizer {};

/* What a train step or an optimizer step reports: read-only. */
%immutable oslo_train_step_result::loss;
%immutable oslo_train_step_result::stepped;
%immutable oslo_train_step_result::skipped;
%immutable oslo_train_step_result::mean_loss;
%immutable oslo_train_step_result::grad_norm;
%immutable oslo_train_step_result::lr;
%immutable oslo_train_step_result::loss_scale;
%immutable oslo_train_step_result::step;
/* What oslo_engine_get_stats reports: read-only. */
%immutable oslo_engine_stats::running;
%immutable oslo_engine_stats::waiting;
%immutable oslo_engine_stats::blocks_used;
%immutable oslo_engine_stats::blocks_total;
%immutable oslo_engine_stats::block_size;
%immutable oslo_engine_stats::cached_tokens;
%immutable oslo_engine_stats::kv_bytes_used;
%immutable oslo_engine_stats::steps;
%immutable oslo_engine_stats::prompt_tokens;
%immutable oslo_engine_stats::generated_tokens;
%immutable oslo_engine_stats::prefix_queries;
%immutable oslo_engine_stats::prefix_hits;

/* The chat templates: their support code, the tokenizer's handle (declared
   there, after that code, as the engine's below) and its chat methods, and
   the template without a tokenizer. Before engine.i, whose constructor
   takes a tokenizer. */
%include "chat_template.i"

/* The serving engine: its support code, its handle (declared there, after
   that code: SWIG emits the %extend methods where the class is declared)
   and its methods. */
%include "engine.i"

%include "oslo.h"

/* ------------------------------------------------------------------------ */
/* Library                                                                   */
/* ------------------------------------------------------------------------ */

%inline %{
/* Run-time version of the library ("0.3.0"). */
static const char *bind_version_string(void) { return oslo_version_string(); }

/* Static name of a status ("OSLO_ERR_TIMEOUT: timed out"). */
static const char *bind_status_string(int status) {
  return oslo_status_string((oslo_status)status);
}

/* oslo_model_merge with its options as arguments; dtype -1 keeps. */
static void bind_model_merge(const char *src, const char *dst, int dtype,
                             unsigned long long max_shard_bytes, int overwrite) {
  oslo_merge_options o;
  if (!oslo_bind_check(oslo_merge_options_init(&o, OSLO_MERGE_OPTIONS_VERSION))) return;
  o.dtype = dtype;
  o.max_shard_bytes = (uint64_t)max_shard_bytes;
  o.overwrite = overwrite;
  oslo_bind_check(oslo_model_merge(src, dst, &o));
}

static void bind_model_reshard(const char *src, const char *dst, int tensor_parallel_size) {
  oslo_bind_check(oslo_model_reshard(src, dst, tensor_parallel_size));
}

/* oslo_pad_batch of the rows of int64 ids held back to back in `ids`, row
   i being lengths[i] ids (int64, one per row), with the options' fields as
   arguments (sides: 0 right, 1 left; max_length 0: no limit). Writes the
   ids to out and the mask to out_mask (int64 [n, L] each; None: only
   sizes; out_mask may be None) when out holds n * L values; returns L. */
static size_t bind_pad_batch(const void *ids, size_t ids_bytes, const void *lengths,
                             size_t lengths_bytes, int padding_side, int64_t pad_id,
                             int64_t max_length, int truncation, int truncation_side,
                             int pad_to_max_length, void *out, size_t out_bytes, void *out_mask,
                             size_t out_mask_bytes) {
  const int64_t *lens = (const int64_t *)lengths, *all = (const int64_t *)ids;
  size_t n = lengths_bytes / 8, len = 0, off = 0, have = ids_bytes / 8, i;
  const int64_t **rows;
  size_t *sizes;
  oslo_pad_batch_options o;
  if (lengths_bytes % 8 || ids_bytes % 8) {
    oslo_bind_fail(OSLO_ERR_INVALID_ARGUMENT,
                   "pad_batch: ids hold %llu bytes and lengths %llu, not whole numbers of int64",
                   (unsigned long long)ids_bytes, (unsigned long long)lengths_bytes);
    return 0;
  }
  if (max_length < 0) {
    oslo_bind_fail(OSLO_ERR_INVALID_ARGUMENT, "pad_batch: max_length %lld is negative",
                   (long long)max_length);
    return 0;
  }
  if (out && out_mask && out_mask_bytes < out_bytes) {
    oslo_bind_fail(OSLO_ERR_SHAPE, "pad_batch: the mask holds %llu bytes, the ids %llu",
                   (unsigned long long)out_mask_bytes, (unsigned long long)out_bytes);
    return 0;
  }
  if (!oslo_bind_check(oslo_pad_batch_options_init(&o, OSLO_PAD_BATCH_OPTIONS_VERSION))) return 0;
  o.padding_side = (oslo_side)padding_side;
  o.pad_id = pad_id;
  o.max_length = (size_t)max_length;
  o.truncation = truncation;
  o.truncation_side = (oslo_side)truncation_side;
  o.pad_to_max_length = pad_to_max_length;
  rows = (const int64_t **)calloc(n ? n : 1, sizeof *rows);
  sizes = (size_t *)calloc(n ? n : 1, sizeof *sizes);
  if (!rows || !sizes) {
    free((void *)rows);
    free(sizes);
    oslo_bind_fail(OSLO_ERR_OUT_OF_MEMORY, "pad_batch: %llu rows", (unsigned long long)n);
    return 0;
  }
  for (i = 0; i < n; ++i) {
    if (lens[i] < 0 || (unsigned long long)lens[i] > have - off) {
      oslo_bind_fail(OSLO_ERR_INVALID_ARGUMENT,
                     "pad_batch: row %llu's length %lld runs past the %llu ids",
                     (unsigned long long)i, (long long)lens[i], (unsigned long long)have);
      break;
    }
    rows[i] = all ? all + off : NULL;
    sizes[i] = (size_t)lens[i];
    off += (size_t)lens[i];
  }
  if (i == n)
    oslo_bind_check(oslo_pad_batch(rows, sizes, n, &o, (int64_t *)out,
                                   out ? (int64_t *)out_mask : NULL, out_bytes / 8, &len));
  free((void *)rows);
  free(sizes);
  return len;
}

/* oslo_checkpoint_inspect: the whole description (text, or JSON if json). */
static char *bind_checkpoint_inspect(const char *path, int json) {
  size_t len = 0;
  char *buf;
  if (!oslo_bind_check(oslo_checkpoint_inspect(path, json, NULL, 0, &len))) return NULL;
  buf = (char *)malloc(len + 1);
  if (!buf) {
    oslo_bind_fail(OSLO_ERR_OUT_OF_MEMORY, "inspect: %llu bytes", len + 1ULL);
    return NULL;
  }
  if (!oslo_bind_check(oslo_checkpoint_inspect(path, json, buf, len + 1, &len))) {
    free(buf);
    return NULL;
  }
  return buf;
}
%}

/* ------------------------------------------------------------------------ */
/* Context: collectives on its groups                                        */
/* ------------------------------------------------------------------------ */

%newobject oslo_context::oslo_context;
%extend oslo_context {
  /* oslo_context_create: JSON text, a JSON file path, or "" for defaults. */
  oslo_context(const char *config) {
    oslo_context *c = NULL;
    oslo_bind_check(oslo_context_create(config, &c));
    return c;
  }
  ~oslo_context() { oslo_context_destroy($self); }
  void m_abort() { oslo_bind_check(oslo_context_abort($self)); }
  int m_rank(oslo_group group) {
    int r = -1;
    oslo_bind_check(oslo_context_rank($self, group, &r));
    return r;
  }
  int m_size(oslo_group group) {
    int s = 0;
    oslo_bind_check(oslo_context_size($self, group, &s));
    return s;
  }
  const char *m_backend() {
    const char *b = NULL;
    oslo_bind_check(oslo_context_backend($self, OSLO_GROUP_WORLD, &b, NULL));
    return b;
  }
  const char *m_transport(oslo_group group) {
    const char *b = NULL, *t = NULL;
    oslo_bind_check(oslo_context_backend($self, group, &b, &t));
    return t;
  }
  void m_all_reduce(oslo_group group, oslo_reduce_op op, oslo_tensor *tensor) {
    oslo_bind_check(oslo_context_all_reduce($self, group, op, tensor));
  }
  void m_all_gather(oslo_group group, const oslo_tensor *input, oslo_tensor *output) {
    oslo_bind_check(oslo_context_all_gather($self, group, input, output));
  }
  void m_reduce_scatter(oslo_group group, oslo_reduce_op op, const oslo_tensor *input,
                        oslo_tensor *output) {
    oslo_bind_check(oslo_context_reduce_scatter($self, group, op, input, output));
  }
  void m_broadcast(oslo_group group, int root, oslo_tensor *tensor) {
    oslo_bind_check(oslo_context_broadcast($self, group, root, tensor));
  }
  void m_send(oslo_group group, int peer, const oslo_tensor *tensor) {
    oslo_bind_check(oslo_context_send($self, group, peer, tensor));
  }
  void m_recv(oslo_group group, int peer, oslo_tensor *tensor) {
    oslo_bind_check(oslo_context_recv($self, group, peer, tensor));
  }
  void m_barrier(oslo_group group) { oslo_bind_check(oslo_context_barrier($self, group)); }
}

/* ------------------------------------------------------------------------ */
/* Tensor                                                                    */
/* ------------------------------------------------------------------------ */

%extend oslo_tensor {
  /* oslo_tensor_create: zero-filled, on the context's device. */
  oslo_tensor(oslo_context *ctx, oslo_dtype dtype, int ndim, const int64_t *shape) {
    oslo_tensor *t = NULL;
    oslo_bind_check(oslo_tensor_create(ctx, dtype, ndim, shape, &t));
    return t;
  }
  ~oslo_tensor() { oslo_tensor_destroy($self); }
  int m_ndim() {
    int n = 0;
    oslo_bind_check(oslo_tensor_ndim($self, &n));
    return n;
  }
  /* Extent of dimension i (0 <= i < ndim). */
  int64_t m_dim(int i) {
    int64_t s[OSLO_MAX_DIMS];
    int n = 0;
    if (!oslo_bind_check(oslo_tensor_ndim($self, &n))) return 0;
    if (i < 0 || i >= n) {
      oslo_bind_fail(OSLO_ERR_INVALID_ARGUMENT, "dim: index %d out of range for %d dimensions", i,
                     n);
      return 0;
    }
    if (!oslo_bind_check(oslo_tensor_shape($self, s))) return 0;
    return s[i];
  }
  oslo_dtype m_dtype() {
    oslo_dtype d = OSLO_DTYPE_F32;
    oslo_bind_check(oslo_tensor_dtype($self, &d));
    return d;
  }
  int64_t m_numel() {
    int64_t n = 0;
    oslo_bind_check(oslo_tensor_numel($self, &n));
    return n;
  }
  /* Address of the data on its device, as an integer (for DLPack-less
     interop; borrowed: valid while the tensor lives). */
  uintptr_t m_data_ptr() {
    void *p = NULL;
    oslo_bind_check(oslo_tensor_data($self, &p));
    return (uintptr_t)p;
  }
  void m_copy_from_host(const void *src, size_t src_bytes) {
    oslo_bind_check(oslo_tensor_copy_from_host($self, src, src_bytes));
  }
  void m_copy_to_host(void *dst, size_t dst_bytes) {
    oslo_bind_check(oslo_tensor_copy_to_host($self, dst, dst_bytes));
  }
}

#if defined(SWIGPYTHON)
%include "python/oslo_python_extend.i"
#endif
#if defined(SWIGPYTHON) || defined(SWIGJAVA)
/* oslo_tensor_wrap over a Python buffer (writable, C-contiguous). The
   Python layer (oslo.Tensor.wrap) keeps the buffer's owner alive for as long
   as the tensor lives, as oslo requires. */
%newobject bind_tensor_wrap;
%rename(tensor_wrap) bind_tensor_wrap;
%inline %{
static oslo_tensor *bind_tensor_wrap(oslo_context *ctx, void *out, size_t out_bytes,
                                     oslo_dtype dtype, int ndim, const int64_t *shape) {
  oslo_tensor *t = NULL;
  if (!oslo_bind_check(oslo_tensor_wrap(ctx, out, dtype, ndim, shape, &t))) return NULL;
  {
    int64_t n = 0;
    size_t esz = (dtype == OSLO_DTYPE_F16 || dtype == OSLO_DTYPE_BF16) ? 2
                 : (dtype == OSLO_DTYPE_I64)                           ? 8
                                                                       : 4;
    if (!oslo_bind_check(oslo_tensor_numel(t, &n)) ||
        !oslo_bind_bytes("wrap", out_bytes, (unsigned long long)n * esz)) {
      oslo_tensor_destroy(t);
      return NULL;
    }
  }
  return t;
}
%}
#endif

/* ------------------------------------------------------------------------ */
/* Tensor-parallel layers and parameter sets                                 */
/* ------------------------------------------------------------------------ */

/* The *_params getters return borrowed tensors (not %newobject: the
   languages never destroy them); the language layers keep the layer alive
   while such a tensor is referenced (Python: oslo.ParallelLinear.weight). */
%extend oslo_parallel_linear {
  /* oslo_parallel_linear_create with the fields of its options. */
  oslo_parallel_linear(oslo_context *ctx, oslo_linear_kind kind, int64_t in_features,
                       int64_t out_features, int bias, int gather_output, int input_is_parallel,
                       oslo_dtype dtype) {
    oslo_parallel_linear_options o;
    oslo_parallel_linear *l = NULL;
    if (!oslo_bind_check(
            oslo_parallel_linear_options_init(&o, OSLO_PARALLEL_LINEAR_OPTIONS_VERSION)))
      return NULL;
    o.kind = kind;
    o.in_features = in_features;
    o.out_features = out_features;
    o.bias = bias;
    o.gather_output = gather_output;
    o.input_is_parallel = input_is_parallel;
    o.dtype = dtype;
    oslo_bind_check(oslo_parallel_linear_create(ctx, &o, &l));
    return l;
  }
  ~oslo_parallel_linear() { oslo_parallel_linear_destroy($self); }
  void m_load_full(const oslo_tensor *weight, const oslo_tensor *bias) {
    oslo_bind_check(oslo_parallel_linear_load_full($self, weight, bias));
  }
  void m_load_shard(const oslo_tensor *weight, const oslo_tensor *bias) {
    oslo_bind_check(oslo_parallel_linear_load_shard($self, weight, bias));
  }
  /* which: 0 weight, 1 bias, 2 grad_weight, 3 grad_bias (borrowed; NULL for
     the bias of a layer without one). */
  oslo_tensor *m_param(int which) {
    oslo_tensor *t[4] = {NULL, NULL, NULL, NULL};
    if (which < 0 || which > 3) {
      oslo_bind_fail(OSLO_ERR_INVALID_ARGUMENT, "param: %d is not 0..3", which);
      return NULL;
    }
    oslo_bind_check(oslo_parallel_linear_params($self, &t[0], &t[1], &t[2], &t[3]));
    return t[which];
  }
  void m_forward(const oslo_tensor *input, oslo_tensor *output) {
    oslo_bind_check(oslo_parallel_linear_forward($self, input, output));
  }
  void m_backward(const oslo_tensor *input, const oslo_tensor *grad_output,
                  oslo_tensor *grad_input) {
    oslo_bind_check(oslo_parallel_linear_backward($self, input, grad_output, grad_input));
  }
  void m_zero_grad() { oslo_bind_check(oslo_parallel_linear_zero_grad($self)); }
}

%extend oslo_parallel_embedding {
  oslo_parallel_embedding(oslo_context *ctx, int64_t vocab_size, int64_t hidden_size,
                          oslo_dtype dtype) {
    oslo_parallel_embedding_options o;
    oslo_parallel_embedding *e = NULL;
    if (!oslo_bind_check(oslo_parallel_embedding_options_init(
            &o, OSLO_PARALLEL_EMBEDDING_OPTIONS_VERSION)))
      return NULL;
    o.vocab_size = vocab_size;
    o.hidden_size = hidden_size;
    o.dtype = dtype;
    oslo_bind_check(oslo_parallel_embedding_create(ctx, &o, &e));
    return e;
  }
  ~oslo_parallel_embedding() { oslo_parallel_embedding_destroy($self); }
  /* which: 0 start, 1 end of this rank's real rows, 2 padded local rows. */
  int64_t m_vocab_range(int which) {
    int64_t v[3] = {0, 0, 0};
    if (which < 0 || which > 2) {
      oslo_bind_fail(OSLO_ERR_INVALID_ARGUMENT, "vocab_range: %d is not 0..2", which);
      return 0;
    }
    oslo_bind_check(oslo_parallel_embedding_vocab_range($self, &v[0], &v[1], &v[2]));
    return v[which];
  }
  void m_load_full(const oslo_tensor *weight) {
    oslo_bind_check(oslo_parallel_embedding_load_full($self, weight));
  }
  void m_load_shard(const oslo_tensor *weight) {
    oslo_bind_check(oslo_parallel_embedding_load_shard($self, weight));
  }
  /* which: 0 weight, 1 grad_weight (borrowed). */
  oslo_tensor *m_param(int which) {
    oslo_tensor *t[2] = {NULL, NULL};
    if (which < 0 || which > 1) {
      oslo_bind_fail(OSLO_ERR_INVALID_ARGUMENT, "param: %d is not 0..1", which);
      return NULL;
    }
    oslo_bind_check(oslo_parallel_embedding_params($self, &t[0], &t[1]));
    return t[which];
  }
  void m_forward(const oslo_tensor *ids, oslo_tensor *output) {
    oslo_bind_check(oslo_parallel_embedding_forward($self, ids, output));
  }
  void m_backward(const oslo_tensor *ids, const oslo_tensor *grad_output) {
    oslo_bind_check(oslo_parallel_embedding_backward($self, ids, grad_output));
  }
  void m_zero_grad() { oslo_bind_check(oslo_parallel_embedding_zero_grad($self)); }
}

%extend oslo_context {
  /* oslo_context_vocab_parallel_cross_entropy; losses and grad_logits may be
     NULL; returns the mean loss. */
  float m_vocab_parallel_cross_entropy(const oslo_tensor *logits, const oslo_tensor *labels,
                                       int64_t vocab_size, int64_t ignore_index,
                                       oslo_tensor *losses, oslo_tensor *grad_logits) {
    oslo_vocab_parallel_cross_entropy_options o;
    float mean = 0;
    if (!oslo_bind_check(oslo_vocab_parallel_cross_entropy_options_init(
            &o, OSLO_VOCAB_PARALLEL_CROSS_ENTROPY_OPTIONS_VERSION)))
      return 0;
    o.vocab_size = vocab_size;
    o.ignore_index = ignore_index;
    oslo_bind_check(oslo_context_vocab_parallel_cross_entropy($self, logits, labels, &o, losses,
                                                              grad_logits, &mean));
    return mean;
  }
}

/* A parameter set borrows what is added to it: the language layers keep
   those alive while the set lives. */
%extend oslo_param_set {
  oslo_param_set(oslo_context *ctx) {
    oslo_param_set *p = NULL;
    oslo_bind_check(oslo_param_set_create(ctx, &p));
    return p;
  }
  ~oslo_param_set() { oslo_param_set_destroy($self); }
  void m_add(const char *name, oslo_tensor *tensor, oslo_tensor *grad, int split_dim) {
    oslo_bind_check(oslo_param_set_add($self, name, tensor, grad, split_dim));
  }
  void m_add_linear(const char *prefix, oslo_parallel_linear *layer) {
    oslo_bind_check(oslo_param_set_add_linear($self, prefix, layer));
  }
  void m_add_embedding(const char *prefix, oslo_parallel_embedding *emb) {
    oslo_bind_check(oslo_param_set_add_embedding($self, prefix, emb));
  }
  size_t m_count() {
    size_t n = 0;
    oslo_bind_check(oslo_param_set_count($self, &n));
    return n;
  }
  /* Returns the global gradient norm (clips when max_norm > 0). */
  double m_clip_grad_norm(double max_norm, double norm_type) {
    double n = 0;
    oslo_bind_check(oslo_param_set_clip_grad_norm($self, max_norm, norm_type, &n));
    return n;
  }
  void m_save_checkpoint(const char *dir) {
    oslo_bind_check(oslo_param_set_save_checkpoint($self, dir));
  }
  void m_load_checkpoint(const char *dir) {
    oslo_bind_check(oslo_param_set_load_checkpoint($self, dir));
  }
}

/* ------------------------------------------------------------------------ */
/* Model                                                                     */
/* ------------------------------------------------------------------------ */

/* Options of generate with Hugging Face's defaults (oslo_generate_options_init). */
%extend oslo_generate_options {
  oslo_generate_options() {
    oslo_generate_options *o = (oslo_generate_options *)calloc(1, sizeof *o);
    if (!o) {
      oslo_bind_fail(OSLO_ERR_OUT_OF_MEMORY, "GenerateOptions: %llu bytes",
                     (unsigned long long)sizeof *o);
      return NULL;
    }
    if (!oslo_bind_check(oslo_generate_options_init(o, OSLO_GENERATE_OPTIONS_VERSION))) {
      free(o);
      return NULL;
    }
    return o;
  }
  ~oslo_generate_options() { free($self); }
}

%extend oslo_model_info {
  ~oslo_model_info() { free($self); }
}

%newobject oslo_model::m_info;
%newobject oslo_model::m_train_step;
%newobject oslo_model::m_backward;
%extend oslo_model {
  /* oslo_model_load; dtype -1 keeps the checkpoint's; virtual_stages and
     layers are the options' pipeline_virtual_stages and pipeline_layers,
     the latter as "A,B,..." blocks per virtual stage ("" splits evenly).
     Collective. */
  oslo_model(oslo_context *ctx, const char *path, int dtype, int virtual_stages,
             const char *layers) {
    oslo_model *m = NULL;
    oslo_model_options o;
    int32_t counts[1024];
    int32_t n = 0;
    if (!oslo_bind_check(oslo_model_options_init(&o, OSLO_MODEL_OPTIONS_VERSION))) return NULL;
    o.dtype = dtype;
    o.pipeline_virtual_stages = virtual_stages;
    if (layers && *layers) {
      const char *p = layers;
      for (;;) {
        char *end = NULL;
        long v;
        errno = 0;
        v = strtol(p, &end, 10);
        if (end == p || errno != 0 || v < INT32_MIN || v > INT32_MAX || n == 1024 ||
            (*end != ',' && *end != '\0')) {
          oslo_bind_fail(OSLO_ERR_INVALID_ARGUMENT,
                         "pipeline_layers \"%s\": not a list of at most 1024 block counts",
                         layers);
          return NULL;
        }
        counts[n++] = (int32_t)v;
        if (*end == '\0') break;
        p = end + 1;
      }
      o.pipeline_layers = counts;
      o.pipeline_layers_count = n;
    }
    oslo_bind_check(oslo_model_load(ctx, path, &o, &m));
    return m;
  }
  ~oslo_model() { oslo_model_destroy($self); }
  oslo_model_info *m_info() {
    oslo_model_info *i = (oslo_model_info *)calloc(1, sizeof *i);
    if (!i) {
      oslo_bind_fail(OSLO_ERR_OUT_OF_MEMORY, "info: %llu bytes",
                     (unsigned long long)sizeof *i);
      return NULL;
    }
    if (!oslo_bind_check(oslo_model_get_info($self, i, NULL))) {
      free(i);
      return NULL;
    }
    return i;
  }
  const char *m_model_type() {
    oslo_model_info i;
    const char *t = NULL;
    oslo_bind_check(oslo_model_get_info($self, &i, &t));
    return t;
  }
  /* ids, mask (None: all 1), token_type_ids (None: all 0): int64
     [batch, seq]; out: float32 [batch, seq, vocab or hidden]. Collective. */
  void m_forward(const void *ids, size_t ids_bytes, const void *mask, size_t mask_bytes,
                 const void *token_type_ids, size_t token_type_ids_bytes, int64_t batch,
                 int64_t seq, oslo_model_output output, void *out, size_t out_bytes) {
    const unsigned long long cells = (unsigned long long)(batch > 0 ? batch : 0) *
                                     (unsigned long long)(seq > 0 ? seq : 0);
    if (!oslo_bind_bytes("forward: ids", ids_bytes, cells * 8)) return;
    if (mask && !oslo_bind_bytes("forward: mask", mask_bytes, cells * 8)) return;
    if (token_type_ids &&
        !oslo_bind_bytes("forward: token_type_ids", token_type_ids_bytes, cells * 8))
      return;
    {
      const unsigned long long w = oslo_bind_model_width($self, output);
      if (w && !oslo_bind_bytes("forward: out", out_bytes, cells * w * 4)) return;
    }
    oslo_bind_check(oslo_model_forward($self, (const int64_t *)ids, (const int64_t *)mask,
                                       (const int64_t *)token_type_ids, batch, seq, output,
                                       (float *)out, out_bytes / sizeof(float)));
  }
  /* ids, mask: int64 [batch, seq]; out: float32 [batch, hidden]. Collective. */
  void m_embed(const void *ids, size_t ids_bytes, const void *mask, size_t mask_bytes,
               int64_t batch, int64_t seq, int normalize, void *out, size_t out_bytes) {
    const unsigned long long cells = (unsigned long long)(batch > 0 ? batch : 0) *
                                     (unsigned long long)(seq > 0 ? seq : 0);
    if (!oslo_bind_bytes("embed: ids", ids_bytes, cells * 8)) return;
    if (mask && !oslo_bind_bytes("embed: mask", mask_bytes, cells * 8)) return;
    {
      const unsigned long long w = oslo_bind_model_width($self, OSLO_MODEL_OUTPUT_HIDDEN);
      if (w && !oslo_bind_bytes("embed: out", out_bytes,
                                (unsigned long long)(batch > 0 ? batch : 0) * w * 4))
        return;
    }
    oslo_bind_check(oslo_model_embed($self, (const int64_t *)ids, (const int64_t *)mask, batch,
                                     seq, normalize, (float *)out, out_bytes / sizeof(float)));
  }
  /* prompt_ids: int64, the prompts one after another; prompt_lengths: int64
     [batch]; eos_token_ids: int64 (None: the config's); out_tokens: int64
     [batch, max_new_tokens]; out_lengths: int64 [batch]; out_scores: float32
     [batch] or None. Collective. */
  void m_generate(const void *prompt_ids, size_t prompt_ids_bytes, const void *prompt_lengths,
                  size_t prompt_lengths_bytes, int64_t batch, const oslo_generate_options *options,
                  const void *eos_token_ids, size_t eos_token_ids_bytes, void *out_tokens,
                  size_t out_tokens_bytes, void *out_lengths, size_t out_lengths_bytes,
                  void *out_scores, size_t out_scores_bytes) {
    oslo_generate_options o;
    unsigned long long total = 0, b;
    const unsigned long long nb = (unsigned long long)(batch > 0 ? batch : 0);
    if (!options) {
      oslo_bind_fail(OSLO_ERR_INVALID_ARGUMENT, "generate: options is NULL");
      return;
    }
    o = *options;
    if (!oslo_bind_bytes("generate: prompt_lengths", prompt_lengths_bytes, nb * 8)) return;
    for (b = 0; b < nb; ++b) {
      const int64_t l = ((const int64_t *)prompt_lengths)[b];
      total += l > 0 ? (unsigned long long)l : 0;
    }
    if (!oslo_bind_bytes("generate: prompt_ids", prompt_ids_bytes, total * 8)) return;
    if (eos_token_ids_bytes % 8) {
      oslo_bind_fail(OSLO_ERR_INVALID_ARGUMENT,
                     "generate: eos_token_ids holds %llu bytes, not a whole number of int64",
                     (unsigned long long)eos_token_ids_bytes);
      return;
    }
    if (eos_token_ids) {
      o.eos_token_ids = (const int64_t *)eos_token_ids;
      o.num_eos_token_ids = eos_token_ids_bytes / 8;
    }
    if (!oslo_bind_bytes("generate: out_tokens", out_tokens_bytes,
                         nb * (unsigned long long)(o.max_new_tokens > 0 ? o.max_new_tokens : 0) *
                             8) ||
        !oslo_bind_bytes("generate: out_lengths", out_lengths_bytes, nb * 8) ||
        (out_scores && !oslo_bind_bytes("generate: out_scores", out_scores_bytes, nb * 4)))
      return;
    oslo_bind_check(oslo_model_generate($self, (const int64_t *)prompt_ids,
                                        (const int64_t *)prompt_lengths, batch, &o,
                                        (int64_t *)out_tokens, (int64_t *)out_lengths,
                                        (float *)out_scores));
  }
  /* oslo_model_save: a parallel checkpoint in dir. Collective. */
  void m_save(const char *dir) { oslo_bind_check(oslo_model_save($self, dir)); }
  /* oslo_model_train_step: ids, labels (None: the ids, -100 under padding),
     mask (None: all 1): int64 [batch, seq]; optimizer None: only accumulate
     the gradients. Returns the result (NULL on failure). Collective. */
  oslo_train_step_result *m_train_step(oslo_optimizer *optimizer, const void *ids,
                                       size_t ids_bytes, const void *labels, size_t labels_bytes,
                                       const void *mask, size_t mask_bytes, int64_t batch,
                                       int64_t seq) {
    const unsigned long long cells = (unsigned long long)(batch > 0 ? batch : 0) *
                                     (unsigned long long)(seq > 0 ? seq : 0);
    oslo_train_step_result *r;
    if (!oslo_bind_bytes("train_step: ids", ids_bytes, cells * 8)) return NULL;
    if (labels && !oslo_bind_bytes("train_step: labels", labels_bytes, cells * 8)) return NULL;
    if (mask && !oslo_bind_bytes("train_step: mask", mask_bytes, cells * 8)) return NULL;
    r = oslo_bind_train_step_result();
    if (!r) return NULL;
    if (!oslo_bind_check(oslo_model_train_step($self, optimizer, (const int64_t *)ids,
                                               (const int64_t *)labels, (const int64_t *)mask,
                                               batch, seq, r))) {
      free(r);
      return NULL;
    }
    return r;
  }
  /* oslo_model_backward: ids, mask (None: all 1), token_type_ids (None:
     all 0): int64 [batch, seq]; grad_hidden: float32 [batch, seq, hidden],
     d loss / d hidden states; optimizer None: only accumulate. Returns the
     result (NULL on failure). Collective. */
  oslo_train_step_result *m_backward(oslo_optimizer *optimizer, const void *ids, size_t ids_bytes,
                                     const void *mask, size_t mask_bytes,
                                     const void *token_type_ids, size_t token_type_ids_bytes,
                                     int64_t batch, int64_t seq, const void *grad_hidden,
                                     size_t grad_hidden_bytes) {
    const unsigned long long cells = (unsigned long long)(batch > 0 ? batch : 0) *
                                     (unsigned long long)(seq > 0 ? seq : 0);
    oslo_train_step_result *r;
    if (!oslo_bind_bytes("backward: ids", ids_bytes, cells * 8)) return NULL;
    if (mask && !oslo_bind_bytes("backward: mask", mask_bytes, cells * 8)) return NULL;
    if (token_type_ids &&
        !oslo_bind_bytes("backward: token_type_ids", token_type_ids_bytes, cells * 8))
      return NULL;
    r = oslo_bind_train_step_result();
    if (!r) return NULL;
    if (!oslo_bind_check(oslo_model_backward($self, optimizer, (const int64_t *)ids,
                                             (const int64_t *)mask,
                                             (const int64_t *)token_type_ids, batch, seq,
                                             (const float *)grad_hidden,
                                             grad_hidden_bytes / sizeof(float), r))) {
      free(r);
      return NULL;
    }
    return r;
  }
  /* oslo_model_set_activation_checkpointing. Not collective. */
  void m_set_activation_checkpointing(int enabled) {
    oslo_bind_check(oslo_model_set_activation_checkpointing($self, enabled));
  }
  /* oslo_model_pipeline_stats; out: float64 [3], this rank's compute and
     wall seconds of the model's last train step's pipeline schedule and
     the bubble over all stages (zeros when it ran none). Not collective. */
  void m_pipeline_stats(void *out, size_t out_bytes) {
    if (!oslo_bind_bytes("pipeline_stats: out", out_bytes, 3 * 8)) return;
    double *d = (double *)out;
    oslo_bind_check(oslo_model_pipeline_stats($self, &d[0], &d[1], &d[2]));
  }
}

/* ------------------------------------------------------------------------ */
/* Training: Optimizer, its options, the train options, the step's result   */
/* ------------------------------------------------------------------------ */

/* Options of the optimizer with PyTorch's and Hugging Face Trainer's
   defaults (oslo_optimizer_options_init). */
%extend oslo_optimizer_options {
  oslo_optimizer_options() {
    oslo_optimizer_options *o = (oslo_optimizer_options *)calloc(1, sizeof *o);
    if (!o) {
      oslo_bind_fail(OSLO_ERR_OUT_OF_MEMORY, "OptimizerOptions: %llu bytes",
                     (unsigned long long)sizeof *o);
      return NULL;
    }
    if (!oslo_bind_check(oslo_optimizer_options_init(o, OSLO_OPTIMIZER_OPTIONS_VERSION))) {
      free(o);
      return NULL;
    }
    return o;
  }
  ~oslo_optimizer_options() { free($self); }
}

/* How the training runs (accumulation, ZeRO, DDP buckets, pipeline
   micro-batches), with its defaults (oslo_train_options_init). */
%extend oslo_train_options {
  oslo_train_options() {
    oslo_train_options *o = (oslo_train_options *)calloc(1, sizeof *o);
    if (!o) {
      oslo_bind_fail(OSLO_ERR_OUT_OF_MEMORY, "TrainOptions: %llu bytes",
                     (unsigned long long)sizeof *o);
      return NULL;
    }
    if (!oslo_bind_check(oslo_train_options_init(o, OSLO_TRAIN_OPTIONS_VERSION))) {
      free(o);
      return NULL;
    }
    return o;
  }
  ~oslo_train_options() { free($self); }
}

%extend oslo_train_step_result {
  ~oslo_train_step_result() { free($self); }
}

/* An optimizer over a model's parameters. It must not outlive its model:
   the language layers keep the model open while the optimizer is (Python:
   _Handle dependency; Java: Model.retain; Go: a child node of the model).
   Training checkpoints (optimizer state plus the train state) are methods
   of this class (save_checkpoint / load_checkpoint). */
%newobject oslo_optimizer::m_step;
%extend oslo_optimizer {
  /* oslo_optimizer_create; options, train NULL: their defaults. Not
     collective. */
  oslo_optimizer(oslo_model *model, const oslo_optimizer_options *options,
                 const oslo_train_options *train) {
    oslo_optimizer *o = NULL;
    oslo_optimizer_options c;
    oslo_train_options t;
    /* The structs were made by OptimizerOptions() and TrainOptions(): their
       versions are ours. */
    if (options) {
      c = *options;
      c.version = OSLO_OPTIMIZER_OPTIONS_VERSION;
      options = &c;
    }
    if (train) {
      t = *train;
      t.version = OSLO_TRAIN_OPTIONS_VERSION;
      train = &t;
    }
    oslo_bind_check(oslo_optimizer_create(model, options, train, &o));
    return o;
  }
  ~oslo_optimizer() { oslo_optimizer_destroy($self); }
  /* oslo_optimizer_step: a step now from the gradients accumulated so far.
     Collective. */
  oslo_train_step_result *m_step() {
    oslo_train_step_result *r = oslo_bind_train_step_result();
    if (!r) return NULL;
    if (!oslo_bind_check(oslo_optimizer_step($self, r))) {
      free(r);
      return NULL;
    }
    return r;
  }
  /* oslo_optimizer_zero_grad. Not collective. */
  void m_zero_grad() { oslo_bind_check(oslo_optimizer_zero_grad($self)); }
  /* oslo_checkpoint_save with the train state (seed, epoch, data
     position). Collective over the world group. */
  void m_save_checkpoint(const char *dir, int64_t seed, int64_t epoch, int64_t data_position) {
    oslo_train_state s;
    s.seed = (uint64_t)seed;
    s.epoch = epoch;
    s.data_position = data_position;
    oslo_bind_check(oslo_checkpoint_save($self, dir, &s));
  }
  /* oslo_checkpoint_load; out: int64 [3], the saved seed, epoch and data
     position. Collective over the world group. */
  void m_load_checkpoint(const char *dir, void *out, size_t out_bytes) {
    oslo_train_state s;
    if (!oslo_bind_bytes("load_checkpoint: out", out_bytes, 3 * 8)) return;
    if (!oslo_bind_check(oslo_checkpoint_load($self, dir, &s))) return;
    ((int64_t *)out)[0] = (int64_t)s.seed;
    ((int64_t *)out)[1] = s.epoch;
    ((int64_t *)out)[2] = s.data_position;
  }
}

/* ------------------------------------------------------------------------ */
/* Tokenizer                                                                 */
/* ------------------------------------------------------------------------ */

%extend oslo_tokenizer {
  oslo_tokenizer(const char *path) {
    oslo_tokenizer *t = NULL;
    oslo_bind_check(oslo_tokenizer_load(path, &t));
    return t;
  }
  ~oslo_tokenizer() { oslo_tokenizer_destroy($self); }
  /* UTF-8 text -> int64 ids written to out (None: only counts); returns the
     full count (call again with a larger buffer when it exceeds it). */
  size_t m_encode(const void *text, size_t text_bytes, int add_special_tokens, void *out,
                  size_t out_bytes) {
    size_t n = 0;
    oslo_bind_check(oslo_tokenizer_encode($self, (const char *)text, text_bytes,
                                          add_special_tokens, (int64_t *)out,
                                          out_bytes / sizeof(int64_t), &n));
    return n;
  }
  /* oslo_tokenizer_encode_batch of the texts held back to back in `text`
     (UTF-8), text i being lengths[i] bytes (int64, one per text), with the
     options' fields as arguments (sides: 0 right, 1 left; max_length 0: no
     limit). Writes the ids to out and the mask to out_mask (int64 [n, L]
     each; None: only sizes; out_mask may be None) when out holds n * L
     values; returns L. */
  size_t m_encode_batch(const void *text, size_t text_bytes, const void *lengths,
                        size_t lengths_bytes, int add_special_tokens, int padding_side,
                        int64_t pad_id, int64_t max_length, int truncation, int truncation_side,
                        int pad_to_max_length, void *out, size_t out_bytes, void *out_mask,
                        size_t out_mask_bytes) {
    const int64_t *lens = (const int64_t *)lengths;
    size_t n = lengths_bytes / 8, len = 0, off = 0, i;
    const char **texts;
    size_t *sizes;
    oslo_tokenizer_encode_batch_options o;
    if (lengths_bytes % 8) {
      oslo_bind_fail(OSLO_ERR_INVALID_ARGUMENT,
                     "encode_batch: lengths hold %llu bytes, not a whole number of int64",
                     (unsigned long long)lengths_bytes);
      return 0;
    }
    if (max_length < 0) {
      oslo_bind_fail(OSLO_ERR_INVALID_ARGUMENT, "encode_batch: max_length %lld is negative",
                     (long long)max_length);
      return 0;
    }
    if (out && out_mask && out_mask_bytes < out_bytes) {
      oslo_bind_fail(OSLO_ERR_SHAPE, "encode_batch: the mask holds %llu bytes, the ids %llu",
                     (unsigned long long)out_mask_bytes, (unsigned long long)out_bytes);
      return 0;
    }
    if (!oslo_bind_check(oslo_tokenizer_encode_batch_options_init(
            &o, OSLO_TOKENIZER_ENCODE_BATCH_OPTIONS_VERSION)))
      return 0;
    o.add_special_tokens = add_special_tokens;
    o.padding_side = (oslo_side)padding_side;
    o.pad_id = pad_id;
    o.max_length = (size_t)max_length;
    o.truncation = truncation;
    o.truncation_side = (oslo_side)truncation_side;
    o.pad_to_max_length = pad_to_max_length;
    texts = (const char **)calloc(n ? n : 1, sizeof *texts);
    sizes = (size_t *)calloc(n ? n : 1, sizeof *sizes);
    if (!texts || !sizes) {
      free((void *)texts);
      free(sizes);
      oslo_bind_fail(OSLO_ERR_OUT_OF_MEMORY, "encode_batch: %llu texts", (unsigned long long)n);
      return 0;
    }
    for (i = 0; i < n; ++i) {
      if (lens[i] < 0 || (unsigned long long)lens[i] > text_bytes - off) {
        oslo_bind_fail(OSLO_ERR_INVALID_ARGUMENT,
                       "encode_batch: text %llu's length %lld runs past the %llu bytes of text",
                       (unsigned long long)i, (long long)lens[i], (unsigned long long)text_bytes);
        break;
      }
      texts[i] = text ? (const char *)text + off : NULL;
      sizes[i] = (size_t)lens[i];
      off += (size_t)lens[i];
    }
    if (i == n)
      oslo_bind_check(oslo_tokenizer_encode_batch($self, texts, sizes, n, &o, (int64_t *)out,
                                                  out ? (int64_t *)out_mask : NULL,
                                                  out_bytes / 8, &len));
    free((void *)texts);
    free(sizes);
    return len;
  }
  /* int64 ids -> UTF-8 bytes written to out (None: only sizes); returns the
     full length in bytes. */
  size_t m_decode(const void *ids, size_t ids_bytes, int skip_special_tokens, void *out,
                  size_t out_bytes) {
    size_t n = 0;
    if (ids_bytes % 8) {
      oslo_bind_fail(OSLO_ERR_INVALID_ARGUMENT,
                     "decode: ids hold %llu bytes, not a whole number of int64",
                     (unsigned long long)ids_bytes);
      return 0;
    }
    oslo_bind_check(oslo_tokenizer_decode($self, (const int64_t *)ids, ids_bytes / 8,
                                          skip_special_tokens, (char *)out, out_bytes, &n));
    return n;
  }
  size_t m_vocab_size() {
    size_t n = 0;
    oslo_bind_check(oslo_tokenizer_vocab_size($self, &n));
    return n;
  }
  int64_t m_token_to_id(const void *token, size_t token_bytes) {
    int64_t id = -1;
    oslo_bind_check(oslo_tokenizer_token_to_id($self, (const char *)token, token_bytes, &id));
    return id;
  }
  size_t m_id_to_token(int64_t id, void *out, size_t out_bytes) {
    size_t n = 0;
    oslo_bind_check(oslo_tokenizer_id_to_token($self, id, (char *)out, out_bytes, &n));
    return n;
  }
  int64_t m_special_id(oslo_special_token which) {
    int64_t id = -1;
    oslo_bind_check(oslo_tokenizer_special_id($self, which, &id));
    return id;
  }
}
