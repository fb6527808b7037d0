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
 * oslo/__init__.py, class _Handle).
 *
 * Language sections: SWIGPYTHON, SWIGJAVA, SWIGGO below hold each
 * language's typemaps for the three kinds of argument that need one:
 * a shape (int ndim, const int64_t *shape), a read-only memory block
 * (const void *INBUF, size_t INBYTES) and a writable one (void *OUTBUF,
 * size_t OUTBYTES).
 */
#if defined(SWIGPYTHON)
%module(package="oslo") capi
#else
%module capi
#endif

%{
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
   keyword arguments); oslo_generate_options is exposed (see below). */
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
%ignore OSLO_GENERATE_OPTIONS_VERSION;
/* The EOS list is passed to Model.generate, not kept in the struct (a
   pointer into a language's memory must not outlive the call). */
%ignore oslo_generate_options::version;
%ignore oslo_generate_options::eos_token_ids;
%ignore oslo_generate_options::num_eos_token_ids;
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
%rename(version_string) bind_version_string;
%rename(status_string) bind_status_string;
%rename(model_merge) bind_model_merge;
%rename(model_reshard) bind_model_reshard;
%rename(checkpoint_inspect) bind_checkpoint_inspect;
%include "stdint.i"

/* Objects returned to the caller, freed by the class's destructor. */
%newobject bind_checkpoint_inspect;

/* ------------------------------------------------------------------------ */
/* Errors: the one %exception per language                                   */
/* ------------------------------------------------------------------------ */

#if defined(SWIGPYTHON)
%{
/* Raises oslo._errors.make(status, message): the oslo.Error subclass of the
   status. The message was copied into a Python string on the failing
   thread before this is called. */
static void oslo_bind_raise(int status, PyObject *message) {
  PyObject *mod = PyImport_ImportModule("oslo._errors");
  if (mod) {
    PyObject *exc = PyObject_CallMethod(mod, "make", "iO", status, message);
    Py_DECREF(mod);
    if (exc) {
      PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
      Py_DECREF(exc);
      return;
    }
  }
  /* oslo._errors itself failed: keep its error, which names the cause. */
}
%}
%{
typedef struct bind_array {
  void *data;
  oslo_dtype dtype;
  int ndim;
  int64_t shape[OSLO_MAX_DIMS];
  Py_buffer view;
  int held;
} bind_array;

/* Fills `a` from `obj`; on failure raises the oslo.Error subclass (the GIL
   is held) and returns 0. */
static int bind_array_get(PyObject *obj, bind_array *a, int writable) {
  const char *f;
  char c;
  int i;
  if (PyObject_GetBuffer(obj, &a->view,
                         PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0)) != 0) {
    PyObject *msg;
    PyErr_Clear();
    msg = PyUnicode_FromFormat("expected a C-contiguous%s array, not %s (numpy.ascontiguousarray "
                               "makes one)", writable ? ", writable" : "", Py_TYPE(obj)->tp_name);
    if (msg) {
      oslo_bind_raise((int)OSLO_ERR_INVALID_ARGUMENT, msg);
      Py_DECREF(msg);
    }
    return 0;
  }
  a->held = 1;
  a->data = a->view.buf;
  f = a->view.format ? a->view.format : "B";
  if (*f == '@' || *f == '=' || *f == '<') ++f; /* native order: little-endian x86/arm */
  c = f[1] ? 0 : f[0];
  if (c == 'f' && a->view.itemsize == 4) a->dtype = OSLO_DTYPE_F32;
  else if (c == 'e' && a->view.itemsize == 2) a->dtype = OSLO_DTYPE_F16;
  else if ((c == 'i' || c == 'l') && a->view.itemsize == 4) a->dtype = OSLO_DTYPE_I32;
  else if ((c == 'l' || c == 'q') && a->view.itemsize == 8) a->dtype = OSLO_DTYPE_I64;
  else {
    PyObject *msg = PyUnicode_FromFormat("no oslo dtype for buffer format '%s' of %zd-byte items",
                                         a->view.format ? a->view.format : "B",
                                         a->view.itemsize);
    if (msg) {
      oslo_bind_raise((int)OSLO_ERR_DTYPE, msg);
      Py_DECREF(msg);
    }
    return 0;
  }
  if (a->view.ndim > OSLO_MAX_DIMS) {
    PyObject *msg = PyUnicode_FromFormat("the array has %d dimensions, at most %d are allowed",
                                         a->view.ndim, OSLO_MAX_DIMS);
    if (msg) {
      oslo_bind_raise((int)OSLO_ERR_INVALID_ARGUMENT, msg);
      Py_DECREF(msg);
    }
    return 0;
  }
  a->ndim = a->view.ndim;
  for (i = 0; i < a->ndim; ++i) a->shape[i] = (int64_t)a->view.shape[i];
  return 1;
}

/* Wraps the arrays' memory as tensors of `ctx`, runs `call` on them and
   destroys the wraps; the status (and message) of the first failure is
   recorded. Runs without the GIL. */
typedef oslo_status (*bind_array_call)(void *self, oslo_tensor *const *t);
static void bind_with_arrays(oslo_context *ctx, void *self, bind_array_call call, int n,
                             bind_array *const *a) {
  oslo_tensor *t[3] = {NULL, NULL, NULL};
  int i, ok = 1;
  for (i = 0; i < n && ok; ++i)
    if (a[i]) ok = oslo_bind_check(oslo_tensor_wrap(ctx, a[i]->data, a[i]->dtype, a[i]->ndim,
                                                    a[i]->shape, &t[i]));
  if (ok && !oslo_bind_check(call(self, t)))
    ok = 0;
  if (!ok && !oslo_bind_message[0]) {
    /* Keep oslo's message: the destroys below must not be able to lose it. */
    oslo_status st = oslo_bind_status;
    oslo_bind_fail(st, "%s", oslo_last_error());
  }
  for (i = 0; i < n; ++i) oslo_tensor_destroy(t[i]);
}
static oslo_status bind_linear_forward(void *l, oslo_tensor *const *t) {
  return oslo_parallel_linear_forward((oslo_parallel_linear *)l, t[0], t[1]);
}
static oslo_status bind_linear_backward(void *l, oslo_tensor *const *t) {
  return oslo_parallel_linear_backward((oslo_parallel_linear *)l, t[0], t[1], t[2]);
}
%}
/* Every call runs without the GIL (collectives, forward, generate,
   checkpoint I/O block; the rest is short), so ranks may be threads of one
   Python process and another thread may call Context.abort. The typemaps
   have converted every argument before, and convert the result after. */
%exception {
  oslo_bind_status = OSLO_OK;
  Py_BEGIN_ALLOW_THREADS
  $action
  Py_END_ALLOW_THREADS
  if (oslo_bind_status != OSLO_OK) {
    const char *m_ = oslo_bind_error_message();
    PyObject *msg_ = PyUnicode_DecodeUTF8(m_, (Py_ssize_t)strlen(m_), "replace");
    if (msg_) {
      oslo_bind_raise((int)oslo_bind_status, msg_);
      Py_DECREF(msg_);
    }
    SWIG_fail;
  }
}
#elif defined(SWIGJAVA)
%{
/* Throws org.oslo.OsloException(status, message)
   (bindings/java/org/oslo/OsloException.java). */
static void oslo_bind_throw(JNIEnv *env, int status, const char *message) {
  jclass cls = (*env)->FindClass(env, "org/oslo/OsloException");
  jmethodID ctor = cls ? (*env)->GetMethodID(env, cls, "<init>", "(ILjava/lang/String;)V") : 0;
  jstring msg = ctor ? (*env)->NewStringUTF(env, message) : 0;
  jobject exc = msg ? (*env)->NewObject(env, cls, ctor, status, msg) : 0;
  if (exc) (*env)->Throw(env, (jthrowable)exc);
}
%}
%exception {
  oslo_bind_status = OSLO_OK;
  $action
  if (oslo_bind_status != OSLO_OK) {
    oslo_bind_throw(jenv, (int)oslo_bind_status, oslo_bind_error_message());
    return $null;
  }
}
#elif defined(SWIGGO)
/* Go: a failed call panics, from inside this C wrapper call (so on the
   failing OS thread, before anything else can overwrite oslo's thread-local
   message), with the string "\001oslo\001<status>\001<message>". The
   hand-written package (bindings/go/oslo, func call) recovers exactly such
   a panic into an *oslo.Error return and re-panics anything else; no panic
   ever reaches a user of the Go package. $cleanup frees the C copies of
   string arguments, which the panic would skip. */
