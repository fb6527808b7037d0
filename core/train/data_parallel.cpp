#include "core/train/data_parallel.hpp"

#include <algorithm>
#include <numeric>

#include "core/common/error.hpp"
#include "core/layers/param_set.hpp"
#include "core/parallel/mappings.hpp"
#include "core/tensor/view.hpp"
#include "core/train/optimizer.hpp"

namespace oslo {

std::vector<int> zero_units(const TrainingPass& t) {
  const int L = t.backward_stages() - 2;
  std::vector<int> unit;
  for (int st : t.grad_stages()) unit.push_back(st == 0 || st == L + 1 ? 0 : 1 + (L - st));
  return unit;
}

namespace {

char* at_f32(void* base, int64_t elements) {
  return static_cast<char*>(base) + elements * static_cast<int64_t>(sizeof(float));
}

}  // namespace

DataParallel::DataParallel(Model& model, const DataParallelOptions& o)
    : model_(model), ctx_(model.context()), o_(o), t0_(std::chrono::steady_clock::now()) {
  OSLO_CHECK(o.zero_stage >= 0 && o.zero_stage <= 3, OSLO_ERR_INVALID_ARGUMENT,
             "data parallel: zero_stage ", o.zero_stage, " must be 0, 1, 2 or 3");
  OSLO_CHECK(o.bucket_bytes >= static_cast<int64_t>(sizeof(float)), OSLO_ERR_INVALID_ARGUMENT,
             "data parallel: bucket_bytes ", o.bucket_bytes, " must be at least 4");
  n_ = group_size(ctx_, OSLO_GROUP_DATA);
  r_ = group_rank(ctx_, OSLO_GROUP_DATA);
  const auto& params = model.tensors();
  const std::vector<int> stage = model.training().grad_stages();
  std::vector<size_t> order(params.size());
  std::iota(order.begin(), order.end(), size_t{0});
  // Backward order: by the stage that finishes a gradient, then reverse
  // parameter order (PyTorch DDP's initial bucket order).
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return stage[a] != stage[b] ? stage[a] < stage[b] : a > b;
  });
  owned_.assign(params.size(), OwnedRange{});
  GradBucket cur;
  auto close = [&] {
    if (cur.params.empty()) return;
    buckets_.push_back(std::move(cur));
    cur = GradBucket{};
  };
  for (size_t i : order) {
    const int64_t m = params[i].tensor.numel();
    if (m == 0) continue;
    // Parts of whole rows (a matrix's first dimension), so that a rank's
    // part of a table is a range of its rows (the head in row chunks).
    const Tensor& t = params[i].tensor;
    const int64_t cols = t.ndim() >= 2 ? m / t.dim(0) : 1;
    const int64_t part = (m / cols + n_ - 1) / n_ * cols;
    cur.params.push_back(i);
    cur.offsets.push_back(cur.numel);
    cur.parts.push_back(part);
    cur.part_offsets.push_back(cur.chunk);
    cur.numel += m;
    cur.chunk += part;
    cur.ready_stage = std::max(cur.ready_stage, stage[i]);
    if (cur.numel * static_cast<int64_t>(sizeof(float)) >= o.bucket_bytes) close();
  }
  close();
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const GradBucket& k = buckets_[b];
    for (size_t j = 0; j < k.params.size(); ++j) {
      const int64_t m = params[k.params[j]].tensor.numel();
      OwnedRange& w = owned_[k.params[j]];
      w.bucket = b;
      if (o.zero_stage == 0) {
        w.lo = 0;
        w.hi = m;
        continue;
      }
      const int64_t lo = r_ * k.parts[j], hi = std::min(m, lo + k.parts[j]);
      if (lo < hi) {
        w.lo = lo;
        w.hi = hi;
        w.chunk_offset = k.part_offsets[j];
      }
    }
  }
  if (o.zero_stage >= 2) {
    Backend& be = ctx_.backend();
    for (const GradBucket& k : buckets_) {
      chunks_.push_back(scratch(ctx_.backend_ptr(), OSLO_DTYPE_F32, {k.chunk}));
      be.fill(view(chunks_.back()), 0.0);
    }
  }
  // ZeRO-3 partitions the parameters of two or more dimensions (matrices
  // and tables: all but a fraction of a percent of the elements); 1-D ones
  // (norms, biases) stay whole, as DeepSpeed's persistence threshold keeps
  // small parameters.
  units_ = zero_units(model.training());
  const int n_units = units_.empty() ? 0 : 1 + *std::max_element(units_.begin(), units_.end());
  unit_state_.assign(static_cast<size_t>(n_units), UnitState::kReleased);
  unit_handed_.assign(static_cast<size_t>(n_units), 0);
  unit_finished_.assign(static_cast<size_t>(n_units), 0);
  unit_done_.assign(static_cast<size_t>(n_units), false);
  partitioned_.assign(params.size(), false);
  if (o.zero_stage == 3)
    for (size_t i = 0; i < params.size(); ++i)
      partitioned_[i] = params[i].tensor.ndim() >= 2 && params[i].tensor.numel() > 0;
  row_added_.assign(buckets_.size(), 0);
  timing_.handed.assign(buckets_.size(), 0);
  timing_.started.assign(buckets_.size(), 0);
  timing_.finished.assign(buckets_.size(), 0);
  background_ = n_ > 1 && grad_background_ok(ctx_);
  if (background_) thread_ = std::thread([this] { worker(); });
}

