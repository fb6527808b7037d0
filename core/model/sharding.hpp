// Sharding rules: for each supported model_type, which Hugging Face tensors
// are split by columns (output features), by rows (input features), by the
// vocabulary, or replicated, and in which units (attention heads, key/value
// heads, even pieces). The rules are data (a table per model_type in
// sharding.cpp, documented in docs/MODELS.md); adding an architecture is a
// table plus its block wiring in model.cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/checkpoint/placement.hpp"
#include "core/model/config.hpp"

namespace oslo {

// How one tensor is cut.
enum class Cut {
  REPLICATE,  // every rank holds all of it
  VOCAB,      // dimension 0 split into equal padded pieces of the vocabulary
  EVEN,       // split into tp equal pieces (must divide)
  Q_HEADS,    // split by attention heads (head_dim indices each)
  KV_HEADS,   // split by key/value heads; replicated when tp > kv heads
  QKV_HEADS,  // [q heads | k heads | v heads] fused: three parts, each by heads
};

// When a rule applies (optional tensors).
enum class When { ALWAYS, QKV_BIAS, O_BIAS, MLP_BIAS, UNTIED };

struct ShardRule {
  const char* pattern;  // Hugging Face name; "{L}" stands for the layer index
  const char* role;     // the block's slot the tensor fills
  Cut cut;
  int dim;         // Hugging Face dimension the cut applies to (ignored for REPLICATE)
  bool transpose;  // held transposed locally (GPT-2's Conv1D weights [in, out])
  bool f32;        // held in f32 whatever the model's dtype (norms, biases, positions)
  When when;
};

// The table of a model type (OSLO_ERR_NOT_SUPPORTED if there is none).
const std::vector<ShardRule>& shard_rules(const std::string& model_type);

// One planned tensor of a rank.
struct PlannedTensor {
  Placement placement;
  std::string role;  // rule's role
  int layer = -1;    // layer index, -1 outside the layers
  bool f32 = false;
};

// Placements of every tensor this rank holds at tensor-parallel size `tp`.
// Global shapes come from the config. Errors: OSLO_ERR_NOT_SUPPORTED when
// the heads (or a dimension cut EVEN) do not divide over tp (the message
// names the count and the size).
std::vector<PlannedTensor> plan_model(const ModelConfig& c, int tp, int rank);

// The tensor's global shape in Hugging Face layout, per role.
std::vector<int64_t> global_shape_of(const ModelConfig& c, const std::string& role);

class WeightSource;

// Renames planned tensors to the names the source uses: checkpoints saved
// from a base model lack the head class's prefix ("transformer.", "bert.",
// "model.") or carry one the rules lack. Names not found stay as they are
// (the load then reports them missing).
void resolve_names(const WeightSource& src, std::vector<PlannedTensor>& plan);

// A planner for reshard(): the placements of the model stored at `path`
// (its config from config.json or the checkpoint manifest) at any size.
// Errors: as WeightSource and ModelConfig::parse.
std::function<std::vector<Placement>(int, int)> model_planner(const std::string& path);

}  // namespace oslo