%exception {
  oslo_bind_status = OSLO_OK;
  $action
  if (oslo_bind_status != OSLO_OK) {
    char buf_[640];
    snprintf(buf_, sizeof buf_, "\001oslo\001%d\001%s", (int)oslo_bind_status,
             oslo_bind_error_message());
    $cleanup
    _swig_gopanic(buf_);
  }
}
#endif

/* ------------------------------------------------------------------------ */
/* Typemaps per language                                                     */
/* ------------------------------------------------------------------------ */

#if defined(SWIGPYTHON)
/* A shape: any sequence of ints. */
%typemap(in) (int ndim, const int64_t *shape) (int64_t dims_[OSLO_MAX_DIMS]) {
  PyObject *seq_ = PySequence_Fast($input, "shape must be a sequence of ints");
  Py_ssize_t n_, i_;
  if (!seq_) SWIG_fail;
  n_ = PySequence_Fast_GET_SIZE(seq_);
  if (n_ > OSLO_MAX_DIMS) {
    Py_DECREF(seq_);
    PyErr_Format(PyExc_ValueError, "shape has %zd dimensions, at most %d are allowed", n_,
                 OSLO_MAX_DIMS);
    SWIG_fail;
  }
  for (i_ = 0; i_ < n_; ++i_) {
    long long v_ = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq_, i_));
    if (v_ == -1 && PyErr_Occurred()) {
      Py_DECREF(seq_);
      SWIG_fail;
    }
    dims_[i_] = (int64_t)v_;
  }
  Py_DECREF(seq_);
  $1 = (int)n_;
  $2 = dims_;
}
%typemap(typecheck) (int ndim, const int64_t *shape) { $1 = PySequence_Check($input); }

/* Memory: any object with the buffer protocol (numpy arrays, bytes,
   bytearray, memoryview), C-contiguous, used in place; None is NULL. */
%typemap(in) (const void *INBUF, size_t INBYTES) (Py_buffer view_, int got_ = 0) {
  if ($input == Py_None) {
    $1 = NULL;
    $2 = 0;
  } else {
    if (PyObject_GetBuffer($input, &view_, PyBUF_C_CONTIGUOUS) != 0) SWIG_fail;
    got_ = 1;
    $1 = view_.buf;
    $2 = (size_t)view_.len;
  }
}
%typemap(freearg) (const void *INBUF, size_t INBYTES) {
  if (got_$argnum) PyBuffer_Release(&view_$argnum);
}
%typemap(in) (void *OUTBUF, size_t OUTBYTES) (Py_buffer view_, int got_ = 0) {
  if ($input == Py_None) {
    $1 = NULL;
    $2 = 0;
  } else {
    if (PyObject_GetBuffer($input, &view_, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) != 0) SWIG_fail;
    got_ = 1;
    $1 = view_.buf;
    $2 = (size_t)view_.len;
  }
}
%typemap(freearg) (void *OUTBUF, size_t OUTBYTES) {
  if (got_$argnum) PyBuffer_Release(&view_$argnum);
}
/* A numpy array (any C-contiguous buffer with a format) to wrap in place for
   one call: bind_array (see bind_array_get); None is NULL. Before oslo.h is
   included: the classes' %extend methods are wrapped there. */
/* held_ is initialised where it is declared: when an earlier argument
   fails, freearg runs for this one too, before its conversion ran. */
%typemap(in) const bind_array *ARRAY_IN (bind_array a_, int held_ = 0) {
  $1 = NULL;
  if ($input != Py_None) {
    a_.held = 0;
    if (!bind_array_get($input, &a_, 0)) {
      held_ = a_.held;
      SWIG_fail;
    }
    held_ = a_.held;
    $1 = &a_;
  }
}
%typemap(in) bind_array *ARRAY_OUT (bind_array a_, int held_ = 0) {
  $1 = NULL;
  if ($input != Py_None) {
    a_.held = 0;
    if (!bind_array_get($input, &a_, 1)) {
      held_ = a_.held;
      SWIG_fail;
    }
    held_ = a_.held;
    $1 = &a_;
  }
}
%typemap(freearg) const bind_array *ARRAY_IN, bind_array *ARRAY_OUT {
  if (held_$argnum) PyBuffer_Release(&a_$argnum.view);
}
%apply const bind_array *ARRAY_IN { const bind_array *GRAD_IN };
/* DLPack (Python): exports become capsules "dltensor_versioned" (DLPack 1.x)
   or "dltensor" whose destructor calls the deleter unless a consumer took
   the tensor (and renamed the capsule "used_..."); imports take such a
   capsule, and rename it once oslo owns the tensor (on failure the capsule,
   and so its deleter, stays the caller's). */
%{
static void bind_capsule_free_versioned(PyObject *cap) {
  if (PyCapsule_IsValid(cap, "dltensor_versioned")) {
    struct DLManagedTensorVersioned *m =
        (struct DLManagedTensorVersioned *)PyCapsule_GetPointer(cap, "dltensor_versioned");
    if (m && m->deleter) m->deleter(m);
  }
}
static void bind_capsule_free_unversioned(PyObject *cap) {
  if (PyCapsule_IsValid(cap, "dltensor")) {
    struct DLManagedTensor *m = (struct DLManagedTensor *)PyCapsule_GetPointer(cap, "dltensor");
    if (m && m->deleter) m->deleter(m);
  }
}
%}
typedef struct DLManagedTensorVersioned *bind_dlpack_versioned;
typedef struct DLManagedTensor *bind_dlpack_unversioned;
%typemap(out) bind_dlpack_versioned {
  $result = PyCapsule_New($1, "dltensor_versioned", bind_capsule_free_versioned);
  if (!$result) {
    if ($1->deleter) $1->deleter($1);
    SWIG_fail;
  }
}
%typemap(out) bind_dlpack_unversioned {
  $result = PyCapsule_New($1, "dltensor", bind_capsule_free_unversioned);
  if (!$result) {
    if ($1->deleter) $1->deleter($1);
    SWIG_fail;
  }
}
%typemap(in) (void *dlpack_capsule, int dlpack_versioned) {
  if (PyCapsule_IsValid($input, "dltensor_versioned")) {
    $1 = PyCapsule_GetPointer($input, "dltensor_versioned");
    $2 = 1;
  } else if (PyCapsule_IsValid($input, "dltensor")) {
    $1 = PyCapsule_GetPointer($input, "dltensor");
    $2 = 0;
  } else {
    PyErr_SetString(PyExc_ValueError, "expected an unconsumed DLPack capsule "
                                      "(\"dltensor_versioned\" or \"dltensor\")");
    SWIG_fail;
  }
}
/* Runs only when the import succeeded: oslo owns the tensor now. */
%typemap(argout) (void *dlpack_capsule, int dlpack_versioned) {
  if (PyCapsule_SetName($input, $2 ? "used_dltensor_versioned" : "used_dltensor") != 0) SWIG_fail;
}
#elif defined(SWIGJAVA)
/* Java names (package org.oslo): classes and enums in UpperCamelCase
   (Context, Tensor, DType, ReduceOp, Group, Status, ...), enum constants
   without their C prefix (DType.F32, ReduceOp.SUM, Group.TENSOR,
   Status.CONFIG: the same names as Python's oslo.Status), methods and the
   accessors of struct fields in lowerCamelCase (ctx.allReduce,
   opts.setMaxNewTokens). The module class capi (version, merge, reshard,
   inspect, tensor_wrap) and capiJNI are package-private: Oslo and
   Tensor.wrap are their public face. */
