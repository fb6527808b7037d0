/* test_api, contexts: defaults, config files and JSON (bad, hostile, long,
 * duplicate keys), backend names, NULL arguments, abort. */
#include "api_common.h"

/* ---- context ---- */

void test_context_defaults(void **state) {
  (void)state;
  const char *configs[] = {NULL,
                           "",
                           "{}",
                           "{\"model_parallelism\": {\"tensor_parallel_size\": 1}}",
                           "{\"backend\": \"cpu\", \"tensor_parallel_size\": 1, "
                           "\"pipeline_parallel_size\": 1, \"data_parallel_size\": 1, "
                           "\"timeout_seconds\": 2.5, \"num_threads\": 1, \"rank\": 0, "
                           "\"world_size\": 1, \"init_method\": \"env://\"}",
                           "{\"prepack\": \"none\"}",
                           "{\"prepack\": \"all\"}",
                           "{\"prepack\": \"quantized\"}"};
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

void test_context_config_file(void **state) {
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

void test_context_bad_configs(void **state) {
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
      {"{\"prepack\": \"yes\"}", OSLO_ERR_CONFIG, "prepack"},
      {"{\"prepack\": true}", OSLO_ERR_CONFIG, "prepack"},
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

void test_context_backend_names(void **state) {
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
void test_context_config_file_not_regular(void **state) {
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
void test_context_json_exceptions(void **state) {
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
void test_context_long_strings_clipped(void **state) {
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
void test_context_duplicate_keys(void **state) {
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

void test_context_null_args(void **state) {
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

void test_context_abort(void **state) {
  (void)state;
  oslo_context *ctx = NULL;
  ok(oslo_context_create(NULL, &ctx));
  ok(oslo_context_abort(ctx));
  expect_error(oslo_context_barrier(ctx, OSLO_GROUP_WORLD), OSLO_ERR_COMM, "abort");
  oslo_context_destroy(ctx);
}
