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
 * oslo/_handle.py, class _Handle); the C ABI also keeps a model's context
 * and an optimizer's model alive, so its *_destroy run in any order. Python
 * closes a handle through release_<handle> (python/oslo_python.i), which
 * destroys the C object at once and empties the SWIG object, whatever
 * still references it (a frame a traceback keeps).
 *
 * Files (one common interface plus one per language, as GDAL does): this
 * file holds what every language shares (the support code, what is
 * exposed) and includes the %extend methods, one file per area, after
 * oslo.h and in this order:
 *   library.i    version, status names, merge/reshard/inspect, pad_batch;
 *   tensor.i     Context (its collectives) and Tensor (it includes
 *                python/oslo_python_extend.i: DLPack and the numpy-array
 *                calls, Python only; and tensor_wrap);
 *   layers.i     the tensor-parallel layers, the vocabulary-parallel
 *                cross-entropy and the parameter sets;
 *   model.i      GenerateOptions, ModelInfo and Model;
 *   train.i      Optimizer, its options, the train options, the step's
 *                result and the training checkpoints;
 *   tokenizer.i  the tokenizer (encode, encode_batch, decode, vocabulary).
 * Each language's own part lives next to its package and is included from
 * here, before oslo.h:
 *   python/oslo_python.i  Python's %exception and typemaps;
 *   java/oslo_java.i      Java's %exception, names, Javadoc and typemaps;
 *                         it includes the hand-written methods of the
 *                         generated classes, one file per area
 *                         (java/oslo_java_{tensor,layers,model,train}.i);
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
 * size_t OUTBYTES). SWIG finds the included files relative to this one; the
 * builds list them all as the dependencies of the wrappers
 * (cmake/OsloSwigInterface.cmake).
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
/* The methods, one file per area                                            */
/* ------------------------------------------------------------------------ */

/* In this order, after oslo.h (the order SWIG emits them in). */
%include "library.i"
%include "tensor.i"
%include "layers.i"
%include "model.i"
%include "train.i"
%include "tokenizer.i"
