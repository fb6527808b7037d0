/*
 * CMocka tests of every C ABI function on a single rank: normal use and bad
 * input (NULL, wrong shapes and dtypes, invalid JSON, unknown keys, sizes
 * that do not divide). Multi-rank behaviour is in tests/multirank.
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

#include "dlpack/dlpack.h"
#include "oslo.h"

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
  if (oslo_context_create(&ctx, "{\"timeout_seconds\": 30}") != OSLO_OK) return -1;
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
    ok(oslo_context_create(&ctx, configs[i]));
    int v = -1;
    for (int g = OSLO_GROUP_WORLD; g <= OSLO_GROUP_DATA; ++g) {
      ok(oslo_context_rank(&v, ctx, (oslo_group)g));
      assert_int_equal(v, 0);
      ok(oslo_context_size(&v, ctx, (oslo_group)g));
      assert_int_equal(v, 1);
    }
    const char *b = NULL, *t = NULL;
    ok(oslo_context_backend(&b, &t, ctx, OSLO_GROUP_TENSOR));
    assert_string_equal(b, "cpu");
    assert_string_equal(t, "self");
    ok(oslo_context_backend(&b, NULL, ctx, OSLO_GROUP_WORLD));
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
  ok(oslo_context_create(&ctx, path));
  oslo_context_destroy(ctx);
  /* A file with invalid JSON names the file. */
  fd = open(path, O_WRONLY | O_TRUNC);
  assert_int_equal(write(fd, "{oops", 5), 5);
  close(fd);
  expect_error(oslo_context_create(&ctx, path), OSLO_ERR_FORMAT, path);
  assert_null(ctx);
  unlink(path);
  expect_error(oslo_context_create(&ctx, "/nonexistent/oslo.json"), OSLO_ERR_IO,
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
    oslo_status st = oslo_context_create(&ctx, cases[i].config);
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
  oslo_status st = oslo_context_create(&ctx, config);
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
  ok(oslo_context_create(&ctx, big));
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
    oslo_status st = oslo_context_create(&ctx, cases[i].config);
    if (st != cases[i].status || !strstr(oslo_last_error(), cases[i].needle))
      fail_msg("config %s: got %s (\"%s\"), expected %s mentioning \"%s\"", cases[i].config,
               oslo_status_string(st), oslo_last_error(), oslo_status_string(cases[i].status),
               cases[i].needle);
    assert_null(ctx);
  }
  /* The largest accepted timeout. */
  oslo_context *ctx = NULL;
  ok(oslo_context_create(&ctx, "{\"timeout_seconds\": 1e7}"));
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
  ok(oslo_context_create(&ctx,
                         "{\"model_parallelism\": {\"tensor_parallel_size\": 1}, "
                         "\"tensor_parallel_size\": 1}"));
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
  expect_error(oslo_context_rank(NULL, ctx, OSLO_GROUP_WORLD), OSLO_ERR_INVALID_ARGUMENT, "rank");
  expect_error(oslo_context_rank(&v, NULL, OSLO_GROUP_WORLD), OSLO_ERR_INVALID_ARGUMENT, "ctx");
  expect_error(oslo_context_rank(&v, ctx, (oslo_group)7), OSLO_ERR_INVALID_ARGUMENT, "group");
  expect_error(oslo_context_size(NULL, ctx, OSLO_GROUP_WORLD), OSLO_ERR_INVALID_ARGUMENT, "size");
  expect_error(oslo_context_size(&v, NULL, OSLO_GROUP_WORLD), OSLO_ERR_INVALID_ARGUMENT, "ctx");
  expect_error(oslo_context_size(&v, ctx, (oslo_group)-1), OSLO_ERR_INVALID_ARGUMENT, "group");
  expect_error(oslo_context_backend(NULL, NULL, ctx, OSLO_GROUP_WORLD), OSLO_ERR_INVALID_ARGUMENT,
               "backend");
  expect_error(oslo_context_backend(&s, NULL, NULL, OSLO_GROUP_WORLD), OSLO_ERR_INVALID_ARGUMENT,
               "ctx");
  expect_error(oslo_context_abort(NULL), OSLO_ERR_INVALID_ARGUMENT, "ctx");
  oslo_context_destroy(NULL);
}

static void test_context_abort(void **state) {
  (void)state;
  oslo_context *ctx = NULL;
  ok(oslo_context_create(&ctx, NULL));
  ok(oslo_context_abort(ctx));
  expect_error(oslo_barrier(ctx, OSLO_GROUP_WORLD), OSLO_ERR_COMM, "abort");
  oslo_context_destroy(ctx);
}

/* ---- tensors ---- */

