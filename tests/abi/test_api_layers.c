/* test_api, layers: options versions, parallel linear / embedding /
 * cross-entropy (bad arguments, 16-bit and mixed dtypes); parameter sets,
 * clipping and checkpoint errors. */
#include "api_common.h"

/* ---- layers ---- */

/* Every options struct: version 0 (never initialised) and versions newer than
   the library are refused naming the version; _init writes its version. */
void test_options_versions(void **state) {
  oslo_context *ctx = (oslo_context *)*state;
  oslo_parallel_linear_options lo;
  oslo_parallel_embedding_options eo;
  oslo_vocab_parallel_cross_entropy_options xo;
  expect_error(oslo_parallel_linear_options_init(&lo, 0), OSLO_ERR_INVALID_ARGUMENT,
               "version is 0");
  expect_error(oslo_parallel_linear_options_init(&lo, OSLO_PARALLEL_LINEAR_OPTIONS_VERSION + 1),
               OSLO_ERR_INVALID_ARGUMENT, "version 2 is unknown");
  expect_error(oslo_parallel_linear_options_init(NULL, OSLO_PARALLEL_LINEAR_OPTIONS_VERSION),
               OSLO_ERR_INVALID_ARGUMENT, "options");
  expect_error(oslo_parallel_embedding_options_init(&eo, 0), OSLO_ERR_INVALID_ARGUMENT,
               "version is 0");
  expect_error(oslo_parallel_embedding_options_init(&eo, 77), OSLO_ERR_INVALID_ARGUMENT,
               "version 77");
  expect_error(oslo_vocab_parallel_cross_entropy_options_init(&xo, 0), OSLO_ERR_INVALID_ARGUMENT,
               "version is 0");
  expect_error(oslo_vocab_parallel_cross_entropy_options_init(&xo, 5), OSLO_ERR_INVALID_ARGUMENT,
               "version 5");

  /* _init sets the version it was given and the defaults. */
  ok(oslo_parallel_linear_options_init(&lo, OSLO_PARALLEL_LINEAR_OPTIONS_VERSION));
  assert_int_equal(lo.version, OSLO_PARALLEL_LINEAR_OPTIONS_VERSION);
  ok(oslo_parallel_embedding_options_init(&eo, OSLO_PARALLEL_EMBEDDING_OPTIONS_VERSION));
  ok(oslo_vocab_parallel_cross_entropy_options_init(
      &xo, OSLO_VOCAB_PARALLEL_CROSS_ENTROPY_OPTIONS_VERSION));
  assert_int_equal(xo.version, OSLO_VOCAB_PARALLEL_CROSS_ENTROPY_OPTIONS_VERSION);

  /* A struct filled by hand without _init (version 0) is refused by name. */
  oslo_parallel_linear *l = (oslo_parallel_linear *)0x1;
  oslo_parallel_linear_options raw;
  memset(&raw, 0, sizeof raw);
  raw.in_features = 4;
  raw.out_features = 4;
  expect_error(oslo_parallel_linear_create(ctx, &raw, &l), OSLO_ERR_INVALID_ARGUMENT,
               "oslo_parallel_linear_options_init(&options, OSLO_PARALLEL_LINEAR_OPTIONS_VERSION)");
  assert_null(l);
  lo.in_features = 4;
  lo.out_features = 4;
  lo.version = 99;
  expect_error(oslo_parallel_linear_create(ctx, &lo, &l), OSLO_ERR_INVALID_ARGUMENT, "version 99");
  lo.version = OSLO_PARALLEL_LINEAR_OPTIONS_VERSION;
  ok(oslo_parallel_linear_create(ctx, &lo, &l));
  oslo_parallel_linear_destroy(l);

  oslo_parallel_embedding *e = (oslo_parallel_embedding *)0x1;
  eo.vocab_size = 8;
  eo.hidden_size = 2;
  eo.version = 0;
  expect_error(oslo_parallel_embedding_create(ctx, &eo, &e), OSLO_ERR_INVALID_ARGUMENT,
               "oslo_parallel_embedding_options_init");
  assert_null(e);
  eo.version = OSLO_PARALLEL_EMBEDDING_OPTIONS_VERSION + 1;
  expect_error(oslo_parallel_embedding_create(ctx, &eo, &e), OSLO_ERR_INVALID_ARGUMENT,
               "version 2 is unknown");

  oslo_tensor *logits = tensor2(ctx, OSLO_DTYPE_F32, 1, 8), *labels = NULL;
  ok(oslo_tensor_create(ctx, OSLO_DTYPE_I32, 1, (int64_t[]){1}, &labels));
  xo.vocab_size = 8;
  xo.version = 0;
  expect_error(
      oslo_context_vocab_parallel_cross_entropy(ctx, logits, labels, &xo, NULL, NULL, NULL),
      OSLO_ERR_INVALID_ARGUMENT, "oslo_vocab_parallel_cross_entropy_options_init");
  xo.version = 3;
  expect_error(
      oslo_context_vocab_parallel_cross_entropy(ctx, logits, labels, &xo, NULL, NULL, NULL),
      OSLO_ERR_INVALID_ARGUMENT, "version 3 is unknown");
  xo.version = OSLO_VOCAB_PARALLEL_CROSS_ENTROPY_OPTIONS_VERSION;
  ok(oslo_context_vocab_parallel_cross_entropy(ctx, logits, labels, &xo, NULL, NULL, NULL));
  oslo_tensor_destroy(logits);
  oslo_tensor_destroy(labels);
}

