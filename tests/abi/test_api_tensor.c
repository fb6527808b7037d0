/* test_api, tensors: create and query, bad arguments, wrapping host memory,
 * DLPack (both versions, round trips); collectives on one rank. */
#include "api_common.h"

/* ---- tensors ---- */

void test_tensor_create_and_query(void **state) {
  oslo_context *ctx = (oslo_context *)*state;
  int64_t shape[3] = {2, 3, 4};
  oslo_dtype dts[] = {OSLO_DTYPE_F32, OSLO_DTYPE_F16, OSLO_DTYPE_BF16, OSLO_DTYPE_I32,
                      OSLO_DTYPE_I64};
  size_t sizes[] = {4, 2, 2, 4, 8};
  for (int d = 0; d < 5; ++d) {
    oslo_tensor *t = NULL;
    ok(oslo_tensor_create(ctx, dts[d], 3, shape, &t));
    int nd = 0;
    int64_t sh[OSLO_MAX_DIMS], n = 0;
    oslo_dtype dt;
    void *data = NULL;
    ok(oslo_tensor_ndim(t, &nd));
    ok(oslo_tensor_shape(t, sh));
    ok(oslo_tensor_numel(t, &n));
    ok(oslo_tensor_dtype(t, &dt));
    ok(oslo_tensor_data(t, &data));
    assert_int_equal(nd, 3);
    assert_int_equal(sh[0], 2);
    assert_int_equal(sh[2], 4);
    assert_int_equal(n, 24);
    assert_int_equal(dt, dts[d]);
    assert_non_null(data);
    /* zero-filled */
    unsigned char buf[24 * 8];
    ok(oslo_tensor_copy_to_host(t, buf, 24 * sizes[d]));
    for (size_t i = 0; i < 24 * sizes[d]; ++i) assert_int_equal(buf[i], 0);
    /* round trip through host memory */
    for (size_t i = 0; i < 24 * sizes[d]; ++i) buf[i] = (unsigned char)i;
    ok(oslo_tensor_copy_from_host(t, buf, 24 * sizes[d]));
    unsigned char back[24 * 8];
    ok(oslo_tensor_copy_to_host(t, back, 24 * sizes[d]));
    assert_memory_equal(buf, back, 24 * sizes[d]);
    /* wrong byte counts name both sizes */
    expect_error(oslo_tensor_copy_from_host(t, buf, 24 * sizes[d] - 1), OSLO_ERR_SHAPE, "holds");
    expect_error(oslo_tensor_copy_to_host(t, back, 24 * sizes[d] + 1), OSLO_ERR_SHAPE, "holds");
    oslo_tensor_destroy(t);
  }
  /* 0-d and empty tensors */
  oslo_tensor *t = NULL;
  int64_t n = -1;
  ok(oslo_tensor_create(ctx, OSLO_DTYPE_F32, 0, NULL, &t));
  ok(oslo_tensor_numel(t, &n));
  assert_int_equal(n, 1);
  oslo_tensor_destroy(t);
  int64_t empty[2] = {0, 5};
  ok(oslo_tensor_create(ctx, OSLO_DTYPE_F32, 2, empty, &t));
  ok(oslo_tensor_numel(t, &n));
  assert_int_equal(n, 0);
  ok(oslo_tensor_copy_from_host(t, NULL, 0));
  oslo_tensor_destroy(t);
  oslo_tensor_destroy(NULL);
}