DataParallel::~DataParallel() {
  if (background_) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
}

double DataParallel::now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
}

void DataParallel::begin_backward(bool first, bool last) {
  first_ = first;
  armed_ = (o_.zero_stage >= 2 || last) && !(n_ == 1 && o_.zero_stage < 2);
  next_ = 0;
  done_ = 0;
  std::fill(timing_.handed.begin(), timing_.handed.end(), 0.0);
  std::fill(timing_.started.begin(), timing_.started.end(), 0.0);
  std::fill(timing_.finished.begin(), timing_.finished.end(), 0.0);
  timing_.backward_end = timing_.waited_until = 0;
  timing_.acquires.clear();
  timing_.row_chunks = 0;
  std::fill(row_added_.begin(), row_added_.end(), 0);
  {
    std::lock_guard<std::mutex> lk(mu_);
    handed_ = finished_ = 0;
  }
  if (n_ == 1 && o_.zero_stage < 2) reduced_ = true;  // nothing to exchange
}

void DataParallel::on_stage(int stage) {
  if (!armed_) return;
  while (next_ < buckets_.size() && buckets_[next_].ready_stage <= stage) hand_over(next_++);
  release_finished();
}

void DataParallel::hand_over(size_t b) {
  timing_.handed[b] = now();
  if (!background_) {
    timing_.started[b] = now();
    reduce_bucket(b, accumulate(b));
    timing_.finished[b] = now();
    std::lock_guard<std::mutex> lk(mu_);
    ++handed_;
    ++finished_;
    return;
  }
  // The transport reads the gradients' memory directly: what the backward
  // enqueued must have run.
  ctx_.backend().synchronize();
  {
    std::lock_guard<std::mutex> lk(mu_);
    queue_.push_back(Task{false, b});
    ++handed_;
    ++busy_;
  }
  cv_.notify_all();
}

void DataParallel::worker() {
  for (;;) {
    Task task;
    bool skip;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and nothing left
      task = queue_.front();
      queue_.pop_front();
      skip = error_ != nullptr;
    }
    const double t = now();
    std::exception_ptr err;
    if (!skip) {
      try {
        if (task.prefetch)
          gather_unit(static_cast<int>(task.index), true);
        else
          reduce_bucket(task.index, accumulate(task.index));
      } catch (...) {
        err = std::current_exception();
      }
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (task.prefetch) {
        unit_finished_[task.index] = now();
        unit_done_[task.index] = true;
      } else {
        timing_.started[task.index] = t;
        timing_.finished[task.index] = now();
        ++finished_;
      }
      if (err && !error_) error_ = err;
      --busy_;
    }
    cv_.notify_all();
  }
}