static void test_tensor_create_and_query(void **state) {
  oslo_context *ctx = (oslo_context *)*state;
  int64_t shape[3] = {2, 3, 4};
  oslo_dtype dts[] = {OSLO_F32, OSLO_F16, OSLO_BF16, OSLO_I32, OSLO_I64};
  size_t sizes[] = {4, 2, 2, 4, 8};
  for (int d = 0; d < 5; ++d) {
    oslo_tensor *t = NULL;
    ok(oslo_tensor_create(&t, ctx, dts[d], 3, shape));
    int nd = 0;
    int64_t sh[OSLO_MAX_DIMS], n = 0;
    oslo_dtype dt;
    void *data = NULL;
    ok(oslo_tensor_ndim(&nd, t));
    ok(oslo_tensor_shape(sh, t));
    ok(oslo_tensor_numel(&n, t));
    ok(oslo_tensor_dtype(&dt, t));
    ok(oslo_tensor_data(&data, t));
    assert_int_equal(nd, 3);
    assert_int_equal(sh[0], 2);
    assert_int_equal(sh[2], 4);
    assert_int_equal(n, 24);
    assert_int_equal(dt, dts[d]);
    assert_non_null(data);
    /* zero-filled */
    unsigned char buf[24 * 8];
    ok(oslo_tensor_copy_to_host(buf, 24 * sizes[d], t));
    for (size_t i = 0; i < 24 * sizes[d]; ++i) assert_int_equal(buf[i], 0);
    /* round trip through host memory */
    for (size_t i = 0; i < 24 * sizes[d]; ++i) buf[i] = (unsigned char)i;
    ok(oslo_tensor_copy_from_host(t, buf, 24 * sizes[d]));
    unsigned char back[24 * 8];
    ok(oslo_tensor_copy_to_host(back, 24 * sizes[d], t));
    assert_memory_equal(buf, back, 24 * sizes[d]);
    /* wrong byte counts name both sizes */
    expect_error(oslo_tensor_copy_from_host(t, buf, 24 * sizes[d] - 1), OSLO_ERR_SHAPE, "holds");
    expect_error(oslo_tensor_copy_to_host(back, 24 * sizes[d] + 1, t), OSLO_ERR_SHAPE, "holds");
    oslo_tensor_destroy(t);
  }
  /* 0-d and empty tensors */
  oslo_tensor *t = NULL;
  int64_t n = -1;
  ok(oslo_tensor_create(&t, ctx, OSLO_F32, 0, NULL));
  ok(oslo_tensor_numel(&n, t));
  assert_int_equal(n, 1);
  oslo_tensor_destroy(t);
  int64_t empty[2] = {0, 5};
  ok(oslo_tensor_create(&t, ctx, OSLO_F32, 2, empty));
  ok(oslo_tensor_numel(&n, t));
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
  expect_error(oslo_tensor_create(NULL, ctx, OSLO_F32, 2, shape), OSLO_ERR_INVALID_ARGUMENT, "out");
  expect_error(oslo_tensor_create(&t, NULL, OSLO_F32, 2, shape), OSLO_ERR_INVALID_ARGUMENT, "ctx");
  assert_null(t);
  expect_error(oslo_tensor_create(&t, ctx, (oslo_dtype)42, 2, shape), OSLO_ERR_DTYPE, "dtype");
  expect_error(oslo_tensor_create(&t, ctx, OSLO_F32, 2, NULL), OSLO_ERR_INVALID_ARGUMENT, "shape");
  expect_error(oslo_tensor_create(&t, ctx, OSLO_F32, -1, shape), OSLO_ERR_INVALID_ARGUMENT, "ndim");
  expect_error(oslo_tensor_create(&t, ctx, OSLO_F32, 9, nine), OSLO_ERR_INVALID_ARGUMENT, "ndim");
  expect_error(oslo_tensor_create(&t, ctx, OSLO_F32, 2, neg), OSLO_ERR_INVALID_ARGUMENT,
               "negative");
  expect_error(oslo_tensor_create(&t, ctx, OSLO_F32, 3, huge), OSLO_ERR_INVALID_ARGUMENT,
               "too large");
  expect_error(oslo_tensor_wrap(&t, ctx, NULL, OSLO_F32, 2, shape), OSLO_ERR_INVALID_ARGUMENT,
               "NULL");
  expect_error(oslo_tensor_wrap(NULL, ctx, NULL, OSLO_F32, 2, shape), OSLO_ERR_INVALID_ARGUMENT,
               "out");
  float x;
  int nd;
  int64_t sh[OSLO_MAX_DIMS];
  oslo_dtype dt;
  void *p;
  expect_error(oslo_tensor_copy_from_host(NULL, &x, 4), OSLO_ERR_INVALID_ARGUMENT, "dst");
  expect_error(oslo_tensor_copy_to_host(&x, 4, NULL), OSLO_ERR_INVALID_ARGUMENT, "src");
  expect_error(oslo_tensor_ndim(&nd, NULL), OSLO_ERR_INVALID_ARGUMENT, "tensor");
  expect_error(oslo_tensor_ndim(NULL, NULL), OSLO_ERR_INVALID_ARGUMENT, "ndim");
  expect_error(oslo_tensor_shape(sh, NULL), OSLO_ERR_INVALID_ARGUMENT, "tensor");
  expect_error(oslo_tensor_dtype(&dt, NULL), OSLO_ERR_INVALID_ARGUMENT, "tensor");
  expect_error(oslo_tensor_numel(NULL, NULL), OSLO_ERR_INVALID_ARGUMENT, "numel");
  expect_error(oslo_tensor_data(&p, NULL), OSLO_ERR_INVALID_ARGUMENT, "tensor");
  ok(oslo_tensor_create(&t, ctx, OSLO_F32, 2, shape));
  expect_error(oslo_tensor_copy_from_host(t, NULL, 24), OSLO_ERR_INVALID_ARGUMENT, "src");
  expect_error(oslo_tensor_shape(NULL, t), OSLO_ERR_INVALID_ARGUMENT, "shape");
  expect_error(oslo_tensor_dtype(NULL, t), OSLO_ERR_INVALID_ARGUMENT, "dtype");
  expect_error(oslo_tensor_data(NULL, t), OSLO_ERR_INVALID_ARGUMENT, "data");
  oslo_tensor_destroy(t);
}