void test_tensor_bad_args(void **state) {
  oslo_context *ctx = (oslo_context *)*state;
  int64_t shape[2] = {2, 3}, neg[2] = {2, -3}, huge[3] = {INT64_MAX / 2, 4, 4};
  int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  oslo_tensor *t = (oslo_tensor *)0x1;
  expect_error(oslo_tensor_create(ctx, OSLO_DTYPE_F32, 2, shape, NULL), OSLO_ERR_INVALID_ARGUMENT,
               "out");
  expect_error(oslo_tensor_create(NULL, OSLO_DTYPE_F32, 2, shape, &t), OSLO_ERR_INVALID_ARGUMENT,
               "ctx");
  assert_null(t);
  expect_error(oslo_tensor_create(ctx, (oslo_dtype)42, 2, shape, &t), OSLO_ERR_DTYPE, "dtype");
  expect_error(oslo_tensor_create(ctx, OSLO_DTYPE_F32, 2, NULL, &t), OSLO_ERR_INVALID_ARGUMENT,
               "shape");
  expect_error(oslo_tensor_create(ctx, OSLO_DTYPE_F32, -1, shape, &t), OSLO_ERR_INVALID_ARGUMENT,
               "ndim");
  expect_error(oslo_tensor_create(ctx, OSLO_DTYPE_F32, 9, nine, &t), OSLO_ERR_INVALID_ARGUMENT,
               "ndim");
  expect_error(oslo_tensor_create(ctx, OSLO_DTYPE_F32, 2, neg, &t), OSLO_ERR_INVALID_ARGUMENT,
               "negative");
  expect_error(oslo_tensor_create(ctx, OSLO_DTYPE_F32, 3, huge, &t), OSLO_ERR_INVALID_ARGUMENT,
               "too large");
  expect_error(oslo_tensor_wrap(ctx, NULL, OSLO_DTYPE_F32, 2, shape, &t), OSLO_ERR_INVALID_ARGUMENT,
               "NULL");
  expect_error(oslo_tensor_wrap(ctx, NULL, OSLO_DTYPE_F32, 2, shape, NULL),
               OSLO_ERR_INVALID_ARGUMENT, "out");
  float x;
  int nd;
  int64_t sh[OSLO_MAX_DIMS];
  oslo_dtype dt;
  void *p;
  int64_t n;
  expect_error(oslo_tensor_copy_from_host(NULL, &x, 4), OSLO_ERR_INVALID_ARGUMENT, "tensor");
  expect_error(oslo_tensor_copy_to_host(NULL, &x, 4), OSLO_ERR_INVALID_ARGUMENT, "tensor");
  expect_error(oslo_tensor_ndim(NULL, &nd), OSLO_ERR_INVALID_ARGUMENT, "tensor");
  expect_error(oslo_tensor_shape(NULL, sh), OSLO_ERR_INVALID_ARGUMENT, "tensor");
  expect_error(oslo_tensor_dtype(NULL, &dt), OSLO_ERR_INVALID_ARGUMENT, "tensor");
  expect_error(oslo_tensor_numel(NULL, &n), OSLO_ERR_INVALID_ARGUMENT, "tensor");
  expect_error(oslo_tensor_data(NULL, &p), OSLO_ERR_INVALID_ARGUMENT, "tensor");
  ok(oslo_tensor_create(ctx, OSLO_DTYPE_F32, 2, shape, &t));
  expect_error(oslo_tensor_copy_from_host(t, NULL, 24), OSLO_ERR_INVALID_ARGUMENT, "src");
  expect_error(oslo_tensor_copy_to_host(t, NULL, 24), OSLO_ERR_INVALID_ARGUMENT, "dst");
  expect_error(oslo_tensor_ndim(t, NULL), OSLO_ERR_INVALID_ARGUMENT, "ndim");
  expect_error(oslo_tensor_numel(t, NULL), OSLO_ERR_INVALID_ARGUMENT, "numel");
  expect_error(oslo_tensor_shape(t, NULL), OSLO_ERR_INVALID_ARGUMENT, "shape");
  expect_error(oslo_tensor_dtype(t, NULL), OSLO_ERR_INVALID_ARGUMENT, "dtype");
  expect_error(oslo_tensor_data(t, NULL), OSLO_ERR_INVALID_ARGUMENT, "data");
  oslo_tensor_destroy(t);
}

