/* DLPack with a device backend (the "guard" test plugin: device type kDLCUDA,
 * device index from its backend option "device"): an import must be on the
 * context's device index, not only its device type; exports name the
 * backend's device. The imported memory is never touched by the core (the
 * guard plugin would refuse it as a view; here no op runs on it). */
#include <stdio.h>
#include <string.h>

#include <oslo/dlpack.h>

#include "oslo.h"

static int passed, failed, deleted;

static void check(int ok, const char *what) {
  if (ok) {
    ++passed;
  } else {
    ++failed;
    fprintf(stderr, "FAIL: %s (last error: %s)\n", what, oslo_last_error());
  }
}

static void count_delete(DLManagedTensor *m) {
  (void)m;
  ++deleted;
}

static float g_host[4];
static int64_t g_shape[1] = {4};

static DLManagedTensor make(int device_id) {
  DLManagedTensor m;
  memset(&m, 0, sizeof m);
  m.dl_tensor.data = g_host;
  m.dl_tensor.device.device_type = kDLCUDA;
  m.dl_tensor.device.device_id = device_id;
  m.dl_tensor.ndim = 1;
  m.dl_tensor.dtype.code = kDLFloat;
  m.dl_tensor.dtype.bits = 32;
  m.dl_tensor.dtype.lanes = 1;
  m.dl_tensor.shape = g_shape;
  m.deleter = count_delete;
  return m;
}

int main(void) {
  oslo_context *ctx = NULL;
  oslo_status st =
      oslo_context_create("{\"backend\": \"guard\", \"backend_options\": {\"device\": 0}}", &ctx);
  check(st == OSLO_OK, "a context on the guard backend, device 0");
  if (st != OSLO_OK) return 1;

  DLManagedTensor on1 = make(1);
  oslo_tensor *t = (oslo_tensor *)1;
  st = oslo_tensor_from_dlpack(ctx, &on1, &t);
  check(st == OSLO_ERR_NOT_SUPPORTED, "a tensor on device 1 into a context on device 0 fails");
  check(strstr(oslo_last_error(), "device 2:1") != NULL &&
            strstr(oslo_last_error(), "device 2:0") != NULL,
        "the message names both devices");
  check(deleted == 0, "on failure the caller keeps the tensor");

  DLManagedTensor on0 = make(0);
  t = NULL;
  st = oslo_tensor_from_dlpack(ctx, &on0, &t);
  check(st == OSLO_OK && t != NULL, "a tensor on device 0 imports");
  if (st == OSLO_OK) oslo_tensor_destroy(t);
  check(deleted == 1, "the import's deleter ran once its tensor was gone");

  /* Exports carry the backend's device. */
  int64_t shape[2] = {2, 3};
  oslo_tensor *x = NULL;
  check(oslo_tensor_create(ctx, OSLO_DTYPE_F32, 2, shape, &x) == OSLO_OK, "tensor on the guard");
  DLManagedTensor *out = NULL;
  check(oslo_tensor_to_dlpack(x, &out) == OSLO_OK && out, "export");
  if (out) {
    check(out->dl_tensor.device.device_type == kDLCUDA && out->dl_tensor.device.device_id == 0,
          "the export is on kDLCUDA:0");
    out->deleter(out);
  }
  oslo_tensor_destroy(x);
  oslo_context_destroy(ctx);
  printf("guard dlpack: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
