// Data parallelism with PyTorch DDP's semantics and DeepSpeed ZeRO's stages
// 1, 2 and 3 over the context's data-parallel group (Megatron's order: the
// ranks holding the same tensor-parallel slice).
//
// Buckets. The model's parameters, in the order the backward finishes
// their gradients (Model::grad_stages; reverse parameter order within a
// stage), are cut into buckets of about bucket_bytes of f32 gradient.
// ZeRO partitions each parameter as DeepSpeed's stage 3 does: into N equal
// parts of whole rows (N the data-parallel size, the last part padded), rank r owning
// part r; a rank's chunk of a bucket is its parts of the bucket's
// parameters, in bucket order, so that one reduce-scatter or all-gather of
// the bucket (laid out rank-major) serves all of them. The layout depends
// only on the shapes, so every rank computes the same one.
//
// Reduction. During the backward of the last micro-batch of a window
// (stages 0 and 1: no_sync semantics, nothing is exchanged before it) a
// bucket whose parameters are all final is handed to a communication
// thread, in bucket order, at once; the thread reduces it over the
// context's grad_comm() (a communicator of its own) while the backward goes
// on: stage 0 and 1 sum each gradient in place (all-reduce), stage 2
// reduce-scatters the bucket into this rank's chunk and the full gradients
// of the bucket are freed. Gradients are sums; the trainer scales the loss
// by 1/N so that they come out as the average (DDP). end_backward waits for
// what is in flight. Backends whose memory the host cannot address, or
// whose groups do not run on a host transport, reduce each bucket on the
// calling thread when it is ready (the same order, no overlap).
//
// ZeRO. Stage 1: the optimizer keeps state (and f32 masters) only for the
// elements of the chunks this rank owns, updates them from the all-reduced
// gradients, and gather_parameters() all-gathers the updated values. Stage
// 2: the same from the reduce-scattered chunks, which are all the gradient
// this rank keeps (reduced after every micro-batch and accumulated there).
// Stage 3: also the parameters of two or more dimensions are kept only as
// the optimizer's f32 masters of the owned parts; the model gathers a
// unit's (a block's, or the embeddings' and head's) just before using it,
// in the forward and again in the backward, and frees it after
// (Model::set_param_hook). When it gathers a unit it hands the gather of
// the unit the model names as next to the communication thread, so that
// the next block's parameters arrive while this one computes (DeepSpeed's
// prefetch, one unit ahead); only the first unit of a pass is gathered on
// the calling thread.
//
// Every method is called by one thread (the model's); collective over the
// data-parallel group where it says so.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "core/model/model.hpp"

namespace oslo {

// ZeRO-3's parameter units of a model's tensors() entries, the training
// pass's (TrainingPass::set_param_hook): 0 the embeddings, final norm and
// head, 1 + l block l, read from the stage of the backward after which each
// gradient is final (0 the head, 1 .. L the blocks from the last, L + 1 the
// embeddings). Thread-safe (const).
std::vector<int> zero_units(const TrainingPass& t);

struct DataParallelOptions {
  int64_t bucket_bytes = 25 << 20;  // PyTorch DDP's bucket_cap_mb = 25
  int zero_stage = 0;               // 0, 1, 2 or 3
};

struct GradBucket {
  std::vector<size_t> params;    // Model::tensors() indices, in bucket order
  std::vector<int64_t> offsets;  // element offset of each in the bucket
  // ZeRO: each parameter is cut into N equal parts (the last padded),
  // parts[j] elements each; rank r owns part r of every parameter, and its
  // chunk of the bucket is those parts in bucket order, part j at
  // part_offsets[j].
  std::vector<int64_t> parts, part_offsets;
  int64_t numel = 0;    // elements of the parameters
  int64_t chunk = 0;    // elements of one rank's chunk: the sum of parts
  int ready_stage = 0;  // the backward stage that completes it
};

// The elements of one parameter this rank owns (ZeRO): [lo, hi) of the
// flattened local tensor, at chunk_offset in bucket `bucket`'s chunk.
struct OwnedRange {
  int64_t lo = 0, hi = 0;
  size_t bucket = 0;
  int64_t chunk_offset = 0;
};

class DataParallel {
 public:
  // Lays out the buckets and starts the communication thread. Validates
  // the options (OSLO_ERR_INVALID_ARGUMENT naming the bad one). Not
  // collective.
  DataParallel(Model& model, const DataParallelOptions& options);
  // Waits for what is in flight (errors dropped) and stops the thread.
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  int size() const { return n_; }
  int rank() const { return r_; }
  int zero_stage() const { return o_.zero_stage; }
  const std::vector<GradBucket>& buckets() const { return buckets_; }
  // Per Model::tensors() entry: what this rank owns (everything when the
  // stage is 0).
  const std::vector<OwnedRange>& owned() const { return owned_; }