void test_tensor_wrap_no_copy(void **state) {
  oslo_context *ctx = (oslo_context *)*state;
  float mem[6] = {1, 2, 3, 4, 5, 6};
  int64_t shape[2] = {2, 3};
  oslo_tensor *t = NULL;
  ok(oslo_tensor_wrap(ctx, mem, OSLO_DTYPE_F32, 2, shape, &t));
  void *p = NULL;
  ok(oslo_tensor_data(t, &p));
  assert_ptr_equal(p, mem);
  ok(oslo_context_all_reduce(ctx, OSLO_GROUP_WORLD, OSLO_REDUCE_SUM, t)); /* one rank: identity */
  mem[0] = 42;
  float back[6];
  ok(oslo_tensor_copy_to_host(t, back, sizeof back));
  assert_true(back[0] == 42.f);
  oslo_tensor_destroy(t);
  assert_true(mem[5] == 6.f); /* caller memory untouched by destroy */
}

static int dl_deleted;
static void count_delete(DLManagedTensor *m) {
  dl_deleted++;
  (void)m;
}
static int dlv_deleted;
static void count_delete_versioned(struct DLManagedTensorVersioned *m) {
  dlv_deleted++;
  (void)m;
}

/* Exports carry compact row-major strides; 0-d exports a non-NULL pointer. */
static void expect_compact_strides(const DLTensor *d) {
  assert_non_null(d->strides);
  int64_t expect = 1;
  for (int i = d->ndim - 1; i >= 0; --i) {
    assert_int_equal(d->strides[i], expect);
    expect *= d->shape[i] > 0 ? d->shape[i] : 1;
  }
  assert_int_equal(d->byte_offset, 0);
}

void test_dlpack(void **state) {
  oslo_context *ctx = (oslo_context *)*state;
  int64_t shape[2] = {2, 3};
  oslo_tensor *t = NULL;
  ok(oslo_tensor_create(ctx, OSLO_DTYPE_BF16, 2, shape, &t));
  DLManagedTensor *m = NULL;
  ok(oslo_tensor_to_dlpack(t, &m));
  assert_int_equal(m->dl_tensor.ndim, 2);
  assert_int_equal(m->dl_tensor.shape[1], 3);
  assert_int_equal(m->dl_tensor.dtype.code, kDLBfloat);
  assert_int_equal(m->dl_tensor.device.device_type, kDLCPU);
  expect_compact_strides(&m->dl_tensor);
  assert_int_equal(m->dl_tensor.strides[0], 3);
  void *p = NULL;
  ok(oslo_tensor_data(t, &p));
  assert_ptr_equal(m->dl_tensor.data, p);
  oslo_tensor_destroy(t);
  /* the export keeps the memory alive after the tensor is gone */
  memset(m->dl_tensor.data, 0x7f, 12);
  m->deleter(m);

  /* import: zero copy, deleter called once on destroy */
  float mem[6] = {1, 2, 3, 4, 5, 6};
  int64_t dshape[2] = {2, 3};
  DLManagedTensor in;
  memset(&in, 0, sizeof in);
  in.dl_tensor.data = mem;
  in.dl_tensor.device.device_type = kDLCPU;
  in.dl_tensor.ndim = 2;
  in.dl_tensor.dtype.code = kDLFloat;
  in.dl_tensor.dtype.bits = 32;
  in.dl_tensor.dtype.lanes = 1;
  in.dl_tensor.shape = dshape;
  in.deleter = count_delete;
  dl_deleted = 0;
  oslo_tensor *imp = NULL;
  ok(oslo_tensor_from_dlpack(ctx, &in, &imp));
  ok(oslo_tensor_data(imp, &p));
  assert_ptr_equal(p, mem);
  assert_int_equal(dl_deleted, 0);
  oslo_tensor_destroy(imp);
  assert_int_equal(dl_deleted, 1);
  /* strides describing the compact layout are accepted */
  int64_t compact[2] = {3, 1};
  in.dl_tensor.strides = compact;
  ok(oslo_tensor_from_dlpack(ctx, &in, &imp));
  oslo_tensor_destroy(imp);
  assert_int_equal(dl_deleted, 2);

  /* strided, wrong device, unsupported type: refused, caller keeps ownership */
  int64_t strides[2] = {1, 2};
  in.dl_tensor.strides = strides;
  expect_error(oslo_tensor_from_dlpack(ctx, &in, &imp), OSLO_ERR_NOT_SUPPORTED, "contiguous");
  assert_null(imp);
  in.dl_tensor.strides = NULL;
  in.dl_tensor.device.device_type = kDLCUDA;
  expect_error(oslo_tensor_from_dlpack(ctx, &in, &imp), OSLO_ERR_NOT_SUPPORTED, "device");
  in.dl_tensor.device.device_type = kDLCPU;
  in.dl_tensor.dtype.code = kDLUInt;
  in.dl_tensor.dtype.bits = 8;
  expect_error(oslo_tensor_from_dlpack(ctx, &in, &imp), OSLO_ERR_DTYPE, "not supported");
  assert_int_equal(dl_deleted, 2);
  expect_error(oslo_tensor_from_dlpack(ctx, NULL, &imp), OSLO_ERR_INVALID_ARGUMENT, "managed");
  expect_error(oslo_tensor_from_dlpack(NULL, &in, &imp), OSLO_ERR_INVALID_ARGUMENT, "ctx");
  expect_error(oslo_tensor_from_dlpack(ctx, &in, NULL), OSLO_ERR_INVALID_ARGUMENT, "out");
  expect_error(oslo_tensor_to_dlpack(NULL, &m), OSLO_ERR_INVALID_ARGUMENT, "tensor");
  expect_error(oslo_tensor_to_dlpack(t, NULL), OSLO_ERR_INVALID_ARGUMENT, "out");
}

