/* oslo_tokenizer_encode_batch through oslo.h only: every case of
 * batch_reference.txt (Hugging Face's tokenizer(texts, padding=...,
 * truncation=..., max_length=...), written by make_batch_reference.py) gives
 * Hugging Face's ids and mask, with the sizing rule; the options' defaults
 * and versions; and bad input: named errors, never a crash.
 * Usage: test_tokenizer_batch REFERENCE MODEL_FIXTURES_DIR */
#include <oslo.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "batch_common.h"

static const char *g_reference;
static const char *g_fixtures;

enum { kMaxTexts = 16, kMaxRow = 256, kLine = 8192 };

static oslo_tokenizer *load(const char *fixture) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", g_fixtures, fixture);
  oslo_tokenizer *tok = NULL;
  oslo_status st = oslo_tokenizer_load(path, &tok);
  if (st != OSLO_OK) fprintf(stderr, "load %s: %s\n", path, oslo_last_error());
  assert_int_equal(st, OSLO_OK);
  return tok;
}

static void chomp(char *s) {
  size_t n = strlen(s);
  while (n && (s[n - 1] == '\n' || s[n - 1] == '\r')) s[--n] = 0;
}

typedef struct {
  char fixture[128], pad_side[8], pad[16], trunc_side[8], padding[16];
  int special, n;
  unsigned long max_length;
  char texts[kMaxTexts][1024];
  int64_t ids[kMaxTexts][kMaxRow], mask[kMaxTexts][kMaxRow];
  size_t len;
} ref_case;

