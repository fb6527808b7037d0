// All-reduce over oslo's shared-memory transport: N ranks (default 2) forked
// from this process, each pinned to its own CPU, meeting through a FileStore.
// Usage: bench_allreduce_shm [nranks]
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "bench/allreduce/bench_common.h"
#include "core/common/error.hpp"
#include "core/rendezvous/file_store.hpp"
#include "transports/shm/shm_communicator.hpp"

namespace {

int run_rank(int rank, int n, const std::string& store_path) {
  bench_pin(rank);
  oslo::FileStore store(store_path);
  auto comm = oslo::create_shm_communicator(store, "bench/allreduce", rank, n, 120.0);
  if (rank == 0) bench_print_header("oslo shm", n);
  const size_t max_count = kBenchSizes[BENCH_NSIZES - 1] / 4;
  float* in = static_cast<float*>(std::aligned_alloc(64, max_count * 4));
  float* out = static_cast<float*>(std::aligned_alloc(64, max_count * 4));
  if (!in || !out) return 1;
  for (size_t i = 0; i < max_count; ++i) in[i] = bench_value(rank, i);
  for (size_t s = 0; s < BENCH_NSIZES; ++s) {
    const size_t bytes = kBenchSizes[s], count = bytes / 4;
    if (!bench_size_wanted(bytes)) continue;
    const int iters = bench_iters(bytes);
    for (int i = 0; i < iters / 10 + 5; ++i)
      comm->all_reduce(in, out, count, OSLO_DTYPE_F32, OSLO_REDUCE_SUM);
    double trial[BENCH_TRIALS];
    for (int t = 0; t < BENCH_TRIALS; ++t) {
      comm->barrier();
      double t0 = bench_now();
      for (int i = 0; i < iters; ++i)
        comm->all_reduce(in, out, count, OSLO_DTYPE_F32, OSLO_REDUCE_SUM);
      // The slowest rank's time counts.
      int64_t ns = static_cast<int64_t>((bench_now() - t0) * 1e9), worst = 0;
      comm->all_reduce(&ns, &worst, 1, OSLO_DTYPE_I64, OSLO_REDUCE_MAX);
      trial[t] = static_cast<double>(worst) * 1e-9;
    }
    int32_t ok = 1, all_ok = 0;
    for (size_t i = 0; i < count; ++i)
      if (out[i] != bench_expected(n, i)) ok = 0;
    comm->all_reduce(&ok, &all_ok, 1, OSLO_DTYPE_I32, OSLO_REDUCE_MIN);
    if (rank == 0) bench_print_row(bytes, n, trial, iters, all_ok);
  }
  std::free(in);
  std::free(out);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int n = argc > 1 ? std::atoi(argv[1]) : 2;
  if (n < 1 || n > 64) {
    std::fprintf(stderr, "usage: %s [nranks]\n", argv[0]);
    return 2;
  }
  char dir[] = "/tmp/oslo-bench-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  const std::string store_path = std::string(dir) + "/store";
  std::vector<pid_t> pids;
  std::fflush(stdout);
  for (int r = 0; r < n; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      int rc = 1;
      try {
        rc = run_rank(r, n, store_path);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
      }
      std::fflush(stdout);
      _exit(rc);
    }
    pids.push_back(pid);
  }
  int rc = 0;
  for (pid_t p : pids) {
    int st = 0;
    waitpid(p, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) rc = 1;
  }
  unlink(store_path.c_str());
  rmdir(dir);
  return rc;
}