/* oslo tensor -> DLPack -> oslo tensor, both structs: the same memory, the
   values intact, every deleter run once (ASan/LSan would see a leak). */
void test_dlpack_round_trip(void **state) {
  oslo_context *ctx = (oslo_context *)*state;
  int64_t shape[3] = {2, 1, 3};
  float v[6] = {1.5f, -2, 3, 4, 5, 6.25f}, back[6];
  for (int versioned = 0; versioned < 2; ++versioned) {
    oslo_tensor *t = NULL, *imp = NULL;
    ok(oslo_tensor_create(ctx, OSLO_DTYPE_F32, 3, shape, &t));
    ok(oslo_tensor_copy_from_host(t, v, sizeof v));
    void *p = NULL, *q = NULL;
    ok(oslo_tensor_data(t, &p));
    if (versioned) {
      struct DLManagedTensorVersioned *m = NULL;
      ok(oslo_tensor_to_dlpack_versioned(t, &m));
      expect_compact_strides(&m->dl_tensor);
      ok(oslo_tensor_from_dlpack_versioned(ctx, m, &imp));
    } else {
      DLManagedTensor *m = NULL;
      ok(oslo_tensor_to_dlpack(t, &m));
      expect_compact_strides(&m->dl_tensor);
      ok(oslo_tensor_from_dlpack(ctx, m, &imp));
    }
    oslo_tensor_destroy(t); /* the import keeps the memory alive */
    ok(oslo_tensor_data(imp, &q));
    assert_ptr_equal(p, q);
    int64_t sh[OSLO_MAX_DIMS];
    int nd = 0;
    ok(oslo_tensor_ndim(imp, &nd));
    ok(oslo_tensor_shape(imp, sh));
    assert_int_equal(nd, 3);
    assert_int_equal(sh[2], 3);
    ok(oslo_tensor_copy_to_host(imp, back, sizeof back));
    assert_memory_equal(back, v, sizeof v);
    oslo_tensor_destroy(imp); /* runs the export's deleter */
  }
  /* 0-d and empty tensors export strides too */
  oslo_tensor *t = NULL;
  struct DLManagedTensorVersioned *m = NULL;
  ok(oslo_tensor_create(ctx, OSLO_DTYPE_I64, 0, NULL, &t));
  ok(oslo_tensor_to_dlpack_versioned(t, &m));
  assert_int_equal(m->dl_tensor.ndim, 0);
  assert_non_null(m->dl_tensor.strides);
  m->deleter(m);
  oslo_tensor_destroy(t);
  int64_t empty[2] = {0, 4};
  ok(oslo_tensor_create(ctx, OSLO_DTYPE_F16, 2, empty, &t));
  ok(oslo_tensor_to_dlpack_versioned(t, &m));
  expect_compact_strides(&m->dl_tensor);
  assert_int_equal(m->dl_tensor.strides[0], 4);
  m->deleter(m);
  oslo_tensor_destroy(t);
}