void DataParallel::reduce_bucket(size_t b, bool accumulate) {
  const GradBucket& k = buckets_[b];
  const auto& grads = model_.training().grads();
  const auto& params = model_.tensors();
  if (o_.zero_stage < 2) {
    for (size_t j = 0; j < k.params.size(); ++j) {
      const Tensor& g = grads[k.params[j]];
      grad_all_reduce(ctx_, g.data(), static_cast<size_t>(g.numel()), OSLO_DTYPE_F32);
    }
    return;
  }
  // Stage 2: the bucket rank-major (rank q's parts of every parameter,
  // padding zero), reduce-scattered into this rank's chunk (or a copy of
  // it that end_backward adds).
  Backend& be = ctx_.backend();
  const auto& bp = ctx_.backend_ptr();
  Tensor flat = scratch(bp, OSLO_DTYPE_F32, {k.chunk * n_});
  std::vector<float> zeros;
  for (size_t j = 0; j < k.params.size(); ++j) {
    const size_t i = k.params[j];
    const int64_t m = params[i].tensor.numel(), part = k.parts[j];
    for (int q = 0; q < n_; ++q) {
      const int64_t lo = q * part, len = std::max<int64_t>(0, std::min(m, lo + part) - lo);
      char* dst = at_f32(flat.data(), q * k.chunk + k.part_offsets[j]);
      // No gradient: the backward did not write one (a head whose weight
      // came in row chunks reduced it already).
      const int64_t have = grads[i].defined() ? len : 0;
      if (have > 0)
        be.copy(dst, at_f32(grads[i].data(), lo), static_cast<size_t>(have) * sizeof(float),
                CopyKind::DeviceToDevice);
      if (have < part) {
        zeros.assign(static_cast<size_t>(part - have), 0.f);
        be.copy(at_f32(dst, have), zeros.data(), zeros.size() * sizeof(float),
                CopyKind::HostToDevice);
      }
    }
  }
  if (!accumulate) {
    grad_reduce_scatter(ctx_, flat.data(), chunks_[b].data(), static_cast<size_t>(k.chunk),
                        OSLO_DTYPE_F32);
  } else {
    // The sum lands at the front of `flat`; end_backward adds it.
    grad_reduce_scatter(ctx_, flat.data(), flat.data(), static_cast<size_t>(k.chunk),
                        OSLO_DTYPE_F32);
    std::lock_guard<std::mutex> lk(mu_);
    pending_.emplace_back(b, flat);
  }
}

void DataParallel::release_finished() {
  if (o_.zero_stage < 2) return;
  size_t fin;
  {
    std::lock_guard<std::mutex> lk(mu_);
    fin = finished_;
  }
  // The thread finishes buckets in order: the first `fin` are done.
  for (; done_ < fin; ++done_) model_.training().release_grads(buckets_[done_].params);
}

void DataParallel::wait_all() {
  if (!background_) return;
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [&] { return busy_ == 0; });
}

void DataParallel::end_backward() {
  if (!armed_) {
    reduced_ = false;
    return;
  }
  timing_.backward_end = now();
  while (next_ < buckets_.size()) hand_over(next_++);
  wait_all();
  timing_.waited_until = now();
  armed_ = false;
  std::exception_ptr err;
  std::vector<std::pair<size_t, Tensor>> adds;
  {
    std::lock_guard<std::mutex> lk(mu_);
    err = error_;
    adds.swap(pending_);
  }
  if (err) std::rethrow_exception(err);
  Backend& be = ctx_.backend();
  for (auto& a : adds) {
    const View part = make_view(a.second.data(), OSLO_DTYPE_F32, {buckets_[a.first].chunk});
    be.binary(OSLO_BK_ADD, view(chunks_[a.first]), view(chunks_[a.first]), part);
  }
  release_finished();
  reduced_ = true;
}

void DataParallel::abandon() noexcept {
  armed_ = false;
  try {
    wait_all();
  } catch (...) {
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    pending_.clear();
  }
  release_units();
}