  // Before a micro-batch's backward: `last` when it completes the
  // accumulation window (stages 0 and 1 reduce only then), `first` when it
  // starts one (stage 2 overwrites its chunks instead of adding).
  void begin_backward(bool first, bool last);
  // The model's backward hook: stage `stage` finished.
  void on_stage(int stage);
  // After the backward returned: hands over what is left, waits for every
  // bucket and rethrows the first error of the communication thread
  // (OSLO_ERR_COMM / OSLO_ERR_TIMEOUT). Collective over the data group.
  void end_backward();
  // After a backward that threw: waits for the buckets in flight (bounded
  // by the communicator's timeout) and forgets the rest.
  void abandon() noexcept;
  // Whether the gradients (stages 0, 1) or chunks (stage 2) hold the
  // reduction of everything accumulated since the last reset.
  bool reduced() const { return reduced_; }
  // Reduces every bucket now on the calling thread (an optimizer step after
  // a window that did not end with a reducing backward). Collective.
  void reduce_now();
  // After the optimizer step: the next backward starts a new window.
  void reset();

  // Stage 2: this rank's reduced gradient chunk of bucket b, f32 [chunk].
  const Tensor& grad_chunk(size_t b) const { return chunks_.at(b); }
  // The f32 gradient the optimizer reads for parameter i: the owned
  // elements (stage 2: in the chunk; else in the model's gradient), as a
  // flat view of hi - lo elements (empty when nothing is owned).
  View grad_view(size_t i) const;
  // Stages 1, 2: every rank contributes the f32 values of its owned
  // elements (values(i): a flat view of parameter i's owned elements, f32)
  // and every parameter gets the gathered values, rounded to its dtype.
  // Collective over the data group.
  void gather_parameters(const std::vector<View>& values);
  // The same into other memory: out[i], a flat view of all of parameter
  // i's local elements (any float dtype; values rounded to it), gets the
  // owned parts of every rank (parts[i]: flat f32, hi - lo elements). A
  // training checkpoint gathers the partitioned optimizer state with it.
  // Collective over the data group.
  void gather(const std::vector<View>& parts, const std::vector<View>& out);
  // ZeRO-3: the f32 values of each parameter's owned elements (the
  // optimizer's masters) that acquire() gathers from; set once.
  void set_sources(const std::vector<View>& sources);
  // ZeRO-3: frees every partitioned parameter's memory (after the
  // optimizer took its masters).
  void discard_partitioned();
  // ZeRO-3, the model's parameter hook: gathers the partitioned parameters
  // of `unit` (Model::param_units) from every data rank's part (`on`; at
  // once when a prefetch holds them or is bringing them, else now), or
  // frees them; with `on`, starts gathering unit `next` (>= 0) on the
  // communication thread. Collective over the data group (the same calls
  // in the same order on every data rank).
  void acquire(int unit, bool on, int next = -1);
  // ZeRO-3: the head's weight in row chunks for the model's loss
  // (TrainingPass::set_head_rows), gathered from and reduced into the ranks' row
  // parts on the calling thread over the context's data group; parts == 0
  // when the stage is not 3 or the model has no partitioned head. The
  // returned functions call into this object: clear them from the model
  // before it is destroyed.
  TrainingPass::HeadRows head_rows();
  // ZeRO-3: frees every gathered unit (after waiting for a prefetch in
  // flight); the next use gathers the current values again.
  void release_units();
  // Whether parameter i is partitioned (ZeRO-3, two or more dimensions).
  bool partitioned(size_t i) const { return partitioned_.at(i); }
  // The gradient tensors the update reads, for scaling and clipping:
  // stage 2 the chunks, else the model's gradients.
  std::vector<Tensor> grad_tensors() const;
  // torch.nn.utils.clip_grad_norm_ over the gradients as they are held
  // (stage 2: the partitions, summed over the data group too). Collective
  // over the tensor and data groups.
  double clip_grad_norm(double max_norm);