void test_linear_bad_args(void **state) {
  oslo_context *ctx = (oslo_context *)*state;
  oslo_parallel_linear_options o;
  oslo_parallel_linear_options_init(&o, OSLO_PARALLEL_LINEAR_OPTIONS_VERSION);
  assert_int_equal(o.kind, OSLO_LINEAR_COLUMN);
  assert_int_equal(o.bias, 1);
  assert_int_equal(o.dtype, OSLO_DTYPE_F32);
  oslo_parallel_linear *l = (oslo_parallel_linear *)0x1;
  expect_error(oslo_parallel_linear_create(ctx, &o, &l), OSLO_ERR_INVALID_ARGUMENT, "positive");
  assert_null(l);
  o.in_features = 4;
  o.out_features = 6;
  expect_error(oslo_parallel_linear_create(ctx, &o, NULL), OSLO_ERR_INVALID_ARGUMENT, "out");
  expect_error(oslo_parallel_linear_create(NULL, &o, &l), OSLO_ERR_INVALID_ARGUMENT, "ctx");
  expect_error(oslo_parallel_linear_create(ctx, NULL, &l), OSLO_ERR_INVALID_ARGUMENT, "options");
  o.kind = (oslo_linear_kind)5;
  expect_error(oslo_parallel_linear_create(ctx, &o, &l), OSLO_ERR_INVALID_ARGUMENT, "kind");
  o.kind = OSLO_LINEAR_ROW;
  o.dtype = OSLO_DTYPE_I32;
  expect_error(oslo_parallel_linear_create(ctx, &o, &l), OSLO_ERR_DTYPE, "dtype");
  o.dtype = OSLO_DTYPE_F32;
  ok(oslo_parallel_linear_create(ctx, &o, &l));

  oslo_tensor *w_bad = tensor2(ctx, OSLO_DTYPE_F32, 4, 6), *w = tensor2(ctx, OSLO_DTYPE_F32, 6, 4);
  oslo_tensor *wi = tensor2(ctx, OSLO_DTYPE_I64, 6, 4);
  oslo_tensor *x = tensor2(ctx, OSLO_DTYPE_F32, 3, 4), *x_bad = tensor2(ctx, OSLO_DTYPE_F32, 3, 5);
  oslo_tensor *y = tensor2(ctx, OSLO_DTYPE_F32, 3, 6), *y_bad = tensor2(ctx, OSLO_DTYPE_F32, 2, 6);
  oslo_tensor *xi = tensor2(ctx, OSLO_DTYPE_I32, 3, 4);
  expect_error(oslo_parallel_linear_load_full(l, w_bad, NULL), OSLO_ERR_SHAPE, "[6, 4]");
  expect_error(oslo_parallel_linear_load_full(l, wi, NULL), OSLO_ERR_DTYPE, "i64");
  expect_error(oslo_parallel_linear_load_full(l, NULL, NULL), OSLO_ERR_INVALID_ARGUMENT, "weight");
  expect_error(oslo_parallel_linear_load_full(NULL, w, NULL), OSLO_ERR_INVALID_ARGUMENT, "layer");
  expect_error(oslo_parallel_linear_load_full(l, w, w), OSLO_ERR_SHAPE, "bias");
  expect_error(oslo_parallel_linear_load_shard(l, w_bad, NULL), OSLO_ERR_SHAPE, "shard");
  expect_error(oslo_parallel_linear_load_shard(NULL, w, NULL), OSLO_ERR_INVALID_ARGUMENT, "layer");
  ok(oslo_parallel_linear_load_full(l, w, NULL));
  ok(oslo_parallel_linear_load_shard(l, w, NULL));
  ok(oslo_parallel_linear_forward(l, x, y));
  expect_error(oslo_parallel_linear_forward(l, x_bad, y), OSLO_ERR_SHAPE,
               "last dimension must be 4");
  expect_error(oslo_parallel_linear_forward(l, x, y_bad), OSLO_ERR_SHAPE, "rows");
  expect_error(oslo_parallel_linear_forward(l, xi, y), OSLO_ERR_DTYPE, "i32");
  expect_error(oslo_parallel_linear_forward(l, x, NULL), OSLO_ERR_INVALID_ARGUMENT, "output");
  expect_error(oslo_parallel_linear_forward(l, NULL, y), OSLO_ERR_INVALID_ARGUMENT, "input");
  expect_error(oslo_parallel_linear_forward(NULL, x, y), OSLO_ERR_INVALID_ARGUMENT, "layer");
  ok(oslo_parallel_linear_backward(l, x, y, x));
  ok(oslo_parallel_linear_backward(l, x, y, NULL));
  expect_error(oslo_parallel_linear_backward(l, x, y, x_bad), OSLO_ERR_SHAPE, "grad_input");
  expect_error(oslo_parallel_linear_backward(l, x, y_bad, x), OSLO_ERR_SHAPE, "grad_output");
  expect_error(oslo_parallel_linear_backward(l, NULL, y, x), OSLO_ERR_INVALID_ARGUMENT, "input");
  expect_error(oslo_parallel_linear_backward(NULL, x, y, x), OSLO_ERR_INVALID_ARGUMENT, "layer");
  ok(oslo_parallel_linear_zero_grad(l));
  expect_error(oslo_parallel_linear_zero_grad(NULL), OSLO_ERR_INVALID_ARGUMENT, "layer");
  oslo_tensor *pw = NULL, *pb = (oslo_tensor *)0x1, *gw = NULL, *gb = (oslo_tensor *)0x1;
  ok(oslo_parallel_linear_params(l, &pw, &pb, &gw, &gb));
  assert_non_null(pw);
  assert_non_null(gw);
  assert_non_null(pb); /* default options have a bias */
  ok(oslo_parallel_linear_params(l, NULL, NULL, NULL, NULL));
  expect_error(oslo_parallel_linear_params(NULL, &pw, NULL, NULL, NULL), OSLO_ERR_INVALID_ARGUMENT,
               "layer");
  oslo_parallel_linear_destroy(l);
  oslo_parallel_linear_destroy(NULL);

  /* without bias: a given bias is refused, bias pointers are NULL */
  o.bias = 0;
  ok(oslo_parallel_linear_create(ctx, &o, &l));
  oslo_tensor *b = NULL;
  ok(oslo_tensor_create(ctx, OSLO_DTYPE_F32, 1, (int64_t[]){6}, &b));
  expect_error(oslo_parallel_linear_load_full(l, w, b), OSLO_ERR_INVALID_ARGUMENT, "without bias");
  ok(oslo_parallel_linear_params(l, NULL, &pb, NULL, &gb));
  assert_null(pb);
  assert_null(gb);
  oslo_parallel_linear_destroy(l);
  oslo_tensor *ts[] = {w_bad, w, wi, x, x_bad, y, y_bad, xi, b};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; ++i) oslo_tensor_destroy(ts[i]);
}

