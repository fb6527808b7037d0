// Pipeline layouts, schedules and their simulation (core/pipeline/schedule.hpp).
//
//   pipeline_schedule_test megatron
//       Every rank's order for (p, m, v) = (2, 4, 1), (4, 8, 1), (4, 8, 2)
//       equals Megatron-LM's, as tests/pipeline/megatron_order.py (a
//       transcription of Megatron's loops) printed it.
//   pipeline_schedule_test invariants
//       Every schedule for p in 1..4, m in 1..9, v in 1..3 (v > 1 only
//       when p divides m): each (micro-batch, chunk) forward and backward
//       exactly once, the backward after the forward; the activations kept
//       at the peak (1F1B: exactly min(p - r, m)); the simulation of the
//       whole pipeline finishes, every op starting as soon as its rank is
//       free and its input there.
//   pipeline_schedule_test bubble
//       The simulated bubble fraction: 1F1B (p - 1) / (m + p - 1) and
//       interleaved (p - 1) / (v m + p - 1), smaller than 1F1B's; a
//       hand-computed pipeline with communication time and one with
//       unequal stages.
//   pipeline_schedule_test partition
//       Uniform cuts as Colossal-AI's partition_uniform makes them, explicit
//       counts, first and last stages.
//   pipeline_schedule_test peers
//       Whom each op receives from and sends to (p = 4, v = 2 by hand;
//       every send matched by the receive of the next stage).
//   pipeline_schedule_test errors
//       Every invalid argument refused with OSLO_ERR_INVALID_ARGUMENT and a
//       message naming it; a deadlocked set of orders reported, not looped
//       on.
//   pipeline_schedule_test order P R M V
//       Prints rank R's order (for megatron_order.py --check, which compares
//       every p in 1..4, m in 1..9, v in 1..3 with Megatron's).
//
// The modes are in test_schedule_orders.cpp, test_schedule_layout.cpp,
// test_schedule_plan.cpp and test_schedule_errors.cpp (schedule_common.hpp).
#include "schedule_common.hpp"

using namespace oslo;
using namespace sched_test;

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "order" && argc == 6) {
      const int p = std::atoi(argv[2]), r = std::atoi(argv[3]), m = std::atoi(argv[4]),
                v = std::atoi(argv[5]);
      std::printf("%s\n", schedule_string(pipeline_schedule(p, r, m, v), v > 1).c_str());
      return 0;
    } else if (mode == "megatron") {
      test_megatron();
    } else if (mode == "invariants") {
      test_invariants();
    } else if (mode == "bubble") {
      test_bubble();
    } else if (mode == "partition") {
      test_partition();
    } else if (mode == "peers") {
      test_peers();
    } else if (mode == "errors") {
      test_errors();
    } else if (mode == "plan") {
      test_plan();
    } else if (mode == "headsplit") {
      test_head_split();
    } else {
      std::fprintf(stderr,
                   "usage: pipeline_schedule_test "
                   "megatron|invariants|bubble|partition|peers|errors|plan|headsplit"
                   "\n       pipeline_schedule_test order P R M V\n");
      return 2;
    }
  } catch (const Error& e) {
    std::printf("FAIL: unexpected error: %s\n", e.what());
    return 1;
  }
  if (g_fail) {
    std::printf("%d failure(s)\n", g_fail.load());
    return 1;
  }
  std::printf("OK\n");
  return 0;
}