void DataParallel::reduce_now() {
  if (reduced_) return;
  // Stage 2 reduces after every backward: nothing is left (the chunks are
  // zero when no backward ran since reset).
  if (n_ > 1 && o_.zero_stage < 2) {
    ctx_.backend().synchronize();
    for (size_t b = 0; b < buckets_.size(); ++b) reduce_bucket(b, accumulate(b));
  }
  reduced_ = true;
}

void DataParallel::reset() {
  reduced_ = false;
  first_ = true;
  if (o_.zero_stage >= 2)
    for (Tensor& c : chunks_) ctx_.backend().fill(view(c), 0.0);
}

View DataParallel::grad_view(size_t i) const {
  const OwnedRange& w = owned_.at(i);
  const int64_t n = w.hi - w.lo;
  if (n == 0) return make_view(nullptr, OSLO_DTYPE_F32, {0});
  if (o_.zero_stage >= 2)
    return make_view(at_f32(chunks_[w.bucket].data(), w.chunk_offset), OSLO_DTYPE_F32, {n});
  return make_view(at_f32(model_.training().grads().at(i).data(), w.lo), OSLO_DTYPE_F32, {n});
}

void DataParallel::gather_parameters(const std::vector<View>& values) {
  if (o_.zero_stage == 3) {
    // The partitioned parameters are gathered when next used (a unit still
    // held has the old values: freed); the whole (1-D) ones now.
    release_units();
    for (size_t i = 0; i < values.size(); ++i) {
      if (partitioned_[i] || model_.tensors()[i].tensor.numel() == 0) continue;
      const Tensor& p = model_.tensors()[i].tensor;
      gather_one(i, values[i], make_view(p.data(), p.dtype(), {p.numel()}), false);
    }
    return;
  }
  std::vector<View> out;
  for (const PlacedTensor& p : model_.tensors())
    out.push_back(make_view(p.tensor.data(), p.tensor.dtype(), {p.tensor.numel()}));
  gather(values, out);
}

void DataParallel::gather(const std::vector<View>& values, const std::vector<View>& out) {
  OSLO_CHECK(o_.zero_stage >= 1, OSLO_ERR_INTERNAL, "data parallel: gather without ZeRO");
  OSLO_CHECK(values.size() == model_.tensors().size() && out.size() == values.size(),
             OSLO_ERR_INTERNAL, "data parallel: gather of ", values.size(), " parts into ",
             out.size(), " tensors for ", model_.tensors().size(), " parameters");
  Backend& be = ctx_.backend();
  const auto& bp = ctx_.backend_ptr();
  const auto& params = model_.tensors();
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const GradBucket& k = buckets_[b];
    Tensor send = scratch(bp, OSLO_DTYPE_F32, {k.chunk});
    be.fill(view(send), 0.0);
    for (size_t i : k.params) {
      const OwnedRange& w = owned_[i];
      if (w.hi > w.lo)
        be.copy(at_f32(send.data(), w.chunk_offset), values.at(i).data,
                static_cast<size_t>(w.hi - w.lo) * sizeof(float), CopyKind::DeviceToDevice);
    }
    Tensor all = scratch(bp, OSLO_DTYPE_F32, {k.chunk * n_});
    all_gather(ctx_, OSLO_GROUP_DATA, send.data(), all.data(), static_cast<size_t>(k.chunk),
               OSLO_DTYPE_F32);
    // Rank q's part of parameter j sits at q * chunk + part_offsets[j].
    for (size_t j = 0; j < k.params.size(); ++j) {
      const int64_t m = params[k.params[j]].tensor.numel(), part = k.parts[j];
      const View& o = out[k.params[j]];
      OSLO_CHECK(o.numel() == m, OSLO_ERR_INTERNAL, "data parallel: gather target of ",
                 params[k.params[j]].placement.name, " has ", o.numel(), " elements for ", m);
      const size_t esize = dtype_size(o.dtype);
      for (int q = 0; q < n_; ++q) {
        const int64_t lo = q * part, len = std::max<int64_t>(0, std::min(m, lo + part) - lo);
        if (len == 0) continue;
        be.convert(
            make_view(static_cast<char*>(o.data) + lo * static_cast<int64_t>(esize), o.dtype,
                      {len}),
            make_view(at_f32(all.data(), q * k.chunk + k.part_offsets[j]), OSLO_DTYPE_F32, {len}));
      }
    }
  }
}