static void test_tensor_wrap_no_copy(void **state) {
  oslo_context *ctx = (oslo_context *)*state;
  float mem[6] = {1, 2, 3, 4, 5, 6};
  int64_t shape[2] = {2, 3};
  oslo_tensor *t = NULL;
  ok(oslo_tensor_wrap(&t, ctx, mem, OSLO_F32, 2, shape));
  void *p = NULL;
  ok(oslo_tensor_data(&p, t));
  assert_ptr_equal(p, mem);
  ok(oslo_all_reduce(ctx, OSLO_GROUP_WORLD, t, OSLO_SUM)); /* one rank: identity */
  mem[0] = 42;
  float back[6];
  ok(oslo_tensor_copy_to_host(back, sizeof back, t));
  assert_true(back[0] == 42.f);
  oslo_tensor_destroy(t);
  assert_true(mem[5] == 6.f); /* caller memory untouched by destroy */
}

static int dl_deleted;
static void count_delete(DLManagedTensor *m) {
  dl_deleted++;
  (void)m;
}

static void test_dlpack(void **state) {
  oslo_context *ctx = (oslo_context *)*state;
  int64_t shape[2] = {2, 3};
  oslo_tensor *t = NULL;
  ok(oslo_tensor_create(&t, ctx, OSLO_BF16, 2, shape));
  DLManagedTensor *m = NULL;
  ok(oslo_tensor_to_dlpack(&m, t));
  assert_int_equal(m->dl_tensor.ndim, 2);
  assert_int_equal(m->dl_tensor.shape[1], 3);
  assert_int_equal(m->dl_tensor.dtype.code, kDLBfloat);
  assert_int_equal(m->dl_tensor.device.device_type, kDLCPU);
  void *p = NULL;
  ok(oslo_tensor_data(&p, t));
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
  ok(oslo_tensor_from_dlpack(&imp, ctx, &in));
  ok(oslo_tensor_data(&p, imp));
  assert_ptr_equal(p, mem);
  assert_int_equal(dl_deleted, 0);
  oslo_tensor_destroy(imp);
  assert_int_equal(dl_deleted, 1);

  /* strided, wrong device, unsupported type: refused, caller keeps ownership */
  int64_t strides[2] = {1, 2};
  in.dl_tensor.strides = strides;
  expect_error(oslo_tensor_from_dlpack(&imp, ctx, &in), OSLO_ERR_NOT_SUPPORTED, "contiguous");
  assert_null(imp);
  in.dl_tensor.strides = NULL;
  in.dl_tensor.device.device_type = kDLCUDA;
  expect_error(oslo_tensor_from_dlpack(&imp, ctx, &in), OSLO_ERR_NOT_SUPPORTED, "device");
  in.dl_tensor.device.device_type = kDLCPU;
  in.dl_tensor.dtype.code = kDLUInt;
  in.dl_tensor.dtype.bits = 8;
  expect_error(oslo_tensor_from_dlpack(&imp, ctx, &in), OSLO_ERR_DTYPE, "not supported");
  assert_int_equal(dl_deleted, 1);
  expect_error(oslo_tensor_from_dlpack(&imp, ctx, NULL), OSLO_ERR_INVALID_ARGUMENT, "managed");
  expect_error(oslo_tensor_from_dlpack(&imp, NULL, &in), OSLO_ERR_INVALID_ARGUMENT, "ctx");
  expect_error(oslo_tensor_to_dlpack(&m, NULL), OSLO_ERR_INVALID_ARGUMENT, "tensor");
  expect_error(oslo_tensor_to_dlpack(NULL, NULL), OSLO_ERR_INVALID_ARGUMENT, "out");
}

/* ---- collectives on one rank ---- */

