// The "communicator" config key and a group's control messages
// (core/comm/control.hpp), two ranks as threads:
//   - cpu: "auto" and "host" connect shm; "backend" is refused by name (the
//     CPU backend has no communicators of its own);
//   - guard (memory the host cannot read; tests/backend_plugin): "auto" and
//     "host" connect the staged host communicator, "backend" is refused;
//     a host buffer handed to its communicator is refused naming the group,
//     the call and the argument, before anything is sent (the next call
//     still works); backend memory goes through;
//   - Control on both: all_reduce (sum, max, min), all_gather, broadcast
//     from each root, all_gather_strings and broadcast_string (empty, long,
//     binary), barrier: every rank gets the same, exact values.
// Usage: test_control (OSLO_BACKEND_PATH must name the folder with the guard
// plugin).
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/common/error.hpp"
#include "core/context/context.hpp"
#include "core/parallel/mappings.hpp"
#include "core/tensor/tensor.hpp"
#include "tests/common/temp_dir.hpp"

namespace {

std::atomic<int> g_fail{0};

void expect(bool ok, int rank, const std::string& what) {
  if (!ok) {
    ++g_fail;
    std::printf("FAIL [rank %d] %s\n", rank, what.c_str());
  }
}

// Runs body(rank, ctx) on two thread ranks with the given backend and
// communicator mode; returns each rank's error status (OSLO_OK if none) and
// message.
struct Outcome {
  oslo_status status = OSLO_OK;
  std::string message;
};
std::vector<Outcome> two_ranks(const std::string& backend, const std::string& mode,
                               const std::function<void(int, oslo::Context&)>& body) {
  const std::string store = oslo_test::temp_dir("oslo-control");
  std::vector<Outcome> out(2);
  std::vector<std::thread> th;
  for (int r = 0; r < 2; ++r)
    th.emplace_back([&, r] {
      try {
        const std::string cfg = "{\"rank\": " + std::to_string(r) +
                                ", \"world_size\": 2, \"tensor_parallel_size\": 2, "
                                "\"init_method\": \"file://" +
                                store + "/rdv\", \"timeout_seconds\": 20, \"num_threads\": 1, " +
                                "\"backend\": \"" + backend + "\", \"communicator\": \"" + mode +
                                "\"}";
        oslo::Context ctx(oslo::Config::parse(cfg.c_str()));
        body(r, ctx);
      } catch (const oslo::Error& e) {
        out[r].status = e.status();
        out[r].message = e.what();
      }
    });
  for (auto& t : th) t.join();
  oslo_test::remove_tree(store);
  return out;
}

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Every Control operation, exact on both ranks.
void control_suite(int r, oslo::Context& ctx) {
  oslo::Control& c = ctx.control(OSLO_GROUP_TENSOR);
  expect(c.size() == 2 && c.rank() == r, r, "control rank/size");
  int64_t v[3] = {r + 1, -5 * (r + 1), int64_t(1) << (40 + r)};
  c.all_reduce(v, 3, OSLO_REDUCE_SUM);
  expect(v[0] == 3 && v[1] == -15 && v[2] == (int64_t(1) << 40) + (int64_t(1) << 41), r,
         "control all_reduce sum");
  int64_t m = 10 * r - 3;
  c.all_reduce(&m, 1, OSLO_REDUCE_MAX);
  expect(m == 7, r, "control all_reduce max");
  m = 10 * r - 3;
  c.all_reduce(&m, 1, OSLO_REDUCE_MIN);
  expect(m == -3, r, "control all_reduce min");
  const int64_t mine[2] = {100 + r, -r};
  int64_t all[4] = {0, 0, 0, 0};
  c.all_gather(mine, all, 2);
  expect(all[0] == 100 && all[1] == 0 && all[2] == 101 && all[3] == -1, r, "control all_gather");
  for (int root = 0; root < 2; ++root) {
    int64_t b[2] = {r == root ? 42 + root : -1, r == root ? -7 : -1};
    c.broadcast(b, 2, root);
    expect(b[0] == 42 + root && b[1] == -7, r, "control broadcast from " + std::to_string(root));
  }
  const std::string bin("a\0b\xff", 4);
  // Each case: what rank q sends (the same shape on both ranks).
  const std::vector<std::function<std::string(int)>> cases = {
      [](int) { return std::string(); },
      [](int q) { return std::string(5000, static_cast<char>('x' + q)); },
      [&](int q) { return bin + std::to_string(q); },
  };
  for (size_t k = 0; k < cases.size(); ++k) {
    const std::vector<std::string> got = c.all_gather_strings(cases[k](r));
    expect(got.size() == 2 && got[0] == cases[k](0) && got[1] == cases[k](1), r,
           "control all_gather_strings case " + std::to_string(k));
  }
  const std::vector<std::string> names = c.all_gather_strings(r == 0 ? "zero" : "one, longer");
  expect(names.size() == 2 && names[0] == "zero" && names[1] == "one, longer", r,
         "control all_gather_strings of different lengths");
  const std::string b0 = c.broadcast_string(r == 1 ? bin : std::string("ignored"), 1);
  expect(b0 == bin, r, "control broadcast_string from rank 1");
  c.barrier();
}

void test_cpu() {
  // "auto" and "host": shm (a host transport over host memory).
  for (const char* mode : {"auto", "host"}) {
    auto o = two_ranks("cpu", mode, [&](int r, oslo::Context& ctx) {
      expect(std::string(ctx.transport_name(OSLO_GROUP_TENSOR)) == "shm", r,
             std::string("cpu ") + mode + " transport is " + ctx.transport_name(OSLO_GROUP_TENSOR));
      control_suite(r, ctx);
    });
    for (int r = 0; r < 2; ++r)
      expect(o[r].status == OSLO_OK, r, std::string("cpu ") + mode + ": " + o[r].message);
  }
  auto o = two_ranks("cpu", "backend", [](int, oslo::Context&) {});
  for (int r = 0; r < 2; ++r)
    expect(o[r].status == OSLO_ERR_NOT_SUPPORTED && has(o[r].message, "\"communicator\"") &&
               has(o[r].message, "'cpu'"),
           r, "cpu \"backend\" refused by name: " + o[r].message);
}

void test_guard() {
  for (const char* mode : {"auto", "host"}) {
    auto o = two_ranks("guard", mode, [&](int r, oslo::Context& ctx) {
      const std::string t = ctx.transport_name(OSLO_GROUP_TENSOR);
      expect(t == "staged/shm", r, std::string("guard ") + mode + " transport is " + t);
      control_suite(r, ctx);
      // Backend memory goes through the staged communicator.
      oslo::Tensor x = oslo::scratch(ctx.backend_ptr(), OSLO_DTYPE_F32, {3});
      const float in[3] = {1.f + r, 2.f, -3.f * r};
      ctx.backend().copy(x.data(), in, sizeof in, oslo::CopyKind::HostToDevice);
      oslo::all_reduce(ctx, OSLO_GROUP_TENSOR, x.data(), 3, OSLO_DTYPE_F32, OSLO_REDUCE_SUM);
      float got[3];
      ctx.backend().copy(got, x.data(), sizeof got, oslo::CopyKind::DeviceToHost);
      expect(got[0] == 3.f && got[1] == 4.f && got[2] == -3.f, r, "guard staged all_reduce");
      // A host buffer is refused by name on every call, before anything is
      // sent, and the communicator stays usable.
      float host[4] = {0, 0, 0, 0};
      struct Call {
        const char* call;
        const char* arg;
        std::function<void()> fn;
      };
      oslo::Communicator& comm = ctx.comm(OSLO_GROUP_TENSOR);
      const std::vector<Call> calls = {
          {"all_reduce", "in",
           [&] { comm.all_reduce(host, x.data(), 1, OSLO_DTYPE_F32, OSLO_REDUCE_SUM); }},
          {"all_reduce", "out",
           [&] { comm.all_reduce(x.data(), host, 1, OSLO_DTYPE_F32, OSLO_REDUCE_SUM); }},
          {"all_gather", "out", [&] { comm.all_gather(x.data(), host, 1, OSLO_DTYPE_F32); }},
          {"reduce_scatter", "in",
           [&] { comm.reduce_scatter(host, x.data(), 1, OSLO_DTYPE_F32, OSLO_REDUCE_SUM); }},
          {"broadcast", "buf", [&] { comm.broadcast(host, 1, OSLO_DTYPE_F32, 0); }},
          {"send", "buf", [&] { comm.send(host, 4, 1 - r); }},
          {"recv", "buf", [&] { comm.recv(host, 4, 1 - r); }},
      };
      for (const Call& c : calls) {
        std::string msg;
        oslo_status st = OSLO_OK;
        try {
          c.fn();
        } catch (const oslo::Error& e) {
          st = e.status();
          msg = e.what();
        }
        expect(st == OSLO_ERR_INVALID_ARGUMENT && has(msg, c.call) &&
                   has(msg, std::string("`") + c.arg + "`") && has(msg, "communicator of group") &&
                   has(msg, "guard"),
               r, std::string("host buffer to ") + c.call + " refused by name: " + msg);
      }
      oslo::all_reduce(ctx, OSLO_GROUP_TENSOR, x.data(), 3, OSLO_DTYPE_F32, OSLO_REDUCE_SUM);
      ctx.backend().copy(got, x.data(), sizeof got, oslo::CopyKind::DeviceToHost);
      expect(got[0] == 6.f && got[1] == 8.f && got[2] == -6.f, r,
             "guard staged all_reduce after the refusals");
    });
    for (int r = 0; r < 2; ++r)
      expect(o[r].status == OSLO_OK, r, std::string("guard ") + mode + ": " + o[r].message);
  }
  auto o = two_ranks("guard", "backend", [](int, oslo::Context&) {});
  for (int r = 0; r < 2; ++r)
    expect(o[r].status == OSLO_ERR_NOT_SUPPORTED && has(o[r].message, "'guard'"), r,
           "guard \"backend\" refused by name: " + o[r].message);
}

}  // namespace

int main() {
  test_cpu();
  test_guard();
  std::printf("test_control: %s\n", g_fail ? "FAILED" : "passed");
  return g_fail ? 1 : 0;
}
