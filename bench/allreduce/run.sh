#!/usr/bin/env bash
# Runs the shm and the Open MPI all-reduce benchmarks (2 ranks, each pinned to
# its own CPU) one after the other and prints one table with the ratios.
# Builds nothing. Usage: bench/allreduce/run.sh BUILD_DIR [NRANKS]
set -euo pipefail
build=${1:?usage: $0 BUILD_DIR [NRANKS]}
n=${2:-2}
dir=$build/bench/allreduce
shm_bin=$dir/bench_allreduce_shm
mpi_bin=$dir/bench_allreduce_mpi
[[ -x $shm_bin ]] || { echo "missing $shm_bin (build target bench_allreduce_shm)" >&2; exit 1; }
[[ -x $mpi_bin ]] || { echo "missing $mpi_bin (MPI not found at configure time?)" >&2; exit 1; }

# mpirun refuses root without these; the benchmark pins its ranks itself, so
# Open MPI must not bind them (--bind-to none).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

echo "# machine: $(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1)," \
  "$(nproc) CPUs; load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
shm_out=$("$shm_bin" "$n")
mpi_out=$(mpirun --oversubscribe --bind-to none -np "$n" "$mpi_bin")
echo "$shm_out" | grep '^#'
echo "$mpi_out" | grep '^#'
echo

# Joined columns: bytes, shm (time, median, busbw, check), mpi (the same).
join <(echo "$shm_out" | awk '$1 == "row" {print $2, $4, $5, $7, $8}' | sort -k1,1) \
     <(echo "$mpi_out" | awk '$1 == "row" {print $2, $4, $5, $7, $8}' | sort -k1,1) |
  sort -n -k1,1 |
  awk '
    BEGIN {
      printf "%10s | %9s %9s | %9s %9s | %7s | %9s %9s %7s | %s\n", "bytes", "shm_us",
             "(median)", "mpi_us", "(median)", "shm/mpi", "shm_busbw", "mpi_busbw", "shm/mpi",
             "check"
      printf "%10s | %9s %9s | %9s %9s | %7s | %9s %9s %7s |\n", "", "best", "", "best", "",
             "time", "GB/s", "GB/s", "busbw"
    }
    {
      lat = $2 / $6; bw = ($8 > 0) ? $4 / $8 : 0
      printf "%10d | %9.3f %9.3f | %9.3f %9.3f | %7.2f | %9.3f %9.3f %7.2f | %s/%s\n",
             $1, $2, $3, $6, $7, lat, $4, $8, bw, $5, $9
      if ($1 == 4096) { lat4k = lat }
      if ($1 == 4194304) { bw4m = bw }
    }
    END {
      # Parentheses: a bare ">" in a printf argument list is a redirection.
      printf "\n4 KB latency  shm/MPI = %.2f (goal <= 2.0): %s\n", lat4k,
             ((lat4k <= 2.0) ? "met" : "NOT met")
      printf "4 MB busbw    shm/MPI = %.2f (goal >= 0.8): %s\n", bw4m,
             ((bw4m >= 0.8) ? "met" : "NOT met")
    }'