void test_dlpack_versioned(void **state) {
  oslo_context *ctx = (oslo_context *)*state;
  int64_t shape[2] = {2, 3};
  oslo_tensor *t = NULL;
  ok(oslo_tensor_create(ctx, OSLO_DTYPE_I32, 2, shape, &t));
  struct DLManagedTensorVersioned *m = NULL;
  ok(oslo_tensor_to_dlpack_versioned(t, &m));
  assert_int_equal(m->version.major, DLPACK_MAJOR_VERSION);
  assert_int_equal(m->version.minor, DLPACK_MINOR_VERSION);
  assert_int_equal(m->flags, 0); /* writable, not a copy */
  assert_int_equal(m->dl_tensor.dtype.code, kDLInt);
  assert_int_equal(m->dl_tensor.dtype.bits, 32);
  expect_compact_strides(&m->dl_tensor);
  oslo_tensor_destroy(t);
  m->deleter(m);

  float mem[8] = {0, 0, 1, 2, 3, 4, 5, 6};
  int64_t dshape[3] = {2, 1, 3};
  struct DLManagedTensorVersioned in;
  memset(&in, 0, sizeof in);
  in.version.major = 1;
  in.version.minor = 7; /* a later minor version is fine */
  in.dl_tensor.data = mem;
  in.dl_tensor.byte_offset = 2 * sizeof(float); /* honoured */
  in.dl_tensor.device.device_type = kDLCPU;
  in.dl_tensor.ndim = 3;
  in.dl_tensor.dtype.code = kDLFloat;
  in.dl_tensor.dtype.bits = 32;
  in.dl_tensor.dtype.lanes = 1;
  in.dl_tensor.shape = dshape;
  in.deleter = count_delete_versioned;
  dlv_deleted = 0;
  /* contiguous strides (any stride for the extent of 1), and NULL, accepted */
  int64_t compact[3] = {3, 99, 1};
  in.dl_tensor.strides = compact;
  oslo_tensor *imp = NULL;
  ok(oslo_tensor_from_dlpack_versioned(ctx, &in, &imp));
  float back[6];
  ok(oslo_tensor_copy_to_host(imp, back, sizeof back));
  assert_memory_equal(back, mem + 2, sizeof back);
  oslo_tensor_destroy(imp);
  assert_int_equal(dlv_deleted, 1);
  in.dl_tensor.strides = NULL;
  in.flags = DLPACK_FLAG_BITMASK_IS_COPIED; /* ours alone: fine */
  ok(oslo_tensor_from_dlpack_versioned(ctx, &in, &imp));
  oslo_tensor_destroy(imp);
  assert_int_equal(dlv_deleted, 2);
  in.flags = 0;

  /* refused, the caller keeps ownership (no deleter call) */
  int64_t transposed[3] = {1, 3, 2};
  in.dl_tensor.strides = transposed;
  expect_error(oslo_tensor_from_dlpack_versioned(ctx, &in, &imp), OSLO_ERR_NOT_SUPPORTED,
               "not contiguous");
  assert_null(imp);
  in.dl_tensor.strides = compact;
  in.flags = DLPACK_FLAG_BITMASK_READ_ONLY;
  expect_error(oslo_tensor_from_dlpack_versioned(ctx, &in, &imp), OSLO_ERR_NOT_SUPPORTED,
               "read-only");
  in.flags = 0;
  in.version.major = 2;
  expect_error(oslo_tensor_from_dlpack_versioned(ctx, &in, &imp), OSLO_ERR_NOT_SUPPORTED,
               "version 2.7");
  in.version.major = 0;
  expect_error(oslo_tensor_from_dlpack_versioned(ctx, &in, &imp), OSLO_ERR_NOT_SUPPORTED,
               "major version 1");
  in.version.major = 1;
  in.dl_tensor.dtype.code = kDLComplex;
  in.dl_tensor.dtype.bits = 64;
  expect_error(oslo_tensor_from_dlpack_versioned(ctx, &in, &imp), OSLO_ERR_DTYPE, "not supported");
  in.dl_tensor.dtype.code = kDLFloat;
  in.dl_tensor.dtype.bits = 32;
  in.dl_tensor.device.device_type = kDLCUDA;
  expect_error(oslo_tensor_from_dlpack_versioned(ctx, &in, &imp), OSLO_ERR_NOT_SUPPORTED, "device");
  in.dl_tensor.device.device_type = kDLCPU;
  assert_int_equal(dlv_deleted, 2);
  /* an empty tensor may have any strides and a NULL data pointer */
  int64_t eshape[2] = {0, 3}, any[2] = {7, 5};
  in.dl_tensor.ndim = 2;
  in.dl_tensor.shape = eshape;
  in.dl_tensor.strides = any;
  in.dl_tensor.data = NULL;
  in.dl_tensor.byte_offset = 0;
  ok(oslo_tensor_from_dlpack_versioned(ctx, &in, &imp));
  oslo_tensor_destroy(imp);
  assert_int_equal(dlv_deleted, 3);
  expect_error(oslo_tensor_from_dlpack_versioned(ctx, NULL, &imp), OSLO_ERR_INVALID_ARGUMENT,
               "managed");
  expect_error(oslo_tensor_from_dlpack_versioned(NULL, &in, &imp), OSLO_ERR_INVALID_ARGUMENT,
               "ctx");
  expect_error(oslo_tensor_to_dlpack_versioned(NULL, &m), OSLO_ERR_INVALID_ARGUMENT, "tensor");
}

