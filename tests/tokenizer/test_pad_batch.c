/* oslo_pad_batch through oslo.h only: every case of pad_reference.txt
 * (Hugging Face's tokenizer.pad of rows of ids, truncated first as its
 * tokenizer truncates; written by make_pad_reference.py) gives Hugging
 * Face's ids and mask, with oslo_tokenizer_encode_batch's sizing rule; the
 * options' defaults and versions; and bad input: named errors (naming the
 * row), never a crash.
 * Usage: test_pad_batch REFERENCE */
#include <oslo.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "batch_common.h"

static const char *g_reference;

enum { kMaxRows = 16, kMaxRow = 256, kLine = 8192 };

typedef struct {
  char pad_side[8], trunc_side[8], padding[16];
  long long pad;
  int truncation, n;
  unsigned long max_length;
  int64_t rows[kMaxRows][kMaxRow];
  size_t row_lens[kMaxRows];
  int64_t ids[kMaxRows][kMaxRow], mask[kMaxRows][kMaxRow];
  size_t len;
} ref_case;

/* The next case of the reference file; 0 at its end. */
static int next_case(FILE *f, ref_case *c) {
  static char line[kLine];
  for (;;) {
    if (!fgets(line, sizeof line, f)) return 0;
    if (line[0] != '#') break;
  }
  assert_int_equal(sscanf(line, "case %7s %lld %lu %d %7s %15s %d", c->pad_side, &c->pad,
                          &c->max_length, &c->truncation, c->trunc_side, c->padding, &c->n),
                   7);
  assert_true(c->n > 0 && c->n <= kMaxRows);
  for (int i = 0; i < c->n; ++i) {
    assert_non_null(fgets(line, sizeof line, f));
    c->row_lens[i] = read_row_of(line, "row", c->rows[i], kMaxRow);
    assert_non_null(fgets(line, sizeof line, f));
    size_t a = read_row_of(line, "ids", c->ids[i], kMaxRow);
    assert_non_null(fgets(line, sizeof line, f));
    size_t b = read_row_of(line, "mask", c->mask[i], kMaxRow);
    assert_int_equal(a, b);
    if (i == 0) c->len = a;
    assert_int_equal(a, c->len);
  }
  return 1;
}

static oslo_side side_of(const char *s) {
  return strcmp(s, "left") == 0 ? OSLO_SIDE_LEFT : OSLO_SIDE_RIGHT;
}

static void test_reference(void **state) {
  (void)state;
  static ref_case c;
  static int64_t ids[kMaxRows * kMaxRow], mask[kMaxRows * kMaxRow];
  FILE *f = fopen(g_reference, "r");
  assert_non_null(f);
  int cases = 0;
  while (next_case(f, &c)) {
    const int64_t *rows[kMaxRows];
    for (int i = 0; i < c.n; ++i) rows[i] = c.row_lens[i] ? c.rows[i] : NULL;
    oslo_pad_batch_options o;
    assert_int_equal(oslo_pad_batch_options_init(&o, OSLO_PAD_BATCH_OPTIONS_VERSION), OSLO_OK);
    o.padding_side = side_of(c.pad_side);
    o.pad_id = c.pad;
    o.max_length = c.max_length;
    o.truncation = c.truncation;
    o.truncation_side = side_of(c.trunc_side);
    o.pad_to_max_length = strcmp(c.padding, "max_length") == 0;
    /* Sizing: capacity 0 writes nothing and gives L. */
    size_t len = 12345;
    assert_int_equal(oslo_pad_batch(rows, c.row_lens, (size_t)c.n, &o, NULL, NULL, 0, &len),
                     OSLO_OK);
    assert_int_equal(len, c.len);
    const size_t total = (size_t)c.n * len;
    /* One short of n * L: nothing written, still OK. */
    ids[0] = -7;
    assert_int_equal(oslo_pad_batch(rows, c.row_lens, (size_t)c.n, &o, ids, mask, total - 1, &len),
                     OSLO_OK);
    assert_int_equal(ids[0], -7);
    assert_int_equal(oslo_pad_batch(rows, c.row_lens, (size_t)c.n, &o, ids, mask, total, &len),
                     OSLO_OK);
    for (int i = 0; i < c.n; ++i)
      for (size_t t = 0; t < len; ++t) {
        if (ids[i * len + t] != c.ids[i][t] || mask[i * len + t] != c.mask[i][t])
          fail_msg(
              "case %d (%s %lld %lu %d %s %s) row %d position %zu: oslo %lld/%lld, "
              "Hugging Face %lld/%lld",
              cases, c.pad_side, c.pad, c.max_length, c.truncation, c.trunc_side, c.padding, i, t,
              (long long)ids[i * len + t], (long long)mask[i * len + t], (long long)c.ids[i][t],
              (long long)c.mask[i][t]);
      }
    /* No mask: the ids alone. */
    memset(ids, 0xff, total * sizeof *ids);
    assert_int_equal(oslo_pad_batch(rows, c.row_lens, (size_t)c.n, &o, ids, NULL, total, &len),
                     OSLO_OK);
    for (int i = 0; i < c.n; ++i) assert_memory_equal(ids + i * len, c.ids[i], len * sizeof *ids);
    ++cases;
  }
  fclose(f);
  assert_true(cases >= 9);
}

