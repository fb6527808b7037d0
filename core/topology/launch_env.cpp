#include "core/topology/launch_env.hpp"

#include <cerrno>
#include <climits>
#include <cstdlib>

#include "core/common/error.hpp"

namespace oslo {
namespace {

// Parses a non-negative int variable; -1 when unset; throws when malformed.
int env_int(const EnvLookup& env, const char* name) {
  const char* v = env(name);
  if (!v || !*v) return -1;
  errno = 0;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  OSLO_CHECK(errno == 0 && end && *end == '\0' && x >= 0 && x <= INT_MAX, OSLO_ERR_CONFIG,
             "environment variable ", name, "='", v, "' is not a non-negative integer");
  return static_cast<int>(x);
}

// SLURM_NTASKS_PER_NODE may be "4" or "4(x2)"; take the leading count.
int slurm_tasks_per_node(const EnvLookup& env) {
  const char* v = env("SLURM_NTASKS_PER_NODE");
  if (!v || !*v) v = env("SLURM_TASKS_PER_NODE");
  if (!v || !*v) return -1;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  return (end != v && x > 0 && x <= INT_MAX) ? static_cast<int>(x) : -1;
}

struct Source {
  const char* name;
  int rank, world, local_rank, local_world;
};

}  // namespace

LaunchInfo resolve_launch(int explicit_rank, int explicit_world, int explicit_local_rank,
                          int explicit_local_world, const EnvLookup& env) {
  std::vector<Source> sources = {
      {"torchrun", env_int(env, "RANK"), env_int(env, "WORLD_SIZE"), env_int(env, "LOCAL_RANK"),
       env_int(env, "LOCAL_WORLD_SIZE")},
      {"openmpi", env_int(env, "OMPI_COMM_WORLD_RANK"), env_int(env, "OMPI_COMM_WORLD_SIZE"),
       env_int(env, "OMPI_COMM_WORLD_LOCAL_RANK"), env_int(env, "OMPI_COMM_WORLD_LOCAL_SIZE")},
      {"pmi", env_int(env, "PMI_RANK"), env_int(env, "PMI_SIZE"), -1, -1},
      {"slurm", env_int(env, "SLURM_PROCID"), env_int(env, "SLURM_NTASKS"),
       env_int(env, "SLURM_LOCALID"), slurm_tasks_per_node(env)},
  };

  LaunchInfo info;
  const Source* chosen = nullptr;
  if (explicit_rank >= 0 || explicit_world >= 0) {
    OSLO_CHECK(explicit_rank >= 0 && explicit_world > 0, OSLO_ERR_CONFIG,
               "config: \"rank\" and \"world_size\" must be given together");
    info.rank = explicit_rank;
    info.world_size = explicit_world;
    // Ranks given explicitly are usually threads of one process.
    info.local_rank = explicit_local_rank >= 0 ? explicit_local_rank : explicit_rank;
    info.local_world_size = explicit_local_world > 0 ? explicit_local_world : explicit_world;
    info.source = "config";
  } else {
    for (const auto& s : sources) {
      if (s.rank >= 0 && s.world > 0) {
        chosen = &s;
        break;
      }
      if ((s.rank >= 0) != (s.world >= 0))
        info.warnings.push_back(str("ignoring ", s.name, " variables: rank and size not both set"));
    }
    if (chosen) {
      info.rank = chosen->rank;
      info.world_size = chosen->world;
      info.local_rank = chosen->local_rank >= 0 ? chosen->local_rank : chosen->rank;
      info.local_world_size = chosen->local_world > 0 ? chosen->local_world : chosen->world;
      info.source = chosen->name;
    } else {
      info.source = "default";
    }
    if (explicit_local_rank >= 0) info.local_rank = explicit_local_rank;
    if (explicit_local_world > 0) info.local_world_size = explicit_local_world;
  }
  for (const auto& s : sources) {
    if (&s == chosen || s.rank < 0 || s.world <= 0) continue;
    if (s.rank != info.rank || s.world != info.world_size)
      info.warnings.push_back(str(s.name, " variables say rank ", s.rank, " of ", s.world, " but ",
                                  info.source, " says rank ", info.rank, " of ", info.world_size,
                                  "; using ", info.source));
  }
  OSLO_CHECK(info.rank < info.world_size, OSLO_ERR_CONFIG, "rank ", info.rank, " (from ",
             info.source, ") is not below world size ", info.world_size);
  OSLO_CHECK(info.local_world_size > 0 && info.local_rank < info.local_world_size, OSLO_ERR_CONFIG,
             "local rank ", info.local_rank, " (from ", info.source,
             ") is not below local world size ", info.local_world_size);
  return info;
}

}  // namespace oslo