void DataParallel::gather_one(size_t i, const View& part_values, const View& out, bool grad_comm) {
  const auto& params = model_.tensors();
  const OwnedRange& w = owned_[i];
  const GradBucket& k = buckets_[w.bucket];
  int64_t part = 0;
  for (size_t j = 0; j < k.params.size(); ++j)
    if (k.params[j] == i) part = k.parts[j];
  const int64_t m = params[i].tensor.numel();
  Backend& be = ctx_.backend();
  const auto& bp = ctx_.backend_ptr();
  Tensor send = scratch(bp, OSLO_DTYPE_F32, {part});
  if (w.hi - w.lo < part) be.fill(view(send), 0.0);
  if (w.hi > w.lo)
    be.copy(send.data(), part_values.data, static_cast<size_t>(w.hi - w.lo) * sizeof(float),
            CopyKind::DeviceToDevice);
  Tensor all = scratch(bp, OSLO_DTYPE_F32, {part * n_});
  if (grad_comm)
    grad_all_gather(ctx_, send.data(), all.data(), static_cast<size_t>(part), OSLO_DTYPE_F32);
  else
    all_gather(ctx_, OSLO_GROUP_DATA, send.data(), all.data(), static_cast<size_t>(part),
               OSLO_DTYPE_F32);
  // The parts in rank order are the parameter's elements in order.
  be.convert(out, make_view(all.data(), OSLO_DTYPE_F32, {m}));
}

void DataParallel::set_sources(const std::vector<View>& sources) {
  OSLO_CHECK(sources.size() == model_.tensors().size(), OSLO_ERR_INTERNAL,
             "data parallel: ", sources.size(), " sources for ", model_.tensors().size(),
             " parameters");
  sources_ = sources;
}

void DataParallel::discard_partitioned() {
  for (size_t i = 0; i < partitioned_.size(); ++i)
    if (partitioned_[i]) storage_discard(*model_.tensors()[i].tensor.storage());
}

void DataParallel::set_unit_memory(int u, bool on) {
  const auto& params = model_.tensors();
  for (size_t i = 0; i < params.size(); ++i) {
    if (!partitioned_[i] || units_[i] != u) continue;
    Storage& st = *params[i].tensor.storage();
    if (on)
      storage_reallocate(st);
    else
      storage_discard(st);
  }
}

void DataParallel::gather_unit(int u, bool grad_comm) {
  const auto& params = model_.tensors();
  for (size_t i = 0; i < params.size(); ++i) {
    if (!partitioned_[i] || units_[i] != u) continue;
    const Tensor& p = params[i].tensor;
    gather_one(i, sources_.at(i), make_view(p.data(), p.dtype(), {p.numel()}), grad_comm);
  }
}

