// Sharded checkpoints: every (tensor-parallel, pipeline) position of
// data-parallel rank 0 saves its slices into one safetensors file, and world
// rank 0 writes a manifest (oslo_checkpoint.json) that records each tensor's
// global shape and which rows every shard holds. A checkpoint saved at any
// tensor-parallel size loads at any other: each rank reads only the byte
// ranges that overlap its own slice. The on-disk format is described in
// core/checkpoint/FORMAT.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/comm/control.hpp"
#include "core/topology/topology.hpp"
#include "oslo.h"

namespace oslo {

// One local parameter buffer and where it sits in the global tensor.
struct ParamShard {
  std::string name;
  oslo_dtype dtype = OSLO_DTYPE_F32;  // dtype of the local buffer
  std::vector<int64_t> global_shape;  // real (unpadded) global shape
  int split_dim = -1;                 // -1: replicated on every tensor-parallel rank
  int64_t offset = 0;                 // global index along split_dim of local row 0
  std::vector<int64_t> local_shape;   // local buffer shape (may include padding rows
                                      // past the global end along split_dim)
  void* data = nullptr;               // contiguous row-major host buffer of local_shape
};

struct CheckpointLayout {
  int tp_rank = 0, tp_size = 1;
  int pp_rank = 0, pp_size = 1;
  int dp_rank = 0, dp_size = 1;
  int world_rank = 0, world_size = 1;
};

// The layout of this rank's position in `t` (every rank and size).
CheckpointLayout layout_of(const Topology& t);

// Byte accounting of one load_checkpoint call.
struct CheckpointLoadStats {
  uint64_t data_bytes_read = 0;  // tensor bytes read from shard files (headers excluded)
  uint64_t read_calls = 0;       // pread calls for tensor data
  uint64_t files_opened = 0;     // shard files opened
};

// Saves `params` under `dir` (created if missing). Collective over `world`
// (every rank calls it; ranks with dp_rank != 0 write nothing): world rank 0
// picks a random save id and broadcasts it; data-parallel rank 0 of every
// (tp, pp) position writes shard-<id>-tp<T>-pp<P>.safetensors atomically
// (sharded tensors: the real rows it holds; replicated ones: tp_rank 0 only);
// an all-reduce tells every rank whether all writes succeeded; world rank 0
// reads the shard headers, writes the manifest atomically and deletes shard
// files no longer referenced; a final all-reduce reports its outcome. Any
// failure anywhere makes every rank throw (the failing rank its own error,
// the others an error naming the failing rank and carrying its status) and
// leaves the previous checkpoint in `dir` loadable and unchanged.
// Errors: OSLO_ERR_INVALID_ARGUMENT (inconsistent params or layout),
// OSLO_ERR_IO, OSLO_ERR_COMM, OSLO_ERR_TIMEOUT.
void save_checkpoint(const std::string& dir, const std::vector<ParamShard>& params,
                     const CheckpointLayout& layout, Control& world);

// Fills every param's local buffer from the checkpoint in `dir` (manifest
// version 1, read by core/checkpoint/manifest.hpp; a version-2 model
// checkpoint is refused with OSLO_ERR_FORMAT, as its checksums are verified
// by the model loader only), converting
// dtypes (float <-> float, int <-> int) and zeroing rows past the global end.
// Not collective. Reads only the shard byte ranges that overlap each local
// slice. Errors: OSLO_ERR_INVALID_ARGUMENT (bad params), OSLO_ERR_IO (no
// manifest, missing or unreadable shard), OSLO_ERR_FORMAT (corrupt manifest
// or shard, tensor missing from the checkpoint: the message names it),
// OSLO_ERR_SHAPE (global shape differs), OSLO_ERR_DTYPE (float <-> integer).
void load_checkpoint(const std::string& dir, const std::vector<ParamShard>& params,
                     CheckpointLoadStats* stats = nullptr);

// load_checkpoint on every rank of `world` (collective), then agreement on
// the outcome: if any rank failed, every rank throws the status of the lowest
// failing world rank with a message naming that rank and quoting its error
// (a rank that failed too appends its own); ranks whose own load succeeded
// keep the loaded values. The agreement is agree_on_outcome
// (core/comm/agreement.hpp): `world`'s collectives, so it honours their
// timeout.
void load_checkpoint_collective(const std::string& dir, const std::vector<ParamShard>& params,
                                Control& world);

// Name of the manifest inside a checkpoint directory (defined with the
// manifest module, core/checkpoint/manifest.hpp).
extern const char* const kCheckpointManifest;  // "oslo_checkpoint.json"

}  // namespace oslo