/* The defaults: right padding to the longest, nothing cut; pad_id unset. */
static void test_defaults(void **state) {
  (void)state;
  oslo_pad_batch_options o;
  memset(&o, 0x5a, sizeof o);
  assert_int_equal(oslo_pad_batch_options_init(&o, 1), OSLO_OK);
  assert_int_equal(o.version, 1);
  assert_int_equal(o.padding_side, OSLO_SIDE_RIGHT);
  assert_int_equal(o.pad_id, -1);
  assert_int_equal(o.max_length, 0);
  assert_int_equal(o.truncation, 0);
  assert_int_equal(o.truncation_side, OSLO_SIDE_RIGHT);
  assert_int_equal(o.pad_to_max_length, 0);
  const int64_t a[] = {1, 2, 3}, b[] = {4};
  const int64_t *rows[] = {a, b, NULL};
  const size_t lens[] = {3, 1, 0};
  int64_t ids[9], mask[9];
  size_t len = 0;
  o.pad_id = 9;
  assert_int_equal(oslo_pad_batch(rows, lens, 3, &o, ids, mask, 9, &len), OSLO_OK);
  assert_int_equal(len, 3);
  const int64_t want_ids[] = {1, 2, 3, 4, 9, 9, 9, 9, 9};
  const int64_t want_mask[] = {1, 1, 1, 1, 0, 0, 0, 0, 0};
  assert_memory_equal(ids, want_ids, sizeof ids);
  assert_memory_equal(mask, want_mask, sizeof mask);
  /* All rows empty: L is 0, nothing to write. */
  const size_t zeros[] = {0, 0};
  const int64_t *none[] = {NULL, NULL};
  len = 7;
  assert_int_equal(oslo_pad_batch(none, zeros, 2, &o, NULL, NULL, 0, &len), OSLO_OK);
  assert_int_equal(len, 0);
}

static void expect_error(oslo_status got, oslo_status want, const char *words) {
  assert_int_equal(got, want);
  const char *msg = oslo_last_error();
  if (!strstr(msg, words)) fail_msg("message \"%s\" lacks \"%s\"", msg, words);
}

