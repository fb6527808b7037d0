// Where a rank learns who it is. Sources, in order of precedence:
//   1. explicit values (the config's "rank"/"world_size"/"local_rank"/"local_world_size")
//   2. torchrun / oslo-run: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE
//   3. Open MPI: OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE
//   4. MPICH/PMI: PMI_RANK, PMI_SIZE
//   5. Slurm: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE
//   6. nothing set: a single rank (0 of 1)
// The first source that gives a rank and a world size wins for both; a lower
// source that disagrees is reported as a warning (it usually means a launcher
// inside another launcher).
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace oslo {

struct LaunchInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string source;                 // "config", "torchrun", "openmpi", "pmi", "slurm", "default"
  std::vector<std::string> warnings;  // disagreements between sources
};

// getenv-like lookup, injectable for tests.
using EnvLookup = std::function<const char*(const char*)>;

// explicit_* < 0 means "not given". Throws OSLO_ERR_CONFIG on a malformed
// variable (naming it) or an inconsistent rank/world.
LaunchInfo resolve_launch(int explicit_rank, int explicit_world, int explicit_local_rank,
                          int explicit_local_world, const EnvLookup& env);

}  // namespace oslo