%include "enums.swg"
%javaconst(1);
%rename(Status) oslo_status;
%rename(DType) oslo_dtype;
%rename(ReduceOp) oslo_reduce_op;
%rename(Group) oslo_group;
%rename(LinearKind) oslo_linear_kind;
%rename(ModelOutput) oslo_model_output;
%rename(SpecialToken) oslo_special_token;
%rename("%(regex:/^OSLO_(ERR_|DTYPE_|REDUCE_|GROUP_|LINEAR_|MODEL_OUTPUT_|SPECIAL_TOKEN_)?(.*)$/\\2/)s",
        %$isenumitem, notregexmatch$name="_ENUM_M(IN|AX)_$") "";
%rename("%(lowercamelcase)s", %$ismember, %$isvariable) "";
%rename(allReduce) m_all_reduce;
%rename(allGather) m_all_gather;
%rename(reduceScatter) m_reduce_scatter;
%rename(vocabParallelCrossEntropy) m_vocab_parallel_cross_entropy;
%rename(dataPtr) m_data_ptr;
%rename(copyFromHost) m_copy_from_host;
%rename(copyToHost) m_copy_to_host;
%rename(loadFull) m_load_full;
%rename(loadShard) m_load_shard;
%rename(zeroGrad) m_zero_grad;
%rename(vocabRange) m_vocab_range;
%rename(nativeAdd) m_add;
%rename(nativeAddLinear) m_add_linear;
%rename(nativeAddEmbedding) m_add_embedding;
%rename(clipGradNorm) m_clip_grad_norm;
%rename(saveCheckpoint) m_save_checkpoint;
%rename(loadCheckpoint) m_load_checkpoint;
%rename(modelType) m_model_type;
%rename(vocabSize) m_vocab_size;
%rename(tokenToId) m_token_to_id;
%rename(idToToken) m_id_to_token;
%rename(specialId) m_special_id;
/* ModelInfo is a result: getters only. */
%immutable oslo_model_info::vocab_size;
%immutable oslo_model_info::hidden_size;
%immutable oslo_model_info::num_layers;
%immutable oslo_model_info::num_heads;
%immutable oslo_model_info::num_kv_heads;
%immutable oslo_model_info::max_positions;
%immutable oslo_model_info::is_causal;
%immutable oslo_model_info::dtype;
%immutable oslo_model_info::eos_token_id;
%immutable oslo_model_info::pad_token_id;
/* Javadoc of the generated classes and methods (SWIG puts these strings
   where the modifiers go). */
%define OSLO_JDOC(NAME, TEXT)
%javamethodmodifiers NAME "/** " TEXT " */\n  public"
%enddef
%define OSLO_JCLASSDOC(TYPE, KIND, TEXT)
%typemap(javaclassmodifiers) TYPE "/** " TEXT " */\npublic " KIND
%enddef
OSLO_JCLASSDOC(struct oslo_context, "class", "A process group of the job (tensor, pipeline, data and world groups) and its collectives. Closing it while handles made in it are open destroys it when the last of them is closed.")
OSLO_JCLASSDOC(struct oslo_tensor, "class", "A tensor on the context's device: owned (new Tensor, Tensor.of), over a direct buffer's memory (Tensor.wrap), or a layer's borrowed parameter.")
OSLO_JCLASSDOC(struct oslo_model, "class", "A Hugging Face model (gpt2, bert, llama, mistral, qwen2) split over the tensor-parallel group; computing calls are collective.")
OSLO_JCLASSDOC(struct oslo_tokenizer, "class", "A Hugging Face tokenizer (tokenizer.json, vocab.txt or .model files of a model folder).")
OSLO_JCLASSDOC(struct oslo_parallel_linear, "class", "A column- or row-parallel linear layer (Megatron-LM), parameters zero until loaded.")
OSLO_JCLASSDOC(struct oslo_parallel_embedding, "class", "A vocabulary-parallel embedding table.")
OSLO_JCLASSDOC(struct oslo_param_set, "class", "Named parameters for gradient clipping and checkpoints; it borrows (and keeps alive) what is added.")
OSLO_JCLASSDOC(struct oslo_generate_options, "class", "Options of Model.generate with Hugging Face's defaults (greedy, 20 new tokens).")
OSLO_JCLASSDOC(struct oslo_model_info, "class", "Sizes of a loaded model, as in its config.json.")
OSLO_JCLASSDOC(oslo_status, "enum", "The status of a failed call (OsloException.status()).")
OSLO_JCLASSDOC(oslo_dtype, "enum", "Element types; the CPU backend computes in F32, F16 and BF16 are storage.")
OSLO_JCLASSDOC(oslo_reduce_op, "enum", "Reductions of collectives, combined in group-rank order.")
OSLO_JCLASSDOC(oslo_group, "enum", "Process groups of a context (Megatron-LM order: tensor fastest, then data, then pipeline).")
OSLO_JCLASSDOC(oslo_linear_kind, "enum", "How a ParallelLinear is split: COLUMN (output features) or ROW (input features).")
OSLO_JCLASSDOC(oslo_model_output, "enum", "What Model.forward returns: LOGITS [batch, seq, vocab] or HIDDEN [batch, seq, hidden].")
OSLO_JCLASSDOC(oslo_special_token, "enum", "The special tokens Tokenizer.specialId returns.")
OSLO_JDOC(oslo_context::oslo_context, "Creates a context (collective over the job's ranks): config is JSON text, a JSON file path, or \"\" for the defaults.")
/* synchronized, as delete(): close() never destroys the native context
   while an abort from another thread is inside oslo_context_abort. */