void DataParallel::acquire(int unit, bool on, int next) {
  const int n_units = static_cast<int>(unit_state_.size());
  OSLO_CHECK(unit >= 0 && unit < n_units && next < n_units, OSLO_ERR_INTERNAL,
             "data parallel: unit ", unit, " (next ", next, ") of ", n_units);
  const size_t u = static_cast<size_t>(unit);
  if (!on) {
    if (unit_state_[u] == UnitState::kHeld) {
      set_unit_memory(unit, false);
      unit_state_[u] = UnitState::kReleased;
    }
    return;
  }
  if (unit_state_[u] != UnitState::kHeld) {
    Timing::Acquire ev;
    ev.unit = unit;
    ev.needed = now();
    if (unit_state_[u] == UnitState::kQueued) {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return bool(unit_done_[u]); });
      ev.handed = unit_handed_[u];
      ev.finished = unit_finished_[u];
      if (error_) {
        // The memory stays allocated and unused until the next release.
        unit_state_[u] = UnitState::kHeld;
        std::rethrow_exception(error_);
      }
    } else {
      set_unit_memory(unit, true);
      unit_state_[u] = UnitState::kHeld;  // released by release_units if this throws
      gather_unit(unit, false);
      ev.finished = now();
    }
    unit_state_[u] = UnitState::kHeld;
    timing_.acquires.push_back(ev);
  }
  if (next < 0 || !background_ || unit_state_[static_cast<size_t>(next)] != UnitState::kReleased)
    return;
  const size_t v = static_cast<size_t>(next);
  set_unit_memory(next, true);
  unit_state_[v] = UnitState::kQueued;
  {
    std::lock_guard<std::mutex> lk(mu_);
    unit_done_[v] = false;
    unit_handed_[v] = now();
    queue_.push_back(Task{true, v});
    ++busy_;
  }
  cv_.notify_all();
}

TrainingPass::HeadRows DataParallel::head_rows() {
  TrainingPass::HeadRows hr;
  const int64_t hp = model_.training().head_param();
  if (o_.zero_stage != 3 || hp < 0 || !partitioned_[static_cast<size_t>(hp)]) return hr;
  const size_t i = static_cast<size_t>(hp);
  const Tensor& w = model_.tensors()[i].tensor;
  const int64_t cols = w.numel() / w.dim(0);
  hr.parts = n_;
  hr.part_rows = (w.dim(0) + n_ - 1) / n_;
  // A chunk of about one bucket of f32 rows over all the ranks.
  hr.chunk_rows = std::max<int64_t>(
      1, std::min<int64_t>(hr.part_rows,
                           o_.bucket_bytes / (static_cast<int64_t>(sizeof(float)) * cols * n_)));
  hr.chunks = (hr.part_rows + hr.chunk_rows - 1) / hr.chunk_rows;
  const int64_t c = hr.chunk_rows;
  hr.gather = [this, i, cols, c](int64_t k, const View& out) { gather_rows(i, cols, c, k, out); };
  hr.reduce = [this, i, cols, c](int64_t k, const View& grad) { reduce_rows(i, cols, c, k, grad); };
  return hr;
}

void DataParallel::gather_rows(size_t i, int64_t cols, int64_t chunk_rows, int64_t k,
                               const View& out) {
  Backend& be = ctx_.backend();
  const auto& bp = ctx_.backend_ptr();
  const OwnedRange& w = owned_[i];
  // This rank's rows of chunk k: its part's rows [k c, k c + c), clipped.
  const int64_t own_rows = (w.hi - w.lo) / cols;
  const int64_t r0 = k * chunk_rows,
                count = std::max<int64_t>(0, std::min(chunk_rows, own_rows - r0));
  const int64_t len = chunk_rows * cols;
  Tensor send = scratch(bp, OSLO_DTYPE_F32, {len});
  if (count < chunk_rows) be.fill(view(send), 0.0);
  if (count > 0)
    be.copy(send.data(), at_f32(sources_.at(i).data, r0 * cols),
            static_cast<size_t>(count * cols) * sizeof(float), CopyKind::DeviceToDevice);
  const bool direct = out.dtype == OSLO_DTYPE_F32;
  Tensor all;
  if (!direct) all = scratch(bp, OSLO_DTYPE_F32, {len * n_});
  void* dst = direct ? out.data : all.data();
  all_gather(ctx_, OSLO_GROUP_DATA, send.data(), dst, static_cast<size_t>(len), OSLO_DTYPE_F32);
  if (!direct) be.convert(out, make_view(all.data(), OSLO_DTYPE_F32, {n_ * chunk_rows, cols}));
}

