// Vocabulary-parallel embedding: the vocabulary is padded to a multiple of
// the tensor-parallel size and split by rows; a lookup is a masked local
// lookup followed by one all-reduce (Megatron's VocabParallelEmbedding).
#pragma once

#include "core/context/context.hpp"
#include "core/tensor/tensor.hpp"

namespace oslo {

class ParallelEmbedding {
 public:
  ParallelEmbedding(Context& ctx, int64_t vocab, int64_t hidden, oslo_dtype dtype);

  void load_full(const Tensor& weight);
  void load_shard(const Tensor& weight);
  void forward(const Tensor& ids, const Tensor& output);
  void backward(const Tensor& ids, const Tensor& grad_output);
  void zero_grad() { grad_weight.zero(); }

  int64_t vocab() const { return vocab_; }
  int64_t hidden() const { return hidden_; }
  int64_t local_rows() const { return local_rows_; }  // padded
  int64_t start() const { return start_; }
  int64_t real_rows() const { return real_rows_; }  // rows of real vocabulary held
  Context& context() const { return ctx_; }

  Tensor weight, grad_weight;

 private:
  void check_ids(const Tensor& ids) const;
  // The rows of a local table that hold real vocabulary (padding excluded).
  View real_rows(const Tensor& t) const;

  Context& ctx_;
  int64_t vocab_, hidden_, local_rows_, start_, real_rows_;
};

// Padded local partition of a vocabulary of `vocab` rows over `tp` ranks.
struct VocabPartition {
  int64_t local;  // padded rows per rank
  int64_t start;  // first global row of `rank`
  int64_t valid;  // real rows held by `rank` (0 .. local)
};
VocabPartition vocab_partition(int64_t vocab, int tp, int rank);

// Vocab-parallel cross-entropy (see oslo_context_vocab_parallel_cross_entropy).
// losses / grad_logits may be undefined tensors; mean_loss may be NULL.
// `divisor` > 0: these tokens are a share of a batch with `divisor` kept
// labels, so *mean_loss is their losses' sum over it and the gradient is
// scaled by 1 / divisor (the pipeline's head split); 0: the labels kept
// here.
void vocab_parallel_cross_entropy(Context& ctx, const Tensor& logits, const Tensor& labels,
                                  int64_t vocab, int64_t ignore_index, const Tensor* losses,
                                  float* mean_loss, const Tensor* grad_logits, int64_t divisor = 0);

}  // namespace oslo
