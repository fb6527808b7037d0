/*
 * Shared by the files of test_api (the CMocka tests of the C ABI on one
 * rank; test_api.c has main and lists every case): the status checks, the
 * context fixture and the cases.
 */
#ifndef OSLO_TESTS_ABI_API_COMMON_H
#define OSLO_TESTS_ABI_API_COMMON_H

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
static inline void expect_error(oslo_status got, oslo_status want, const char *needle) {
  if (got != want || (needle && !strstr(oslo_last_error(), needle)))
    fail_msg("got %s (\"%s\"), expected %s mentioning \"%s\"", oslo_status_string(got),
             oslo_last_error(), oslo_status_string(want), needle ? needle : "");
}

static inline void ok(oslo_status st) {
  if (st != OSLO_OK) fail_msg("%s: %s", oslo_status_string(st), oslo_last_error());
}

static inline int setup_ctx(void **state) {
  oslo_context *ctx = NULL;
  if (oslo_context_create("{\"timeout_seconds\": 30}", &ctx) != OSLO_OK) return -1;
  *state = ctx;
  return 0;
}

static inline int teardown_ctx(void **state) {
  oslo_context_destroy((oslo_context *)*state);
  return 0;
}

/* A 2-d tensor of dt on ctx (fails the case when it cannot be made). */
static inline oslo_tensor *tensor2(oslo_context *ctx, oslo_dtype dt, int64_t a, int64_t b) {
  int64_t shape[2] = {a, b};
  oslo_tensor *t = NULL;
  ok(oslo_tensor_create(ctx, dt, 2, shape, &t));
  return t;
}

/* test_api.c */
void test_version(void **state);
void test_status_strings(void **state);
void test_last_error_never_null(void **state);

/* test_api_context.c */
void test_context_defaults(void **state);
void test_context_config_file(void **state);
void test_context_bad_configs(void **state);
void test_context_backend_names(void **state);
void test_context_config_file_not_regular(void **state);
void test_context_json_exceptions(void **state);
void test_context_long_strings_clipped(void **state);
void test_context_duplicate_keys(void **state);
void test_context_null_args(void **state);
void test_context_abort(void **state);

/* test_api_tensor.c */
void test_tensor_create_and_query(void **state);
void test_tensor_bad_args(void **state);
void test_tensor_wrap_no_copy(void **state);
void test_dlpack(void **state);
void test_dlpack_round_trip(void **state);
void test_dlpack_versioned(void **state);
void test_collectives_single(void **state);

/* test_api_layers.c */
void test_options_versions(void **state);
void test_linear_bad_args(void **state);
void test_linear_low_precision(void **state);
void test_linear_mixed_dtypes(void **state);
void test_embedding_bad_args(void **state);
void test_cross_entropy_bad_args(void **state);
void test_param_set_and_checkpoint_errors(void **state);

#endif