static void test_collectives_single(void **state) {
  oslo_context *ctx = (oslo_context *)*state;
  int64_t n4[1] = {4}, n8[1] = {8};
  float v[4] = {1, -2, 3, 4}, out[8];
  oslo_tensor *t = NULL, *big = NULL, *i32 = NULL;
  ok(oslo_tensor_create(&t, ctx, OSLO_F32, 1, n4));
  ok(oslo_tensor_create(&big, ctx, OSLO_F32, 1, n8));
  ok(oslo_tensor_create(&i32, ctx, OSLO_I32, 1, n4));
  ok(oslo_tensor_copy_from_host(t, v, sizeof v));
  for (int op = OSLO_SUM; op <= OSLO_MIN; ++op)
    ok(oslo_all_reduce(ctx, OSLO_GROUP_TENSOR, t, (oslo_reduce_op)op));
  ok(oslo_tensor_copy_to_host(out, sizeof v, t));
  assert_memory_equal(out, v, sizeof v);
  ok(oslo_all_gather(t, ctx, OSLO_GROUP_WORLD, t));
  ok(oslo_reduce_scatter(t, ctx, OSLO_GROUP_DATA, t, OSLO_SUM));
  ok(oslo_broadcast(ctx, OSLO_GROUP_PIPELINE, t, 0));
  ok(oslo_barrier(ctx, OSLO_GROUP_WORLD));
  /* bad arguments */
  expect_error(oslo_all_reduce(NULL, OSLO_GROUP_WORLD, t, OSLO_SUM), OSLO_ERR_INVALID_ARGUMENT,
               "ctx");
  expect_error(oslo_all_reduce(ctx, (oslo_group)9, t, OSLO_SUM), OSLO_ERR_INVALID_ARGUMENT,
               "group");
  expect_error(oslo_all_reduce(ctx, OSLO_GROUP_WORLD, NULL, OSLO_SUM), OSLO_ERR_INVALID_ARGUMENT,
               "tensor");
  expect_error(oslo_all_reduce(ctx, OSLO_GROUP_WORLD, t, (oslo_reduce_op)7),
               OSLO_ERR_INVALID_ARGUMENT, "op");
  expect_error(oslo_all_gather(big, ctx, OSLO_GROUP_WORLD, t), OSLO_ERR_SHAPE, "elements");
  expect_error(oslo_all_gather(i32, ctx, OSLO_GROUP_WORLD, t), OSLO_ERR_DTYPE, "i32");
  expect_error(oslo_all_gather(NULL, ctx, OSLO_GROUP_WORLD, t), OSLO_ERR_INVALID_ARGUMENT,
               "output");
  expect_error(oslo_all_gather(t, ctx, OSLO_GROUP_WORLD, NULL), OSLO_ERR_INVALID_ARGUMENT, "input");
  expect_error(oslo_reduce_scatter(t, ctx, OSLO_GROUP_WORLD, big, OSLO_SUM), OSLO_ERR_SHAPE,
               "elements");
  expect_error(oslo_reduce_scatter(i32, ctx, OSLO_GROUP_WORLD, t, OSLO_SUM), OSLO_ERR_DTYPE, "f32");
  expect_error(oslo_reduce_scatter(t, ctx, OSLO_GROUP_WORLD, t, (oslo_reduce_op)-1),
               OSLO_ERR_INVALID_ARGUMENT, "op");
  expect_error(oslo_broadcast(ctx, OSLO_GROUP_WORLD, t, 1), OSLO_ERR_INVALID_ARGUMENT, "root");
  expect_error(oslo_broadcast(ctx, OSLO_GROUP_WORLD, NULL, 0), OSLO_ERR_INVALID_ARGUMENT, "tensor");
  expect_error(oslo_send(ctx, OSLO_GROUP_WORLD, t, 0), OSLO_ERR_INVALID_ARGUMENT, "peer");
  expect_error(oslo_send(ctx, OSLO_GROUP_WORLD, t, 1), OSLO_ERR_INVALID_ARGUMENT, "peer");
  expect_error(oslo_recv(t, ctx, OSLO_GROUP_WORLD, -1), OSLO_ERR_INVALID_ARGUMENT, "peer");
  expect_error(oslo_recv(NULL, ctx, OSLO_GROUP_WORLD, 0), OSLO_ERR_INVALID_ARGUMENT, "tensor");
  expect_error(oslo_send(NULL, OSLO_GROUP_WORLD, t, 0), OSLO_ERR_INVALID_ARGUMENT, "ctx");
  expect_error(oslo_barrier(NULL, OSLO_GROUP_WORLD), OSLO_ERR_INVALID_ARGUMENT, "ctx");
  expect_error(oslo_barrier(ctx, (oslo_group)4), OSLO_ERR_INVALID_ARGUMENT, "group");
  oslo_tensor_destroy(t);
  oslo_tensor_destroy(big);
  oslo_tensor_destroy(i32);
}

/* ---- layers ---- */

static oslo_tensor *tensor2(oslo_context *ctx, oslo_dtype dt, int64_t a, int64_t b) {
  int64_t shape[2] = {a, b};
  oslo_tensor *t = NULL;
  ok(oslo_tensor_create(&t, ctx, dt, 2, shape));
  return t;
}

