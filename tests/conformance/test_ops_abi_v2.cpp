// conf_ops, backend ABI v2 (or the core's fallbacks for a v1 backend).
#include "ops_common.hpp"

using namespace oslo;

namespace conf {

// The entries of backend ABI v2, or the core's fallbacks for a v1 backend:
// asynchronous copies ordered with ops on the queue, events ordering two
// instances (a compute and a communication queue on one device),
// stream-ordered memory, device queries, the op capability query and the
// native stream.
void test_abi_v2(const std::shared_ptr<Backend>& be) {
  g_case = "abi version";
  check(be->abi_version() >= OSLO_BACKEND_ABI_VERSION_MIN &&
            be->abi_version() <= OSLO_BACKEND_ABI_VERSION,
        fmt("abi_version %u", be->abi_version()));

  g_case = "copy_async and stream-ordered memory";
  const int64_t n = 1 << 16;
  const size_t bytes = n * sizeof(float);
  std::vector<float> host(n), back(n, 0.f);
  for (int64_t i = 0; i < n; ++i) host[i] = static_cast<float>(i % 1000) - 500.f;
  void* a = be->allocate_async(bytes);
  void* b = be->allocate_async(bytes);
  be->copy_async(a, host.data(), bytes, CopyKind::HostToDevice);
  be->copy_async(b, a, bytes, CopyKind::DeviceToDevice);
  View vb = make_view(b, OSLO_DTYPE_F32, {n});
  be->unary(OSLO_BK_SCALE, vb, vb, 2.f);  // ordered after the copies on the queue
  be->copy_async(back.data(), b, bytes, CopyKind::DeviceToHost);
  {
    Event done(*be);
    done.record();
    done.synchronize();
  }
  bool same = true;
  for (int64_t i = 0; i < n; ++i) same = same && back[i] == 2.f * host[i];
  check(same, "H2D, D2D, an op, D2H, all enqueued, then an event's synchronize");
  be->deallocate_async(a, bytes);
  be->deallocate_async(b, bytes);

  g_case = "events between two queues";
  std::shared_ptr<Backend> comm = create_backend(g_name, g_options);
  for (int round = 0; round < 3; ++round) {
    Dev x(be, OSLO_DTYPE_F32, {4096}), y(be, OSLO_DTYPE_F32, {4096}), z(be, OSLO_DTYPE_F32, {4096});
    be->fill(x.v, 3.0 + round);
    Event produced(*be);
    produced.record();
    produced.wait(*comm);
    comm->binary(OSLO_BK_ADD, y.v, x.v, x.v);  // the "communication" queue
    Event reduced(*comm);
    reduced.record();
    reduced.wait(*be);
    be->binary(OSLO_BK_MUL, z.v, y.v, x.v);
    std::vector<double> got = z.download();
    const double want = 2.0 * (3 + round) * (3 + round);
    bool ok = true;
    for (double g : got) ok = ok && g == want;
    check(ok, fmt("round %d: x on queue 1, y = x + x on queue 2, z = y * x on queue 1", round));
  }
  comm.reset();

  g_case = "device queries";
  const std::string dev = be->device_name();
  check(!dev.empty(), "device_name is not empty");
  size_t free_b = 0, total_b = 0;
  try {
    be->memory_info(&free_b, &total_b);
    check(total_b > 0 && free_b <= total_b, fmt("memory free %zu of %zu", free_b, total_b));
    check(be->abi_version() >= 2, "a v1 backend has no memory_info");
  } catch (const Error& e) {
    check(e.status() == OSLO_ERR_NOT_SUPPORTED, std::string("memory_info: ") + e.what());
    if (be->abi_version() < 2) check(dev == be->name(), "v1 fallback: device_name is the name");
  }

  g_case = "op_supported";
  check(be->op_supported(OSLO_BK_OP_MATMUL, OSLO_DTYPE_F32), "matmul f32 is supported");
  check(be->op_supported(OSLO_BK_OP_SOFTMAX, OSLO_DTYPE_BF16), "softmax bf16 is supported");
  check(!be->op_supported(static_cast<oslo_bk_op>(OSLO_BK_OP_MATMUL_MIXED + 1), OSLO_DTYPE_F32),
        "an op id no fused op has yet is declined");
  check(!be->op_supported(static_cast<oslo_bk_op>(-7), OSLO_DTYPE_F32), "a bad op id is declined");

  g_case = "native stream";
  const int64_t stream = be->native_stream();
  if (be->dlpack_device_type() == 1) check(stream == 0, "a CPU queue has no native stream");
  Dev w(be, OSLO_DTYPE_F32, {256});
  be->fill(w.v, 5.0);
  // A consumer on the backend's own stream (or, without one, the host) waits
  // for the fill.
  be->make_stream_wait(stream != 0 ? stream : 1);
  std::vector<double> got = w.download();
  bool ok = true;
  for (double g : got) ok = ok && g == 5.0;
  check(ok, "data is ready after make_stream_wait");
}

}  // namespace conf
