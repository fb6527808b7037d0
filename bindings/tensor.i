/*
 * tensor.i - the context (its collectives) and the tensor of
 * include/oslo.h for every language.
 *
 * Included by bindings/oslo.i after oslo.h and library.i: the %extend
 * methods of oslo_context (create, ranks, collectives; its cross-entropy
 * is in layers.i) and oslo_tensor, Python's DLPack and numpy-array calls
 * (python/oslo_python_extend.i, included here, after the tensor's
 * methods) and tensor_wrap (Python and Java). Ownership and errors as
 * oslo.i describes.
 */

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
