/*
 * CMocka tests of every C ABI function on a single rank: normal use and bad
 * input (NULL, wrong shapes and dtypes, invalid JSON, unknown keys, sizes
 * that do not divide). Multi-rank behaviour is in tests/layers.
 */
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include <oslo.h>
#include <oslo/dlpack.h> /* as installed; the build tree mirrors it */

/* Asserts a status and that the last error mentions `needle`. */
static void expect_error(oslo_status got, oslo_status want, const char *needle) {
  if (got != want || (needle && !strstr(oslo_last_error(), needle)))
    fail_msg("got %s (\"%s\"), expected %s mentioning \"%s\"", oslo_status_string(got),
             oslo_last_error(), oslo_status_string(want), needle ? needle : "");
}

static void ok(oslo_status st) {
  if (st != OSLO_OK) fail_msg("%s: %s", oslo_status_string(st), oslo_last_error());
}

static int setup_ctx(void **state) {
  oslo_context *ctx = NULL;
  if (oslo_context_create("{\"timeout_seconds\": 30}", &ctx) != OSLO_OK) return -1;
  *state = ctx;
  return 0;
}

static int teardown_ctx(void **state) {
  oslo_context_destroy((oslo_context *)*state);
  return 0;
}

/* ---- status, errors, version ---- */

static void test_version(void **state) {
  (void)state;
  int ma = -1, mi = -1, pa = -1;
  oslo_version(&ma, &mi, &pa);
  assert_int_equal(ma, OSLO_VERSION_MAJOR);
  assert_int_equal(mi, OSLO_VERSION_MINOR);
  assert_int_equal(pa, OSLO_VERSION_PATCH);
  oslo_version(NULL, NULL, NULL); /* any out-pointer may be NULL */
  assert_string_equal(oslo_version_string(), OSLO_VERSION_STRING);
}

static void test_status_strings(void **state) {
  (void)state;
  for (int s = 0; s < OSLO_STATUS_COUNT; ++s) {
    const char *str = oslo_status_string((oslo_status)s);
    assert_non_null(str);
    assert_null(strstr(str, "unknown"));
  }
  assert_string_equal(oslo_status_string((oslo_status)999), "unknown status");
  assert_string_equal(oslo_status_string((oslo_status)-1), "unknown status");
}

static void test_last_error_never_null(void **state) {
  (void)state;
  oslo_clear_error();
  assert_non_null(oslo_last_error());
  assert_string_equal(oslo_last_error(), "");
  expect_error(oslo_context_create(NULL, NULL), OSLO_ERR_INVALID_ARGUMENT, "out");
  assert_true(strlen(oslo_last_error()) > 0);
  oslo_clear_error();
  assert_string_equal(oslo_last_error(), "");
}

/* ---- context ---- */

static void test_context_defaults(void **state) {
  (void)state;
  const char *configs[] = {NULL, "", "{}", "{\"model_parallelism\": {\"tensor_parallel_size\": 1}}",
                           "{\"backend\": \"cpu\", \"tensor_parallel_size\": 1, "
                           "\"pipeline_parallel_size\": 1, \"data_parallel_size\": 1, "
                           "\"timeout_seconds\": 2.5, \"num_threads\": 1, \"rank\": 0, "
                           "\"world_size\": 1, \"init_method\": \"env://\"}"};
  for (size_t i = 0; i < sizeof configs / sizeof configs[0]; ++i) {
    oslo_context *ctx = NULL;
    ok(oslo_context_create(configs[i], &ctx));
    int v = -1;
    for (int g = OSLO_GROUP_WORLD; g <= OSLO_GROUP_DATA; ++g) {
      ok(oslo_context_rank(ctx, (oslo_group)g, &v));
      assert_int_equal(v, 0);
      ok(oslo_context_size(ctx, (oslo_group)g, &v));
      assert_int_equal(v, 1);
    }
    const char *b = NULL, *t = NULL;
    ok(oslo_context_backend(ctx, OSLO_GROUP_TENSOR, &b, &t));
    assert_string_equal(b, "cpu");
    assert_string_equal(t, "self");
    ok(oslo_context_backend(ctx, OSLO_GROUP_WORLD, &b, NULL));
    oslo_context_destroy(ctx);
  }
}