/* bf16/f16 parameters and activations compute in f32 and round once. */
void test_linear_low_precision(void **state) {
  oslo_context *ctx = (oslo_context *)*state;
  oslo_parallel_linear_options o;
  oslo_parallel_linear_options_init(&o, OSLO_PARALLEL_LINEAR_OPTIONS_VERSION);
  o.in_features = 2;
  o.out_features = 2;
  o.dtype = OSLO_DTYPE_BF16;
  oslo_parallel_linear *l = NULL;
  ok(oslo_parallel_linear_create(ctx, &o, &l));
  float w[4] = {1, 2, 3, 4}, b[2] = {0.5f, -0.5f}, x[2] = {1, 1};
  oslo_tensor *tw = tensor2(ctx, OSLO_DTYPE_F32, 2, 2), *tx = tensor2(ctx, OSLO_DTYPE_F32, 1, 2);
  oslo_tensor *ty = tensor2(ctx, OSLO_DTYPE_F16, 1, 2), *tb = NULL;
  ok(oslo_tensor_create(ctx, OSLO_DTYPE_F32, 1, (int64_t[]){2}, &tb));
  ok(oslo_tensor_copy_from_host(tw, w, sizeof w));
  ok(oslo_tensor_copy_from_host(tb, b, sizeof b));
  ok(oslo_tensor_copy_from_host(tx, x, sizeof x));
  ok(oslo_parallel_linear_load_full(l, tw, tb));
  ok(oslo_parallel_linear_forward(l, tx, ty));
  uint16_t h[2];
  ok(oslo_tensor_copy_to_host(ty, h, sizeof h));
  assert_int_equal(h[0], 0x4300); /* f16 3.5 */
  assert_int_equal(h[1], 0x4680); /* f16 6.5 */
  oslo_tensor_destroy(tw);
  oslo_tensor_destroy(tx);
  oslo_tensor_destroy(ty);
  oslo_tensor_destroy(tb);
  oslo_parallel_linear_destroy(l);
}