static void test_linear_bad_args(void **state) {
  oslo_context *ctx = (oslo_context *)*state;
  oslo_linear_options o = oslo_linear_default_options();
  assert_int_equal(o.kind, OSLO_COLUMN_PARALLEL);
  assert_int_equal(o.bias, 1);
  assert_int_equal(o.dtype, OSLO_F32);
  oslo_parallel_linear *l = (oslo_parallel_linear *)0x1;
  expect_error(oslo_parallel_linear_create(&l, ctx, &o), OSLO_ERR_INVALID_ARGUMENT, "positive");
  assert_null(l);
  o.in_features = 4;
  o.out_features = 6;
  expect_error(oslo_parallel_linear_create(NULL, ctx, &o), OSLO_ERR_INVALID_ARGUMENT, "out");
  expect_error(oslo_parallel_linear_create(&l, NULL, &o), OSLO_ERR_INVALID_ARGUMENT, "ctx");
  expect_error(oslo_parallel_linear_create(&l, ctx, NULL), OSLO_ERR_INVALID_ARGUMENT, "options");
  o.kind = (oslo_linear_kind)5;
  expect_error(oslo_parallel_linear_create(&l, ctx, &o), OSLO_ERR_INVALID_ARGUMENT, "kind");
  o.kind = OSLO_ROW_PARALLEL;
  o.dtype = OSLO_I32;
  expect_error(oslo_parallel_linear_create(&l, ctx, &o), OSLO_ERR_DTYPE, "dtype");
  o.dtype = OSLO_F32;
  ok(oslo_parallel_linear_create(&l, ctx, &o));

  oslo_tensor *w_bad = tensor2(ctx, OSLO_F32, 4, 6), *w = tensor2(ctx, OSLO_F32, 6, 4);
  oslo_tensor *wi = tensor2(ctx, OSLO_I64, 6, 4);
  oslo_tensor *x = tensor2(ctx, OSLO_F32, 3, 4), *x_bad = tensor2(ctx, OSLO_F32, 3, 5);
  oslo_tensor *y = tensor2(ctx, OSLO_F32, 3, 6), *y_bad = tensor2(ctx, OSLO_F32, 2, 6);
  oslo_tensor *xi = tensor2(ctx, OSLO_I32, 3, 4);
  expect_error(oslo_parallel_linear_load_full(l, w_bad, NULL), OSLO_ERR_SHAPE, "[6, 4]");
  expect_error(oslo_parallel_linear_load_full(l, wi, NULL), OSLO_ERR_DTYPE, "i64");
  expect_error(oslo_parallel_linear_load_full(l, NULL, NULL), OSLO_ERR_INVALID_ARGUMENT, "weight");
  expect_error(oslo_parallel_linear_load_full(NULL, w, NULL), OSLO_ERR_INVALID_ARGUMENT, "layer");
  expect_error(oslo_parallel_linear_load_full(l, w, w), OSLO_ERR_SHAPE, "bias");
  expect_error(oslo_parallel_linear_load_shard(l, w_bad, NULL), OSLO_ERR_SHAPE, "shard");
  expect_error(oslo_parallel_linear_load_shard(NULL, w, NULL), OSLO_ERR_INVALID_ARGUMENT, "layer");
  ok(oslo_parallel_linear_load_full(l, w, NULL));
  ok(oslo_parallel_linear_load_shard(l, w, NULL));
  ok(oslo_parallel_linear_forward(y, l, x));
  expect_error(oslo_parallel_linear_forward(y, l, x_bad), OSLO_ERR_SHAPE,
               "last dimension must be 4");
  expect_error(oslo_parallel_linear_forward(y_bad, l, x), OSLO_ERR_SHAPE, "rows");
  expect_error(oslo_parallel_linear_forward(y, l, xi), OSLO_ERR_DTYPE, "i32");
  expect_error(oslo_parallel_linear_forward(NULL, l, x), OSLO_ERR_INVALID_ARGUMENT, "output");
  expect_error(oslo_parallel_linear_forward(y, l, NULL), OSLO_ERR_INVALID_ARGUMENT, "input");
  expect_error(oslo_parallel_linear_forward(y, NULL, x), OSLO_ERR_INVALID_ARGUMENT, "layer");
  ok(oslo_parallel_linear_backward(x, l, x, y));
  ok(oslo_parallel_linear_backward(NULL, l, x, y));
  expect_error(oslo_parallel_linear_backward(x_bad, l, x, y), OSLO_ERR_SHAPE, "grad_input");
  expect_error(oslo_parallel_linear_backward(x, l, x, y_bad), OSLO_ERR_SHAPE, "grad_output");
  expect_error(oslo_parallel_linear_backward(x, l, NULL, y), OSLO_ERR_INVALID_ARGUMENT, "input");
  expect_error(oslo_parallel_linear_backward(x, NULL, x, y), OSLO_ERR_INVALID_ARGUMENT, "layer");
  ok(oslo_parallel_linear_zero_grad(l));
  expect_error(oslo_parallel_linear_zero_grad(NULL), OSLO_ERR_INVALID_ARGUMENT, "layer");
  oslo_tensor *pw = NULL, *pb = (oslo_tensor *)0x1, *gw = NULL, *gb = (oslo_tensor *)0x1;
  ok(oslo_parallel_linear_params(&pw, &pb, &gw, &gb, l));
  assert_non_null(pw);
  assert_non_null(gw);
  assert_non_null(pb); /* default options have a bias */
  ok(oslo_parallel_linear_params(NULL, NULL, NULL, NULL, l));
  expect_error(oslo_parallel_linear_params(&pw, NULL, NULL, NULL, NULL), OSLO_ERR_INVALID_ARGUMENT,
               "layer");
  oslo_parallel_linear_destroy(l);
  oslo_parallel_linear_destroy(NULL);

  /* without bias: a given bias is refused, bias pointers are NULL */
  o.bias = 0;
  ok(oslo_parallel_linear_create(&l, ctx, &o));
  oslo_tensor *b = NULL;
  ok(oslo_tensor_create(&b, ctx, OSLO_F32, 1, (int64_t[]){6}));
  expect_error(oslo_parallel_linear_load_full(l, w, b), OSLO_ERR_INVALID_ARGUMENT, "without bias");
  ok(oslo_parallel_linear_params(NULL, &pb, NULL, &gb, l));
  assert_null(pb);
  assert_null(gb);
  oslo_parallel_linear_destroy(l);
  oslo_tensor *ts[] = {w_bad, w, wi, x, x_bad, y, y_bad, xi, b};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; ++i) oslo_tensor_destroy(ts[i]);
}