%javamethodmodifiers oslo_context::m_abort "/** Ends every blocked or later collective of this context with Status.COMM; callable from any thread (after close() it throws Status.INVALID_ARGUMENT). */\n  public synchronized"
OSLO_JDOC(oslo_context::m_rank, "This rank in {@code group}.")
OSLO_JDOC(oslo_context::m_size, "The number of ranks in {@code group}.")
OSLO_JDOC(oslo_context::m_backend, "The compute backend (\"cpu\", \"torch\", ...).")
OSLO_JDOC(oslo_context::m_transport, "The transport of {@code group}'s communicator (\"shm\", \"gloo\", ...).")
OSLO_JDOC(oslo_context::m_all_reduce, "Reduces {@code tensor} with {@code op} over {@code group}, in place. Collective.")
OSLO_JDOC(oslo_context::m_all_gather, "Concatenates every rank's {@code input} along dimension 0 into {@code output}, in rank order. Collective.")
OSLO_JDOC(oslo_context::m_reduce_scatter, "Reduces {@code input} over {@code group}; each rank gets its slice along dimension 0 in {@code output}. Collective.")
OSLO_JDOC(oslo_context::m_broadcast, "Copies rank {@code root}'s {@code tensor} to every rank of {@code group}. Collective.")
OSLO_JDOC(oslo_context::m_send, "Sends {@code tensor} to rank {@code peer} of {@code group}.")
OSLO_JDOC(oslo_context::m_recv, "Receives {@code tensor} from rank {@code peer} of {@code group}.")
OSLO_JDOC(oslo_context::m_barrier, "Waits until every rank of {@code group} has called it.")
OSLO_JDOC(oslo_context::m_vocab_parallel_cross_entropy, "Cross-entropy of vocabulary-parallel logits; losses and grad_logits may be null; returns the mean loss. Collective.")
OSLO_JDOC(oslo_tensor::oslo_tensor, "A new zero-filled tensor of {@code dtype} and {@code shape} in {@code ctx}.")
OSLO_JDOC(oslo_tensor::m_ndim, "The number of dimensions.")
OSLO_JDOC(oslo_tensor::m_dim, "The extent of dimension {@code i}.")
OSLO_JDOC(oslo_tensor::m_dtype, "The element type.")
OSLO_JDOC(oslo_tensor::m_numel, "The number of elements.")
OSLO_JDOC(oslo_tensor::m_data_ptr, "The address of the data (valid while the tensor lives).")
OSLO_JDOC(oslo_tensor::m_copy_from_host, "Copies a direct buffer of exactly the tensor's size in bytes into the tensor.")
OSLO_JDOC(oslo_tensor::m_copy_to_host, "Copies the tensor into a direct buffer of exactly its size in bytes.")
OSLO_JDOC(oslo_parallel_linear::oslo_parallel_linear, "A layer with zero parameters (ParallelLinear.column and row are the usual forms).")
OSLO_JDOC(oslo_parallel_linear::m_load_full, "Loads the full weight [out, in] and bias [out] (or null); each rank keeps its slice.")
OSLO_JDOC(oslo_parallel_linear::m_load_shard, "Loads this rank's slices of the weight and bias (or null).")
OSLO_JDOC(oslo_parallel_linear::m_forward, "output = input weight^T + bias on this rank's slice; collective when it communicates (row, or column with gather).")
OSLO_JDOC(oslo_parallel_linear::m_backward, "Adds the weight and bias gradients; writes the input gradient into {@code grad_input} unless null. Collective.")
OSLO_JDOC(oslo_parallel_linear::m_zero_grad, "Zeroes the gradients.")
OSLO_JDOC(oslo_parallel_embedding::oslo_parallel_embedding, "A zero embedding table [vocab_size, hidden_size] split by vocabulary rows.")
OSLO_JDOC(oslo_parallel_embedding::m_load_full, "Loads the full table; each rank keeps its rows.")
OSLO_JDOC(oslo_parallel_embedding::m_load_shard, "Loads this rank's rows.")
OSLO_JDOC(oslo_parallel_embedding::m_forward, "Looks up {@code ids} (I32 or I64) into {@code output} [..., hidden]. Collective.")
OSLO_JDOC(oslo_parallel_embedding::m_backward, "Adds the table's gradient for {@code ids} and {@code grad_output}.")
OSLO_JDOC(oslo_parallel_embedding::m_zero_grad, "Zeroes the gradient.")
OSLO_JDOC(oslo_param_set::oslo_param_set, "An empty set of parameters in {@code ctx}.")
OSLO_JDOC(oslo_param_set::m_count, "The number of parameters.")
OSLO_JDOC(oslo_param_set::m_clip_grad_norm, "The global gradient norm of type {@code norm_type} (2, or infinity) over the tensor group, as torch computes it unsharded; scales the gradients when {@code max_norm} > 0 and the norm exceeds it. Collective.")
OSLO_JDOC(oslo_param_set::m_save_checkpoint, "Saves the set in a directory (atomic, one file per rank plus a manifest). Collective.")
OSLO_JDOC(oslo_param_set::m_load_checkpoint, "Loads the set from a checkpoint saved at any tensor-parallel size. Collective.")
OSLO_JDOC(oslo_generate_options::oslo_generate_options, "Hugging Face's defaults: greedy, 20 new tokens.")
OSLO_JDOC(oslo_model::oslo_model, "Loads a model folder or parallel checkpoint; {@code dtype} -1 keeps the checkpoint's (else a DType value). Collective.")
OSLO_JDOC(oslo_model::m_info, "The model's sizes (close it, or let the collector free it).")
OSLO_JDOC(oslo_model::m_model_type, "The config's model_type (\"gpt2\", \"bert\", ...).")
OSLO_JDOC(oslo_model::m_forward, "Runs [batch, seq] I64 ids (mask and token_type_ids may be null) into {@code out} [batch, seq, vocab or hidden] F32; direct buffers, no copy. Collective.")
OSLO_JDOC(oslo_model::m_embed, "Sentence embeddings of [batch, seq] I64 ids and mask (null: all 1) into {@code out} [batch, hidden] F32; direct buffers, no copy. Collective.")
OSLO_JDOC(oslo_model::m_generate, "Generates from {@code batch} prompts (ids one after another, I64 lengths) into out_tokens [batch, max_new_tokens] and out_lengths [batch] (I64); eos_token_ids and out_scores may be null; direct buffers, no copy. Collective.")
OSLO_JDOC(oslo_model::m_save, "Saves a parallel checkpoint in {@code dir}. Collective.")
OSLO_JDOC(oslo_tokenizer::oslo_tokenizer, "Loads the tokenizer of a model folder.")
OSLO_JDOC(oslo_tokenizer::m_encode, "Encodes UTF-8 text (a direct buffer) into {@code out} (I64, null: only count); returns the full count.")
OSLO_JDOC(oslo_tokenizer::m_decode, "Decodes I64 ids into UTF-8 bytes in {@code out} (null: only size); returns the full length in bytes.")
OSLO_JDOC(oslo_tokenizer::m_vocab_size, "The size of the vocabulary.")
OSLO_JDOC(oslo_tokenizer::m_token_to_id, "The id of a token spelled in UTF-8 (a direct buffer).")
OSLO_JDOC(oslo_tokenizer::m_id_to_token, "Writes token {@code id}'s spelling into {@code out} (null: only size); returns its length in bytes.")
OSLO_JDOC(oslo_tokenizer::m_special_id, "The id of a special token, or -1.")
/* Raw forms the hand-written methods below build on. */
%javamethodmodifiers m_param "private";
%javamethodmodifiers m_vocab_range "private";
%javamethodmodifiers m_add "private";
%javamethodmodifiers m_add_linear "private";
%javamethodmodifiers m_add_embedding "private";
%pragma(java) moduleclassmodifiers="final class"
%pragma(java) jniclassclassmodifiers="final class"
/* The JNI library loads with the first class that needs it. */
%pragma(java) jniclasscode=%{
  static {
    Oslo.load();
  }
%}

/* -DSWIGWORDSIZE64 makes int64_t a C long, which SWIG maps to a Java int:
   use long long's typemaps (a Java long) for the fixed-width 64-bit types. */
%apply long long { int64_t };
%apply unsigned long long { uint64_t };
/* C ints that are flags: Java booleans. */
%typemap(jni) int normalize, int bias, int gather_output, int input_is_parallel,
    int add_special_tokens, int skip_special_tokens, int json, int overwrite,
    int do_sample "jboolean"
%typemap(jtype) int normalize, int bias, int gather_output, int input_is_parallel,
    int add_special_tokens, int skip_special_tokens, int json, int overwrite,
    int do_sample "boolean"
%typemap(jstype) int normalize, int bias, int gather_output, int input_is_parallel,
    int add_special_tokens, int skip_special_tokens, int json, int overwrite,
    int do_sample "boolean"
%typemap(javain) int normalize, int bias, int gather_output, int input_is_parallel,
    int add_special_tokens, int skip_special_tokens, int json, int overwrite,
    int do_sample "$javainput"
%typemap(in) int normalize, int bias, int gather_output, int input_is_parallel,
    int add_special_tokens, int skip_special_tokens, int json, int overwrite,
    int do_sample "$1 = $input ? 1 : 0;"
