/* oslo.h must compile as strict C99 (-std=c99 -pedantic -Werror). */
#include "oslo.h"

int main(void) {
  oslo_context *ctx = NULL;
  oslo_parallel_linear_options o;
  oslo_parallel_linear_options_init(&o, OSLO_PARALLEL_LINEAR_OPTIONS_VERSION);
  int64_t shape[OSLO_MAX_DIMS] = {0};
  (void)o;
  (void)shape;
  return oslo_context_create(NULL, &ctx) == OSLO_OK ? (oslo_context_destroy(ctx), 0) : 1;
}