/* bf16/f16 parameters and activations compute in f32 and round once. */
static void test_linear_low_precision(void **state) {
  oslo_context *ctx = (oslo_context *)*state;
  oslo_linear_options o = oslo_linear_default_options();
  o.in_features = 2;
  o.out_features = 2;
  o.dtype = OSLO_BF16;
  oslo_parallel_linear *l = NULL;
  ok(oslo_parallel_linear_create(&l, ctx, &o));
  float w[4] = {1, 2, 3, 4}, b[2] = {0.5f, -0.5f}, x[2] = {1, 1};
  oslo_tensor *tw = tensor2(ctx, OSLO_F32, 2, 2), *tx = tensor2(ctx, OSLO_F32, 1, 2);
  oslo_tensor *ty = tensor2(ctx, OSLO_F16, 1, 2), *tb = NULL;
  ok(oslo_tensor_create(&tb, ctx, OSLO_F32, 1, (int64_t[]){2}));
  ok(oslo_tensor_copy_from_host(tw, w, sizeof w));
  ok(oslo_tensor_copy_from_host(tb, b, sizeof b));
  ok(oslo_tensor_copy_from_host(tx, x, sizeof x));
  ok(oslo_parallel_linear_load_full(l, tw, tb));
  ok(oslo_parallel_linear_forward(ty, l, tx));
  uint16_t h[2];
  ok(oslo_tensor_copy_to_host(h, sizeof h, ty));
  assert_int_equal(h[0], 0x4300); /* f16 3.5 */
  assert_int_equal(h[1], 0x4680); /* f16 6.5 */
  oslo_tensor_destroy(tw);
  oslo_tensor_destroy(tx);
  oslo_tensor_destroy(ty);
  oslo_tensor_destroy(tb);
  oslo_parallel_linear_destroy(l);
}

static void test_embedding_bad_args(void **state) {
  oslo_context *ctx = (oslo_context *)*state;
  oslo_parallel_embedding *e = (oslo_parallel_embedding *)0x1;
  expect_error(oslo_parallel_embedding_create(&e, ctx, 0, 4, OSLO_F32), OSLO_ERR_INVALID_ARGUMENT,
               "vocab_size");
  assert_null(e);
  expect_error(oslo_parallel_embedding_create(&e, ctx, 5, -1, OSLO_F32), OSLO_ERR_INVALID_ARGUMENT,
               "hidden_size");
  expect_error(oslo_parallel_embedding_create(&e, ctx, 5, 4, OSLO_I64), OSLO_ERR_DTYPE, "dtype");
  expect_error(oslo_parallel_embedding_create(NULL, ctx, 5, 4, OSLO_F32), OSLO_ERR_INVALID_ARGUMENT,
               "out");
  expect_error(oslo_parallel_embedding_create(&e, NULL, 5, 4, OSLO_F32), OSLO_ERR_INVALID_ARGUMENT,
               "ctx");
  ok(oslo_parallel_embedding_create(&e, ctx, 5, 4, OSLO_F32));
  int64_t s = -1, en = -1, lr = -1;
  ok(oslo_parallel_embedding_vocab_range(&s, &en, &lr, e));
  assert_int_equal(s, 0);
  assert_int_equal(en, 5);
  assert_int_equal(lr, 5);
  ok(oslo_parallel_embedding_vocab_range(NULL, NULL, NULL, e));
  expect_error(oslo_parallel_embedding_vocab_range(&s, &en, &lr, NULL), OSLO_ERR_INVALID_ARGUMENT,
               "emb");
  oslo_tensor *w = tensor2(ctx, OSLO_F32, 5, 4), *w_bad = tensor2(ctx, OSLO_F32, 4, 4);
  oslo_tensor *ids = NULL, *fids = NULL, *y = tensor2(ctx, OSLO_F32, 3, 4),
              *y_bad = tensor2(ctx, OSLO_F32, 3, 5);
  ok(oslo_tensor_create(&ids, ctx, OSLO_I32, 1, (int64_t[]){3}));
  ok(oslo_tensor_create(&fids, ctx, OSLO_F32, 1, (int64_t[]){3}));
  ok(oslo_parallel_embedding_load_full(e, w));
  ok(oslo_parallel_embedding_load_shard(e, w));
  expect_error(oslo_parallel_embedding_load_full(e, w_bad), OSLO_ERR_SHAPE, "[5, 4]");
  expect_error(oslo_parallel_embedding_load_shard(e, w_bad), OSLO_ERR_SHAPE, "[5, 4]");
  expect_error(oslo_parallel_embedding_load_full(NULL, w), OSLO_ERR_INVALID_ARGUMENT, "emb");
  expect_error(oslo_parallel_embedding_load_shard(e, NULL), OSLO_ERR_INVALID_ARGUMENT, "weight");
  ok(oslo_parallel_embedding_forward(y, e, ids));
  expect_error(oslo_parallel_embedding_forward(y_bad, e, ids), OSLO_ERR_SHAPE, "[3, 4]");
  expect_error(oslo_parallel_embedding_forward(y, e, fids), OSLO_ERR_DTYPE, "ids");
  expect_error(oslo_parallel_embedding_forward(y, NULL, ids), OSLO_ERR_INVALID_ARGUMENT, "emb");
  int32_t bad[3] = {0, -1, 2};
  ok(oslo_tensor_copy_from_host(ids, bad, sizeof bad));
  expect_error(oslo_parallel_embedding_forward(y, e, ids), OSLO_ERR_INVALID_ARGUMENT, "-1");
  expect_error(oslo_parallel_embedding_backward(e, ids, y), OSLO_ERR_INVALID_ARGUMENT, "-1");
  int32_t good[3] = {4, 4, 0};
  ok(oslo_tensor_copy_from_host(ids, good, sizeof good));
  ok(oslo_parallel_embedding_backward(e, ids, y));
  expect_error(oslo_parallel_embedding_backward(e, ids, y_bad), OSLO_ERR_SHAPE, "grad_output");
  expect_error(oslo_parallel_embedding_backward(NULL, ids, y), OSLO_ERR_INVALID_ARGUMENT, "emb");
  ok(oslo_parallel_embedding_zero_grad(e));
  expect_error(oslo_parallel_embedding_zero_grad(NULL), OSLO_ERR_INVALID_ARGUMENT, "emb");
  oslo_tensor *pw = NULL, *gw = NULL;
  ok(oslo_parallel_embedding_params(&pw, &gw, e));
  assert_non_null(pw);
  assert_non_null(gw);
  expect_error(oslo_parallel_embedding_params(&pw, &gw, NULL), OSLO_ERR_INVALID_ARGUMENT, "emb");
  oslo_parallel_embedding_destroy(e);
  oslo_parallel_embedding_destroy(NULL);
  oslo_tensor *ts[] = {w, w_bad, ids, fids, y, y_bad};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; ++i) oslo_tensor_destroy(ts[i]);
}

