/* The tokenizer C API through oslo.h only: loading, encode/decode with the
 * sizing rule (capacity 0, truncation, NUL termination), vocabulary and
 * special ids of the real all-MiniLM-L6-v2 tokenizer, argument validation
 * with messages, and concurrent use of one tokenizer from several threads.
 * Usage: test_tokenizer_capi FIXTURES_DIR */
#include <oslo.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static const char *g_dir;

static oslo_tokenizer *load(const char *name) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", g_dir, name);
  oslo_tokenizer *tok = NULL;
  oslo_status st = oslo_tokenizer_load(path, &tok);
  if (st != OSLO_OK) fprintf(stderr, "load %s: %s\n", path, oslo_last_error());
  assert_int_equal(st, OSLO_OK);
  assert_non_null(tok);
  return tok;
}

static void test_minilm(void **state) {
  (void)state;
  oslo_tokenizer *tok = load("minilm");
  const char *text = "Hello world!";
  size_t count = 0;
  assert_int_equal(oslo_tokenizer_encode(tok, text, strlen(text), 1, NULL, 0, &count), OSLO_OK);
  assert_int_equal(count, 5);
  int64_t ids[8];
  assert_int_equal(oslo_tokenizer_encode(tok, text, strlen(text), 1, ids, 8, &count), OSLO_OK);
  const int64_t want[5] = {101, 7592, 2088, 999, 102}; /* [CLS] hello world ! [SEP] */
  for (int i = 0; i < 5; ++i) assert_int_equal(ids[i], want[i]);
  /* Truncated: still the full count, only capacity ids written. */
  int64_t small[2] = {-7, -7};
  assert_int_equal(oslo_tokenizer_encode(tok, text, strlen(text), 1, small, 1, &count), OSLO_OK);
  assert_int_equal(count, 5);
  assert_int_equal(small[0], 101);
  assert_int_equal(small[1], -7);
  assert_int_equal(oslo_tokenizer_encode(tok, text, strlen(text), 0, ids, 8, &count), OSLO_OK);
  assert_int_equal(count, 3);
  assert_int_equal(oslo_tokenizer_encode(tok, NULL, 0, 1, ids, 8, &count), OSLO_OK);
  assert_int_equal(count, 2);

  size_t len = 0;
  assert_int_equal(oslo_tokenizer_decode(tok, want, 5, 1, NULL, 0, &len), OSLO_OK);
  assert_int_equal(len, strlen("hello world!"));
  char buf[64];
  memset(buf, 'X', sizeof buf);
  assert_int_equal(oslo_tokenizer_decode(tok, want, 5, 1, buf, sizeof buf, &len), OSLO_OK);
  assert_string_equal(buf, "hello world!");
  assert_int_equal(oslo_tokenizer_decode(tok, want, 5, 0, buf, sizeof buf, &len), OSLO_OK);
  assert_string_equal(buf, "[CLS] hello world! [SEP]");
  /* Exactly the length: no room for the NUL, so none is written. */
  memset(buf, 'X', sizeof buf);
  assert_int_equal(oslo_tokenizer_decode(tok, want, 5, 1, buf, 12, &len), OSLO_OK);
  assert_int_equal(len, 12);
  assert_int_equal(buf[12], 'X');
  assert_memory_equal(buf, "hello world!", 12);

  size_t vs = 0;
  assert_int_equal(oslo_tokenizer_vocab_size(tok, &vs), OSLO_OK);
  assert_int_equal(vs, 30522);
  int64_t id = 0;
  const struct {
    oslo_special_token which;
    int64_t id;
  } sp[] = {{OSLO_SPECIAL_TOKEN_CLS, 101},  {OSLO_SPECIAL_TOKEN_SEP, 102},
            {OSLO_SPECIAL_TOKEN_PAD, 0},    {OSLO_SPECIAL_TOKEN_UNK, 100},
            {OSLO_SPECIAL_TOKEN_MASK, 103}, {OSLO_SPECIAL_TOKEN_BOS, -1},
            {OSLO_SPECIAL_TOKEN_EOS, -1}};
  for (size_t i = 0; i < sizeof sp / sizeof *sp; ++i) {
    assert_int_equal(oslo_tokenizer_special_id(tok, sp[i].which, &id), OSLO_OK);
    assert_int_equal(id, sp[i].id);
  }
  assert_int_equal(oslo_tokenizer_special_id(tok, (oslo_special_token)99, &id),
                   OSLO_ERR_INVALID_ARGUMENT);
  assert_int_equal(oslo_tokenizer_token_to_id(tok, "##ing", 5, &id), OSLO_OK);
  assert_true(id > 0);
  assert_int_equal(oslo_tokenizer_id_to_token(tok, id, buf, sizeof buf, &len), OSLO_OK);
  assert_string_equal(buf, "##ing");
  assert_int_equal(oslo_tokenizer_token_to_id(tok, "no such token", 13, &id), OSLO_OK);
  assert_int_equal(id, -1);
  assert_int_equal(oslo_tokenizer_id_to_token(tok, 1 << 30, buf, sizeof buf, &len),
                   OSLO_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(oslo_last_error(), "names no token"));
  oslo_tokenizer_destroy(tok);
}