  // Timings of the last reducing backward, for the overlap test and the
  // benchmark: per bucket, when it was handed over, when the thread began
  // and finished it, and when the backward returned (end_backward called),
  // in seconds on one steady clock.
  struct Timing {
    std::vector<double> handed, started, finished;
    double backward_end = 0, waited_until = 0;
    // ZeRO-3, per acquisition of a unit the pass did not hold: the unit,
    // when the model asked for it, when its gather was handed to the
    // communication thread (0: gathered then, on the calling thread) and
    // when that gather finished.
    struct Acquire {
      int unit = 0;
      double needed = 0, handed = 0, finished = 0;
    };
    std::vector<Acquire> acquires;
    // ZeRO-3: the head's row chunks reduced (head_rows()).
    int64_t row_chunks = 0;
  };
  const Timing& timing() const { return timing_; }
  // Whether a communication thread runs the reductions.
  bool background() const { return background_; }

 private:
  Model& model_;
  Context& ctx_;
  DataParallelOptions o_;
  int n_ = 1, r_ = 0;
  std::vector<GradBucket> buckets_;
  std::vector<OwnedRange> owned_;
  std::vector<Tensor> chunks_;     // stages 2, 3
  std::vector<int> units_;         // Model::param_units
  std::vector<bool> partitioned_;  // stage 3
  std::vector<View> sources_;      // stage 3
  // Stage 3, per unit: released, being gathered by the thread, or held.
  enum class UnitState { kReleased, kQueued, kHeld };
  std::vector<UnitState> unit_state_;
  std::vector<double> unit_handed_, unit_finished_;  // of the last prefetch
  std::vector<bool> unit_done_;                      // its gather finished
  // All-gathers parameter i's parts (this rank's from part_values) into
  // out over the data group (grad_comm: the reducer's own communicator, on
  // its background thread).
  void gather_one(size_t i, const View& part_values, const View& out, bool grad_comm);
  // Gathers unit u's partitioned parameters (allocated), as gather_one.
  void gather_unit(int u, bool grad_comm);
  // head_rows()'s gather and reduce of chunk k of parameter i.
  void gather_rows(size_t i, int64_t cols, int64_t chunk_rows, int64_t k, const View& out);
  void reduce_rows(size_t i, int64_t cols, int64_t chunk_rows, int64_t k, const View& grad);
  // Per bucket: the head's rows were added into its chunk in this
  // backward, so that the bucket's own reduction adds to the chunk.
  std::vector<char> row_added_;
  bool accumulate(size_t b) const { return !first_ || row_added_[b]; }
  void set_unit_memory(int u, bool on);
  bool reduced_ = false, armed_ = false, first_ = true;
  size_t next_ = 0;  // next bucket to hand over in this backward
  size_t done_ = 0;  // buckets released so far (stage 2)
  Timing timing_;
  std::chrono::steady_clock::time_point t0_;
  double now() const;

  // The communication thread.
  bool background_ = false;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  // Tasks in order: a bucket's reduction, or (prefetch) a unit's gather.
  struct Task {
    bool prefetch = false;
    size_t index = 0;
  };
  std::deque<Task> queue_;
  size_t finished_ = 0, handed_ = 0;  // buckets
  size_t busy_ = 0;                   // tasks queued or running
  bool stop_ = false;
  std::exception_ptr error_;
  // Stage 2, accumulating micro-batches: reduced sums for end_backward to
  // add into the chunks.
  std::vector<std::pair<size_t, Tensor>> pending_;
  void worker();
  void hand_over(size_t b);
  void wait_all();
  // The reduction of bucket b (on whichever thread runs it).
  void reduce_bucket(size_t b, bool accumulate);
  void release_finished();
};

}  // namespace oslo