/* Input, output and parameters may have different float dtypes (documented
   choice): f16 in, f32 out; bf16 in, f16 out; f16 grad_output, f32
   grad_input. Integer activations are refused. */
void test_linear_mixed_dtypes(void **state) {
  oslo_context *ctx = (oslo_context *)*state;
  oslo_parallel_linear_options o;
  ok(oslo_parallel_linear_options_init(&o, OSLO_PARALLEL_LINEAR_OPTIONS_VERSION));
  o.in_features = 2;
  o.out_features = 2;
  oslo_parallel_linear *l = NULL;
  ok(oslo_parallel_linear_create(ctx, &o, &l));
  float w[4] = {1, 2, 3, 4}, b[2] = {0.5f, -0.5f}, y[2];
  oslo_tensor *tw = tensor2(ctx, OSLO_DTYPE_F32, 2, 2), *tb = NULL;
  ok(oslo_tensor_create(ctx, OSLO_DTYPE_F32, 1, (int64_t[]){2}, &tb));
  ok(oslo_tensor_copy_from_host(tw, w, sizeof w));
  ok(oslo_tensor_copy_from_host(tb, b, sizeof b));
  ok(oslo_parallel_linear_load_full(l, tw, tb));
  uint16_t ones_f16[2] = {0x3c00, 0x3c00}, ones_bf16[2] = {0x3f80, 0x3f80}, h[2];
  oslo_tensor *x16 = tensor2(ctx, OSLO_DTYPE_F16, 1, 2), *xbf = tensor2(ctx, OSLO_DTYPE_BF16, 1, 2);
  oslo_tensor *y32 = tensor2(ctx, OSLO_DTYPE_F32, 1, 2), *y16 = tensor2(ctx, OSLO_DTYPE_F16, 1, 2);
  ok(oslo_tensor_copy_from_host(x16, ones_f16, sizeof ones_f16));
  ok(oslo_tensor_copy_from_host(xbf, ones_bf16, sizeof ones_bf16));
  ok(oslo_parallel_linear_forward(l, x16, y32)); /* f16 in, f32 out */
  ok(oslo_tensor_copy_to_host(y32, y, sizeof y));
  assert_true(y[0] == 3.5f && y[1] == 6.5f);
  ok(oslo_parallel_linear_forward(l, xbf, y16)); /* bf16 in, f16 out */
  ok(oslo_tensor_copy_to_host(y16, h, sizeof h));
  assert_int_equal(h[0], 0x4300); /* f16 3.5 */
  assert_int_equal(h[1], 0x4680); /* f16 6.5 */
  /* backward: f16 grad_output, f32 grad_input = dy W = [4, 6] */
  oslo_tensor *dx = tensor2(ctx, OSLO_DTYPE_F32, 1, 2);
  ok(oslo_parallel_linear_backward(l, x16, x16, dx));
  ok(oslo_tensor_copy_to_host(dx, y, sizeof y));
  assert_true(y[0] == 4.f && y[1] == 6.f);
  oslo_tensor *xi = tensor2(ctx, OSLO_DTYPE_I32, 1, 2), *yi = tensor2(ctx, OSLO_DTYPE_I64, 1, 2);
  expect_error(oslo_parallel_linear_forward(l, xi, y32), OSLO_ERR_DTYPE, "input");
  expect_error(oslo_parallel_linear_forward(l, x16, yi), OSLO_ERR_DTYPE, "output");
  oslo_tensor *ts[] = {tw, tb, x16, xbf, y32, y16, dx, xi, yi};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; ++i) oslo_tensor_destroy(ts[i]);
  oslo_parallel_linear_destroy(l);
}