static void test_cross_entropy_bad_args(void **state) {
  oslo_context *ctx = (oslo_context *)*state;
  oslo_tensor *logits = tensor2(ctx, OSLO_F32, 3, 5), *bad_logits = tensor2(ctx, OSLO_F32, 3, 4);
  oslo_tensor *labels = NULL, *flabels = NULL, *losses = NULL, *bad_losses = NULL;
  oslo_tensor *grad = tensor2(ctx, OSLO_F32, 3, 5), *bad_grad = tensor2(ctx, OSLO_F32, 5, 3);
  ok(oslo_tensor_create(&labels, ctx, OSLO_I64, 1, (int64_t[]){3}));
  ok(oslo_tensor_create(&flabels, ctx, OSLO_F32, 1, (int64_t[]){3}));
  ok(oslo_tensor_create(&losses, ctx, OSLO_F32, 1, (int64_t[]){3}));
  ok(oslo_tensor_create(&bad_losses, ctx, OSLO_F32, 1, (int64_t[]){2}));
  float mean = 0;
  ok(oslo_vocab_parallel_cross_entropy(losses, &mean, grad, ctx, logits, labels, 5, -100));
  /* uniform logits: loss log(5) */
  assert_true(mean > 1.6094f && mean < 1.6095f);
  ok(oslo_vocab_parallel_cross_entropy(NULL, NULL, NULL, ctx, logits, labels, 5, -100));
  expect_error(
      oslo_vocab_parallel_cross_entropy(losses, &mean, grad, ctx, bad_logits, labels, 5, -100),
      OSLO_ERR_SHAPE, "logits");
  expect_error(
      oslo_vocab_parallel_cross_entropy(losses, &mean, grad, ctx, logits, flabels, 5, -100),
      OSLO_ERR_DTYPE, "labels");
  expect_error(
      oslo_vocab_parallel_cross_entropy(bad_losses, &mean, grad, ctx, logits, labels, 5, -100),
      OSLO_ERR_SHAPE, "losses");
  expect_error(
      oslo_vocab_parallel_cross_entropy(losses, &mean, bad_grad, ctx, logits, labels, 5, -100),
      OSLO_ERR_SHAPE, "grad_logits");
  expect_error(oslo_vocab_parallel_cross_entropy(losses, &mean, grad, ctx, logits, labels, 0, -100),
               OSLO_ERR_INVALID_ARGUMENT, "vocab_size");
  expect_error(
      oslo_vocab_parallel_cross_entropy(losses, &mean, grad, NULL, logits, labels, 5, -100),
      OSLO_ERR_INVALID_ARGUMENT, "ctx");
  expect_error(oslo_vocab_parallel_cross_entropy(losses, &mean, grad, ctx, NULL, labels, 5, -100),
               OSLO_ERR_INVALID_ARGUMENT, "logits");
  expect_error(oslo_vocab_parallel_cross_entropy(losses, &mean, grad, ctx, logits, NULL, 5, -100),
               OSLO_ERR_INVALID_ARGUMENT, "labels");
  /* all ignored: mean is NaN, gradient zero */
  int64_t ign[3] = {-100, -100, -100};
  ok(oslo_tensor_copy_from_host(labels, ign, sizeof ign));
  ok(oslo_vocab_parallel_cross_entropy(losses, &mean, grad, ctx, logits, labels, 5, -100));
  assert_true(mean != mean);
  oslo_tensor *ts[] = {logits, bad_logits, labels, flabels, losses, bad_losses, grad, bad_grad};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; ++i) oslo_tensor_destroy(ts[i]);
}

