/* Encodes "Hello world" with the SentencePiece .model given as argument
 * through an installed oslo (the packaged SentencePiece shim): the install
 * checks (tests/install/test_install.sh, tools/deb-check.sh) build it. */
#include <oslo.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
  oslo_tokenizer *tok = NULL;
  int64_t ids[64];
  size_t n = 0;
  const char *text = "Hello world";
  if (argc != 2 || oslo_tokenizer_load(argv[1], &tok) ||
      oslo_tokenizer_encode(tok, text, strlen(text), 1, ids, 64, &n)) {
    fprintf(stderr, "%s\n", oslo_last_error());
    return 1;
  }
  oslo_tokenizer_destroy(tok);
  printf("SentencePiece .model: %zu ids\n", n);
  return n > 1 ? 0 : 1;
}
