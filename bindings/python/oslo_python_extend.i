/*
 * oslo_python_extend.i - the methods only Python has (bindings/oslo.i).
 *
 * Included by oslo.i after oslo.h (SWIGPYTHON only): the DLPack exports and
 * import, and forward/backward on numpy arrays in one C call.
 */

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


/* release_<handle>(h): destroys the C object of a handle its Python owner
   closes and clears the proxy (oslo_python.i, OSLO_PY_HANDLE). */
%define OSLO_PY_RELEASE(TYPE, NAME)
%rename(release_ ## NAME) bind_release_ ## NAME;
%inline %{
static void bind_release_ ## NAME(TYPE *RELEASED) { TYPE ## _destroy(RELEASED); }
%}
%enddef
OSLO_PY_RELEASE(oslo_context, context)
OSLO_PY_RELEASE(oslo_tensor, tensor)
OSLO_PY_RELEASE(oslo_parallel_linear, parallel_linear)
OSLO_PY_RELEASE(oslo_parallel_embedding, parallel_embedding)
OSLO_PY_RELEASE(oslo_param_set, param_set)
OSLO_PY_RELEASE(oslo_model, model)
OSLO_PY_RELEASE(oslo_optimizer, optimizer)
OSLO_PY_RELEASE(oslo_tokenizer, tokenizer)
OSLO_PY_RELEASE(oslo_engine, engine)
