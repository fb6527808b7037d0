// Unit tests of the launch environment resolution and the topology: which
// variables win, how disagreements are reported, Megatron's rank order.
#include <cstring>
#include <functional>
#include <map>
#include <string>

#include "core/common/error.hpp"
#include "core/context/config.hpp"
#include "core/topology/launch_env.hpp"
#include "core/topology/topology.hpp"

// cmocka last: it defines a fail() macro.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
extern "C" {
#include <cmocka.h>
}

using namespace oslo;

namespace {

EnvLookup env_of(std::map<std::string, std::string> m) {
  return [m](const char* n) -> const char* {
    auto it = m.find(n);
    return it == m.end() ? nullptr : it->second.c_str();
  };
}

oslo_status status_of(const std::function<void()>& f, std::string* msg = nullptr) {
  try {
    f();
  } catch (const Error& e) {
    if (msg) *msg = e.what();
    return e.status();
  }
  return OSLO_OK;
}

void test_default_single_rank(void**) {
  LaunchInfo li = resolve_launch(-1, -1, -1, -1, env_of({}));
  assert_int_equal(li.rank, 0);
  assert_int_equal(li.world_size, 1);
  assert_string_equal(li.source.c_str(), "default");
}

void test_torchrun(void**) {
  LaunchInfo li = resolve_launch(
      -1, -1, -1, -1,
      env_of({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "4"}}));
  assert_int_equal(li.rank, 5);
  assert_int_equal(li.world_size, 8);
  assert_int_equal(li.local_rank, 1);
  assert_int_equal(li.local_world_size, 4);
  assert_string_equal(li.source.c_str(), "torchrun");
  assert_true(li.warnings.empty());
}

void test_openmpi_and_slurm(void**) {
  LaunchInfo a = resolve_launch(-1, -1, -1, -1,
                                env_of({{"OMPI_COMM_WORLD_RANK", "3"},
                                        {"OMPI_COMM_WORLD_SIZE", "4"},
                                        {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                        {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}));
  assert_string_equal(a.source.c_str(), "openmpi");
  assert_int_equal(a.rank, 3);
  assert_int_equal(a.local_world_size, 2);
  LaunchInfo s = resolve_launch(-1, -1, -1, -1,
                                env_of({{"SLURM_PROCID", "2"},
                                        {"SLURM_NTASKS", "6"},
                                        {"SLURM_LOCALID", "0"},
                                        {"SLURM_NTASKS_PER_NODE", "3(x2)"}}));
  assert_string_equal(s.source.c_str(), "slurm");
  assert_int_equal(s.rank, 2);
  assert_int_equal(s.world_size, 6);
  assert_int_equal(s.local_world_size, 3);
  LaunchInfo p = resolve_launch(-1, -1, -1, -1, env_of({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}}));
  assert_string_equal(p.source.c_str(), "pmi");
}

void test_precedence_and_disagreement(void**) {
  // torchrun wins over Open MPI and Slurm; disagreements become warnings.
  LaunchInfo li = resolve_launch(-1, -1, -1, -1,
                                 env_of({{"RANK", "1"},
                                         {"WORLD_SIZE", "2"},
                                         {"OMPI_COMM_WORLD_RANK", "0"},
                                         {"OMPI_COMM_WORLD_SIZE", "2"},
                                         {"SLURM_PROCID", "1"},
                                         {"SLURM_NTASKS", "2"}}));
  assert_string_equal(li.source.c_str(), "torchrun");
  assert_int_equal(li.rank, 1);
  assert_int_equal(li.warnings.size(), 1);  // openmpi disagrees, slurm agrees
  assert_non_null(strstr(li.warnings[0].c_str(), "openmpi"));
  // Explicit config values win over everything.
  LaunchInfo c = resolve_launch(0, 3, -1, -1, env_of({{"RANK", "1"}, {"WORLD_SIZE", "2"}}));
  assert_string_equal(c.source.c_str(), "config");
  assert_int_equal(c.world_size, 3);
  assert_int_equal(c.local_world_size, 3);
}

void test_malformed(void**) {
  std::string msg;
  assert_int_equal(
      status_of(
          [] {
            resolve_launch(-1, -1, -1, -1, env_of({{"RANK", "x"}, {"WORLD_SIZE", "2"}}));
          },
          &msg),
      OSLO_ERR_CONFIG);
  assert_non_null(strstr(msg.c_str(), "RANK"));
  assert_int_equal(
      status_of(
          [] {
            resolve_launch(-1, -1, -1, -1, env_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}}));
          },
          &msg),
      OSLO_ERR_CONFIG);
  assert_int_equal(
      status_of(
          [] {
            resolve_launch(-1, -1, -1, -1, env_of({{"RANK", "-1"}, {"WORLD_SIZE", "2"}}));
          },
          &msg),
      OSLO_ERR_CONFIG);
  assert_int_equal(status_of([] { resolve_launch(0, -1, -1, -1, env_of({})); }, &msg),
                   OSLO_ERR_CONFIG);
  // Only half of a source set: ignored with a warning.
  LaunchInfo li = resolve_launch(-1, -1, -1, -1, env_of({{"RANK", "1"}}));
  assert_int_equal(li.world_size, 1);
  assert_false(li.warnings.empty());
}