void test_embedding_bad_args(void **state) {
  oslo_context *ctx = (oslo_context *)*state;
  oslo_parallel_embedding *e = (oslo_parallel_embedding *)0x1;
  oslo_parallel_embedding_options o;
  ok(oslo_parallel_embedding_options_init(&o, OSLO_PARALLEL_EMBEDDING_OPTIONS_VERSION));
  assert_int_equal(o.version, OSLO_PARALLEL_EMBEDDING_OPTIONS_VERSION);
  assert_int_equal(o.vocab_size, 0);
  assert_int_equal(o.hidden_size, 0);
  assert_int_equal(o.dtype, OSLO_DTYPE_F32);
  o.hidden_size = 4;
  expect_error(oslo_parallel_embedding_create(ctx, &o, &e), OSLO_ERR_INVALID_ARGUMENT,
               "vocab_size");
  assert_null(e);
  o.vocab_size = 5;
  o.hidden_size = -1;
  expect_error(oslo_parallel_embedding_create(ctx, &o, &e), OSLO_ERR_INVALID_ARGUMENT,
               "hidden_size");
  o.hidden_size = 4;
  o.dtype = OSLO_DTYPE_I64;
  expect_error(oslo_parallel_embedding_create(ctx, &o, &e), OSLO_ERR_DTYPE, "dtype");
  o.dtype = OSLO_DTYPE_F32;
  expect_error(oslo_parallel_embedding_create(ctx, &o, NULL), OSLO_ERR_INVALID_ARGUMENT, "out");
  expect_error(oslo_parallel_embedding_create(NULL, &o, &e), OSLO_ERR_INVALID_ARGUMENT, "ctx");
  expect_error(oslo_parallel_embedding_create(ctx, NULL, &e), OSLO_ERR_INVALID_ARGUMENT, "options");
  ok(oslo_parallel_embedding_create(ctx, &o, &e));
  int64_t s = -1, en = -1, lr = -1;
  ok(oslo_parallel_embedding_vocab_range(e, &s, &en, &lr));
  assert_int_equal(s, 0);
  assert_int_equal(en, 5);
  assert_int_equal(lr, 5);
  ok(oslo_parallel_embedding_vocab_range(e, NULL, NULL, NULL));
  expect_error(oslo_parallel_embedding_vocab_range(NULL, &s, &en, &lr), OSLO_ERR_INVALID_ARGUMENT,
               "emb");
  oslo_tensor *w = tensor2(ctx, OSLO_DTYPE_F32, 5, 4), *w_bad = tensor2(ctx, OSLO_DTYPE_F32, 4, 4);
  oslo_tensor *ids = NULL, *fids = NULL, *y = tensor2(ctx, OSLO_DTYPE_F32, 3, 4),
              *y_bad = tensor2(ctx, OSLO_DTYPE_F32, 3, 5);
  ok(oslo_tensor_create(ctx, OSLO_DTYPE_I32, 1, (int64_t[]){3}, &ids));
  ok(oslo_tensor_create(ctx, OSLO_DTYPE_F32, 1, (int64_t[]){3}, &fids));
  ok(oslo_parallel_embedding_load_full(e, w));
  ok(oslo_parallel_embedding_load_shard(e, w));
  expect_error(oslo_parallel_embedding_load_full(e, w_bad), OSLO_ERR_SHAPE, "[5, 4]");
  expect_error(oslo_parallel_embedding_load_shard(e, w_bad), OSLO_ERR_SHAPE, "[5, 4]");
  expect_error(oslo_parallel_embedding_load_full(NULL, w), OSLO_ERR_INVALID_ARGUMENT, "emb");
  expect_error(oslo_parallel_embedding_load_shard(e, NULL), OSLO_ERR_INVALID_ARGUMENT, "weight");
  ok(oslo_parallel_embedding_forward(e, ids, y));
  expect_error(oslo_parallel_embedding_forward(e, ids, y_bad), OSLO_ERR_SHAPE, "[3, 4]");
  expect_error(oslo_parallel_embedding_forward(e, fids, y), OSLO_ERR_DTYPE, "ids");
  expect_error(oslo_parallel_embedding_forward(NULL, ids, y), OSLO_ERR_INVALID_ARGUMENT, "emb");
  int32_t bad[3] = {0, -1, 2};
  ok(oslo_tensor_copy_from_host(ids, bad, sizeof bad));
  expect_error(oslo_parallel_embedding_forward(e, ids, y), OSLO_ERR_INVALID_ARGUMENT, "-1");
  expect_error(oslo_parallel_embedding_backward(e, ids, y), OSLO_ERR_INVALID_ARGUMENT, "-1");
  int32_t good[3] = {4, 4, 0};
  ok(oslo_tensor_copy_from_host(ids, good, sizeof good));
  ok(oslo_parallel_embedding_backward(e, ids, y));
  expect_error(oslo_parallel_embedding_backward(e, ids, y_bad), OSLO_ERR_SHAPE, "grad_output");
  expect_error(oslo_parallel_embedding_backward(NULL, ids, y), OSLO_ERR_INVALID_ARGUMENT, "emb");
  ok(oslo_parallel_embedding_zero_grad(e));
  expect_error(oslo_parallel_embedding_zero_grad(NULL), OSLO_ERR_INVALID_ARGUMENT, "emb");
  oslo_tensor *pw = NULL, *gw = NULL;
  ok(oslo_parallel_embedding_params(e, &pw, &gw));
  assert_non_null(pw);
  assert_non_null(gw);
  expect_error(oslo_parallel_embedding_params(NULL, &pw, &gw), OSLO_ERR_INVALID_ARGUMENT, "emb");
  oslo_parallel_embedding_destroy(e);
  oslo_parallel_embedding_destroy(NULL);
  oslo_tensor *ts[] = {w, w_bad, ids, fids, y, y_bad};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; ++i) oslo_tensor_destroy(ts[i]);
}