static void test_round_trip(void **state) {
  (void)state;
  const char *names[] = {"gpt2_bpe", "llama3_bpe", "qwen2_bpe"};
  const char *text =
      "Byte-level BPE is lossless: caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 "
      "\xf0\x9f\x98\x80\t\n  x";
  for (int k = 0; k < 3; ++k) {
    oslo_tokenizer *tok = load(names[k]);
    size_t count = 0, len = 0;
    int64_t ids[256];
    assert_int_equal(oslo_tokenizer_encode(tok, text, strlen(text), 0, ids, 256, &count), OSLO_OK);
    assert_true(count > 0 && count <= 256);
    char out[512];
    assert_int_equal(oslo_tokenizer_decode(tok, ids, count, 0, out, sizeof out, &len), OSLO_OK);
    assert_string_equal(out, text);
    oslo_tokenizer_destroy(tok);
  }
  oslo_tokenizer *sp = load("llama2_spm");
  int64_t id;
  assert_int_equal(oslo_tokenizer_special_id(sp, OSLO_SPECIAL_TOKEN_BOS, &id), OSLO_OK);
  assert_int_equal(id, 1);
  size_t count = 0;
  int64_t ids[64];
  assert_int_equal(oslo_tokenizer_encode(sp, "Hello", 5, 1, ids, 64, &count), OSLO_OK);
  assert_true(count >= 2);
  assert_int_equal(ids[0], 1); /* BOS by default, as LlamaTokenizer */
  oslo_tokenizer_destroy(sp);
}