/* GenerateOptions.getDoSample(). */
%typemap(out) int do_sample "$result = (jboolean)($1 != 0);"
%typemap(javaout) int do_sample {
    return $jnicall;
  }
/* A closed handle (SWIG passes its cleared pointer as NULL) fails with
   INVALID_ARGUMENT before the call: struct accessors would dereference it. */
%typemap(check) SWIGTYPE *self %{
  if (!$1) {
    oslo_bind_throw(jenv, (int)OSLO_ERR_INVALID_ARGUMENT, "the handle is closed");
    return $null;
  }
%}
/* A shape: long... (always the last argument). */
%typemap(jni) (int ndim, const int64_t *shape) "jlongArray"
%typemap(jtype) (int ndim, const int64_t *shape) "long[]"
%typemap(jstype) (int ndim, const int64_t *shape) "long..."
%typemap(javain) (int ndim, const int64_t *shape) "$javainput"
%typemap(in) (int ndim, const int64_t *shape) (int64_t dims_[OSLO_MAX_DIMS]) {
  jsize n_ = $input ? (*jenv)->GetArrayLength(jenv, $input) : 0;
  if (n_ > OSLO_MAX_DIMS) {
    SWIG_JavaThrowException(jenv, SWIG_JavaIllegalArgumentException, "too many dimensions");
    return $null;
  }
  if (n_ > 0) (*jenv)->GetLongArrayRegion(jenv, $input, 0, n_, (jlong *)dims_);
  $1 = (int)n_;
  $2 = dims_;
}
/* Memory: any direct java.nio buffer (ByteBuffer, FloatBuffer, IntBuffer,
   LongBuffer, ...; null is NULL), used in place without a copy: its whole
   capacity from its base address (position and limit are ignored). A
   non-direct (heap) buffer is refused with IllegalArgumentException. */
%{
/* Bytes per element of a direct buffer: capacity is counted in elements. */
static size_t oslo_bind_buffer_esize(JNIEnv *env, jobject buf) {
  static const struct { const char *cls; size_t size; } kinds[] = {
      {"java/nio/ByteBuffer", 1},  {"java/nio/FloatBuffer", 4}, {"java/nio/IntBuffer", 4},
      {"java/nio/LongBuffer", 8},  {"java/nio/DoubleBuffer", 8}, {"java/nio/ShortBuffer", 2},
      {"java/nio/CharBuffer", 2}};
  size_t i;
  for (i = 0; i < sizeof kinds / sizeof kinds[0]; ++i) {
    jclass c = (*env)->FindClass(env, kinds[i].cls);
    int is = c && (*env)->IsInstanceOf(env, buf, c);
    if (c) (*env)->DeleteLocalRef(env, c);
    if (is) return kinds[i].size;
  }
  return 1;
}
%}
%typemap(jni) (const void *INBUF, size_t INBYTES), (void *OUTBUF, size_t OUTBYTES) "jobject"
%typemap(jtype) (const void *INBUF, size_t INBYTES), (void *OUTBUF, size_t OUTBYTES) "java.nio.Buffer"
%typemap(jstype) (const void *INBUF, size_t INBYTES), (void *OUTBUF, size_t OUTBYTES) "java.nio.Buffer"
%typemap(javain) (const void *INBUF, size_t INBYTES), (void *OUTBUF, size_t OUTBYTES) "$javainput"
%typemap(in) (const void *INBUF, size_t INBYTES), (void *OUTBUF, size_t OUTBYTES) {
  $1 = $input ? (*jenv)->GetDirectBufferAddress(jenv, $input) : NULL;
  $2 = $input ? (size_t)(*jenv)->GetDirectBufferCapacity(jenv, $input) *
                    oslo_bind_buffer_esize(jenv, $input)
              : 0;
  if ($input && !$1) {
    SWIG_JavaThrowException(jenv, SWIG_JavaIllegalArgumentException,
                            "the buffer must be direct (ByteBuffer.allocateDirect)");
    return $null;
  }
}
/* Handles are AutoCloseable; close() is SWIG's delete(), idempotent (it
   clears the pointer). A tensor, layer, parameter set or model keeps its
   context in a field, a wrapped tensor its buffer, a borrowed parameter
   tensor its layer, and a parameter set what was added to it.
   Lifetimes: an owned handle made in a context (Tensor, Model,
   ParallelLinear, ParallelEmbedding, ParamSet) counts itself in the context
   while it is open; closing the context while some are open closes the
   Context object at once (its methods then fail) and destroys the native
   context when the last of them is closed, so a context never dies before
   its children. These handles have no finalizer: the finalizer thread
   would destroy them while the context's own thread uses it, which oslo
   forbids (one thread per context at a time); close them, with
   try-with-resources. Tokenizer, GenerateOptions and ModelInfo belong to
   no context and keep SWIG's finalizer. */
%typemap(javainterfaces) struct oslo_context, struct oslo_tensor, struct oslo_model,
    struct oslo_tokenizer, struct oslo_parallel_linear, struct oslo_parallel_embedding,
    struct oslo_param_set, struct oslo_generate_options, struct oslo_model_info "AutoCloseable"
%typemap(javafinalize) struct oslo_context, struct oslo_tensor, struct oslo_model,
    struct oslo_parallel_linear, struct oslo_parallel_embedding, struct oslo_param_set ""
%typemap(javaconstruct) struct oslo_tensor, struct oslo_model, struct oslo_parallel_linear,
    struct oslo_parallel_embedding, struct oslo_param_set {
    this($imcall, true);
    this.context = ctx;
    ctx.retain();
  }
%typemap(javadestruct, methodname="delete", methodmodifiers="public synchronized",
         parameters="") struct oslo_context {
    if (swigCPtr != 0) {
      if (swigCMemOwn) {
        swigCMemOwn = false;
        if (children > 0) deferred = swigCPtr;
        else $jnicall;
      }
      swigCPtr = 0;
    }
  }
%typemap(javadestruct, methodname="delete", methodmodifiers="public synchronized",
         parameters="") struct oslo_tensor, struct oslo_model, struct oslo_parallel_linear,
    struct oslo_parallel_embedding, struct oslo_param_set {
    if (swigCPtr != 0) {
      if (swigCMemOwn) {
        swigCMemOwn = false;
        $jnicall;
        if (context != null) ((Context) context).release();
      }
      swigCPtr = 0;
    }
  }
