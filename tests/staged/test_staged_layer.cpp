// StagedCommunicator (core/comm/staged_communicator.hpp): what the staged
// layer itself adds, on a fake device (tests/staged/fake_device.hpp) over shm
// and gloo: buffers that are not device memory are refused before anything
// is staged or sent and the group stays usable, each call copies exactly
// what it must, host staging is reused and freed; faults through the staged
// layer: a timeout, abort() from another thread. The transports' suites
// through the staged path: test_staged.cpp.
//
// Part of the test_staged executable (its main is test_staged.cpp); ctest
// runs these cases as staged_unit and staged_fault (test_unit_*,
// test_fault_*).
#include "tests/staged/staged_common.hpp"

namespace stagedtest {

// ---- the staged layer's own behaviour -----------------------------------------

// A StagedCommunicator needs every copy and staging entry; rank, size and
// the transport's name come from the host transport.
void test_unit_construction(void**) {
  oslo::HashStore store;
  FakeDevice dev;
  oslo::DeviceStaging s = dev.staging();
  s.to_device = nullptr;
  std::string msg;
  assert_int_equal(status_of(
                       [&] {
                         oslo::StagedCommunicator c(
                             oslo::create_shm_communicator(store, "t/staged/ctor", 0, 1, 5.0), s,
                             "tensor");
                       },
                       &msg),
                   OSLO_ERR_INTERNAL);
  assert_true(contains(msg, "incomplete staging") && contains(msg, "tensor"));
  assert_int_equal(dev.counters().host_allocs, 0);
  auto g = make_group(Kind::Shm, 2, 5.0);
  assert_int_equal((*g)[1].staged().rank(), 1);
  assert_int_equal((*g)[1].staged().size(), 2);
  assert_string_equal((*g)[1].staged().transport(), "staged/shm");
}

// Each call copies exactly what it must, once: all_reduce its count both
// ways, all_gather its block up and n blocks down, reduce_scatter n blocks up
// and one down, broadcast up on the root and down elsewhere, send up, recv
// down, barrier and count-0 calls nothing. All of it through one staging
// buffer of 64 KiB, allocated at the first call that stages bytes.
void test_unit_traffic(void**) {
  auto g = make_group(Kind::Shm, 2, 10.0);
  assert_int_equal((*g)[0].device().counters().host_allocs, 0);  // lazily allocated
  assert_clean(run_threads(*g, [](int r, DeviceMirror& m, Checker& ck) {
    FakeDevice& dev = m.device();
    oslo::StagedCommunicator& c = m.staged();
    const size_t count = 1000, B = count * sizeof(float);
    float* a = static_cast<float*>(dev.alloc(2 * B));
    float* b = static_cast<float*>(dev.alloc(2 * B));
    std::fill(a, a + 2 * count, static_cast<float>(r + 1));
    auto expect = [&](const char* what, const std::function<void()>& call, size_t up, size_t down) {
      auto before = dev.counters();
      call();
      auto after = dev.counters();
      const size_t up_calls = after.to_host_calls - before.to_host_calls;
      const size_t down_calls = after.to_device_calls - before.to_device_calls;
      SHM_EXPECT(ck, after.to_host_bytes - before.to_host_bytes == up, what, ": ",
                 after.to_host_bytes - before.to_host_bytes, " bytes to the host, want ", up);
      SHM_EXPECT(ck, after.to_device_bytes - before.to_device_bytes == down, what, ": ",
                 after.to_device_bytes - before.to_device_bytes, " bytes to the device, want ",
                 down);
      SHM_EXPECT(ck, up_calls == (up ? 1u : 0u) && down_calls == (down ? 1u : 0u), what, ": ",
                 up_calls, " + ", down_calls, " copies");
    };
    expect(
        "all_reduce", [&] { c.all_reduce(a, b, count, OSLO_DTYPE_F32, OSLO_REDUCE_SUM); }, B, B);
    SHM_EXPECT(ck, b[0] == 3 && b[count - 1] == 3, "all_reduce result ", b[0]);
    expect(
        "all_gather", [&] { c.all_gather(a, b, count, OSLO_DTYPE_F32); }, B, 2 * B);
    SHM_EXPECT(ck, b[0] == 1 && b[count] == 2, "all_gather result");
    expect(
        "reduce_scatter", [&] { c.reduce_scatter(a, b, count, OSLO_DTYPE_F32, OSLO_REDUCE_SUM); },
        2 * B, B);
    SHM_EXPECT(ck, b[0] == 3, "reduce_scatter result");
    expect(
        "broadcast", [&] { c.broadcast(a, count, OSLO_DTYPE_F32, 0); }, r == 0 ? B : 0,
        r == 0 ? 0 : B);
    SHM_EXPECT(ck, a[0] == 1, "broadcast result");
    expect(
        "send/recv",
        [&] {
          if (r == 0)
            c.send(b, B, 1);
          else
            c.recv(b, B, 0);
        },
        r == 0 ? B : 0, r == 0 ? 0 : B);
    expect(
        "barrier", [&] { c.barrier(); }, 0, 0);
    expect(
        "count 0", [&] { c.all_reduce(nullptr, nullptr, 0, OSLO_DTYPE_F32, OSLO_REDUCE_SUM); }, 0,
        0);
    auto cn = dev.counters();
    SHM_EXPECT(ck, cn.host_allocs == 1 && cn.host_live == 1, cn.host_allocs, " staging buffers");
    SHM_EXPECT(ck, cn.host_bytes_max == size_t(64) << 10, "staging of ", cn.host_bytes_max);
    dev.free(a);
    dev.free(b);
  }));
}

// Host staging grows to the largest call and is then reused: many calls of
// the size it has allocate nothing, a larger one replaces it (the old one
// freed first), smaller ones after it allocate nothing, destruction frees it.
void test_unit_staging_reused(void**) {
  auto g = make_group(Kind::Shm, 1, 10.0);
  DeviceMirror& m = (*g)[0];
  FakeDevice& dev = m.device();
  const size_t big = 100003;
  float* x = static_cast<float*>(dev.alloc(big * sizeof(float)));
  std::fill(x, x + big, 2.0f);
  for (int i = 0; i < 200; ++i)
    m.staged().all_reduce(x, x, 1000 + static_cast<size_t>(i), OSLO_DTYPE_F32, OSLO_REDUCE_SUM);
  auto c = dev.counters();
  assert_int_equal(c.host_allocs, 1);
  assert_int_equal(c.to_host_calls, 200);
  m.staged().all_reduce(x, x, big, OSLO_DTYPE_F32, OSLO_REDUCE_MAX);
  c = dev.counters();
  assert_int_equal(c.host_allocs, 2);
  assert_int_equal(c.host_frees, 1);
  assert_int_equal(c.host_live, 1);
  assert_true(c.host_bytes_max >= big * sizeof(float));
  for (int i = 0; i < 50; ++i) m.staged().broadcast(x, 5000, OSLO_DTYPE_F32, 0);
  assert_int_equal(dev.counters().host_allocs, 2);
  assert_true(x[big - 1] == 2.0f);
  dev.free(x);
  m.close();
  c = dev.counters();
  assert_int_equal(c.host_live, 0);
  assert_int_equal(c.host_frees, 2);
  assert_string_equal(dev.violations().c_str(), "");
}

// Every call handed memory that is not the backend's (host memory, or a
// device range that runs past its allocation) fails with
// OSLO_ERR_INVALID_ARGUMENT naming the group, the call, the argument, the
// backend and the reason, at once and before anything is staged or sent;
// the same kind of call right after it works on every rank (nothing of the
// refused one is left in the transport), and a count of 0 is no refusal.
static void refusals(Kind k) {
  auto g = make_group(k, 2, 30.0);
  const std::string group = "group " + g->name;
  assert_clean(run_threads(*g, [&](int r, DeviceMirror& m, Checker& ck) {
    FakeDevice& dev = m.device();
    oslo::StagedCommunicator& c = m.staged();
    const size_t count = 16, B = count * sizeof(float);
    std::vector<float> host(4 * count, 1.0f);
    float* h = host.data();
    float* d_in = static_cast<float*>(dev.alloc(2 * B));
    float* d_out = static_cast<float*>(dev.alloc(2 * B));
    float* d_one = static_cast<float*>(dev.alloc(B));  // one block only
    auto refused = [&](const char* call, const char* arg, const char* why,
                       const std::function<void()>& f) {
      auto before = dev.counters();
      std::string msg;
      double t0 = now_s();
      oslo_status st = status_of(f, &msg);
      double took = now_s() - t0;
      auto after = dev.counters();
      std::string what = oslo::str(call, "(`", arg, "` bad)");
      SHM_EXPECT(ck, st == OSLO_ERR_INVALID_ARGUMENT, what, ": status ", st, ": ", msg);
      SHM_EXPECT(ck,
                 contains(msg, group) && contains(msg, std::string(" ") + call + " ") &&
                     contains(msg, std::string("`") + arg + "`") &&
                     contains(msg, "'fake' backend") && contains(msg, why),
                 what, ": message: ", msg);
      SHM_EXPECT(ck, took < 0.5, what, ": took ", took, " s");
      SHM_EXPECT(ck,
                 after.to_host_calls == before.to_host_calls &&
                     after.to_device_calls == before.to_device_calls &&
                     after.host_allocs == before.host_allocs,
                 what, ": staged something before refusing");
    };
    const char* host_mem = "not inside any fake device allocation";
    const char* past_end = "bytes past the end of the fake device allocation";
    auto fill = [&](float* p, size_t n, float v) { std::fill(p, p + n, v); };

    // all_reduce
    refused("all_reduce", "in", host_mem,
            [&] { c.all_reduce(h, d_out, count, OSLO_DTYPE_F32, OSLO_REDUCE_SUM); });
    refused("all_reduce", "out", host_mem,
            [&] { c.all_reduce(d_in, h, count, OSLO_DTYPE_F32, OSLO_REDUCE_SUM); });
    refused("all_reduce", "in", past_end,
            [&] { c.all_reduce(d_one, d_out, 2 * count, OSLO_DTYPE_F32, OSLO_REDUCE_SUM); });
    fill(d_in, count, static_cast<float>(r + 1));
    c.all_reduce(d_in, d_out, count, OSLO_DTYPE_F32, OSLO_REDUCE_SUM);
    SHM_EXPECT(ck, d_out[0] == 3 && d_out[count - 1] == 3, "all_reduce after refusals");

    // all_gather: out must hold n blocks.
    refused("all_gather", "in", host_mem, [&] { c.all_gather(h, d_out, count, OSLO_DTYPE_F32); });
    refused("all_gather", "out", host_mem, [&] { c.all_gather(d_in, h, count, OSLO_DTYPE_F32); });
    refused("all_gather", "out", past_end,
            [&] { c.all_gather(d_in, d_one, count, OSLO_DTYPE_F32); });
    c.all_gather(d_in, d_out, count, OSLO_DTYPE_F32);
    SHM_EXPECT(ck, d_out[0] == 1 && d_out[count] == 2, "all_gather after refusals");

    // reduce_scatter: in must hold n blocks.
    refused("reduce_scatter", "in", host_mem,
            [&] { c.reduce_scatter(h, d_out, count, OSLO_DTYPE_F32, OSLO_REDUCE_MAX); });
    refused("reduce_scatter", "out", host_mem,
            [&] { c.reduce_scatter(d_in, h, count, OSLO_DTYPE_F32, OSLO_REDUCE_MAX); });
    refused("reduce_scatter", "in", past_end,
            [&] { c.reduce_scatter(d_one, d_out, count, OSLO_DTYPE_F32, OSLO_REDUCE_MAX); });
    fill(d_in, 2 * count, static_cast<float>(r + 1));
    c.reduce_scatter(d_in, d_out, count, OSLO_DTYPE_F32, OSLO_REDUCE_MAX);
    SHM_EXPECT(ck, d_out[0] == 2 && d_out[count - 1] == 2, "reduce_scatter after refusals");

    // broadcast: refused on the root and elsewhere.
    refused("broadcast", "buf", host_mem, [&] { c.broadcast(h, count, OSLO_DTYPE_F32, 1); });
    refused("broadcast", "buf", past_end,
            [&] { c.broadcast(d_one, 2 * count, OSLO_DTYPE_F32, 1); });
    fill(d_in, count, static_cast<float>(10 + r));
    c.broadcast(d_in, count, OSLO_DTYPE_F32, 1);
    SHM_EXPECT(ck, d_in[0] == 11 && d_in[count - 1] == 11, "broadcast after refusals");

    // send and recv: a refused send sends nothing, so the receiver's next
    // message (of another size: a stray one would be a size mismatch) is the
    // good one; a refused recv takes nothing.
    if (r == 0) {
      refused("send", "buf", host_mem, [&] { c.send(h, 2 * B, 1); });
      refused("send", "buf", past_end, [&] { c.send(d_one, 2 * B, 1); });
      fill(d_in, count, 42.0f);
      c.send(d_in, B, 1);
    } else {
      refused("recv", "buf", host_mem, [&] { c.recv(h, B, 0); });
      refused("recv", "buf", past_end, [&] { c.recv(d_one, 2 * B, 0); });
      fill(d_out, count, 0.0f);
      c.recv(d_out, B, 0);
      SHM_EXPECT(ck, d_out[0] == 42 && d_out[count - 1] == 42, "recv after refusals");
    }

    // Count 0 moves nothing, so any pointer is fine.
    SHM_EXPECT(ck, status_of([&] {
                     c.all_reduce(h, h, 0, OSLO_DTYPE_F32, OSLO_REDUCE_SUM);
                     c.broadcast(h, 0, OSLO_DTYPE_F32, 0);
                   }) == OSLO_OK,
               "count 0 with host pointers");
    c.barrier();
    SHM_EXPECT(ck, host[0] == 1.0f, "host memory written");
    dev.free(d_in);
    dev.free(d_out);
    dev.free(d_one);
  }));
}

void test_unit_refusals_shm(void**) {
  refusals(Kind::Shm);
}
void test_unit_refusals_gloo(void**) {
  refusals(Kind::Gloo);
}

// A count whose byte size overflows size_t (alone, or times the group size
// for the gathered and scattered sides, or times n + 1 for reduce_scatter's
// staging) is refused with OSLO_ERR_INVALID_ARGUMENT before anything is
// allocated, copied or sent, also on a backend without a memory check (where
// a wrapped size would otherwise pass for a small one), and the group stays
// usable.
void test_unit_overflowing_count(void**) {
  for (int with_check = 0; with_check < 2; ++with_check) {
    auto g = make_group(Kind::Shm, 3, 10.0, with_check != 0);
    assert_clean(run_threads(*g, [&](int r, DeviceMirror& m, Checker& ck) {
      oslo::StagedCommunicator& c = m.staged();
      FakeDevice& dev = m.device();
      float* d = static_cast<float*>(dev.alloc(64));
      const size_t wraps_alone = (size_t(1) << 62) + 1;  // x 4 bytes = 4 (mod 2^64)
      const size_t wraps_by_n = size_t(1) << 61;         // x 4 x 3 = 2^63 x 3 (mod 2^64)
      auto refused = [&](const char* call, const std::function<void()>& f) {
        auto before = dev.counters();
        std::string msg;
        oslo_status st = status_of(f, &msg);
        auto after = dev.counters();
        SHM_EXPECT(
            ck,
            st == OSLO_ERR_INVALID_ARGUMENT && contains(msg, call) && contains(msg, "overflows"),
            call, ": status ", st, ": ", msg);
        SHM_EXPECT(ck,
                   after.to_host_calls == before.to_host_calls &&
                       after.to_device_calls == before.to_device_calls &&
                       after.host_allocs == before.host_allocs,
                   call, ": staged something before refusing");
      };
      refused("all_reduce",
              [&] { c.all_reduce(d, d, wraps_alone, OSLO_DTYPE_F32, OSLO_REDUCE_SUM); });
      refused("all_gather", [&] { c.all_gather(d, d, wraps_by_n, OSLO_DTYPE_F32); });
      refused("reduce_scatter",
              [&] { c.reduce_scatter(d, d, wraps_by_n, OSLO_DTYPE_F32, OSLO_REDUCE_SUM); });
      refused("broadcast", [&] { c.broadcast(d, wraps_alone, OSLO_DTYPE_F32, 0); });
      d[0] = static_cast<float>(r);
      c.all_reduce(d, d, 1, OSLO_DTYPE_F32, OSLO_REDUCE_SUM);
      SHM_EXPECT(ck, d[0] == 3, "all_reduce after the refusals: ", d[0]);
      dev.free(d);
    }));
  }
}

// The harness can fail: the same suite through a fake device whose copies to
// the device (or to the host) do nothing reports failures.
static void sabotaged(bool drop_to_device) {
  auto g = make_group(Kind::Shm, 2, 10.0);
  for (auto& m : g->ranks) {
    m->device().drop_to_device = drop_to_device;
    m->device().drop_to_host = !drop_to_device;
  }
  std::string log =
      run_threads(*g, [](int, DeviceMirror& m, Checker& ck) { collective_suite(m, ck, 4099); });
  assert_false(log.empty());
}
void test_unit_sabotaged_to_device_fails(void**) {
  sabotaged(true);
}
void test_unit_sabotaged_to_host_fails(void**) {
  sabotaged(false);
}

// ---- faults through the staged layer (thread ranks) ---------------------------

// A rank that never calls: the waiting staged all_reduce (and, in a fresh
// group, a recv of a message never sent) fails with OSLO_ERR_TIMEOUT within
// [timeout, 2 x timeout], and the device output is left as it was.
static void timeout(Kind k) {
  for (int p2p = 0; p2p < 2; ++p2p) {
    auto g = make_group(k, 2, 1.0);
    DeviceMirror& m = (*g)[0];
    FakeDevice& dev = m.device();
    const size_t count = 4096;
    float* in = static_cast<float*>(dev.alloc(count * sizeof(float)));
    float* out = static_cast<float*>(dev.alloc(count * sizeof(float)));
    std::fill(in, in + count, 1.0f);
    std::fill(out, out + count, -7.0f);
    std::string msg;
    double t0 = now_s();
    oslo_status st = status_of(
        [&] {
          if (p2p)
            m.staged().recv(out, count * sizeof(float), 1);
          else
            m.staged().all_reduce(in, out, count, OSLO_DTYPE_F32, OSLO_REDUCE_SUM);
        },
        &msg);
    double waited = now_s() - t0;
    print_message("%s %s: %.2f s: %s\n", kind_name(k), p2p ? "recv" : "all_reduce", waited,
                  msg.c_str());
    assert_int_equal(st, OSLO_ERR_TIMEOUT);
    assert_true(waited >= 0.9 && waited < 2.0);
    assert_int_equal(dev.counters().to_device_calls, 0);
    assert_true(out[0] == -7.0f && out[count - 1] == -7.0f);
    assert_string_equal(dev.violations().c_str(), "");
    dev.free(in);
    dev.free(out);
  }
}

void test_fault_timeout_shm(void**) {
  timeout(Kind::Shm);
}
void test_fault_timeout_gloo(void**) {
  timeout(Kind::Gloo);
}

// abort() from another thread unblocks a staged call waiting for a peer that
// never comes (long before the 30 s timeout) with OSLO_ERR_COMM, leaves the
// device output alone, and the peer's next call fails promptly too.
static void abort_from_thread(Kind k) {
  for (int p2p = 0; p2p < 2; ++p2p) {
    auto g = make_group(k, 2, 30.0);
    DeviceMirror& m = (*g)[0];
    FakeDevice& dev = m.device();
    const size_t count = 100000;
    float* buf = static_cast<float*>(dev.alloc(count * sizeof(float)));
    std::fill(buf, buf + count, 1.0f);
    std::thread watchdog([&] {
      usleep(200 * 1000);
      m.abort();
    });
    std::string msg;
    double t0 = now_s();
    oslo_status st = status_of(
        [&] {
          if (p2p)
            m.staged().recv(buf, count * sizeof(float), 1);
          else
            m.staged().all_reduce(buf, buf, count, OSLO_DTYPE_F32, OSLO_REDUCE_SUM);
        },
        &msg);
    double waited = now_s() - t0;
    watchdog.join();
    print_message("%s %s: %.2f s: %s\n", kind_name(k), p2p ? "recv" : "all_reduce", waited,
                  msg.c_str());
    assert_int_equal(st, OSLO_ERR_COMM);
    assert_true(waited < 2.0);
    assert_int_equal(dev.counters().to_device_calls, 0);
    assert_true(buf[0] == 1.0f);
    // The peer, which never took part, fails within a moment.
    FakeDevice& dev1 = (*g)[1].device();
    float* x = static_cast<float*>(dev1.alloc(sizeof(float)));
    t0 = now_s();
    st = status_of([&] { (*g)[1].staged().all_reduce(x, x, 1, OSLO_DTYPE_F32, OSLO_REDUCE_SUM); },
                   &msg);
    assert_int_equal(st, OSLO_ERR_COMM);
    assert_true(now_s() - t0 < 2.0);
    dev.free(buf);
    dev1.free(x);
  }
}

void test_fault_abort_shm(void**) {
  abort_from_thread(Kind::Shm);
}
void test_fault_abort_gloo(void**) {
  abort_from_thread(Kind::Gloo);
}

}  // namespace stagedtest