static void test_errors(void **state) {
  (void)state;
  oslo_tokenizer *tok = (oslo_tokenizer *)0x1;
  assert_int_equal(oslo_tokenizer_load(NULL, &tok), OSLO_ERR_INVALID_ARGUMENT);
  assert_null(tok);
  assert_non_null(strstr(oslo_last_error(), "path is NULL"));
  assert_int_equal(oslo_tokenizer_load("/x", NULL), OSLO_ERR_INVALID_ARGUMENT);
  assert_int_equal(oslo_tokenizer_load("/nonexistent/tokenizer", &tok), OSLO_ERR_IO);
  assert_null(tok);
  assert_non_null(strstr(oslo_last_error(), "/nonexistent/tokenizer"));
  oslo_tokenizer_destroy(NULL);

  tok = load("gpt2_bpe");
  size_t count, len;
  int64_t ids[4];
  char buf[4];
  assert_int_equal(oslo_tokenizer_encode(NULL, "a", 1, 0, ids, 4, &count),
                   OSLO_ERR_INVALID_ARGUMENT);
  assert_int_equal(oslo_tokenizer_encode(tok, NULL, 1, 0, ids, 4, &count),
                   OSLO_ERR_INVALID_ARGUMENT);
  assert_int_equal(oslo_tokenizer_encode(tok, "a", 1, 0, NULL, 4, &count),
                   OSLO_ERR_INVALID_ARGUMENT);
  assert_int_equal(oslo_tokenizer_encode(tok, "a", 1, 0, ids, 4, NULL), OSLO_ERR_INVALID_ARGUMENT);
  assert_int_equal(oslo_tokenizer_encode(tok, "a\xff", 2, 0, ids, 4, &count),
                   OSLO_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(oslo_last_error(), "not valid UTF-8"));
  assert_int_equal(oslo_tokenizer_decode(tok, NULL, 1, 0, buf, 4, &len), OSLO_ERR_INVALID_ARGUMENT);
  assert_int_equal(oslo_tokenizer_decode(tok, ids, 0, 0, NULL, 4, &len), OSLO_ERR_INVALID_ARGUMENT);
  assert_int_equal(oslo_tokenizer_decode(tok, ids, 0, 0, buf, 4, NULL), OSLO_ERR_INVALID_ARGUMENT);
  int64_t neg = -3;
  assert_int_equal(oslo_tokenizer_decode(tok, &neg, 1, 0, buf, 4, &len), OSLO_ERR_INVALID_ARGUMENT);
  assert_int_equal(oslo_tokenizer_decode(tok, NULL, 0, 0, buf, 4, &len), OSLO_OK);
  assert_int_equal(len, 0);
  assert_string_equal(buf, "");
  size_t vs;
  assert_int_equal(oslo_tokenizer_vocab_size(NULL, &vs), OSLO_ERR_INVALID_ARGUMENT);
  assert_int_equal(oslo_tokenizer_vocab_size(tok, NULL), OSLO_ERR_INVALID_ARGUMENT);
  int64_t id;
  assert_int_equal(oslo_tokenizer_token_to_id(tok, NULL, 1, &id), OSLO_ERR_INVALID_ARGUMENT);
  assert_int_equal(oslo_tokenizer_token_to_id(tok, "a", 1, NULL), OSLO_ERR_INVALID_ARGUMENT);
  assert_int_equal(oslo_tokenizer_id_to_token(tok, 0, NULL, 4, &len), OSLO_ERR_INVALID_ARGUMENT);
  assert_int_equal(oslo_tokenizer_special_id(NULL, OSLO_SPECIAL_TOKEN_BOS, &id),
                   OSLO_ERR_INVALID_ARGUMENT);
  oslo_tokenizer_destroy(tok);
}

/* One tokenizer, four threads, the same results as one thread. */
typedef struct {
  const oslo_tokenizer *tok;
  int ok;
} worker_arg;

static const char *kTexts[] = {"The quick brown fox", "caf\xc3\xa9 <|endoftext|> na\xc3\xafve",
                               "  spaces   and\ttabs\n", "\xe4\xbd\xa0\xe5\xa5\xbd 123456"};

static void *worker(void *p) {
  worker_arg *a = (worker_arg *)p;
  int64_t first[4][64];
  size_t first_n[4];
  a->ok = 1;
  for (int round = 0; round < 200; ++round) {
    for (int k = 0; k < 4; ++k) {
      int64_t ids[64];
      size_t n = 0;
      if (oslo_tokenizer_encode(a->tok, kTexts[k], strlen(kTexts[k]), 1, ids, 64, &n) != OSLO_OK ||
          n > 64) {
        a->ok = 0;
        return NULL;
      }
      if (round == 0) {
        memcpy(first[k], ids, n * sizeof *ids);
        first_n[k] = n;
      } else if (n != first_n[k] || memcmp(ids, first[k], n * sizeof *ids) != 0) {
        a->ok = 0;
      }
      char out[256];
      size_t len = 0;
      if (oslo_tokenizer_decode(a->tok, ids, n, 0, out, sizeof out, &len) != OSLO_OK ||
          strcmp(out, kTexts[k]) != 0)
        a->ok = 0;
    }
  }
  return NULL;
}

static void test_threads(void **state) {
  (void)state;
  oslo_tokenizer *tok = load("gpt2_bpe");
  pthread_t th[4];
  worker_arg args[4];
  for (int i = 0; i < 4; ++i) {
    args[i].tok = tok;
    assert_int_equal(pthread_create(&th[i], NULL, worker, &args[i]), 0);
  }
  for (int i = 0; i < 4; ++i) {
    pthread_join(th[i], NULL);
    assert_true(args[i].ok);
  }
  oslo_tokenizer_destroy(tok);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s FIXTURES_DIR\n", argv[0]);
    return 2;
  }
  g_dir = argv[1];
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_minilm),
      cmocka_unit_test(test_round_trip),
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_threads),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
