// One micro-batch's training pass (TrainingPass, training.hpp): the batch
// on the device, what the backward needs from the forward, and the phases
// in the order they run: embed, forward_blocks, head_forward,
// head_backward, backward_blocks, embed_backward (the pipeline executor
// runs them chunk by chunk). Each phase is collective over the tensor
// group. Internal to core/model.
#pragma once

#include <memory>
#include <vector>

#include "core/model/block.hpp"
#include "core/model/training.hpp"

namespace oslo {

struct MicroPass {
  TrainingPass& owner;
  BlockStack& s;
  Backend& be;
  const std::shared_ptr<Backend>& bp;
  const bool labels_in;
  const int64_t B, S, BS, H;
  const int nl;  // blocks
  const float grad_scale;
  const std::vector<float>* grad_hidden;
  Tensor lab_t, ids_t, pos_t, mask_t, types_t, cos_t, sin_t, nsin_t;
  // The ids the token table's gradient is scattered by: ids_t, or a copy
  // with the pad row's id as -1 (no row) where this rank holds that row and
  // the family's embedding has padding_idx (torch's embedding backward
  // skips it; a tied head still adds into the row).
  Tensor grad_ids_t;
  BlockEnv env;
  std::unique_ptr<Block> block;
  Tensor x;       // the residual stream: the embeddings', then each block's output
  Tensor emb_in;  // the embedding norm's input
  Tensor hf, dlogits, dhf;
  Tensor dx;  // gradient of the residual stream
  std::vector<BlockActs> saved;
  float loss = 0.f;
  bool defer_loss_check = false;  // the pipeline's: checked after the schedule
  // The pipeline's head split (pipeline_schedule_head_split): the first
  // head_rows0 tokens' head runs on the first stage (head_share), the rest
  // here; head_in is what goes there, head_grad their gradient back.
  int64_t head_rows0 = 0;
  Tensor head_in, head_grad;
  std::vector<int64_t> host_labels;  // shifted (labels_in)
  int64_t kept = 0;                  // labels kept in the whole micro-batch

  // Uploads ids, positions (following the mask, as the inference forward),
  // the shifted labels and the additive key mask; the inputs were checked
  // by train_pass.
  MicroPass(TrainingPass& owner, const std::vector<int64_t>& ids,
            const std::vector<int64_t>* labels, const std::vector<int64_t>& mask,
            const std::vector<int64_t>& types, const std::vector<float>* grad_hidden, int64_t batch,
            int64_t seq, float grad_scale);

  // The embeddings of the ids (and positions, token types) into x.
  void embed();
  // Blocks [l0, l1) forward from x, keeping what their backward needs.
  void forward_blocks(size_t l0, size_t l1);
  // The final norm, the logits and the loss (its gradient in dlogits), or
  // the caller's gradient of the hidden states (dhf).
  void head_forward();
  // The head's and the final norm's backward: dx, the gradient of the last
  // block's output.
  void head_backward();
  // Blocks [l0, l1) backward, from the last: dx becomes the gradient of
  // block l0's input; each block's activations are freed after it.
  void backward_blocks(size_t l0, size_t l1);
  // The embeddings' backward from dx.
  void embed_backward();
  // The first stage's share of the head split: the final hidden states `h`
  // of the first head_rows0 tokens through the tied token table: their
  // loss (a share of the micro-batch's mean, returned), the table's
  // gradient added to its embedding gradient, and the states' gradient
  // (summed over the tensor group) in *dh.
  float head_share(const Tensor& h, Tensor* dh);
  // Whether the head's weight comes in row chunks (TrainingPass::HeadRows).
  bool chunked() const;

 private:
  Tensor f32(std::vector<int64_t> shape) const;
  Tensor upload(const void* src, oslo_dtype dt, std::vector<int64_t> shape) const;
  Tensor share_logits(const View& h, const Tensor& W, int64_t row0, float* loss_share);
  void share_products(const View& dy, const View& h, const Tensor& W, const View& dh);
  void head_chunks(Tensor* logits);
};

}  // namespace oslo