%typemap(javacode) struct oslo_model_info %{
  /** Frees the handle; safe to call more than once. */
  @Override
  public void close() {
    delete();
  }

  /** Whether the model is causal (a language model: generate works). */
  public boolean isCausal() {
    return getIsCausal() != 0;
  }
%}
%typemap(javacode) struct oslo_context %{
  /** Open handles made in this context. */
  private int children;
  /** The native context, once closed while children were open. */
  private long deferred;

  synchronized void retain() {
    ++children;
  }

  synchronized void release() {
    if (--children == 0 && deferred != 0) {
      long p = deferred;
      deferred = 0;
      capiJNI.delete_Context(p);
    }
  }

  /**
   * A context with every default: a single rank, or the ranks of the
   * launcher whose environment this process runs in (oslo-run, torchrun).
   */
  public Context() {
    this("");
  }

  /**
   * Closes the context; safe to call more than once. The native context is
   * destroyed now, or when the last open handle made in it is closed.
   */
  @Override
  public void close() {
    delete();
  }

  /** This rank in the world group. */
  public int rank() {
    return rank(Group.WORLD);
  }

  /** The number of ranks in the world group. */
  public int size() {
    return size(Group.WORLD);
  }

  /** Sums {@code tensor} over the world group, in place. */
  public void allReduce(Tensor tensor) {
    allReduce(Group.WORLD, ReduceOp.SUM, tensor);
  }

  /** Reduces {@code tensor} with {@code op} over the world group, in place. */
  public void allReduce(ReduceOp op, Tensor tensor) {
    allReduce(Group.WORLD, op, tensor);
  }

  /** Reduces {@code values} with {@code op} over {@code group}, in place (copied twice). */
  public void allReduce(Group group, ReduceOp op, float[] values) {
    try (Tensor t = Tensor.of(this, values, values.length)) {
      allReduce(group, op, t);
      t.copyToHost(values);
    }
  }

  /** Sums {@code values} over the world group, in place (copied twice). */
  public void allReduce(float[] values) {
    allReduce(Group.WORLD, ReduceOp.SUM, values);
  }

  /** Concatenates every world rank's {@code input} along dimension 0 into {@code output}. */
  public void allGather(Tensor input, Tensor output) {
    allGather(Group.WORLD, input, output);
  }

  /** Every rank's {@code values} of {@code group}, one after another in rank order. */
  public float[] allGather(Group group, float[] values) {
    float[] out = new float[values.length * size(group)];
    try (Tensor in = Tensor.of(this, values, values.length);
        Tensor o = new Tensor(this, DType.F32, out.length)) {
      allGather(group, in, o);
      o.copyToHost(out);
    }
    return out;
  }

  /** Every world rank's {@code values}, one after another in rank order. */
  public float[] allGather(float[] values) {
    return allGather(Group.WORLD, values);
  }

  /** Copies world rank {@code root}'s {@code tensor} to every rank. */
  public void broadcast(int root, Tensor tensor) {
    broadcast(Group.WORLD, root, tensor);
  }

  /** Waits until every rank of the world group has called it. */
  public void barrier() {
    barrier(Group.WORLD);
  }

  /** A new zero-filled tensor in this context. */
  public Tensor tensor(DType dtype, long... shape) {
    return new Tensor(this, dtype, shape);
  }
%}
%typemap(javacode) struct oslo_tensor %{
  private Object context;
  /** Memory this tensor uses in place (a wrapped direct buffer). */
  private Object memory;
  /** The layer a borrowed parameter tensor belongs to. */
  private Object owner;

  Tensor keep(Object ctx, Object mem, Object own) {
    context = ctx;
    memory = mem;
    owner = own;
    if (swigCMemOwn && ctx != null) ((Context) ctx).retain();
    return this;
  }

  /** The context this tensor was made in. */
  public Context context() {
    return (Context) context;
  }

  /** Frees the tensor (a layer's parameter is only let go); safe to call more than once. */
  @Override
  public void close() {
    delete();
  }

  /**
   * A tensor over the memory of a direct buffer, used in place without a copy
   * (its whole capacity, native byte order). The tensor keeps the buffer alive.
   *
   * @throws IllegalArgumentException if the buffer is not direct
   * @throws OsloException if its size is not the shape's ({@link Status#SHAPE})
   */
  public static Tensor wrap(Context ctx, java.nio.Buffer buffer, DType dtype, long... shape) {
    return capi.tensor_wrap(ctx, buffer, dtype, shape);
  }

  /** A new f32 tensor holding a copy of {@code data}, of the given shape. */
  public static Tensor of(Context ctx, float[] data, long... shape) {
    Tensor t = new Tensor(ctx, DType.F32, shape);
    try {
      t.copyFromHost(data);
    } catch (RuntimeException e) {
      t.close();
      throw e;
    }
    return t;
  }

  /** The extents of the dimensions. */
  public long[] shape() {
    long[] s = new long[ndim()];
    for (int i = 0; i < s.length; ++i) s[i] = dim(i);
    return s;
  }

  private static java.nio.FloatBuffer directFloats(int n) {
    return java.nio.ByteBuffer.allocateDirect(n * 4).order(java.nio.ByteOrder.nativeOrder())
        .asFloatBuffer();
  }

  /** Copies {@code src} (numel elements) into this f32 tensor. */
  public void copyFromHost(float[] src) {
    java.nio.FloatBuffer b = directFloats(src.length);
    b.put(src);
    copyFromHost(b);
  }

  /** Copies this f32 tensor into {@code dst} (numel elements). */
  public void copyToHost(float[] dst) {
    java.nio.FloatBuffer b = directFloats(dst.length);
    copyToHost(b);
    b.get(dst);
  }

  /** This f32 tensor's elements as a new array. */
  public float[] toFloatArray() {
    float[] out = new float[Math.toIntExact(numel())];
    copyToHost(out);
    return out;
  }
%}
%typemap(javacode) struct oslo_parallel_linear %{
  private Object context;

  /** The context this layer was made in. */
  public Context context() {
    return (Context) context;
  }

  /** Frees the layer and its parameters; safe to call more than once. */
  @Override
  public void close() {
    delete();
  }

  /** A column-parallel f32 layer with bias: each rank holds out/tp output features. */
  public static ParallelLinear column(Context ctx, long inFeatures, long outFeatures) {
    return column(ctx, inFeatures, outFeatures, true, false);
  }

  /** A column-parallel f32 layer; {@code gatherOutput}: all-gather the output. */
  public static ParallelLinear column(Context ctx, long inFeatures, long outFeatures,
      boolean bias, boolean gatherOutput) {
    return new ParallelLinear(ctx, LinearKind.COLUMN, inFeatures, outFeatures, bias,
        gatherOutput, true, DType.F32);
  }

  /** A row-parallel f32 layer with bias taking the column layer's split input. */
  public static ParallelLinear row(Context ctx, long inFeatures, long outFeatures) {
    return row(ctx, inFeatures, outFeatures, true, true);
  }

  /** A row-parallel f32 layer; {@code inputIsParallel}: the input is already split. */
  public static ParallelLinear row(Context ctx, long inFeatures, long outFeatures,
      boolean bias, boolean inputIsParallel) {
    return new ParallelLinear(ctx, LinearKind.ROW, inFeatures, outFeatures, bias, false,
        inputIsParallel, DType.F32);
  }

  private Tensor borrowed(int which) {
    Tensor t = param(which);
    return t == null ? null : t.keep(context, null, this);
  }

  /** This rank's slice of the weight (borrowed: valid while the layer lives). */
  public Tensor weight() {
    return borrowed(0);
  }

  /** This rank's slice of the bias, or null (borrowed). */
  public Tensor bias() {
    return borrowed(1);
  }

  /** The weight's gradient (borrowed). */
  public Tensor gradWeight() {
    return borrowed(2);
  }

  /** The bias's gradient, or null (borrowed). */
  public Tensor gradBias() {
    return borrowed(3);
  }

  /** The backward pass without the input gradient (the first layer's). */
  public void backward(Tensor input, Tensor gradOutput) {
    backward(input, gradOutput, null);
  }
%}
%typemap(javacode) struct oslo_parallel_embedding %{
  private Object context;

  /** The context this layer was made in. */
  public Context context() {
    return (Context) context;
  }

  /** Frees the layer and its table; safe to call more than once. */
  @Override
  public void close() {
    delete();
  }

  /** An f32 vocabulary-parallel embedding. */
  public ParallelEmbedding(Context ctx, long vocabSize, long hiddenSize) {
    this(ctx, vocabSize, hiddenSize, DType.F32);
  }

  /** The first vocabulary row this rank holds. */
  public long vocabStart() {
    return vocabRange(0);
  }

  /** One past the last real vocabulary row this rank holds. */
  public long vocabEnd() {
    return vocabRange(1);
  }

  /** The rows this rank holds, padding included. */
  public long localRows() {
    return vocabRange(2);
  }

  /** This rank's rows of the table (borrowed: valid while the layer lives). */
  public Tensor weight() {
    Tensor t = param(0);
    return t == null ? null : t.keep(context, null, this);
  }

  /** The table's gradient (borrowed). */
  public Tensor gradWeight() {
    Tensor t = param(1);
    return t == null ? null : t.keep(context, null, this);
  }
%}
%typemap(javacode) struct oslo_param_set %{
  private Object context;
  /** What the set borrows, kept alive while it lives. */
  private final java.util.List<Object> held = new java.util.ArrayList<>();

  /** The context this set was made in. */
  public Context context() {
    return (Context) context;
  }

  /** Frees the set (not its tensors); safe to call more than once. */
  @Override
  public void close() {
    delete();
    held.clear();
  }

  /**
   * Adds {@code tensor} (and its gradient, or null) under {@code name};
   * {@code splitDim} is the dimension the tensor-parallel ranks split, or -1
   * when each holds all of it.
   */
  public void add(String name, Tensor tensor, Tensor grad, int splitDim) {
    nativeAdd(name, tensor, grad, splitDim);
    held.add(tensor);
    if (grad != null) held.add(grad);
  }

  /** Adds a linear layer's weight and bias as PREFIX.weight and PREFIX.bias. */
  public void addLinear(String prefix, ParallelLinear layer) {
    nativeAddLinear(prefix, layer);
    held.add(layer);
  }

  /** Adds an embedding's table as PREFIX.weight. */
  public void addEmbedding(String prefix, ParallelEmbedding embedding) {
    nativeAddEmbedding(prefix, embedding);
    held.add(embedding);
  }

  /** Clips the gradients to a global L2 norm of {@code maxNorm}; returns the norm before. */
  public double clipGradNorm(double maxNorm) {
    return clipGradNorm(maxNorm, 2.0);
  }

  /** The global L2 norm of the gradients over the tensor-parallel group. */
  public double gradNorm() {
    return clipGradNorm(0.0, 2.0);
  }
%}
%typemap(javacode) struct oslo_generate_options %{
  private long[] eosTokenIds;

  /** Frees the options; safe to call more than once. */
  @Override
  public void close() {
    delete();
  }

  /** Options for greedy generation of at most {@code maxNewTokens} tokens. */
  public GenerateOptions(long maxNewTokens) {
    this();
    setMaxNewTokens(maxNewTokens);
  }

  /** The ids that end a row (null: the model config's). */
  public void setEosTokenIds(long... ids) {
    eosTokenIds = ids == null ? null : ids.clone();
  }

  /** The ids that end a row, or null for the model config's. */
  public long[] getEosTokenIds() {
    return eosTokenIds == null ? null : eosTokenIds.clone();
  }
%}
%typemap(javacode) struct oslo_model %{
  private Object context;

  /** The context this model was loaded in. */
  public Context context() {
    return (Context) context;
  }

  /** Frees the model; safe to call more than once. */
  @Override
  public void close() {
    delete();
  }

  /** Loads a model keeping the checkpoint's dtype. Collective. */
  public Model(Context ctx, String path) {
    this(ctx, path, -1);
  }

  /** Loads a model converting its weight matrices to {@code dtype}. Collective. */
  public Model(Context ctx, String path, DType dtype) {
    this(ctx, path, dtype.swigValue());
  }

  static java.nio.LongBuffer directLongs(int n) {
    return java.nio.ByteBuffer.allocateDirect(n * 8).order(java.nio.ByteOrder.nativeOrder())
        .asLongBuffer();
  }

  static java.nio.FloatBuffer directFloats(long n) {
    return java.nio.ByteBuffer.allocateDirect(Math.toIntExact(n * 4))
        .order(java.nio.ByteOrder.nativeOrder()).asFloatBuffer();
  }

  /**
   * Runs one sequence of token ids: logits [seq, vocab] or hidden states
   * [seq, hidden], row-major. Collective.
   */
  public float[] forward(long[] ids, ModelOutput output) {
    java.nio.LongBuffer in = directLongs(ids.length);
    in.put(ids);
    ModelInfo i = info();
    long width = output == ModelOutput.LOGITS ? i.getVocabSize() : i.getHiddenSize();
    i.close();
    java.nio.FloatBuffer out = directFloats(ids.length * width);
    forward(in, null, null, 1, ids.length, output, out);
    float[] result = new float[out.capacity()];
    out.get(result);
    return result;
  }

  /** Normalised sentence embeddings of token-id rows of any lengths. Collective. */
  public float[][] embed(long[][] ids) {
    return embed(ids, true);
  }

  /**
   * Sentence embeddings (mean over the tokens, L2-normalised if
   * {@code normalize}) of token-id rows of any lengths (right padded). Collective.
   */
  public float[][] embed(long[][] ids, boolean normalize) {
    int longest = 1;
    for (long[] row : ids) longest = Math.max(longest, row.length);
    java.nio.LongBuffer flat = directLongs(ids.length * longest);
    java.nio.LongBuffer mask = directLongs(ids.length * longest);
    for (int r = 0; r < ids.length; ++r)
      for (int t = 0; t < ids[r].length; ++t) {
        flat.put(r * longest + t, ids[r][t]);
        mask.put(r * longest + t, 1);
      }
    ModelInfo i = info();
    int hidden = Math.toIntExact(i.getHiddenSize());
    i.close();
    java.nio.FloatBuffer out = directFloats((long) ids.length * hidden);
    embed(flat, mask, ids.length, longest, normalize, out);
    float[][] result = new float[ids.length][hidden];
    for (float[] row : result) out.get(row);
    return result;
  }

  /** The new tokens of each prompt (EOS included when one was emitted). Collective. */
  public long[][] generate(long[][] prompts, GenerateOptions options) {
    int total = 0;
    for (long[] p : prompts) total += p.length;
    java.nio.LongBuffer ids = directLongs(total);
    java.nio.LongBuffer lengths = directLongs(prompts.length);
    for (int b = 0; b < prompts.length; ++b) {
      ids.put(prompts[b]);
      lengths.put(b, prompts[b].length);
    }
    long[] eos = options.getEosTokenIds();
    java.nio.LongBuffer eosBuf = null;
    if (eos != null) {
      eosBuf = directLongs(eos.length);
      eosBuf.put(eos);
    }
    int max = Math.toIntExact(options.getMaxNewTokens());
    java.nio.LongBuffer out = directLongs(prompts.length * max);
    java.nio.LongBuffer outLengths = directLongs(prompts.length);
    generate(ids, lengths, prompts.length, options, eosBuf, out, outLengths, null);
    long[][] result = new long[prompts.length][];
    for (int b = 0; b < prompts.length; ++b) {
      result[b] = new long[Math.toIntExact(outLengths.get(b))];
      out.position(b * max);
      out.get(result[b]);
    }
    return result;
  }

  /** The new tokens of one prompt. Collective. */
  public long[] generate(long[] prompt, GenerateOptions options) {
    return generate(new long[][] {prompt}, options)[0];
  }

  /** At most {@code maxNewTokens} greedy new tokens of one prompt. Collective. */
  public long[] generate(long[] prompt, int maxNewTokens) {
    try (GenerateOptions o = new GenerateOptions(maxNewTokens)) {
      return generate(prompt, o);
    }
  }
%}
%typemap(javacode) struct oslo_tokenizer %{
  /** Frees the tokenizer; safe to call more than once. */
  @Override
  public void close() {
    delete();
  }

  private static java.nio.ByteBuffer utf8(String s) {
    byte[] b = s.getBytes(java.nio.charset.StandardCharsets.UTF_8);
    java.nio.ByteBuffer buf = java.nio.ByteBuffer.allocateDirect(Math.max(1, b.length));
    buf.put(b);
    return b.length == 0 ? null : buf;
  }

  private static String string(java.nio.ByteBuffer buf, long n) {
    byte[] b = new byte[Math.toIntExact(n)];
    buf.position(0);
    buf.get(b);
    return new String(b, java.nio.charset.StandardCharsets.UTF_8);
  }

  /** The token ids of {@code text} with the tokenizer's special tokens ([CLS] ... [SEP]). */
  public long[] encode(String text) {
    return encode(text, true);
  }

  /** The token ids of {@code text}; {@code addSpecialTokens}: BOS, [CLS] ... [SEP]. */
  public long[] encode(String text, boolean addSpecialTokens) {
    java.nio.ByteBuffer t = utf8(text);
    long n = encode(t, addSpecialTokens, null);
    long[] ids = new long[Math.toIntExact(n)];
    if (n > 0) {
      java.nio.LongBuffer out = Model.directLongs(ids.length);
      encode(t, addSpecialTokens, out);
      out.get(ids);
    }
    return ids;
  }

  /** The text of {@code ids}, special tokens included. */
  public String decode(long... ids) {
    return decode(ids, false);
  }

  /** The text of {@code ids}; {@code skipSpecialTokens}: leave special tokens out. */
  public String decode(long[] ids, boolean skipSpecialTokens) {
    java.nio.LongBuffer in = null;
    if (ids.length > 0) {
      in = Model.directLongs(ids.length);
      in.put(ids);
    }
    long n = decode(in, skipSpecialTokens, null);
    java.nio.ByteBuffer out = java.nio.ByteBuffer.allocateDirect(Math.toIntExact(n + 1));
    decode(in, skipSpecialTokens, out);
    return string(out, n);
  }

  /** The id of the token spelled {@code token}. */
  public long tokenToId(String token) {
    return tokenToId(utf8(token));
  }

  /** The vocabulary's spelling of token {@code id}. */
  public String idToToken(long id) {
    long n = idToToken(id, null);
    java.nio.ByteBuffer out = java.nio.ByteBuffer.allocateDirect(Math.toIntExact(n + 1));
    idToToken(id, out);
    return string(out, n);
  }
%}
#elif defined(SWIGGO)
/* A shape: []int64. Memory: []byte (nil is NULL), used during the call. */
%typemap(gotype) (int ndim, const int64_t *shape) "[]int64"
%typemap(in) (int ndim, const int64_t *shape) {
  $1 = (int)$input.len;
  $2 = ($2_ltype)$input.array;
}
%typemap(gotype) (const void *INBUF, size_t INBYTES), (void *OUTBUF, size_t OUTBYTES) "[]byte"
%typemap(in) (const void *INBUF, size_t INBYTES), (void *OUTBUF, size_t OUTBYTES) {
  $1 = $input.len ? (void *)$input.array : NULL;
  $2 = (size_t)$input.len;
}
#endif

