// Sharding rules: for each supported model_type, which Hugging Face tensors
// are split by columns (output features), by rows (input features), by the
// vocabulary, or replicated, and in which units (attention heads, key/value
// heads, even pieces). The rules are data: one table per family, in its file
// of the architecture registry (core/model/arch/<family>.cpp), documented in
// docs/MODELS.md. This file turns a table into placements.
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
  // [head 0: q k v | head 1: q k v | ...] fused per head (GPT-NeoX's
  // query_key_value; needs as many key/value heads as heads): each rank holds
  // its heads, and its local copy is re-ordered to [q | k | v] (one segment
  // per head and part), the layout QKV_HEADS gives.
  QKV_PER_HEAD,
  // [a | b] fused halves, each split into tp equal pieces (Phi-3's
  // gate_up_proj = [gate | up]): two segments per rank, local [a_r | b_r].
  HALVES_EVEN,
};

// Extents a rule's global shape is made of (from the config).
enum class Dim {
  NONE,       // no such dimension (1-D tensors)
  VOCAB,      // vocab_size
  HIDDEN,     // hidden_size
  POSITIONS,  // max_positions (learned position table)
  TYPES,      // type_vocab_size
  Q,          // num_heads * head_dim
  KV,         // num_kv_heads * head_dim
  QKV,        // (num_heads + 2 * num_kv_heads) * head_dim
  INTER,      // intermediate_size
  INTER2,     // 2 * intermediate_size (fused gate and up)
};

// When a rule applies (optional tensors).
enum class When { ALWAYS, QKV_BIAS, O_BIAS, MLP_BIAS, UNTIED };

struct ShardRule {
  const char* pattern;  // Hugging Face name; "{L}" stands for the layer index
  const char* role;     // the block's slot the tensor fills
  // Global shape as nn.Linear holds it ([out, in] for weights; Conv1D
  // tensors with `transpose` are stored the other way round).
  Dim shape[2];
  Cut cut;
  int dim;         // Hugging Face dimension the cut applies to (ignored for REPLICATE)
  bool transpose;  // held transposed locally (GPT-2's Conv1D weights [in, out])
  bool f32;        // held in f32 whatever the model's dtype (norms, biases, positions)
  When when;
};

// The table of a model type, from the architecture registry
// (OSLO_ERR_NOT_SUPPORTED if there is none).
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

// Pipeline parallelism: of a whole plan, what one stage holds: the blocks
// of `ranges` (each [begin, end); several with virtual stages), the
// embeddings on the first stage, the final norm, the head and the pooler
// on the last. With tied word embeddings the last stage (when it is not
// also the first) holds the token table for its head too, as a copy it
// does not save (the first stage owns it).
std::vector<PlannedTensor> plan_stage(const std::vector<PlannedTensor>& plan, const ModelConfig& c,
                                      const std::vector<std::pair<int64_t, int64_t>>& ranges,
                                      bool first, bool last);

// The global shape of the tensor filling `role`, as nn.Linear holds it
// (before a rule's `transpose`), from the rule's Dim pair.
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
