/*
 * oslo_python.i - the Python part of the SWIG interface (bindings/oslo.i).
 *
 * Included by oslo.i before oslo.h (SWIGPYTHON only): the %exception that
 * turns a failed status into an oslo.Error, and the typemaps (shape, memory
 * blocks, numpy arrays, DLPack capsules). The methods only Python has are
 * in oslo_python_extend.i, included after oslo.h.
 */

/* Errors: the %exception of Python */
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

/* Handles closed by their Python owner (oslo/__init__.py, _Handle.close).
   release_<handle>(h) takes the C object out of its SWIG proxy under the
   GIL (the proxy no longer owns it and holds NULL) and destroys it when the
   proxy owned it (a borrowed tensor is only cleared). A stale proxy, such
   as a local of a frame a traceback keeps, then neither destroys the object
   a second time when it is collected nor reaches freed memory: passing it
   to any call raises InvalidArgumentError ("this Optimizer is closed").
   None stays None (an optional handle), and a destructor's NULL is the
   no-op of oslo_*_destroy. */
%define OSLO_PY_HANDLE(TYPE, NAME)
%typemap(in) struct TYPE *, const struct TYPE * {
  void *argp_ = 0;
  int res_ = SWIG_ConvertPtr($input, &argp_, $descriptor, $disown | %convertptr_flags);
  if (!SWIG_IsOK(res_)) {
    %argument_fail(res_, "$type", $symname, $argnum);
  }
  if (!argp_ && $input != Py_None && !($disown)) {
    PyObject *msg_ = PyUnicode_FromString("this " NAME " is closed");
    if (msg_) {
      oslo_bind_raise((int)OSLO_ERR_INVALID_ARGUMENT, msg_);
      Py_DECREF(msg_);
    }
    SWIG_fail;
  }
  $1 = %reinterpret_cast(argp_, $ltype);
}
%typemap(in) struct TYPE *RELEASED {
  void *argp_ = 0;
  SwigPyObject *sobj_;
  int res_ = SWIG_ConvertPtr($input, &argp_, $descriptor, %convertptr_flags);
  if (!SWIG_IsOK(res_)) {
    %argument_fail(res_, "$type", $symname, $argnum);
  }
  sobj_ = SWIG_Python_GetSwigThis($input);
  $1 = (sobj_ && sobj_->own) ? %reinterpret_cast(argp_, $ltype) : NULL;
  if (sobj_) {
    sobj_->own = 0;
    sobj_->ptr = 0;
  }
}
%enddef
OSLO_PY_HANDLE(oslo_context, "Context")
OSLO_PY_HANDLE(oslo_tensor, "Tensor")
OSLO_PY_HANDLE(oslo_parallel_linear, "ParallelLinear")
OSLO_PY_HANDLE(oslo_parallel_embedding, "ParallelEmbedding")
OSLO_PY_HANDLE(oslo_param_set, "ParamSet")
OSLO_PY_HANDLE(oslo_model, "Model")
OSLO_PY_HANDLE(oslo_optimizer, "Optimizer")
OSLO_PY_HANDLE(oslo_tokenizer, "Tokenizer")
OSLO_PY_HANDLE(oslo_engine, "Engine")

/* Typemaps */
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