void test_cross_entropy_bad_args(void **state) {
  oslo_context *ctx = (oslo_context *)*state;
  oslo_tensor *logits = tensor2(ctx, OSLO_DTYPE_F32, 3, 5),
              *bad_logits = tensor2(ctx, OSLO_DTYPE_F32, 3, 4);
  oslo_tensor *labels = NULL, *flabels = NULL, *losses = NULL, *bad_losses = NULL;
  oslo_tensor *grad = tensor2(ctx, OSLO_DTYPE_F32, 3, 5),
              *bad_grad = tensor2(ctx, OSLO_DTYPE_F32, 5, 3);
  ok(oslo_tensor_create(ctx, OSLO_DTYPE_I64, 1, (int64_t[]){3}, &labels));
  ok(oslo_tensor_create(ctx, OSLO_DTYPE_F32, 1, (int64_t[]){3}, &flabels));
  ok(oslo_tensor_create(ctx, OSLO_DTYPE_F32, 1, (int64_t[]){3}, &losses));
  ok(oslo_tensor_create(ctx, OSLO_DTYPE_F32, 1, (int64_t[]){2}, &bad_losses));
  oslo_vocab_parallel_cross_entropy_options xo, xo0;
  ok(oslo_vocab_parallel_cross_entropy_options_init(
      &xo, OSLO_VOCAB_PARALLEL_CROSS_ENTROPY_OPTIONS_VERSION));
  assert_int_equal(xo.vocab_size, 0);
  assert_int_equal(xo.ignore_index, -100);
  xo0 = xo; /* vocab_size 0: refused */
  xo.vocab_size = 5;
  float mean = 0;
  ok(oslo_context_vocab_parallel_cross_entropy(ctx, logits, labels, &xo, losses, grad, &mean));
  /* uniform logits: loss log(5) */
  assert_true(mean > 1.6094f && mean < 1.6095f);
  ok(oslo_context_vocab_parallel_cross_entropy(ctx, logits, labels, &xo, NULL, NULL, NULL));
  expect_error(
      oslo_context_vocab_parallel_cross_entropy(ctx, bad_logits, labels, &xo, losses, grad, &mean),
      OSLO_ERR_SHAPE, "logits");
  expect_error(
      oslo_context_vocab_parallel_cross_entropy(ctx, logits, flabels, &xo, losses, grad, &mean),
      OSLO_ERR_DTYPE, "labels");
  expect_error(
      oslo_context_vocab_parallel_cross_entropy(ctx, logits, labels, &xo, bad_losses, grad, &mean),
      OSLO_ERR_SHAPE, "losses");
  expect_error(
      oslo_context_vocab_parallel_cross_entropy(ctx, logits, labels, &xo, losses, bad_grad, &mean),
      OSLO_ERR_SHAPE, "grad_logits");
  expect_error(
      oslo_context_vocab_parallel_cross_entropy(ctx, logits, labels, &xo0, losses, grad, &mean),
      OSLO_ERR_INVALID_ARGUMENT, "vocab_size");
  expect_error(
      oslo_context_vocab_parallel_cross_entropy(NULL, logits, labels, &xo, losses, grad, &mean),
      OSLO_ERR_INVALID_ARGUMENT, "ctx");
  expect_error(
      oslo_context_vocab_parallel_cross_entropy(ctx, NULL, labels, &xo, losses, grad, &mean),
      OSLO_ERR_INVALID_ARGUMENT, "logits");
  expect_error(
      oslo_context_vocab_parallel_cross_entropy(ctx, logits, NULL, &xo, losses, grad, &mean),
      OSLO_ERR_INVALID_ARGUMENT, "labels");
  expect_error(
      oslo_context_vocab_parallel_cross_entropy(ctx, logits, labels, NULL, losses, grad, &mean),
      OSLO_ERR_INVALID_ARGUMENT, "options");
  /* all ignored: mean is NaN, gradient zero */
  int64_t ign[3] = {-100, -100, -100};
  ok(oslo_tensor_copy_from_host(labels, ign, sizeof ign));
  ok(oslo_context_vocab_parallel_cross_entropy(ctx, logits, labels, &xo, losses, grad, &mean));
  assert_true(mean != mean);
  oslo_tensor *ts[] = {logits, bad_logits, labels, flabels, losses, bad_losses, grad, bad_grad};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; ++i) oslo_tensor_destroy(ts[i]);
}