void test_topology_megatron_order(void**) {
  // world 8 = tp 2 x dp 2 x pp 2, the example of oslo.h
  for (int g = 0; g < 8; ++g) {
    Topology t(g, 8, 2, 2, 2);
    assert_int_equal(t.world_rank(), t.pp_rank() * 4 + t.dp_rank() * 2 + t.tp_rank());
  }
  Topology t5(5, 8, 2, 2, 2);
  assert_int_equal(t5.tp_rank(), 1);
  assert_int_equal(t5.dp_rank(), 0);
  assert_int_equal(t5.pp_rank(), 1);
  assert_true((t5.members(OSLO_GROUP_TENSOR) == std::vector<int>{4, 5}));
  assert_true((t5.members(OSLO_GROUP_DATA) == std::vector<int>{5, 7}));
  assert_true((t5.members(OSLO_GROUP_PIPELINE) == std::vector<int>{1, 5}));
  Topology t2(2, 8, 2, 2, 2);
  assert_true((t2.members(OSLO_GROUP_DATA) == std::vector<int>{0, 2}));
  assert_true((t2.members(OSLO_GROUP_PIPELINE) == std::vector<int>{2, 6}));
  // Non-power-of-two tensor parallelism works (OSLO itself only allows powers of two).
  Topology t6(4, 6, 3, 1, 2);
  assert_true((t6.members(OSLO_GROUP_TENSOR) == std::vector<int>{3, 4, 5}));
  assert_int_equal(status_of([] { Topology(0, 6, 4, 1, 1); }), OSLO_ERR_CONFIG);
  assert_int_equal(status_of([] { Topology(6, 6, 3, 1, 2); }), OSLO_ERR_CONFIG);
}

void test_init_methods(void**) {
  InitMethod m = parse_init_method("tcp://10.0.0.1:1234");
  assert_int_equal(m.kind, InitMethod::Tcp);
  assert_string_equal(m.host.c_str(), "10.0.0.1");
  assert_int_equal(m.port, 1234);
  m = parse_init_method("tcp://[::1]:80");
  assert_string_equal(m.host.c_str(), "::1");
  m = parse_init_method("file:///tmp/store");
  assert_string_equal(m.path.c_str(), "/tmp/store");
  setenv("MASTER_ADDR", "node7", 1);
  setenv("MASTER_PORT", "4321", 1);
  m = parse_init_method("env://");
  assert_string_equal(m.host.c_str(), "node7");
  assert_int_equal(m.port, 4321);
  setenv("MASTER_PORT", "http", 1);
  std::string msg;
  assert_int_equal(status_of([] { parse_init_method("env://"); }, &msg), OSLO_ERR_CONFIG);
  assert_non_null(strstr(msg.c_str(), "MASTER_PORT"));
  unsetenv("MASTER_ADDR");
  unsetenv("MASTER_PORT");
}

}  // namespace

int main() {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_default_single_rank),
      cmocka_unit_test(test_torchrun),
      cmocka_unit_test(test_openmpi_and_slurm),
      cmocka_unit_test(test_precedence_and_disagreement),
      cmocka_unit_test(test_malformed),
      cmocka_unit_test(test_topology_megatron_order),
      cmocka_unit_test(test_init_methods),
  };
  return cmocka_run_group_tests(tests, nullptr, nullptr);
}