static void test_bad_input(void **state) {
  (void)state;
  const int64_t a[] = {1, 2, 3, 4, 5}, b[] = {6};
  const int64_t *rows[] = {a, b};
  const size_t lens[] = {5, 1};
  int64_t ids[64], mask[64];
  size_t len = 0;
  oslo_pad_batch_options o;
  assert_int_equal(oslo_pad_batch_options_init(&o, OSLO_PAD_BATCH_OPTIONS_VERSION), OSLO_OK);
  o.pad_id = 0;
  expect_error(oslo_pad_batch(rows, lens, 2, &o, ids, mask, 64, NULL), OSLO_ERR_INVALID_ARGUMENT,
               "length is NULL");
  expect_error(oslo_pad_batch(NULL, lens, 2, &o, ids, mask, 64, &len), OSLO_ERR_INVALID_ARGUMENT,
               "rows is NULL");
  expect_error(oslo_pad_batch(rows, NULL, 2, &o, ids, mask, 64, &len), OSLO_ERR_INVALID_ARGUMENT,
               "row_lens is NULL");
  expect_error(oslo_pad_batch(rows, lens, 0, &o, ids, mask, 64, &len), OSLO_ERR_INVALID_ARGUMENT,
               "n is 0");
  expect_error(oslo_pad_batch(rows, lens, 2, &o, NULL, mask, 64, &len), OSLO_ERR_INVALID_ARGUMENT,
               "ids is NULL");
  const int64_t *with_null[] = {a, NULL};
  expect_error(oslo_pad_batch(with_null, lens, 2, &o, ids, mask, 64, &len),
               OSLO_ERR_INVALID_ARGUMENT, "rows[1] is NULL with length 1");

  /* pad_id: required (the default -1 is refused), never negative. */
  expect_error(oslo_pad_batch(rows, lens, 2, NULL, ids, mask, 64, &len), OSLO_ERR_INVALID_ARGUMENT,
               "pad_id -1 is negative");
  oslo_pad_batch_options v = o;
  v.pad_id = -5;
  expect_error(oslo_pad_batch(rows, lens, 2, &v, ids, mask, 64, &len), OSLO_ERR_INVALID_ARGUMENT,
               "pad_id -5 is negative");

  /* Versions: 0 (never initialised) and newer than the library. */
  v = o;
  v.version = 0;
  expect_error(oslo_pad_batch(rows, lens, 2, &v, ids, mask, 64, &len), OSLO_ERR_INVALID_ARGUMENT,
               "version is 0");
  v.version = OSLO_PAD_BATCH_OPTIONS_VERSION + 1;
  expect_error(oslo_pad_batch(rows, lens, 2, &v, ids, mask, 64, &len), OSLO_ERR_INVALID_ARGUMENT,
               "is unknown");
  expect_error(oslo_pad_batch_options_init(&v, 0), OSLO_ERR_INVALID_ARGUMENT, "version is 0");
  expect_error(oslo_pad_batch_options_init(&v, 99), OSLO_ERR_INVALID_ARGUMENT, "is unknown");
  expect_error(oslo_pad_batch_options_init(NULL, 1), OSLO_ERR_INVALID_ARGUMENT, "options is NULL");

  /* Bad values. */
  v = o;
  v.padding_side = (oslo_side)2;
  expect_error(oslo_pad_batch(rows, lens, 2, &v, ids, mask, 64, &len), OSLO_ERR_INVALID_ARGUMENT,
               "padding_side is 2");
  v = o;
  v.truncation_side = (oslo_side)-1;
  expect_error(oslo_pad_batch(rows, lens, 2, &v, ids, mask, 64, &len), OSLO_ERR_INVALID_ARGUMENT,
               "truncation_side is -1");
  v = o;
  v.truncation = 1;
  expect_error(oslo_pad_batch(rows, lens, 2, &v, ids, mask, 64, &len), OSLO_ERR_INVALID_ARGUMENT,
               "max_length is 0 but truncation");
  v = o;
  v.pad_to_max_length = 1;
  expect_error(oslo_pad_batch(rows, lens, 2, &v, ids, mask, 64, &len), OSLO_ERR_INVALID_ARGUMENT,
               "max_length is 0 but pad_to_max_length");
  /* A row longer than max_length, named, unless truncation cuts it. */
  const int64_t *flipped[] = {b, a};
  const size_t flens[] = {1, 5};
  v = o;
  v.max_length = 3;
  expect_error(oslo_pad_batch(flipped, flens, 2, &v, ids, mask, 64, &len),
               OSLO_ERR_INVALID_ARGUMENT, "row 1 has 5 ids, more than max_length 3");
  v.truncation = 1;
  assert_int_equal(oslo_pad_batch(flipped, flens, 2, &v, ids, mask, 64, &len), OSLO_OK);
  assert_int_equal(len, 3);

  /* n * L overflowing size_t: refused before anything is allocated. */
  v = o;
  v.max_length = SIZE_MAX / 4;
  v.pad_to_max_length = 1;
  expect_error(oslo_pad_batch(rows, lens, 2, &v, NULL, NULL, 0, &len), OSLO_ERR_OUT_OF_MEMORY,
               "overflow");
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s REFERENCE\n", argv[0]);
    return 2;
  }
  g_reference = argv[1];
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reference),
      cmocka_unit_test(test_defaults),
      cmocka_unit_test(test_bad_input),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
