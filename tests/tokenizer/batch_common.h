/* What the batch tests of this folder share (test_tokenizer_batch.c,
 * test_pad_batch.c): reading a row of their reference files. Include after
 * cmocka.h. */
#ifndef OSLO_TESTS_TOKENIZER_BATCH_COMMON_H
#define OSLO_TESTS_TOKENIZER_BATCH_COMMON_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Reads "PREFIX v1 v2 ..." into out (at most max values); returns the
 * count. */
static size_t read_row_of(const char *line, const char *prefix, int64_t *out, size_t max) {
  size_t k = strlen(prefix);
  assert_true(strncmp(line, prefix, k) == 0);
  const char *p = line + k;
  size_t n = 0;
  char *end;
  for (;;) {
    long long v = strtoll(p, &end, 10);
    if (end == p) break;
    assert_true(n < max);
    out[n++] = v;
    p = end;
  }
  return n;
}

#endif