static void test_context_config_file(void **state) {
  (void)state;
  char path[] = "/tmp/oslo-config-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  const char *json = "{\n  \"model_parallelism\": {\n    \"tensor_parallel_size\": 1\n  }\n}\n";
  assert_int_equal(write(fd, json, strlen(json)), (ssize_t)strlen(json));
  close(fd);
  oslo_context *ctx = NULL;
  ok(oslo_context_create(path, &ctx));
  oslo_context_destroy(ctx);
  /* A file with invalid JSON names the file. */
  fd = open(path, O_WRONLY | O_TRUNC);
  assert_int_equal(write(fd, "{oops", 5), 5);
  close(fd);
  expect_error(oslo_context_create(path, &ctx), OSLO_ERR_FORMAT, path);
  assert_null(ctx);
  unlink(path);
  expect_error(oslo_context_create("/nonexistent/oslo.json", &ctx), OSLO_ERR_IO,
               "/nonexistent/oslo.json");
}

static void test_context_bad_configs(void **state) {
  (void)state;
  struct {
    const char *config;
    oslo_status status;
    const char *needle;
  } cases[] = {
      {"{", OSLO_ERR_FORMAT, "invalid JSON"},
      {"{\"tensor_parallel_size\": 1,}", OSLO_ERR_FORMAT, "invalid JSON"},
      {"[1, 2]", OSLO_ERR_CONFIG, "object"},
      {"{\"tensor_paralel_size\": 2}", OSLO_ERR_CONFIG, "tensor_paralel_size"},
      {"{\"model_parallelism\": {\"tensor_size\": 2}}", OSLO_ERR_CONFIG,
       "model_parallelism.tensor_size"},
      {"{\"model_parallelism\": 2}", OSLO_ERR_CONFIG, "model_parallelism"},
      {"{\"tensor_parallel_size\": \"2\"}", OSLO_ERR_CONFIG, "tensor_parallel_size"},
      {"{\"tensor_parallel_size\": 1.5}", OSLO_ERR_CONFIG, "tensor_parallel_size"},
      {"{\"tensor_parallel_size\": 0}", OSLO_ERR_CONFIG, "tensor_parallel_size"},
      {"{\"pipeline_parallel_size\": -2}", OSLO_ERR_CONFIG, "pipeline_parallel_size"},
      {"{\"data_parallel_size\": 0}", OSLO_ERR_CONFIG, "data_parallel_size"},
      {"{\"timeout_seconds\": 0}", OSLO_ERR_CONFIG, "timeout_seconds"},
      {"{\"timeout_seconds\": \"soon\"}", OSLO_ERR_CONFIG, "timeout_seconds"},
      {"{\"num_threads\": 0}", OSLO_ERR_CONFIG, "num_threads"},
      {"{\"backend\": 3}", OSLO_ERR_CONFIG, "backend"},
      {"{\"backend\": \"nosuch\"}", OSLO_ERR_BACKEND_UNAVAILABLE, "nosuch"},
      {"{\"communicator\": \"nccl\"}", OSLO_ERR_CONFIG, "communicator"},
      {"{\"communicator\": 1}", OSLO_ERR_CONFIG, "communicator"},
      {"{\"init_method\": \"udp://x\"}", OSLO_ERR_CONFIG, "init_method"},
      {"{\"init_method\": \"tcp://host\"}", OSLO_ERR_CONFIG, "init_method"},
      {"{\"init_method\": \"tcp://host:99999\"}", OSLO_ERR_CONFIG, "port"},
      {"{\"init_method\": \"file://relative\"}", OSLO_ERR_CONFIG, "init_method"},
      {"{\"rank\": 0}", OSLO_ERR_CONFIG, "world_size"},
      {"{\"rank\": 2, \"world_size\": 2}", OSLO_ERR_CONFIG, "rank"},
      {"{\"rank\": -1, \"world_size\": 2}", OSLO_ERR_CONFIG, "rank"},
      /* sizes that do not divide the world */
      {"{\"rank\": 0, \"world_size\": 3, \"tensor_parallel_size\": 2}", OSLO_ERR_CONFIG,
       "tensor_parallel_size"},
      {"{\"rank\": 0, \"world_size\": 4, \"tensor_parallel_size\": 2, \"pipeline_parallel_size\": "
       "3}",
       OSLO_ERR_CONFIG, "pipeline_parallel_size"},
      {"{\"rank\": 0, \"world_size\": 4, \"tensor_parallel_size\": 2, \"data_parallel_size\": 3}",
       OSLO_ERR_CONFIG, "data_parallel_size"},
      {"{\"tensor_parallel_size\": 2}", OSLO_ERR_CONFIG, "tensor_parallel_size"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    oslo_context *ctx = (oslo_context *)0x1;
    oslo_status st = oslo_context_create(cases[i].config, &ctx);
    if (st != cases[i].status || !strstr(oslo_last_error(), cases[i].needle))
      fail_msg("config %s: got %s (\"%s\"), expected %s mentioning \"%s\"", cases[i].config,
               oslo_status_string(st), oslo_last_error(), oslo_status_string(cases[i].status),
               cases[i].needle);
    assert_null(ctx);
  }
}

/* Builds {"<key>": <value>} around a long run of `fill` characters: the key
 * (value NULL) or a string value is `n` bytes long, starting with `start`. */
static char *config_with_long(const char *key, const char *start, char fill, size_t n,
                              const char *value_prefix) {
  size_t cap = n + 256;
  char *c = malloc(cap);
  assert_non_null(c);
  size_t len = strlen(start);
  char *big = malloc(n + 1);
  assert_non_null(big);
  memcpy(big, start, len);
  memset(big + len, fill, n - len);
  big[n] = '\0';
  if (key)
    snprintf(c, cap, "{\"%s\": \"%s%s\"}", key, value_prefix ? value_prefix : "", big);
  else
    snprintf(c, cap, "{\"%s\": 1}", big);
  free(big);
  return c;
}

/* Expects `config` to fail with `want`, a message under 1 KB that mentions
 * every needle. */
static void expect_short_error(const char *config, oslo_status want, const char *n1,
                               const char *n2) {
  oslo_context *ctx = (oslo_context *)0x1;
  oslo_status st = oslo_context_create(config, &ctx);
  const char *m = oslo_last_error();
  if (st != want || strlen(m) >= 1024 || (n1 && !strstr(m, n1)) || (n2 && !strstr(m, n2)))
    fail_msg(
        "got %s, message of %zu bytes (\"%.300s\"), expected %s under 1 KB mentioning "
        "\"%s\" and \"%s\"",
        oslo_status_string(st), strlen(m), m, oslo_status_string(want), n1 ? n1 : "", n2 ? n2 : "");
  assert_null(ctx);
}

/* Defect: the backend name went to dlopen unchecked; a 1 MiB name crashed
 * (glibc builds the path on the stack). */
static void backend_name_cases(void) {
  char *huge = config_with_long("backend", "hugebackend", 'x', 1 << 20, NULL);
  expect_short_error(huge, OSLO_ERR_CONFIG, "\"backend\"", "'hugebackendxxx");
  free(huge);
  char name65[128];
  memset(name65, 'b', 65);
  name65[65] = '\0';
  char cfg[256];
  snprintf(cfg, sizeof cfg, "{\"backend\": \"%s\"}", name65);
  expect_short_error(cfg, OSLO_ERR_CONFIG, "backend", "64");
  expect_short_error("{\"backend\": \"\"}", OSLO_ERR_CONFIG, "backend", NULL);
  expect_short_error("{\"backend\": \"../evil\"}", OSLO_ERR_CONFIG, "backend", "'../evil'");
  expect_short_error("{\"backend\": \"a\\u0000b\"}", OSLO_ERR_CONFIG, "backend", "\\x00");
  /* 64 characters is a name: it is looked for, and not found */
  name65[64] = '\0';
  snprintf(cfg, sizeof cfg, "{\"backend\": \"%s\"}", name65);
  expect_short_error(cfg, OSLO_ERR_BACKEND_UNAVAILABLE, name65, NULL);
}

static void *backend_name_thread(void *arg) {
  (void)arg;
  backend_name_cases();
  return NULL;
}

static void test_context_backend_names(void **state) {
  (void)state;
  /* Rank threads may have small stacks: from a 64 KiB one, then from this. */
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  assert_int_equal(pthread_attr_setstacksize(&attr, 64 << 10), 0);
  pthread_t tid;
  assert_int_equal(pthread_create(&tid, &attr, backend_name_thread, NULL), 0);
  pthread_attr_destroy(&attr);
  /* cmocka's assertions do not work in another thread: a failure there ends
   * the process (fail_msg), a crash too; both fail the test. */
  assert_int_equal(pthread_join(tid, NULL), 0);
  backend_name_cases();
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Defect: a config path naming /dev/zero was read without end, a FIFO with
 * no writer blocked forever. alarm() ends the process if one still does. */
static void test_context_config_file_not_regular(void **state) {
  (void)state;
  char dir[] = "/tmp/oslo-config-dir-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char fifo[128], big[128];
  snprintf(fifo, sizeof fifo, "%s/fifo.json", dir);
  snprintf(big, sizeof big, "%s/big.json", dir);
  assert_int_equal(mkfifo(fifo, 0600), 0);
  alarm(60);
  double t0 = now_s();
  expect_short_error("/dev/zero", OSLO_ERR_IO, "'/dev/zero'", "not a regular file");
  expect_short_error(fifo, OSLO_ERR_IO, fifo, "not a regular file");
  expect_short_error(dir, OSLO_ERR_IO, dir, "directory");
  assert_true(now_s() - t0 < 30); /* promptly, not after some internal timeout */
  /* One byte over the 16 MiB limit (sparse), and exactly at it. */
  int fd = open(big, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  assert_true(fd >= 0);
  assert_int_equal(ftruncate(fd, (16 << 20) + 1), 0);
  close(fd);
  expect_short_error(big, OSLO_ERR_IO, big, "limit");
  /* Exactly at the limit: "{}" and spaces, read and accepted. */
  fd = open(big, O_WRONLY | O_TRUNC);
  assert_true(fd >= 0);
  char *spaces = malloc(1 << 20);
  assert_non_null(spaces);
  memset(spaces, ' ', 1 << 20);
  memcpy(spaces, "{}", 2);
  for (int i = 0; i < 16; ++i) {
    assert_int_equal(write(fd, spaces, 1 << 20), 1 << 20);
    spaces[0] = spaces[1] = ' ';
  }
  free(spaces);
  close(fd);
  oslo_context *ctx = NULL;
  ok(oslo_context_create(big, &ctx));
  oslo_context_destroy(ctx);
  alarm(0);
  unlink(fifo);
  unlink(big);
  rmdir(dir);
}

/* Defect: nlohmann exceptions other than parse_error (e.g. the out_of_range
 * of 1e400) escaped as OSLO_ERR_INTERNAL. */
static void test_context_json_exceptions(void **state) {
  (void)state;
  struct {
    const char *config;
    oslo_status status;
    const char *needle;
  } cases[] = {
      {"{\"timeout_seconds\": 1e400}", OSLO_ERR_FORMAT, "1e400"},
      {"{\"timeout_seconds\": -1e400}", OSLO_ERR_FORMAT, "overflow"},
      {"{\"tensor_parallel_size\": 1e400}", OSLO_ERR_FORMAT, "invalid JSON"},
      {"{\"tensor_parallel_size\": 18446744073709551615}", OSLO_ERR_CONFIG, "18446744073709551615"},
      {"{\"tensor_parallel_size\": 18446744073709551616}", OSLO_ERR_CONFIG, "integer"},
      {"{\"rank\": -9223372036854775809, \"world_size\": 2}", OSLO_ERR_CONFIG, "rank"},
      {"{\"num_threads\": 16777217}", OSLO_ERR_CONFIG, "num_threads"},
      {"{\"backend\": \"\\ud800\"}", OSLO_ERR_FORMAT, "invalid JSON"},
      {"{\"backend\": \"\xff\"}", OSLO_ERR_FORMAT, "invalid JSON"},
      {"{\"backend\": NaN}", OSLO_ERR_FORMAT, "invalid JSON"},
      {"{\"timeout_seconds\": 1e10}", OSLO_ERR_CONFIG, "timeout_seconds"},
      {"{\"timeout_seconds\": 10000001}", OSLO_ERR_CONFIG, "at most"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    oslo_context *ctx = (oslo_context *)0x1;
    oslo_status st = oslo_context_create(cases[i].config, &ctx);
    if (st != cases[i].status || !strstr(oslo_last_error(), cases[i].needle))
      fail_msg("config %s: got %s (\"%s\"), expected %s mentioning \"%s\"", cases[i].config,
               oslo_status_string(st), oslo_last_error(), oslo_status_string(cases[i].status),
               cases[i].needle);
    assert_null(ctx);
  }
  /* The largest accepted timeout. */
  oslo_context *ctx = NULL;
  ok(oslo_context_create("{\"timeout_seconds\": 1e7}", &ctx));
  oslo_context_destroy(ctx);
  /* Deep nesting: printing or walking it would recurse 100000 levels. */
  const size_t depth = 100000;
  char *deep = malloc(2 * depth + 64);
  assert_non_null(deep);
  strcpy(deep, "{\"tensor_parallel_size\": ");
  size_t len = strlen(deep);
  memset(deep + len, '[', depth);
  memset(deep + len + depth, ']', depth);
  strcpy(deep + len + 2 * depth, "}");
  expect_short_error(deep, OSLO_ERR_CONFIG, "nested", NULL);
  free(deep);
}

/* Defect: messages quoted user strings in full (a 10 MB key, 10 MB). */
static void test_context_long_strings_clipped(void **state) {
  (void)state;
  const size_t n = 10u << 20;
  char *c = config_with_long(NULL, "my_unknown_key_", 'k', n, NULL);
  expect_short_error(c, OSLO_ERR_CONFIG, "unknown key \"my_unknown_key_kkk", "10485760 bytes");
  free(c);
  c = config_with_long("init_method", "udp://", 'h', n, NULL);
  expect_short_error(c, OSLO_ERR_CONFIG, "init_method", "'udp://hhh");
  free(c);
  c = config_with_long("init_method", "tcp://", 'h', n, NULL);
  expect_short_error(c, OSLO_ERR_CONFIG, "init_method", "'tcp://hhh");
  free(c);
  c = config_with_long("tensor_parallel_size", "v", 'v', n, NULL);
  expect_short_error(c, OSLO_ERR_CONFIG, "tensor_parallel_size", "\"vvv");
  free(c);
  c = config_with_long("backend", "b!", 'b', n, NULL);
  expect_short_error(c, OSLO_ERR_CONFIG, "backend", "'b!bbb");
  free(c);
  /* A path that is not JSON: 10 MB of it */
  char *path = malloc(n + 1);
  assert_non_null(path);
  memset(path, 'p', n);
  memcpy(path, "/tmp/", 5);
  path[n] = '\0';
  expect_short_error(path, OSLO_ERR_IO, "'/tmp/ppp", "bytes)");
  free(path);
  /* invalid JSON whose last token is a 10 MB string */
  c = config_with_long("backend", "s", 's', n, NULL);
  c[strlen(c) - 2] = '\0'; /* drop the closing quote and brace */
  expect_short_error(c, OSLO_ERR_FORMAT, "invalid JSON", NULL);
  free(c);
}

/* Defect: duplicate keys were accepted silently (the last won). */
static void test_context_duplicate_keys(void **state) {
  (void)state;
  expect_short_error("{\"tensor_parallel_size\": 1, \"tensor_parallel_size\": 1}", OSLO_ERR_CONFIG,
                     "duplicate key", "\"tensor_parallel_size\"");
  expect_short_error("{\"timeout_seconds\": 5, \"backend\": \"cpu\", \"timeout_seconds\": 600}",
                     OSLO_ERR_CONFIG, "duplicate key", "\"timeout_seconds\"");
  expect_short_error(
      "{\"model_parallelism\": {\"tensor_parallel_size\": 1, "
      "\"tensor_parallel_size\": 2}}",
      OSLO_ERR_CONFIG, "duplicate key", "\"model_parallelism.tensor_parallel_size\"");
  expect_short_error(
      "{\"model_parallelism\": {\"tensor_parallel_size\": 1}, "
      "\"model_parallelism\": {}}",
      OSLO_ERR_CONFIG, "duplicate key", "\"model_parallelism\"");
  /* Same key in different objects is not a duplicate. */
  oslo_context *ctx = NULL;
  ok(
      oslo_context_create("{\"model_parallelism\": {\"tensor_parallel_size\": 1}, "
                          "\"tensor_parallel_size\": 1}",
                          &ctx));
  oslo_context_destroy(ctx);
  /* In a file too, naming the file. */
  char path[] = "/tmp/oslo-config-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  const char *json = "{\"num_threads\": 1,\n \"num_threads\": 2}\n";
  assert_int_equal(write(fd, json, strlen(json)), (ssize_t)strlen(json));
  close(fd);
  expect_short_error(path, OSLO_ERR_CONFIG, path, "\"num_threads\"");
  unlink(path);
}

static void test_context_null_args(void **state) {
  oslo_context *ctx = (oslo_context *)*state;
  int v;
  const char *s;
  expect_error(oslo_context_rank(ctx, OSLO_GROUP_WORLD, NULL), OSLO_ERR_INVALID_ARGUMENT, "rank");
  expect_error(oslo_context_rank(NULL, OSLO_GROUP_WORLD, &v), OSLO_ERR_INVALID_ARGUMENT, "ctx");
  expect_error(oslo_context_rank(ctx, (oslo_group)7, &v), OSLO_ERR_INVALID_ARGUMENT, "group");
  expect_error(oslo_context_size(ctx, OSLO_GROUP_WORLD, NULL), OSLO_ERR_INVALID_ARGUMENT, "size");
  expect_error(oslo_context_size(NULL, OSLO_GROUP_WORLD, &v), OSLO_ERR_INVALID_ARGUMENT, "ctx");
  expect_error(oslo_context_size(ctx, (oslo_group)-1, &v), OSLO_ERR_INVALID_ARGUMENT, "group");
  expect_error(oslo_context_backend(ctx, OSLO_GROUP_WORLD, NULL, NULL), OSLO_ERR_INVALID_ARGUMENT,
               "backend");
  expect_error(oslo_context_backend(NULL, OSLO_GROUP_WORLD, &s, NULL), OSLO_ERR_INVALID_ARGUMENT,
               "ctx");
  expect_error(oslo_context_abort(NULL), OSLO_ERR_INVALID_ARGUMENT, "ctx");
  oslo_context_destroy(NULL);
}

static void test_context_abort(void **state) {
  (void)state;
  oslo_context *ctx = NULL;
  ok(oslo_context_create(NULL, &ctx));
  ok(oslo_context_abort(ctx));
  expect_error(oslo_context_barrier(ctx, OSLO_GROUP_WORLD), OSLO_ERR_COMM, "abort");
  oslo_context_destroy(ctx);
}

/* ---- tensors ---- */

static void test_tensor_create_and_query(void **state) {
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

static void test_tensor_bad_args(void **state) {
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

static void test_tensor_wrap_no_copy(void **state) {
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

static void test_dlpack(void **state) {
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
static void test_dlpack_round_trip(void **state) {
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

static void test_dlpack_versioned(void **state) {
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

static void test_collectives_single(void **state) {
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

/* ---- layers ---- */

static oslo_tensor *tensor2(oslo_context *ctx, oslo_dtype dt, int64_t a, int64_t b) {
  int64_t shape[2] = {a, b};
  oslo_tensor *t = NULL;
  ok(oslo_tensor_create(ctx, dt, 2, shape, &t));
  return t;
}

/* Every options struct: version 0 (never initialised) and versions newer than
   the library are refused naming the version; _init writes its version. */
static void test_options_versions(void **state) {
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

static void test_linear_bad_args(void **state) {
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
static void test_linear_low_precision(void **state) {
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
static void test_linear_mixed_dtypes(void **state) {
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

static void test_embedding_bad_args(void **state) {
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

static void test_cross_entropy_bad_args(void **state) {
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

static void test_param_set_and_checkpoint_errors(void **state) {
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

int main(int argc, char **argv) {
  if (argc > 1) cmocka_set_test_filter(argv[1]); /* e.g. "test_context_*" */
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_version),
      cmocka_unit_test(test_status_strings),
      cmocka_unit_test(test_last_error_never_null),
      cmocka_unit_test(test_context_defaults),
      cmocka_unit_test(test_context_config_file),
      cmocka_unit_test(test_context_bad_configs),
      cmocka_unit_test(test_context_abort),
      cmocka_unit_test(test_context_backend_names),
      cmocka_unit_test(test_context_config_file_not_regular),
      cmocka_unit_test(test_context_json_exceptions),
      cmocka_unit_test(test_context_long_strings_clipped),
      cmocka_unit_test(test_context_duplicate_keys),
      cmocka_unit_test_setup_teardown(test_context_null_args, setup_ctx, teardown_ctx),
      cmocka_unit_test_setup_teardown(test_tensor_create_and_query, setup_ctx, teardown_ctx),
      cmocka_unit_test_setup_teardown(test_tensor_bad_args, setup_ctx, teardown_ctx),
      cmocka_unit_test_setup_teardown(test_tensor_wrap_no_copy, setup_ctx, teardown_ctx),
      cmocka_unit_test_setup_teardown(test_dlpack, setup_ctx, teardown_ctx),
      cmocka_unit_test_setup_teardown(test_dlpack_round_trip, setup_ctx, teardown_ctx),
      cmocka_unit_test_setup_teardown(test_dlpack_versioned, setup_ctx, teardown_ctx),
      cmocka_unit_test_setup_teardown(test_collectives_single, setup_ctx, teardown_ctx),
      cmocka_unit_test_setup_teardown(test_options_versions, setup_ctx, teardown_ctx),
      cmocka_unit_test_setup_teardown(test_linear_bad_args, setup_ctx, teardown_ctx),
      cmocka_unit_test_setup_teardown(test_linear_low_precision, setup_ctx, teardown_ctx),
      cmocka_unit_test_setup_teardown(test_linear_mixed_dtypes, setup_ctx, teardown_ctx),
      cmocka_unit_test_setup_teardown(test_embedding_bad_args, setup_ctx, teardown_ctx),
      cmocka_unit_test_setup_teardown(test_cross_entropy_bad_args, setup_ctx, teardown_ctx),
      cmocka_unit_test_setup_teardown(test_param_set_and_checkpoint_errors, setup_ctx,
                                      teardown_ctx),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
