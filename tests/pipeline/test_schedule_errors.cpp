// pipeline_schedule_test errors: every invalid argument refused with
// OSLO_ERR_INVALID_ARGUMENT and a message naming it; deadlocks reported.
#include "schedule_common.hpp"

using namespace oslo;

namespace sched_test {

// --------------------------------------------------------------- errors

// Expects `fn` to throw OSLO_ERR_INVALID_ARGUMENT with every one of `parts`
// in the message.
void expect_error(const char* what, const std::function<void()>& fn,
                  const std::vector<const char*>& parts) {
  try {
    fn();
    EXPECT(false, "%s: accepted", what);
  } catch (const Error& e) {
    bool named = true;
    for (const char* part : parts) named = named && std::strstr(e.what(), part) != nullptr;
    EXPECT(e.status() == OSLO_ERR_INVALID_ARGUMENT && named, "%s: status %d, message '%s'", what,
           static_cast<int>(e.status()), e.what());
  }
}

void test_errors() {
  // Partitions.
  expect_error("uniform p 0", [] { partition_uniform(8, 0, 1); }, {"pipeline size 0"});
  expect_error("uniform v 0", [] { partition_uniform(8, 2, 0); }, {"chunks per rank 0"});
  expect_error("uniform v -1", [] { partition_uniform(8, 2, -1); }, {"chunks per rank -1"});
  expect_error("uniform too few layers", [] { partition_uniform(7, 4, 2); },
               {"7 layers", "8 virtual stages"});
  expect_error("uniform layers % v", [] { partition_uniform(9, 2, 2); },
               {"9 layers", "multiple of the 2 chunks"});
  expect_error("counts length",
               [] {
                 partition_counts(8, 2, 2, {2, 2, 4});
               },
               {"3 layer counts", "4 virtual stages"});
  expect_error("counts zero",
               [] {
                 partition_counts(8, 2, 2, {2, 0, 3, 3});
               },
               {"layer count 0", "virtual stage 1", "rank 1 chunk 0"});
  expect_error("counts negative",
               [] {
                 partition_counts(8, 2, 2, {2, 3, -1, 4});
               },
               {"layer count -1", "virtual stage 2", "rank 0 chunk 1"});
  expect_error("counts sum",
               [] {
                 partition_counts(9, 2, 2, {2, 2, 2, 2});
               },
               {"sum to 8", "9 layers"});
  expect_error("counts p 0", [] { partition_counts(8, 0, 2, {}); }, {"pipeline size 0"});
  const PipelinePartition part = partition_uniform(8, 2, 2);
  expect_error("at rank", [&] { part.at(2, 0); }, {"rank 2", "[0, 2)"});
  expect_error("at chunk", [&] { part.at(0, -1); }, {"chunk -1", "[0, 2)"});

  // Schedules.
  expect_error("schedule p 0", [] { pipeline_schedule(0, 0, 4, 1); }, {"pipeline size 0"});
  expect_error("schedule rank -1", [] { pipeline_schedule(2, -1, 4, 1); }, {"rank -1"});
  expect_error("schedule rank p", [] { pipeline_schedule(2, 2, 4, 1); }, {"rank 2", "[0, 2)"});
  expect_error("schedule m 0", [] { pipeline_schedule(2, 0, 0, 1); }, {"0 micro-batches"});
  expect_error("schedule v 0", [] { pipeline_schedule(2, 0, 4, 0); }, {"chunks per rank 0"});
  expect_error("schedule too many steps", [] { pipeline_schedule(2, 0, 1 << 30, 3); },
               {"1073741824 x 3 micro-batch steps", "too many"});
  expect_error("schedule m % p", [] { pipeline_schedule(4, 1, 6, 2); },
               {"6 micro-batches", "pipeline size 4", "multiple"});

  // check_schedule and peak_live_microbatches.
  using K = PipeOp;
  // HEAD ops (the head split's): only where allowed, once per micro-batch,
  // between the chunk-0 forward and backward; the head-split schedule's
  // arguments.
  expect_error("head op not allowed",
               [] {
                 check_schedule({{K::FORWARD, 0, 0}, {K::HEAD, 0, 0}, {K::BACKWARD, 0, 0}}, 1, 1);
               },
               {"has kind 2"});
  expect_error("head op missing",
               [] {
                 check_schedule({{K::FORWARD, 0, 0}, {K::BACKWARD, 0, 0}}, 1, 1, true);
               },
               {"runs before its head share"});
  expect_error(
      "head op before forward",
      [] {
        check_schedule({{K::HEAD, 0, 0}, {K::FORWARD, 0, 0}, {K::BACKWARD, 0, 0}}, 1, 1, true);
      },
      {"H0.0", "not the one head share"});
  expect_error("head ops on rank 1",
               [] {
                 simulate_pipeline({{{K::FORWARD, 0, 0}, {K::BACKWARD, 0, 0}},
                                    {{K::FORWARD, 0, 0}, {K::HEAD, 0, 0}, {K::BACKWARD, 0, 0}}},
                                   1, 1);
               },
               {"rank 1", "has kind 2"});
  expect_error("head split p 1", [] { pipeline_schedule_head_split(1, 4, 1, {1}, 1); },
               {"pipeline size 1"});
  expect_error("head split costs", [] { pipeline_schedule_head_split(2, 4, 1, {1}, 1); },
               {"1 stage costs for 2 virtual stages"});
  expect_error("head split head cost",
               [] {
                 pipeline_schedule_head_split(2, 4, 1, {1, 1}, 0);
               },
               {"head cost 0"});
  expect_error("head split backward costs",
               [] {
                 pipeline_schedule_head_split(2, 4, 1, {1, 1}, 1, {1, -1});
               },
               {"finite and > 0"});
  expect_error("check missing",
               [] {
                 check_schedule({{K::FORWARD, 0, 0}, {K::BACKWARD, 0, 0}}, 2, 1);
               },
               {"F1.0 is missing"});
  expect_error("check missing backward",
               [] {
                 check_schedule({{K::FORWARD, 0, 0}}, 1, 1);
               },
               {"B0.0 is missing"});
  expect_error("check backward first",
               [] {
                 check_schedule({{K::BACKWARD, 0, 0}, {K::FORWARD, 0, 0}}, 1, 1);
               },
               {"op 0", "B0.0", "before its forward"});
  expect_error(
      "check twice",
      [] {
        check_schedule({{K::FORWARD, 0, 0}, {K::FORWARD, 0, 0}, {K::BACKWARD, 0, 0}}, 1, 1);
      },
      {"op 1", "F0.0", "second time"});
  expect_error("check micro-batch range",
               [] {
                 check_schedule({{K::FORWARD, 3, 0}}, 2, 1);
               },
               {"op 0", "micro-batch 3", "[0, 2)"});
  expect_error("check chunk range",
               [] {
                 check_schedule({{K::FORWARD, 0, 2}}, 2, 2);
               },
               {"op 0", "chunk 2", "[0, 2)"});
  expect_error("peak backward without forward",
               [] {
                 peak_live_microbatches({{K::FORWARD, 0, 0}, {K::BACKWARD, 1, 0}});
               },
               {"op 1", "B1.0", "without an outstanding forward"});
  expect_error("peak forward twice",
               [] {
                 peak_live_microbatches({{K::FORWARD, 0, 1}, {K::FORWARD, 0, 1}});
               },
               {"op 1", "F0.1", "again"});

  // Peers.
  expect_error("peers chunk",
               [] {
                 pipe_op_peers({K::FORWARD, 0, 2}, 0, 4, 2);
               },
               {"chunk 2", "[0, 2)"});
  expect_error("peers rank",
               [] {
                 pipe_op_peers({K::FORWARD, 0, 0}, 4, 4, 2);
               },
               {"rank 4", "[0, 4)"});

  // Simulation.
  expect_error("simulate no ranks", [] { simulate_pipeline({}, 1, 1); }, {"pipeline size 0"});
  expect_error("simulate m 0", [] { simulate_pipeline(all_ranks(2, 1, 1), 0, 1); },
               {"0 micro-batches"});
  expect_error("simulate bad rank list",
               [] {
                 auto ops = all_ranks(2, 2, 1);
                 ops[1].pop_back();
                 simulate_pipeline(ops, 2, 1);
               },
               {"rank 1", "B1.0 is missing"});
  expect_error("simulate negative cost",
               [] {
                 PipeSimOptions o;
                 o.t_backward = -1;
                 simulate_pipeline(all_ranks(2, 2, 1), 2, 1, o);
               },
               {"t_backward -1"});
  expect_error("simulate nan comm",
               [] {
                 PipeSimOptions o;
                 o.t_comm = std::nan("");
                 simulate_pipeline(all_ranks(2, 2, 1), 2, 1, o);
               },
               {"t_comm nan"});
  expect_error("simulate scale size",
               [] {
                 PipeSimOptions o;
                 o.stage_scale = {1, 1, 1};
                 simulate_pipeline(all_ranks(2, 2, 2), 2, 2, o);
               },
               {"3 stage scales", "4 virtual stages"});
  // Rank 0 runs micro-batch 0's backward before micro-batch 1's forward,
  // rank 1 micro-batch 1's forward before micro-batch 0's: each waits for
  // the other.
  expect_error(
      "simulate deadlock",
      [] {
        std::vector<std::vector<PipeOp>> ops = {
            {{K::FORWARD, 0, 0}, {K::BACKWARD, 0, 0}, {K::FORWARD, 1, 0}, {K::BACKWARD, 1, 0}},
            {{K::FORWARD, 1, 0}, {K::BACKWARD, 1, 0}, {K::FORWARD, 0, 0}, {K::BACKWARD, 0, 0}}};
        simulate_pipeline(ops, 2, 1);
      },
      {"deadlock", "rank 0 at op 1 (B0.0) waits for B0.0 on rank 1",
       "rank 1 at op 0 (F1.0) waits for F1.0 on rank 0"});
  // A deadlock through the wrap between chunks: rank 0 does chunk 1 of
  // micro-batch 0 before chunk 0, which stage 1 (rank 1) must run first.
  expect_error("simulate deadlock across chunks",
               [] {
                 auto ops = all_ranks(2, 2, 2);
                 std::vector<PipeOp>& r0 = ops[0];
                 const PipeOp f01{K::FORWARD, 0, 1};
                 r0.erase(std::find(r0.begin(), r0.end(), f01));
                 r0.insert(r0.begin(), f01);
                 simulate_pipeline(ops, 2, 2);
               },
               {"deadlock", "rank 0 at op 0 (F0.1) waits for F0.0 on rank 1",
                "rank 1 at op 0 (F0.0) waits for F0.0 on rank 0"});
}

}  // namespace sched_test
