// gloo communicator: every op, dtype and reduce op on 2, 3 and 4 ranks (as
// threads and as processes) over a TcpStore on 127.0.0.1, exact expected
// values, in-place variants, bitwise agreement across ranks; faults: a rank
// SIGKILLed mid-allreduce, a SIGSTOPped rank, abort() from another thread,
// ranks that never join.
//
// The cases are in test_gloo_ops.cpp, test_gloo_misc.cpp and
// test_gloo_fault.cpp (gloo_util.hpp).
#include "gloo_util.hpp"

using namespace gloo_test;

// argv[1], if given, is a cmocka name pattern ("test_fault_*"): ctest runs
// the groups as separate tests so that each stays short.
int main(int argc, char** argv) {
  if (argc > 1) cmocka_set_test_filter(argv[1]);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_misc_single_rank, test_util::kill_children),
      cmocka_unit_test_teardown(test_threads_2, test_util::kill_children),
      cmocka_unit_test_teardown(test_threads_3, test_util::kill_children),
      cmocka_unit_test_teardown(test_threads_4, test_util::kill_children),
      cmocka_unit_test_teardown(test_processes_2, test_util::kill_children),
      cmocka_unit_test_teardown(test_processes_3, test_util::kill_children),
      cmocka_unit_test_teardown(test_processes_4, test_util::kill_children),
      cmocka_unit_test_teardown(test_fault_sigkill_mid_allreduce, test_util::kill_children),
      cmocka_unit_test_teardown(test_fault_sigstop_times_out, test_util::kill_children),
      cmocka_unit_test_teardown(test_fault_abort_from_other_thread, test_util::kill_children),
      cmocka_unit_test_teardown(test_fault_missing_rank, test_util::kill_children),
      cmocka_unit_test_teardown(test_fault_send_never_received, test_util::kill_children),
      cmocka_unit_test_teardown(test_fault_destroy_flushes_sends, test_util::kill_children),
      cmocka_unit_test_teardown(test_fault_send_recv_size_mismatch, test_util::kill_children),
      cmocka_unit_test_teardown(test_fault_frozen_during_rendezvous, test_util::kill_children),
      cmocka_unit_test_teardown(test_processes_broadcast_root_mismatch_2, test_util::kill_children),
      cmocka_unit_test_teardown(test_processes_collective_mismatch_2, test_util::kill_children),
      cmocka_unit_test_teardown(test_processes_collective_mismatch_3, test_util::kill_children),
      cmocka_unit_test_teardown(test_processes_broadcast_root_mismatch_3, test_util::kill_children),
      cmocka_unit_test_teardown(test_misc_huge_timeout_late_peer, test_util::kill_children),
      cmocka_unit_test_teardown(test_misc_local_address_towards, test_util::kill_children),
      cmocka_unit_test_teardown(test_misc_bad_local_address, test_util::kill_children),
  };
  return cmocka_run_group_tests_name("gloo", tests, nullptr, nullptr);
}