/* The next case of the reference file; 0 at its end. */
static int next_case(FILE *f, ref_case *c) {
  static char line[kLine];
  for (;;) {
    if (!fgets(line, sizeof line, f)) return 0;
    if (line[0] != '#') break;
  }
  chomp(line);
  assert_int_equal(sscanf(line, "case %127s %7s %15s %d %lu %7s %15s %d", c->fixture, c->pad_side,
                          c->pad, &c->special, &c->max_length, c->trunc_side, c->padding, &c->n),
                   8);
  assert_true(c->n > 0 && c->n <= kMaxTexts);
  for (int i = 0; i < c->n; ++i) {
    assert_non_null(fgets(line, sizeof line, f));
    chomp(line);
    assert_true(strncmp(line, "text", 4) == 0);
    const char *t = line[4] ? line + 5 : "";
    assert_true(strlen(t) < sizeof c->texts[i]);
    memcpy(c->texts[i], t, strlen(t) + 1);
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
  FILE *f = fopen(g_reference, "r");
  assert_non_null(f);
  int cases = 0;
  while (next_case(f, &c)) {
    oslo_tokenizer *tok = load(c.fixture);
    oslo_tokenizer_encode_batch_options o;
    assert_int_equal(
        oslo_tokenizer_encode_batch_options_init(&o, OSLO_TOKENIZER_ENCODE_BATCH_OPTIONS_VERSION),
        OSLO_OK);
    o.add_special_tokens = c.special;
    o.padding_side = side_of(c.pad_side);
    o.pad_id = strcmp(c.pad, "default") == 0 ? -1 : atoll(c.pad);
    o.max_length = c.max_length;
    o.truncation = c.max_length > 0;
    o.truncation_side = side_of(c.trunc_side);
    o.pad_to_max_length = strcmp(c.padding, "max_length") == 0;
    const char *texts[kMaxTexts];
    size_t lens[kMaxTexts];
    for (int i = 0; i < c.n; ++i) {
      texts[i] = c.texts[i];
      lens[i] = strlen(c.texts[i]);
    }
    /* Sizing: capacity 0, nothing written. */
    size_t len = 12345;
    assert_int_equal(
        oslo_tokenizer_encode_batch(tok, texts, lens, (size_t)c.n, &o, NULL, NULL, 0, &len),
        OSLO_OK);
    assert_int_equal(len, c.len);
    size_t total = (size_t)c.n * len;
    int64_t *ids = malloc((total + 1) * sizeof *ids), *mask = malloc((total + 1) * sizeof *mask);
    assert_true(ids && mask);
    /* One short: still nothing written. */
    if (total > 0) {
      ids[0] = -7;
      assert_int_equal(oslo_tokenizer_encode_batch(tok, texts, lens, (size_t)c.n, &o, ids, mask,
                                                   total - 1, &len),
                       OSLO_OK);
      assert_int_equal(ids[0], -7);
    }
    ids[total] = mask[total] = -9;
    assert_int_equal(
        oslo_tokenizer_encode_batch(tok, texts, lens, (size_t)c.n, &o, ids, mask, total + 1, &len),
        OSLO_OK);
    assert_int_equal(ids[total], -9);
    assert_int_equal(mask[total], -9);
    for (int i = 0; i < c.n; ++i) {
      for (size_t t = 0; t < len; ++t) {
        if (ids[i * len + t] != c.ids[i][t] || mask[i * len + t] != c.mask[i][t])
          fprintf(stderr,
                  "case %s %s max_length %lu: text %d position %zu: %lld/%lld, want %lld/%lld\n",
                  c.fixture, c.pad_side, c.max_length, i, t, (long long)ids[i * len + t],
                  (long long)mask[i * len + t], (long long)c.ids[i][t], (long long)c.mask[i][t]);
        assert_int_equal(ids[i * len + t], c.ids[i][t]);
        assert_int_equal(mask[i * len + t], c.mask[i][t]);
      }
    }
    /* NUL-terminated texts (text_lens NULL) and no mask: the same ids. */
    int64_t *ids2 = malloc((total + 1) * sizeof *ids2);
    assert_non_null(ids2);
    assert_int_equal(
        oslo_tokenizer_encode_batch(tok, texts, NULL, (size_t)c.n, &o, ids2, NULL, total, &len),
        OSLO_OK);
    assert_memory_equal(ids, ids2, total * sizeof *ids);
    free(ids2);
    free(ids);
    free(mask);
    oslo_tokenizer_destroy(tok);
    ++cases;
  }
  fclose(f);
  assert_true(cases >= 10);
}

/* NULL options: Hugging Face's tokenizer(texts, padding=True) with the
 * tokenizer's [PAD]; the same as the defaults of version 1. */
static void test_defaults(void **state) {
  (void)state;
  oslo_tokenizer *tok = load("bert-tiny");
  const char *texts[] = {"hello world", "hello"};
  int64_t a[64], b[64], ma[64], mb[64], one[16];
  size_t la = 0, lb = 0, n1 = 0;
  assert_int_equal(oslo_tokenizer_encode_batch(tok, texts, NULL, 2, NULL, a, ma, 64, &la), OSLO_OK);
  oslo_tokenizer_encode_batch_options o;
  memset(&o, 0x5a, sizeof o);
  assert_int_equal(oslo_tokenizer_encode_batch_options_init(&o, 1), OSLO_OK);
  assert_int_equal(o.version, 1);
  assert_int_equal(o.add_special_tokens, 1);
  assert_int_equal(o.padding_side, OSLO_SIDE_RIGHT);
  assert_int_equal(o.pad_id, -1);
  assert_int_equal(o.max_length, 0);
  assert_int_equal(o.truncation, 0);
  assert_int_equal(o.pad_to_max_length, 0);
  assert_int_equal(oslo_tokenizer_encode_batch(tok, texts, NULL, 2, &o, b, mb, 64, &lb), OSLO_OK);
  assert_int_equal(la, lb);
  assert_memory_equal(a, b, 2 * la * sizeof *a);
  assert_memory_equal(ma, mb, 2 * la * sizeof *ma);
  /* Row 1 is oslo_tokenizer_encode's ids, then [PAD]. */
  assert_int_equal(oslo_tokenizer_encode(tok, texts[1], strlen(texts[1]), 1, one, 16, &n1),
                   OSLO_OK);
  assert_true(n1 < la);
  int64_t pad = -1;
  assert_int_equal(oslo_tokenizer_special_id(tok, OSLO_SPECIAL_TOKEN_PAD, &pad), OSLO_OK);
  for (size_t t = 0; t < la; ++t) {
    assert_int_equal(a[la + t], t < n1 ? one[t] : pad);
    assert_int_equal(ma[la + t], t < n1 ? 1 : 0);
  }
  /* A text with NUL bytes and a NULL empty text, by length. */
  const char *nul[] = {"a\0b", NULL};
  size_t lens[] = {3, 0};
  assert_int_equal(oslo_tokenizer_encode_batch(tok, nul, lens, 2, NULL, a, ma, 64, &la), OSLO_OK);
  assert_int_equal(oslo_tokenizer_encode(tok, "a\0b", 3, 1, one, 16, &n1), OSLO_OK);
  assert_int_equal(la, n1);
  assert_memory_equal(a, one, n1 * sizeof *a);
  assert_int_equal(ma[la], 1); /* [CLS] [SEP] of the empty text */
  assert_int_equal(ma[la + 2], 0);
  oslo_tokenizer_destroy(tok);
}

static void expect_error(oslo_status got, oslo_status want, const char *words) {
  if (got != want || !strstr(oslo_last_error(), words))
    fprintf(stderr, "status %d (want %d), message \"%s\" (want \"%s\")\n", (int)got, (int)want,
            oslo_last_error(), words);
  assert_int_equal(got, want);
  assert_non_null(strstr(oslo_last_error(), words));
}

static void test_bad_input(void **state) {
  (void)state;
  oslo_tokenizer *bert = load("bert-tiny"), *gpt2 = load("gpt2-tiny");
  const char *texts[] = {"hello world again and again", "hi"};
  int64_t ids[256], mask[256];
  size_t len = 0;
  oslo_tokenizer_encode_batch_options o;
  assert_int_equal(oslo_tokenizer_encode_batch_options_init(&o, 1), OSLO_OK);
#define BATCH(tok, texts, lens, n, opts, ids, cap, len) \
  oslo_tokenizer_encode_batch(tok, texts, lens, n, opts, ids, mask, cap, len)
  expect_error(BATCH(NULL, texts, NULL, 2, &o, ids, 256, &len), OSLO_ERR_INVALID_ARGUMENT,
               "tok is NULL");
  expect_error(BATCH(bert, texts, NULL, 2, &o, ids, 256, NULL), OSLO_ERR_INVALID_ARGUMENT,
               "length is NULL");
  expect_error(BATCH(bert, NULL, NULL, 2, &o, ids, 256, &len), OSLO_ERR_INVALID_ARGUMENT,
               "texts is NULL");
  expect_error(BATCH(bert, texts, NULL, 0, &o, ids, 256, &len), OSLO_ERR_INVALID_ARGUMENT,
               "n is 0");
  expect_error(BATCH(bert, texts, NULL, 2, &o, NULL, 256, &len), OSLO_ERR_INVALID_ARGUMENT,
               "ids is NULL");
  const char *with_null[] = {"a", NULL};
  expect_error(BATCH(bert, with_null, NULL, 2, &o, ids, 256, &len), OSLO_ERR_INVALID_ARGUMENT,
               "texts[1] is NULL");
  size_t lens[] = {1, 4};
  expect_error(BATCH(bert, with_null, lens, 2, &o, ids, 256, &len), OSLO_ERR_INVALID_ARGUMENT,
               "texts[1] is NULL with a nonzero length");
  const char *bad_utf8[] = {"fine", "a\xff"};
  expect_error(BATCH(bert, bad_utf8, NULL, 2, &o, ids, 256, &len), OSLO_ERR_INVALID_ARGUMENT,
               "text 1: ");

  /* Versions: 0 (never initialised) and newer than the library. */
  oslo_tokenizer_encode_batch_options v = o;
  v.version = 0;
  expect_error(BATCH(bert, texts, NULL, 2, &v, ids, 256, &len), OSLO_ERR_INVALID_ARGUMENT,
               "version is 0");
  v.version = OSLO_TOKENIZER_ENCODE_BATCH_OPTIONS_VERSION + 1;
  expect_error(BATCH(bert, texts, NULL, 2, &v, ids, 256, &len), OSLO_ERR_INVALID_ARGUMENT,
               "is unknown");
  expect_error(oslo_tokenizer_encode_batch_options_init(&v, 0), OSLO_ERR_INVALID_ARGUMENT,
               "version is 0");
  expect_error(oslo_tokenizer_encode_batch_options_init(&v, 99), OSLO_ERR_INVALID_ARGUMENT,
               "is unknown");
  expect_error(oslo_tokenizer_encode_batch_options_init(NULL, 1), OSLO_ERR_INVALID_ARGUMENT,
               "options is NULL");

  /* Bad values. */
  v = o;
  v.padding_side = (oslo_side)2;
  expect_error(BATCH(bert, texts, NULL, 2, &v, ids, 256, &len), OSLO_ERR_INVALID_ARGUMENT,
               "padding_side is 2");
  v = o;
  v.truncation_side = (oslo_side)-1;
  expect_error(BATCH(bert, texts, NULL, 2, &v, ids, 256, &len), OSLO_ERR_INVALID_ARGUMENT,
               "truncation_side is -1");
  v = o;
  v.pad_id = -2;
  expect_error(BATCH(bert, texts, NULL, 2, &v, ids, 256, &len), OSLO_ERR_INVALID_ARGUMENT,
               "pad_id -2");
  v = o;
  v.truncation = 1;
  expect_error(BATCH(bert, texts, NULL, 2, &v, ids, 256, &len), OSLO_ERR_INVALID_ARGUMENT,
               "max_length is 0 but truncation");
  v = o;
  v.pad_to_max_length = 1;
  expect_error(BATCH(bert, texts, NULL, 2, &v, ids, 256, &len), OSLO_ERR_INVALID_ARGUMENT,
               "max_length is 0 but pad_to_max_length");
  v = o;
  v.max_length = 3;
  size_t n0 = 0;
  assert_int_equal(oslo_tokenizer_encode(bert, texts[0], strlen(texts[0]), 1, NULL, 0, &n0),
                   OSLO_OK);
  char words[128];
  snprintf(words, sizeof words, "text 0 has %zu ids, more than max_length 3", n0);
  expect_error(BATCH(bert, texts, NULL, 2, &v, ids, 256, &len), OSLO_ERR_INVALID_ARGUMENT, words);
  v.truncation = 1;
  v.max_length = 1;
  expect_error(BATCH(bert, texts, NULL, 2, &v, ids, 256, &len), OSLO_ERR_INVALID_ARGUMENT,
               "max_length 1 is shorter than its 2 special tokens");
  /* Without special tokens max_length 1 keeps one id. */
  v.add_special_tokens = 0;
  assert_int_equal(BATCH(bert, texts, NULL, 2, &v, ids, 256, &len), OSLO_OK);
  assert_int_equal(len, 1);

  /* GPT-2 has no [PAD]: an explicit pad_id is needed. */
  expect_error(BATCH(gpt2, texts, NULL, 2, &o, ids, 256, &len), OSLO_ERR_INVALID_ARGUMENT,
               "no padding token");
  v = o;
  v.pad_id = 0;
  assert_int_equal(BATCH(gpt2, texts, NULL, 2, &v, ids, 256, &len), OSLO_OK);
#undef BATCH
  oslo_tokenizer_destroy(bert);
  oslo_tokenizer_destroy(gpt2);
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s REFERENCE MODEL_FIXTURES_DIR\n", argv[0]);
    return 2;
  }
  g_reference = argv[1];
  g_fixtures = argv[2];
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reference),
      cmocka_unit_test(test_defaults),
      cmocka_unit_test(test_bad_input),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