%apply (const void *INBUF, size_t INBYTES) {
  (const void *src, size_t src_bytes),
  (const void *ids, size_t ids_bytes),
  (const void *mask, size_t mask_bytes),
  (const void *token_type_ids, size_t token_type_ids_bytes),
  (const void *prompt_ids, size_t prompt_ids_bytes),
  (const void *prompt_lengths, size_t prompt_lengths_bytes),
  (const void *eos_token_ids, size_t eos_token_ids_bytes),
  (const void *text, size_t text_bytes),
  (const void *token, size_t token_bytes)
};
%apply (void *OUTBUF, size_t OUTBYTES) {
  (void *dst, size_t dst_bytes),
  (void *out, size_t out_bytes),
  (void *out_tokens, size_t out_tokens_bytes),
  (void *out_lengths, size_t out_lengths_bytes),
  (void *out_scores, size_t out_scores_bytes)
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
struct oslo_context {};
struct oslo_tensor {};
struct oslo_model {};
struct oslo_tokenizer {};
struct oslo_parallel_linear {};
struct oslo_parallel_embedding {};
struct oslo_param_set {};

%include "oslo.h"

/* ------------------------------------------------------------------------ */
/* Library                                                                   */
/* ------------------------------------------------------------------------ */

%inline %{
/* Run-time version of the library ("0.2.0"). */
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
%extend oslo_tensor {
  bind_dlpack_versioned m_to_dlpack_versioned() {
    struct DLManagedTensorVersioned *m = NULL;
    oslo_bind_check(oslo_tensor_to_dlpack_versioned($self, &m));
    return m;
  }
  bind_dlpack_unversioned m_to_dlpack() {
    struct DLManagedTensor *m = NULL;
    oslo_bind_check(oslo_tensor_to_dlpack($self, &m));
    return m;
  }
  /* (device_type, device_id) of DLPack, as device_type * 2^32 + device_id. */
  int64_t m_dlpack_device() {
    struct DLManagedTensorVersioned *m = NULL;
    int64_t d;
    if (!oslo_bind_check(oslo_tensor_to_dlpack_versioned($self, &m))) return 0;
    d = (int64_t)m->dl_tensor.device.device_type * 4294967296LL +
        (int64_t)m->dl_tensor.device.device_id;
    if (m->deleter) m->deleter(m);
    return d;
  }
}
/* numpy arrays (any C-contiguous buffer with a format) passed straight to
   a call: the typemap takes the buffer (format, shape) with the GIL, the
   method wraps it as a tensor for the call only (oslo_tensor_wrap, no copy)
   and destroys the wrap after it, without the GIL. One C call instead of a
   wrap, the call and a destroy from Python (bench/python: a 1x64x64 forward
   on numpy arrays 4.6 -> 2.0 us, as on oslo tensors). */
%extend oslo_parallel_linear {
  /* forward and backward on numpy arrays (grad_input may be None). */
  void m_forward_arrays(oslo_context *ctx, const bind_array *ARRAY_IN, bind_array *ARRAY_OUT) {
    bind_array *a[2] = {(bind_array *)ARRAY_IN, ARRAY_OUT};
    bind_with_arrays(ctx, $self, bind_linear_forward, 2, a);
  }
  void m_backward_arrays(oslo_context *ctx, const bind_array *ARRAY_IN,
                         const bind_array *GRAD_IN, bind_array *ARRAY_OUT) {
    bind_array *a[3] = {(bind_array *)ARRAY_IN, (bind_array *)GRAD_IN, ARRAY_OUT};
    bind_with_arrays(ctx, $self, bind_linear_backward, 3, a);
  }
}

%newobject bind_tensor_from_dlpack;
%rename(tensor_from_dlpack) bind_tensor_from_dlpack;
%inline %{
static oslo_tensor *bind_tensor_from_dlpack(oslo_context *ctx, void *dlpack_capsule,
                                            int dlpack_versioned) {
  oslo_tensor *t = NULL;
  if (dlpack_versioned)
    oslo_bind_check(oslo_tensor_from_dlpack_versioned(
        ctx, (struct DLManagedTensorVersioned *)dlpack_capsule, &t));
  else
    oslo_bind_check(oslo_tensor_from_dlpack(ctx, (struct DLManagedTensor *)dlpack_capsule, &t));
  return t;
}
%}

#endif
#if defined(SWIGPYTHON) || defined(SWIGJAVA)
#if defined(SWIGJAVA)
/* Java: the tensor keeps its context and the direct buffer alive. */
%typemap(javaout) oslo_tensor *bind_tensor_wrap {
    long cPtr = $jnicall;
    return (cPtr == 0) ? null : new Tensor(cPtr, $owner).keep(ctx, out, null);
  }
#endif
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
%extend oslo_model {
  /* oslo_model_load; dtype -1 keeps the checkpoint's. Collective. */
  oslo_model(oslo_context *ctx, const char *path, int dtype) {
    oslo_model *m = NULL;
    oslo_model_options o;
    if (!oslo_bind_check(oslo_model_options_init(&o, OSLO_MODEL_OPTIONS_VERSION))) return NULL;
    o.dtype = dtype;
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