void DataParallel::reduce_rows(size_t i, int64_t cols, int64_t chunk_rows, int64_t k,
                               const View& grad) {
  OSLO_CHECK(armed_, OSLO_ERR_INTERNAL, "data parallel: the head's gradient outside a backward");
  Backend& be = ctx_.backend();
  const OwnedRange& w = owned_[i];
  const int64_t len = chunk_rows * cols;
  // The sum of this rank's block lands at the front of `grad`.
  reduce_scatter(ctx_, OSLO_GROUP_DATA, grad.data, grad.data, static_cast<size_t>(len),
                 OSLO_DTYPE_F32, OSLO_REDUCE_SUM);
  const int64_t own_rows = (w.hi - w.lo) / cols;
  const int64_t r0 = k * chunk_rows,
                count = std::max<int64_t>(0, std::min(chunk_rows, own_rows - r0));
  // The first contribution of a window to the bucket's chunk: the chunk
  // starts from zero and the bucket's own reduction adds to it.
  const size_t b = w.bucket;
  if (first_ && !row_added_[b]) be.fill(view(chunks_[b]), 0.0);
  row_added_[b] = 1;
  ++timing_.row_chunks;
  if (count == 0) return;
  const View dst = make_view(at_f32(chunks_[b].data(), w.chunk_offset + r0 * cols), OSLO_DTYPE_F32,
                             {count * cols});
  be.binary(OSLO_BK_ADD, dst, dst, make_view(grad.data, OSLO_DTYPE_F32, {count * cols}));
}

void DataParallel::release_units() {
  if (o_.zero_stage != 3) return;
  try {
    wait_all();  // a prefetch in flight writes into its unit
  } catch (...) {
  }
  for (size_t u = 0; u < unit_state_.size(); ++u) {
    if (unit_state_[u] == UnitState::kReleased) continue;
    set_unit_memory(static_cast<int>(u), false);
    unit_state_[u] = UnitState::kReleased;
  }
}

std::vector<Tensor> DataParallel::grad_tensors() const {
  if (o_.zero_stage >= 2) return chunks_;
  return model_.training().grads();
}

double DataParallel::clip_grad_norm(double max_norm) {
  if (o_.zero_stage < 2) return oslo::clip_grad_norm(model_, max_norm);
  // Each chunk once for scaling and the search for non-finite values, then
  // the elements it counts: those of the rows this tensor rank owns
  // (replicated parameters: tensor rank 0 counts them), clipped to what
  // this data rank holds.
  std::vector<GradSlice> slices;
  for (const Tensor& c : chunks_) slices.push_back(GradSlice{"gradient partition", c, false, 0, 0});
  const auto& params = model_.tensors();
  const bool tp_first = ctx_.topology().tp_rank() == 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const OwnedRange& w = owned_[i];
    if (w.hi <= w.lo) continue;
    const Placement& pl = params[i].placement;
    // Replicated over the tensor group: tensor rank 0 counts it (the chunk
    // slices above search every rank's copy for non-finite values).
    if (pl.split_dim < 0 && !tp_first) continue;
    const Placement& p = params[i].placement;
    const int64_t numel = params[i].tensor.numel();
    std::vector<std::pair<int64_t, int64_t>> ranges;
    bool all_owned = true;
    for (const Segment& s : p.segments) all_owned = all_owned && s.owner;
    if (p.split_dim < 0 || all_owned) {
      ranges.emplace_back(0, numel);
    } else {
      OSLO_CHECK(p.split_dim == 0 && !p.transpose && p.local_extent > 0, OSLO_ERR_INTERNAL,
                 "clip_grad_norm: ", p.name, " shares segments along a dimension other than 0");
      const int64_t inner = numel / p.local_extent;
      for (const Segment& s : p.segments)
        if (s.owner) ranges.emplace_back(s.local_start * inner, (s.local_start + s.length) * inner);
    }
    for (const auto& rg : ranges) {
      const int64_t lo = std::max(rg.first, w.lo), hi = std::min(rg.second, w.hi);
      if (lo >= hi) continue;
      slices.push_back(GradSlice{p.name, chunks_[w.bucket], false, w.chunk_offset + (lo - w.lo),
                                 hi - lo, false});
    }
  }
  return oslo::clip_grad_norm(ctx_, slices, max_norm, 2.0, true);
}

}  // namespace oslo