/* ---- parameter sets, clipping, checkpoints ---- */

void test_param_set_and_checkpoint_errors(void **state) {
  oslo_context *ctx = (oslo_context *)*state;
  oslo_param_set *ps = (oslo_param_set *)0x1;
  expect_error(oslo_param_set_create(NULL, &ps), OSLO_ERR_INVALID_ARGUMENT, "ctx");
  assert_null(ps);
  expect_error(oslo_param_set_create(ctx, NULL), OSLO_ERR_INVALID_ARGUMENT, "out");
  ok(oslo_param_set_create(ctx, &ps));
  oslo_tensor *w = tensor2(ctx, OSLO_DTYPE_F32, 2, 3), *g = tensor2(ctx, OSLO_DTYPE_F32, 2, 3),
              *g_bad = tensor2(ctx, OSLO_DTYPE_F32, 3, 2);
  float gv[6] = {3, 0, 0, 0, 4, 0}, wv[6] = {1, 2, 3, 4, 5, 6};
  ok(oslo_tensor_copy_from_host(g, gv, sizeof gv));
  ok(oslo_tensor_copy_from_host(w, wv, sizeof wv));
  expect_error(oslo_param_set_add(ps, "w", w, g_bad, 0), OSLO_ERR_SHAPE, "gradient");
  expect_error(oslo_param_set_add(ps, "w", w, g, 2), OSLO_ERR_INVALID_ARGUMENT, "split_dim");
  expect_error(oslo_param_set_add(ps, "w", w, g, -2), OSLO_ERR_INVALID_ARGUMENT, "split_dim");
  expect_error(oslo_param_set_add(ps, "", w, g, 0), OSLO_ERR_INVALID_ARGUMENT, "empty");
  expect_error(oslo_param_set_add(ps, NULL, w, g, 0), OSLO_ERR_INVALID_ARGUMENT, "name");
  expect_error(oslo_param_set_add(ps, "w", NULL, g, 0), OSLO_ERR_INVALID_ARGUMENT, "tensor");
  expect_error(oslo_param_set_add(NULL, "w", w, g, 0), OSLO_ERR_INVALID_ARGUMENT, "set");
  ok(oslo_param_set_add(ps, "w", w, g, 1));
  expect_error(oslo_param_set_add(ps, "w", w, g, 1), OSLO_ERR_INVALID_ARGUMENT, "already");
  expect_error(oslo_param_set_add_linear(ps, "l", NULL), OSLO_ERR_INVALID_ARGUMENT, "layer");
  expect_error(oslo_param_set_add_embedding(ps, NULL, NULL), OSLO_ERR_INVALID_ARGUMENT, "prefix");
  size_t n = 0;
  ok(oslo_param_set_count(ps, &n));
  assert_int_equal(n, 1);
  expect_error(oslo_param_set_count(ps, NULL), OSLO_ERR_INVALID_ARGUMENT, "count");

  double norm = 0;
  ok(oslo_param_set_clip_grad_norm(ps, 0, 2.0, &norm));
  assert_true(norm > 4.999999 && norm < 5.000001);
  ok(oslo_param_set_clip_grad_norm(ps, 0, 1.0, &norm));
  assert_true(norm > 6.999999 && norm < 7.000001);
  ok(oslo_param_set_clip_grad_norm(ps, 0, INFINITY, &norm));
  assert_true(norm == 4.0);
  expect_error(oslo_param_set_clip_grad_norm(ps, 0, 0.5, &norm), OSLO_ERR_INVALID_ARGUMENT,
               "norm_type");
  expect_error(oslo_param_set_clip_grad_norm(NULL, 0, 2.0, &norm), OSLO_ERR_INVALID_ARGUMENT,
               "set");
  ok(oslo_param_set_clip_grad_norm(ps, 1.0, 2.0, &norm));
  float back[6];
  ok(oslo_tensor_copy_to_host(g, back, sizeof back));
  assert_true(back[0] > 0.5999 && back[0] < 0.6001); /* 3 * 1/5 */

  /* checkpoint round trip on one rank, then corruptions */
  char dir[] = "/tmp/oslo-ckpt-XXXXXX";
  assert_non_null(mkdtemp(dir));
  ok(oslo_param_set_save_checkpoint(ps, dir));
  float zero[6] = {0};
  ok(oslo_tensor_copy_from_host(w, zero, sizeof zero));
  ok(oslo_param_set_load_checkpoint(ps, dir));
  ok(oslo_tensor_copy_to_host(w, back, sizeof back));
  assert_memory_equal(back, wv, sizeof wv);
  expect_error(oslo_param_set_save_checkpoint(NULL, dir), OSLO_ERR_INVALID_ARGUMENT, "set");
  expect_error(oslo_param_set_save_checkpoint(ps, NULL), OSLO_ERR_INVALID_ARGUMENT, "dir");
  expect_error(oslo_param_set_load_checkpoint(ps, "/nonexistent/ckpt"), OSLO_ERR_IO,
               "oslo_checkpoint.json");
  expect_error(oslo_param_set_load_checkpoint(NULL, dir), OSLO_ERR_INVALID_ARGUMENT, "set");
  /* a tensor the checkpoint does not have */
  oslo_param_set *other = NULL;
  ok(oslo_param_set_create(ctx, &other));
  ok(oslo_param_set_add(other, "missing", w, NULL, -1));
  expect_error(oslo_param_set_load_checkpoint(other, dir), OSLO_ERR_FORMAT, "missing");
  oslo_param_set_destroy(other);
  /* a global shape that differs */
  oslo_tensor *w2 = tensor2(ctx, OSLO_DTYPE_F32, 3, 3);
  ok(oslo_param_set_create(ctx, &other));
  ok(oslo_param_set_add(other, "w", w2, NULL, 1));
  expect_error(oslo_param_set_load_checkpoint(other, dir), OSLO_ERR_SHAPE, "w");
  oslo_param_set_destroy(other);
  oslo_tensor_destroy(w2);
  /* a corrupt manifest */
  char path[256];
  snprintf(path, sizeof path, "%s/oslo_checkpoint.json", dir);
  FILE *f = fopen(path, "w");
  fputs("{\"not\": \"a manifest\"", f);
  fclose(f);
  expect_error(oslo_param_set_load_checkpoint(ps, dir), OSLO_ERR_FORMAT, NULL);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);

  oslo_param_set_destroy(ps);
  oslo_param_set_destroy(NULL);
  oslo_tensor_destroy(w);
  oslo_tensor_destroy(g);
  oslo_tensor_destroy(g_bad);
}
