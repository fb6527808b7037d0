// Where a rank's local copy of one model tensor sits in the global tensor.
//
// Model tensors keep their Hugging Face names and the Hugging Face layout
// (GPT-2's Conv1D weights [in, out], nn.Linear weights [out, in]) in every
// file oslo reads or writes; a placement says which pieces of the global
// tensor a rank holds. A piece is a run of indices along one split dimension
// (`segments`); a fused tensor split per part and per head (GPT-2's c_attn:
// q, k and v side by side, each split by heads) is several segments, and a
// grouped-query model with more ranks than KV heads holds the same segment
// on several ranks (only the owner writes it when saving).
//
// The local tensor is the concatenation of the segments along split_dim (in
// segment order; `local_start` says where each begins), optionally followed
// by padding rows (vocabulary padding), and optionally transposed (2-D only)
// when the compute prefers the other layout (GPT-2's Conv1D is held [out, in]
// locally, as nn.Linear is).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor/tensor.hpp"
#include "oslo.h"

namespace oslo {

struct Segment {
  int64_t global_start = 0;  // first index along split_dim in the global tensor
  int64_t length = 0;        // indices in this segment (>= 1)
  int64_t local_start = 0;   // where it begins along split_dim in the local tensor (HF layout)
  bool owner = true;         // this rank writes the segment when saving (one owner per index)
};

struct Placement {
  std::string name;                   // Hugging Face tensor name
  std::vector<int64_t> global_shape;  // Hugging Face layout
  int split_dim = -1;                 // -1: replicated (the whole tensor on every rank)
  std::vector<Segment> segments;      // along split_dim, in local order (empty if replicated)
  bool replica_owner = true;          // replicated tensors: this rank writes it (tp rank 0)
  bool transpose = false;             // 2-D: the local tensor is the transpose of the HF slice
  int64_t local_extent = 0;  // local size along split_dim incl. padding (>= sum of lengths)

  // Shape of the local tensor (after `transpose`).
  std::vector<int64_t> local_shape() const;
};

// A placement and the backend tensor that holds this rank's copy.
struct PlacedTensor {
  Placement placement;
  Tensor tensor;
};

}  // namespace oslo
