/*
 * CMocka tests of every C ABI function on a single rank: normal use and bad
 * input (NULL, wrong shapes and dtypes, invalid JSON, unknown keys, sizes
 * that do not divide). Multi-rank behaviour is in tests/layers.
 *
 * The cases are in test_api_context.c, test_api_tensor.c and
 * test_api_layers.c (api_common.h); here: status, errors, version and main.
 */
#include "api_common.h"

/* ---- status, errors, version ---- */

void test_version(void **state) {
  (void)state;
  int ma = -1, mi = -1, pa = -1;
  oslo_version(&ma, &mi, &pa);
  assert_int_equal(ma, OSLO_VERSION_MAJOR);
  assert_int_equal(mi, OSLO_VERSION_MINOR);
  assert_int_equal(pa, OSLO_VERSION_PATCH);
  oslo_version(NULL, NULL, NULL); /* any out-pointer may be NULL */
  assert_string_equal(oslo_version_string(), OSLO_VERSION_STRING);
}

void test_status_strings(void **state) {
  (void)state;
  for (int s = 0; s < OSLO_STATUS_COUNT; ++s) {
    const char *str = oslo_status_string((oslo_status)s);
    assert_non_null(str);
    assert_null(strstr(str, "unknown"));
  }
  assert_string_equal(oslo_status_string((oslo_status)999), "unknown status");
  assert_string_equal(oslo_status_string((oslo_status)-1), "unknown status");
}

void test_last_error_never_null(void **state) {
  (void)state;
  oslo_clear_error();
  assert_non_null(oslo_last_error());
  assert_string_equal(oslo_last_error(), "");
  expect_error(oslo_context_create(NULL, NULL), OSLO_ERR_INVALID_ARGUMENT, "out");
  assert_true(strlen(oslo_last_error()) > 0);
  oslo_clear_error();
  assert_string_equal(oslo_last_error(), "");
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
