// Model I/O over placements (core/checkpoint/placement.hpp): load each rank's
// slices of Hugging Face named tensors from any WeightSource, save a parallel
// model as an oslo checkpoint (manifest version 2, FORMAT.md), merge any
// source into an ordinary Hugging Face folder, reshard a checkpoint offline
// to another tensor-parallel size, and describe any checkpoint (inspect).
// Implemented by job: model_load.cpp (load_placed, load_placed_collective,
// run_agreed), model_save.cpp (save_placed), model_tools.cpp (reshard,
// merge, inspect); the manifest is core/checkpoint/manifest.hpp and the
// failure agreement core/comm/agreement.hpp.
//
// Tensor memory is reached only through Backend copies and ops, so local
// tensors may live on a GPU.
//
// Ownership: every function borrows its arguments for the call only (local
// tensors are written in place, never reallocated). Thread safety: no global
// state; calls on different WeightSources and different directories may run
// concurrently; one WeightSource must not be used by two threads at once;
// save_placed and load_placed_collective are collectives (one call per rank,
// ranks may be threads with their own communicators). Errors are
// oslo::Error with the status named on each function.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/backend/backend.hpp"
#include "core/checkpoint/checkpoint.hpp"
#include "core/checkpoint/placement.hpp"
#include "core/checkpoint/weight_source.hpp"
#include "core/comm/control.hpp"
#include "oslo.h"

