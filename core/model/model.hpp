// A Hugging Face transformer of any registered architecture
// (core/model/arch/), loaded and sharded over the context's tensor group
// by its sharding rules (attention by heads, key/value heads replicated
// when there are fewer than ranks; MLPs by columns then rows; embeddings
// and the LM head by vocabulary) and over the pipeline stages (each stage
// reads and holds only its blocks). Model owns the parameters and their
// placement (loading, saving) and the parts that compute from them:
//  - stack(): the compute layout and the one block (stack.hpp, block.hpp);
//  - inference(): forward, embeddings, the KV cache and generation's side
//    (inference.hpp);
//  - training(): the loss and backward, gradients, pipeline schedules and
//    the hooks data parallelism and ZeRO drive (training.hpp).
//
// Every method that computes is collective over the tensor group: all its
// ranks call it with the same arguments. One thread at a time per model.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/context/context.hpp"
#include "core/model/config.hpp"
#include "core/model/inference.hpp"
#include "core/model/sharding.hpp"
#include "core/model/stack.hpp"
#include "core/model/training.hpp"

namespace oslo {

struct ModelLoadOptions {
  // Dtype of the matrices (weights of products and embedding tables):
  // -1 keeps each checkpoint's stored float dtype; else F32, F16 or BF16.
  int dtype = -1;
  // Pipeline stages: model chunks per pipeline rank (Megatron's virtual
  // stages: virtual stage c P + r on rank r), and the blocks of each
  // virtual stage in order (empty: Colossal-AI's partition_uniform). One
  // count per virtual stage, each >= 1, summing to the model's blocks
  // (partition_counts; OSLO_ERR_INVALID_ARGUMENT naming the bad one).
  int virtual_stages = 1;
  std::vector<int> pipeline_layers;
};

class Model {
 public:
  // Loads a Hugging Face folder or an oslo parallel checkpoint; every rank
  // reads only its own slices. Collective over the world group: every rank
  // returns the same status (OSLO_ERR_IO, OSLO_ERR_FORMAT, ... naming the
  // file).
  static std::unique_ptr<Model> load(Context& ctx, const std::string& path,
                                     const ModelLoadOptions& options);
  ~Model();

  const ModelConfig& config() const { return cfg_; }
  Context& context() const { return ctx_; }
  oslo_dtype dtype() const { return dtype_; }
  bool causal() const { return cfg_.traits.causal; }
  // Every tensor this rank holds with its placement (for saving, training).
  // Their memory stays valid from then on: weights whose packed copies had
  // replaced them (BlockStack::release_plain) are written back and kept.
  const std::vector<PlacedTensor>& tensors() const {
    stack_->keep_plain();
    return params_;
  }
  // Where the model was loaded from, and the files of that folder worth
  // copying along when saving (tokenizer, generation config).
  const std::string& source() const { return source_; }
  const std::vector<std::string>& extra_files() const { return extra_files_; }
  // Saves a parallel checkpoint (core/checkpoint/FORMAT.md): each rank its
  // owned segments, the manifest last. Collective over the world group.
  // OSLO_ERR_NOT_SUPPORTED while ZeRO-3 holds the parameters partitioned.
  void save(const std::string& dir);
  // Call after changing parameters in place (an optimizer step): refreshes
  // what the model derives from them (Gemma's 1 + w norm weights) and drops
  // the packed weight copies (made again at the next inference run).
  void parameters_changed();
  // The pipeline stages of this model (the context's pipeline size) and
  // this model's stage.
  int pipeline_size() const { return stack_->pp; }
  int pipeline_rank() const { return stack_->pp_rank; }

  const BlockStack& stack() const { return *stack_; }
  InferenceRunner& inference() { return *inference_; }
  TrainingPass& training() { return *training_; }
  const TrainingPass& training() const { return *training_; }

 private:
  Model(Context& ctx, ModelConfig cfg, oslo_dtype dtype);

  Context& ctx_;
  ModelConfig cfg_;
  oslo_dtype dtype_;
  std::string source_;
  std::vector<std::string> extra_files_;
  std::vector<PlacedTensor> params_;
  std::vector<oslo_dtype> stored_dtype_;  // per params_ entry: dtype in the source
  std::unique_ptr<BlockStack> stack_;
  std::unique_ptr<InferenceRunner> inference_;
  std::unique_ptr<TrainingPass> training_;
};

}  // namespace oslo