/* ---- parameter sets, clipping, checkpoints ---- */

static void test_param_set_and_checkpoint_errors(void **state) {
  oslo_context *ctx = (oslo_context *)*state;
  oslo_param_set *ps = (oslo_param_set *)0x1;
  expect_error(oslo_param_set_create(&ps, NULL), OSLO_ERR_INVALID_ARGUMENT, "ctx");
  assert_null(ps);
  expect_error(oslo_param_set_create(NULL, ctx), OSLO_ERR_INVALID_ARGUMENT, "out");
  ok(oslo_param_set_create(&ps, ctx));
  oslo_tensor *w = tensor2(ctx, OSLO_F32, 2, 3), *g = tensor2(ctx, OSLO_F32, 2, 3),
              *g_bad = tensor2(ctx, OSLO_F32, 3, 2);
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
  ok(oslo_param_set_count(&n, ps));
  assert_int_equal(n, 1);
  expect_error(oslo_param_set_count(NULL, ps), OSLO_ERR_INVALID_ARGUMENT, "count");

  double norm = 0;
  ok(oslo_clip_grad_norm(&norm, ps, 0, 2.0));
  assert_true(norm > 4.999999 && norm < 5.000001);
  ok(oslo_clip_grad_norm(&norm, ps, 0, 1.0));
  assert_true(norm > 6.999999 && norm < 7.000001);
  ok(oslo_clip_grad_norm(&norm, ps, 0, INFINITY));
  assert_true(norm == 4.0);
  expect_error(oslo_clip_grad_norm(&norm, ps, 0, 0.5), OSLO_ERR_INVALID_ARGUMENT, "norm_type");
  expect_error(oslo_clip_grad_norm(&norm, NULL, 0, 2.0), OSLO_ERR_INVALID_ARGUMENT, "set");
  ok(oslo_clip_grad_norm(&norm, ps, 1.0, 2.0));
  float back[6];
  ok(oslo_tensor_copy_to_host(back, sizeof back, g));
  assert_true(back[0] > 0.5999 && back[0] < 0.6001); /* 3 * 1/5 */

  /* checkpoint round trip on one rank, then corruptions */
  char dir[] = "/tmp/oslo-ckpt-XXXXXX";
  assert_non_null(mkdtemp(dir));
  ok(oslo_checkpoint_save(ps, dir));
  float zero[6] = {0};
  ok(oslo_tensor_copy_from_host(w, zero, sizeof zero));
  ok(oslo_checkpoint_load(ps, dir));
  ok(oslo_tensor_copy_to_host(back, sizeof back, w));
  assert_memory_equal(back, wv, sizeof wv);
  expect_error(oslo_checkpoint_save(NULL, dir), OSLO_ERR_INVALID_ARGUMENT, "set");
  expect_error(oslo_checkpoint_save(ps, NULL), OSLO_ERR_INVALID_ARGUMENT, "dir");
  expect_error(oslo_checkpoint_load(ps, "/nonexistent/ckpt"), OSLO_ERR_IO, "oslo_checkpoint.json");
  expect_error(oslo_checkpoint_load(NULL, dir), OSLO_ERR_INVALID_ARGUMENT, "set");
  /* a tensor the checkpoint does not have */
  oslo_param_set *other = NULL;
  ok(oslo_param_set_create(&other, ctx));
  ok(oslo_param_set_add(other, "missing", w, NULL, -1));
  expect_error(oslo_checkpoint_load(other, dir), OSLO_ERR_FORMAT, "missing");
  oslo_param_set_destroy(other);
  /* a global shape that differs */
  oslo_tensor *w2 = tensor2(ctx, OSLO_F32, 3, 3);
  ok(oslo_param_set_create(&other, ctx));
  ok(oslo_param_set_add(other, "w", w2, NULL, 1));
  expect_error(oslo_checkpoint_load(other, dir), OSLO_ERR_SHAPE, "w");
  oslo_param_set_destroy(other);
  oslo_tensor_destroy(w2);
  /* a corrupt manifest */
  char path[256];
  snprintf(path, sizeof path, "%s/oslo_checkpoint.json", dir);
  FILE *f = fopen(path, "w");
  fputs("{\"not\": \"a manifest\"", f);
  fclose(f);
  expect_error(oslo_checkpoint_load(ps, dir), OSLO_ERR_FORMAT, NULL);
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
      cmocka_unit_test_setup_teardown(test_collectives_single, setup_ctx, teardown_ctx),
      cmocka_unit_test_setup_teardown(test_linear_bad_args, setup_ctx, teardown_ctx),
      cmocka_unit_test_setup_teardown(test_linear_low_precision, setup_ctx, teardown_ctx),
      cmocka_unit_test_setup_teardown(test_embedding_bad_args, setup_ctx, teardown_ctx),
      cmocka_unit_test_setup_teardown(test_cross_entropy_bad_args, setup_ctx, teardown_ctx),
      cmocka_unit_test_setup_teardown(test_param_set_and_checkpoint_errors, setup_ctx,
                                      teardown_ctx),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