namespace oslo {

// Byte accounting of loads (headers excluded); load_placed adds to it.
struct ModelLoadStats {
  uint64_t bytes_read = 0;     // tensor bytes read from files
  uint64_t read_calls = 0;     // read calls (pread, or copies from a mapping)
  uint64_t files_opened = 0;   // files opened by this load
  uint64_t tensors = 0;        // tensors filled
  uint64_t staging_bytes = 0;  // largest host staging buffer used
};

// Fills every local tensor from `src`: each segment of its placement is the
// box [global_start, global_start + length) along split_dim, written at
// local_start; padding rows (local indices no segment covers) are zeroed; a
// transposed placement is transposed on the backend. Dtypes convert (float
// <-> float, int <-> int). Staging goes through one host buffer, at most
// 16 MiB for tensors whose segments are contiguous in the local tensor
// (split_dim 0 or replicated, not transposed), else one local tensor.
// Everything is validated before the first tensor is written: names (unique,
// in the source: OSLO_ERR_FORMAT naming the tensor and the file), global
// shapes (OSLO_ERR_SHAPE naming both), local shapes against
// Placement::local_shape() (OSLO_ERR_SHAPE), dtypes (OSLO_ERR_DTYPE),
// segments inside both extents (OSLO_ERR_INVALID_ARGUMENT), stored pieces'
// headers (OSLO_ERR_FORMAT). An I/O error or checksum mismatch found during
// the copy can leave tensors partly filled. Not collective; not thread-safe
// for one `src`. `progress` gets bytes filled of the total.
void load_placed(WeightSource& src, std::vector<PlacedTensor>& tensors, Backend& backend,
                 ModelLoadStats* stats = nullptr, const ProgressFn& progress = {});

// Opens `path` and runs load_placed on every rank of `world` (collective),
// then agrees on the outcome: if any rank failed (opening included), every
// rank throws the status of the lowest failing world rank with a message
// naming that rank and quoting its error. Never hangs on a failure of one
// rank (the agreement is two collectives every rank reaches).
void load_placed_collective(const std::string& path, std::vector<PlacedTensor>& tensors,
                            Backend& backend, Control& world, ModelLoadStats* stats = nullptr,
                            const ProgressFn& progress = {});

// Runs `body` on every rank of `world` (collective), then agrees on the
// outcome (agree_on_outcome): if any rank failed, every rank throws the
// status of the lowest failing rank with a message naming it (`what` says
// what failed), so no rank goes on into a collective the others left.
// Honours world's timeout.
void run_agreed(Control& world, const std::string& what, const std::function<void()>& body);

// Saves a parallel model into `dir` as an oslo checkpoint (manifest version
// 2). Collective over `world`, atomic and crash-safe like save_checkpoint:
// world rank 0 draws the save id; data-parallel rank 0 of every (tp, pp)
// position writes shard-<id>-tp<TT>-pp<PP>.safetensors (ranks zero-padded
// to at least 2 digits) holding the segments it owns, each under the tensor's
// name if the rank holds one segment of it, else `name@<global_start>`
// (replicated tensors: the whole tensor, by the replica owner), each in its
// Hugging Face layout (transposed back if held transposed; padding rows are
// not saved); an all-reduce agrees on failure; each writer's records (key,
// rows, bytes, CRC32C) are gathered on world rank 0, which checks that the
// owned segments tile every tensor exactly (OSLO_ERR_INVALID_ARGUMENT naming
// the rows in no or two shards), copies `extra_files` (paths; stored under
// their base names) atomically, writes the manifest last (the commit point,
// with `model_config_json`, which must be a JSON object or empty), and
// removes files no longer referenced. Any failure makes every rank throw and
// leaves the previous checkpoint in `dir` loadable. `sections` (world rank
// 0's are used) are written into the manifest as extension sections
// (FORMAT.md "Extending the manifest"; a training section is checked against
// the saved tensors before the manifest is written). Errors:
// OSLO_ERR_INVALID_ARGUMENT, OSLO_ERR_IO, OSLO_ERR_COMM, OSLO_ERR_TIMEOUT.
void save_placed(const std::string& dir, const std::vector<PlacedTensor>& tensors,
                 const std::string& model_config_json, const std::vector<std::string>& extra_files,
                 const CheckpointLayout& layout, Control& world, const ProgressFn& progress = {},
                 const std::map<std::string, nlohmann::json>& sections = {});

struct MergeOptions {
  // Above this many bytes of tensor data, write model-0000i-of-0000n.safetensors
  // and model.safetensors.index.json (as transformers' save_pretrained
  // splits); 0: always one model.safetensors.
  uint64_t max_shard_bytes = 0;
  // Convert floating-point tensors to this dtype (F32, F16, BF16); integer
  // tensors are kept. Unset: keep every dtype.
  bool convert = false;
  oslo_dtype dtype = OSLO_DTYPE_F32;
  // Replace a non-empty `dst` (otherwise that is OSLO_ERR_INVALID_ARGUMENT).
  bool overwrite = false;
  ProgressFn progress;  // bytes written of the total
};

// Writes `src` (any WeightSource path) as an ordinary Hugging Face folder at
// `dst`: the weights (metadata {"format": "pt"} as transformers writes
// them), config.json (the source's config) and the source's extra files.
// Offline, not collective. Streams tensor by tensor: memory is bounded by
// the largest tensor. Atomic: everything is written into a temporary folder
// next to `dst`, fsync'ed, then renamed. Checksums of the source's pieces
// are verified (each is read whole). A training checkpoint merges to its
// weights only (its optimizer tensors are left out). Errors: as WeightSource
// and read_box,
// OSLO_ERR_INVALID_ARGUMENT (non-empty dst without overwrite), OSLO_ERR_IO.
void merge(const std::string& src, const std::string& dst, const MergeOptions& options = {});

// The model's sharding rules: the placements of tensor-parallel rank
// `tp_rank` of `tp_size` (the tensors' local shapes, segments and owners).
using Planner = std::function<std::vector<Placement>(int tp_size, int tp_rank)>;

struct ReshardOptions {
  bool convert = false;  // convert floating-point tensors to `dtype`
  oslo_dtype dtype = OSLO_DTYPE_F32;
  ProgressFn progress;  // bytes written of the total
};

// Writes the checkpoint `src` (any WeightSource) into `dst` as if
// save_placed had saved it at tensor-parallel size `new_tp` (pipeline and
// data-parallel size 1) with the placements `planner` returns for each rank,
// reading only the boxes each rank's owned segments need. Source tensors the
// planner does not mention are kept, replicated on rank 0. One process
// writes every rank's file, then the manifest (atomic like save_placed;
// `dst` may be `src`). A training checkpoint stays one: each optimizer
// tensor "optimizer/<state>/<P>" gets the placements of P (re-sliced with
// its weight) and the training section is copied; converting its dtype is
// OSLO_ERR_INVALID_ARGUMENT (it would round the master weights). Offline,
// not collective. Errors: as load_placed and save_placed.
void reshard(const std::string& src, const std::string& dst, int new_tp, const Planner& planner,
             const ReshardOptions& options = {});

// A description of a checkpoint, for `oslo inspect`.
// One stored piece as inspect shows it (the manifest's description; bytes
// and CRC32C where the source records them).
using InspectShard = ManifestShard;
struct InspectTensor {
  std::string name;
  std::string dtype;  // safetensors name ("F32", "BF16", ...), or "q8_0", ... when quantized
  std::vector<int64_t> shape;
  int split_dim = -1;
  uint64_t bytes = 0;
  std::vector<InspectShard> shards;
};
struct Inspection {
  std::string path;
  std::string kind;  // source_kind_name()
  int manifest_version = 0;
  std::string save_id;
  SourceLayout layout;
  bool has_config = false;
  std::vector<std::pair<std::string, std::string>> config_summary;  // key, JSON value
  std::vector<std::string> extra_files;
  // A training checkpoint: its manifest's training section, verbatim
  // (FORMAT.md "Training checkpoints"); rendered after the summary.
  bool has_training = false;
  nlohmann::json training;
  std::vector<std::string> files;  // weight files
  uint64_t total_bytes = 0;
  std::vector<InspectTensor> tensors;  // sorted by name
};

// Describes the checkpoint at `path` (opens it as a WeightSource; reads
// headers only). Errors: as WeightSource.
Inspection inspect(const std::string& path);
// Aligned text: a summary block, then one line per tensor.
std::string render_text(const Inspection& in);
// The same as a JSON document (indent 1).
std::string render_json(const Inspection& in);

}  // namespace oslo
