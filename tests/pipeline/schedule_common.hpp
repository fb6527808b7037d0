// Shared by the files of pipeline_schedule_test (test_schedule.cpp says what
// each mode checks): every rank's schedule for (p, m, v), and the modes.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/common/error.hpp"
#include "core/pipeline/schedule.hpp"
#include "tests/common/expect.hpp"

using namespace oslo;
namespace sched_test {

using oslo_test::g_fail;

inline std::vector<std::vector<PipeOp>> all_ranks(int p, int m, int v) {
  std::vector<std::vector<PipeOp>> ops;
  for (int r = 0; r < p; ++r) ops.push_back(pipeline_schedule(p, r, m, v));
  return ops;
}

void test_megatron();    // test_schedule_orders.cpp
void test_invariants();  // test_schedule_orders.cpp
void test_bubble();      // test_schedule_orders.cpp
void test_partition();   // test_schedule_layout.cpp
void test_peers();       // test_schedule_layout.cpp
void test_plan();        // test_schedule_plan.cpp
void test_head_split();  // test_schedule_plan.cpp
void test_errors();      // test_schedule_errors.cpp

}  // namespace sched_test