/* ---- collectives on one rank ---- */

void test_collectives_single(void **state) {
  oslo_context *ctx = (oslo_context *)*state;
  int64_t n4[1] = {4}, n8[1] = {8};
  float v[4] = {1, -2, 3, 4}, out[8];
  oslo_tensor *t = NULL, *big = NULL, *i32 = NULL;
  ok(oslo_tensor_create(ctx, OSLO_DTYPE_F32, 1, n4, &t));
  ok(oslo_tensor_create(ctx, OSLO_DTYPE_F32, 1, n8, &big));
  ok(oslo_tensor_create(ctx, OSLO_DTYPE_I32, 1, n4, &i32));
  ok(oslo_tensor_copy_from_host(t, v, sizeof v));
  for (int op = OSLO_REDUCE_SUM; op <= OSLO_REDUCE_MIN; ++op)
    ok(oslo_context_all_reduce(ctx, OSLO_GROUP_TENSOR, (oslo_reduce_op)op, t));
  ok(oslo_tensor_copy_to_host(t, out, sizeof v));
  assert_memory_equal(out, v, sizeof v);
  ok(oslo_context_all_gather(ctx, OSLO_GROUP_WORLD, t, t));
  ok(oslo_context_reduce_scatter(ctx, OSLO_GROUP_DATA, OSLO_REDUCE_SUM, t, t));
  ok(oslo_context_broadcast(ctx, OSLO_GROUP_PIPELINE, 0, t));
  ok(oslo_context_barrier(ctx, OSLO_GROUP_WORLD));
  /* bad arguments */
  expect_error(oslo_context_all_reduce(NULL, OSLO_GROUP_WORLD, OSLO_REDUCE_SUM, t),
               OSLO_ERR_INVALID_ARGUMENT, "ctx");
  expect_error(oslo_context_all_reduce(ctx, (oslo_group)9, OSLO_REDUCE_SUM, t),
               OSLO_ERR_INVALID_ARGUMENT, "group");
  expect_error(oslo_context_all_reduce(ctx, OSLO_GROUP_WORLD, OSLO_REDUCE_SUM, NULL),
               OSLO_ERR_INVALID_ARGUMENT, "tensor");
  expect_error(oslo_context_all_reduce(ctx, OSLO_GROUP_WORLD, (oslo_reduce_op)7, t),
               OSLO_ERR_INVALID_ARGUMENT, "op");
  expect_error(oslo_context_all_gather(ctx, OSLO_GROUP_WORLD, t, big), OSLO_ERR_SHAPE, "elements");
  expect_error(oslo_context_all_gather(ctx, OSLO_GROUP_WORLD, t, i32), OSLO_ERR_DTYPE, "i32");
  expect_error(oslo_context_all_gather(ctx, OSLO_GROUP_WORLD, t, NULL), OSLO_ERR_INVALID_ARGUMENT,
               "output");
  expect_error(oslo_context_all_gather(ctx, OSLO_GROUP_WORLD, NULL, t), OSLO_ERR_INVALID_ARGUMENT,
               "input");
  expect_error(oslo_context_reduce_scatter(ctx, OSLO_GROUP_WORLD, OSLO_REDUCE_SUM, big, t),
               OSLO_ERR_SHAPE, "elements");
  expect_error(oslo_context_reduce_scatter(ctx, OSLO_GROUP_WORLD, OSLO_REDUCE_SUM, t, i32),
               OSLO_ERR_DTYPE, "f32");
  expect_error(oslo_context_reduce_scatter(ctx, OSLO_GROUP_WORLD, (oslo_reduce_op)-1, t, t),
               OSLO_ERR_INVALID_ARGUMENT, "op");
  expect_error(oslo_context_broadcast(ctx, OSLO_GROUP_WORLD, 1, t), OSLO_ERR_INVALID_ARGUMENT,
               "root");
  expect_error(oslo_context_broadcast(ctx, OSLO_GROUP_WORLD, 0, NULL), OSLO_ERR_INVALID_ARGUMENT,
               "tensor");
  expect_error(oslo_context_send(ctx, OSLO_GROUP_WORLD, 0, t), OSLO_ERR_INVALID_ARGUMENT, "peer");
  expect_error(oslo_context_send(ctx, OSLO_GROUP_WORLD, 1, t), OSLO_ERR_INVALID_ARGUMENT, "peer");
  expect_error(oslo_context_recv(ctx, OSLO_GROUP_WORLD, -1, t), OSLO_ERR_INVALID_ARGUMENT, "peer");
  expect_error(oslo_context_recv(ctx, OSLO_GROUP_WORLD, 0, NULL), OSLO_ERR_INVALID_ARGUMENT,
               "tensor");
  expect_error(oslo_context_send(NULL, OSLO_GROUP_WORLD, 0, t), OSLO_ERR_INVALID_ARGUMENT, "ctx");
  expect_error(oslo_context_barrier(NULL, OSLO_GROUP_WORLD), OSLO_ERR_INVALID_ARGUMENT, "ctx");
  expect_error(oslo_context_barrier(ctx, (oslo_group)4), OSLO_ERR_INVALID_ARGUMENT, "group");
  oslo_tensor_destroy(t);
  oslo_tensor_destroy(big);
  oslo_tensor_destroy(i32);
}
