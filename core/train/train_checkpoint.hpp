// Training checkpoints: everything a run needs to resume, in one oslo
// checkpoint folder (core/checkpoint/FORMAT.md "Training checkpoints"):
//
//  - the model's weights, saved from the optimizer's f32 masters
//    (Optimizer::master) under the model's names and placements, so the
//    folder is also a plain model checkpoint (Model::load reads it; merge
//    writes its weights only);
//  - the optimizer state of every parameter (AdamW's exp_avg and exp_avg_sq,
//    SGD's momentum_buffer), f32, stored as "optimizer/<state>/<parameter>"
//    with the parameter's placement, so it is sliced exactly like the
//    parameter and re-sliced with it when loaded at another tensor-parallel
//    size (or by reshard);
//  - the manifest's "training" section: the trainer's scalar state
//    (Trainer::state(): optimizer updates, which drive the schedule and
//    AdamW's bias correction, the loss scale and its growth tracker), the
//    optimizer state names, the parameters, and the caller's user_state (a
//    JSON value: seed, epoch, data position, the caller's RNG state; oslo's
//    trainer itself draws no random numbers).
//
// One manifest (core/checkpoint/manifest.hpp), written last: saves are
// atomic and every stored piece carries a CRC32C, as for model checkpoints.
//
// Ownership: both functions borrow their arguments for the call. Thread
// safety: collectives over the world group of the trainer's model's context
// (one call per rank, same arguments, ranks may be threads); a trainer is
// used by one thread at a time.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/train/trainer.hpp"

namespace oslo {

// Saves `trainer` (its model's masters and optimizer state, its scalar
// state) and `user_state` (world rank 0's; any JSON value) into `dir` as a
// training checkpoint. Collective over the world group. Before anything is
// written every rank checks, and all agree, that the trainer has no
// micro-batches accumulated since its last update (Trainer::state:
// OSLO_ERR_INVALID_ARGUMENT) and that user_state serialises (valid UTF-8:
// OSLO_ERR_INVALID_ARGUMENT); then save_placed writes the shards, the
// manifest last. Any failure on any rank makes every rank throw its status
// (naming the failing rank) and leaves the previous checkpoint in `dir`
// loadable. Errors: OSLO_ERR_INVALID_ARGUMENT, OSLO_ERR_IO, OSLO_ERR_COMM,
// OSLO_ERR_TIMEOUT.
void save_training_checkpoint(const std::string& dir, Trainer& trainer,
                              const nlohmann::json& user_state);

// Restores `trainer` from the training checkpoint in `dir`, saved at any
// tensor-parallel size: after every rank has checked the manifest and its
// training section (and all agree), the masters (then
// Optimizer::masters_loaded) and the optimizer state are read with
// load_placed (re-sliced to this size), then Trainer::set_state restores
// the scalar state (pending micro-batches are dropped), inside a second
// agreement. Returns the saved user_state (the same on
// every rank). Collective over the world group; every rank returns or
// throws the same status. At the saved layout the resumed run is bitwise
// the uninterrupted one. Errors, named on every rank:
//  - OSLO_ERR_FORMAT "not a training checkpoint": a model checkpoint without
//    a training section, a Hugging Face folder, any folder without
//    oslo_checkpoint.json (OSLO_ERR_IO: `dir` does not exist);
//  - OSLO_ERR_INVALID_ARGUMENT: saved by an optimizer with other state
//    (another kind, SGD with or without momentum) or of another kind;
//  - OSLO_ERR_SHAPE naming the tensor: a checkpoint of another model (a
//    name the model lacks: OSLO_ERR_FORMAT naming it);
//  - OSLO_ERR_FORMAT: a corrupt manifest or training section, a shard whose
//    checksum does not match (naming the file), a bad trainer state;
//  - OSLO_ERR_IO, OSLO_ERR_COMM, OSLO_ERR_TIMEOUT.
// Everything but checksums and I/O errors is found before the first byte of
// any tensor is written; after a checksum or I/O error the trainer's
// weights and optimizer state are partly overwritten (load again).
nlohmann::json load_training_checkpoint(const std::string& dir, Trainer& trainer);

}  // namespace oslo
