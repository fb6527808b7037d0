#include "core/serve/engine.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>

#include "core/comm/leader.hpp"
#include "core/common/dtype.hpp"
#include "core/common/error.hpp"
#include "core/context/context.hpp"
#include "core/tensor/view.hpp"
#include "core/tensor/view_util.hpp"

namespace oslo {
namespace serve {

const char* finish_name(Finish f) {
  switch (f) {
    case Finish::kNone: return "none";
    case Finish::kLength: return "length";
    case Finish::kEos: return "eos";
    case Finish::kStop: return "stop";
    case Finish::kCancelled: return "cancelled";
    case Finish::kError: return "error";
  }
  return "?";
}

// A request the stepping thread owns.
struct Engine::Live {
  int64_t id = 0;
  Request req;
  Sequence* seq = nullptr;
  std::unique_ptr<TextStream> text;
  int64_t generated = 0;
};

// What a step takes in: the leader's new requests and cancels.
struct Engine::Incoming {
  std::deque<std::pair<int64_t, Request>> requests;
  std::vector<int64_t> cancels;
  bool stop = false;
};

namespace {

// The step's message from the leader: int64 words (doubles by their bits)
// and strings, in a byte string for Control::broadcast_string.
struct Writer {
  std::string out;
  void word(int64_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); }
  void real(double d) {
    int64_t v;
    std::memcpy(&v, &d, sizeof v);
    word(v);
  }
  void text(const std::string& s) {
    word(static_cast<int64_t>(s.size()));
    out += s;
  }
};
struct Reader {
  const std::string& in;
  size_t at = 0;
  int64_t word() {
    OSLO_CHECK(at + sizeof(int64_t) <= in.size(), OSLO_ERR_COMM,
               "serving: the leader's step message is cut short");
    int64_t v;
    std::memcpy(&v, in.data() + at, sizeof v);
    at += sizeof v;
    return v;
  }
  double real() {
    const int64_t v = word();
    double d;
    std::memcpy(&d, &v, sizeof d);
    return d;
  }
  std::string text() {
    const int64_t n = word();
    OSLO_CHECK(n >= 0 && at + static_cast<size_t>(n) <= in.size(), OSLO_ERR_COMM,
               "serving: the leader's step message is cut short");
    std::string s = in.substr(at, static_cast<size_t>(n));
    at += static_cast<size_t>(n);
    return s;
  }
};

std::string encode(const std::deque<std::pair<int64_t, Request>>& reqs,
                   const std::vector<int64_t>& cancels, bool stop) {
  Writer w;
  w.word(stop ? 1 : 0);
  w.word(static_cast<int64_t>(cancels.size()));
  for (int64_t c : cancels) w.word(c);
  w.word(static_cast<int64_t>(reqs.size()));
  for (const auto& item : reqs) {
    const Request& r = item.second;
    const GenerateOptions& o = r.options;
    w.word(item.first);
    w.word(static_cast<int64_t>(r.prompt.size()));
    for (int64_t t : r.prompt) w.word(t);
    w.word(o.max_new_tokens);
    w.word(o.min_new_tokens);
    w.word(o.do_sample ? 1 : 0);
    w.real(o.temperature);
    w.word(o.top_k);
    w.real(o.top_p);
    w.word(static_cast<int64_t>(o.seed));
    w.word(o.num_beams);
    w.real(o.length_penalty);
    w.word(static_cast<int64_t>(o.early_stopping));
    w.word(static_cast<int64_t>(o.eos_token_ids.size()));
    for (int64_t e : o.eos_token_ids) w.word(e);
    w.word(o.pad_token_id);
    w.real(o.repetition_penalty);
    w.word(static_cast<int64_t>(r.stop.size()));
    for (const std::string& st : r.stop) w.text(st);
  }
  return w.out;
}

void decode_into(const std::string& msg, std::deque<std::pair<int64_t, Request>>& reqs,
                 std::vector<int64_t>& cancels, bool& stop) {
  Reader rd{msg};
  stop = rd.word() != 0;
  for (int64_t n = rd.word(); n > 0; --n) cancels.push_back(rd.word());
  for (int64_t n = rd.word(); n > 0; --n) {
    Request r;
    GenerateOptions& o = r.options;
    const int64_t id = rd.word();
    for (int64_t k = rd.word(); k > 0; --k) r.prompt.push_back(rd.word());
    o.max_new_tokens = rd.word();
    o.min_new_tokens = rd.word();
    o.do_sample = rd.word() != 0;
    o.temperature = rd.real();
    o.top_k = rd.word();
    o.top_p = rd.real();
    o.seed = static_cast<uint64_t>(rd.word());
    o.num_beams = rd.word();
    o.length_penalty = rd.real();
    o.early_stopping = static_cast<EarlyStopping>(rd.word());
    for (int64_t k = rd.word(); k > 0; --k) o.eos_token_ids.push_back(rd.word());
    o.pad_token_id = rd.word();
    o.repetition_penalty = rd.real();
    for (int64_t k = rd.word(); k > 0; --k) r.stop.push_back(rd.text());
    reqs.emplace_back(id, std::move(r));
  }
  OSLO_CHECK(rd.at == msg.size(), OSLO_ERR_COMM, "serving: the leader's step message has ",
             msg.size() - rd.at, " bytes too many");
}

}  // namespace

Engine::Engine(InferenceRunner& runner, const BlockStack& stack, const EngineOptions& opt,
               TextStream::Decode decode)
    : runner_(runner), stack_(stack), opt_(opt), decode_(std::move(decode)) {
  OSLO_CHECK(stack.cfg.traits.causal && (!stack.last_stage() || stack.lm_head.defined()),
             OSLO_ERR_NOT_SUPPORTED, stack.cfg.model_type,
             ": serving needs a causal language model with a head");
  const Topology& topo = stack.ctx.topology();
  OSLO_CHECK(topo.dp_size() == 1, OSLO_ERR_NOT_SUPPORTED,
             "serving: data-parallel replicas are not supported (data-parallel size ",
             topo.dp_size(), "); run one engine per replica's world");
  if (topo.world_size() > 1) {
    ctl_ = &stack.ctx.control(OSLO_GROUP_WORLD);
    leader_ = topo.world_rank() == 0;
  }
  OSLO_CHECK(opt.idle_wait_ms >= 0, OSLO_ERR_INVALID_ARGUMENT,
             "serving: idle_wait_ms must be >= 0, got ", opt.idle_wait_ms);
  OSLO_CHECK(opt.block_size >= 1 && opt.block_size <= 4096, OSLO_ERR_INVALID_ARGUMENT,
             "serving: block_size must be in [1, 4096], got ", opt.block_size);
  OSLO_CHECK(opt.num_blocks >= 0 && opt.kv_memory_bytes >= 0, OSLO_ERR_INVALID_ARGUMENT,
             "serving: num_blocks and kv_memory_bytes must be >= 0");
  int64_t blocks = opt.num_blocks;
  if (blocks == 0) {
    const int64_t per = PagedKV::block_bytes(stack, opt.block_size, opt.kv_dtype);
    blocks = per > 0 ? opt.kv_memory_bytes / per : 0;
    OSLO_CHECK(blocks >= 1, OSLO_ERR_INVALID_ARGUMENT, "serving: kv_memory_bytes ",
               opt.kv_memory_bytes, " holds no KV block (", per, " bytes each)");
  }
  pool_ = std::make_unique<BlockPool>(blocks, opt.block_size, opt.prefix_caching);
  sched_ = std::make_unique<Scheduler>(*pool_, SchedulerLimits{opt.max_seqs, opt.max_step_tokens});
  kv_ = std::make_unique<PagedKV>(stack, blocks, opt.block_size, opt.kv_dtype);
  stats_.blocks_total = blocks;
  stats_.block_size = opt.block_size;
}

Engine::~Engine() = default;

int64_t Engine::add(Request r) {
  const ModelConfig& cfg = stack_.cfg;
  OSLO_CHECK(leader_, OSLO_ERR_INVALID_ARGUMENT,
             "serving: requests are added on world rank 0 (this is rank ",
             stack_.ctx.topology().world_rank(), ", which follows rank 0's steps)");
  OSLO_CHECK(!r.prompt.empty(), OSLO_ERR_INVALID_ARGUMENT, "request: empty prompt");
  for (size_t i = 0; i < r.prompt.size(); ++i)
    OSLO_CHECK(r.prompt[i] >= 0 && r.prompt[i] < cfg.vocab_size, OSLO_ERR_INVALID_ARGUMENT,
               "request: prompt token ", i, " is ", r.prompt[i], ", outside the vocabulary [0, ",
               cfg.vocab_size, ")");
  validate_options(r.options, cfg.vocab_size);
  OSLO_CHECK(r.options.num_beams == 1, OSLO_ERR_INVALID_ARGUMENT,
             "request: num_beams must be 1 when serving (beam search: oslo_model_generate)");
  OSLO_CHECK(r.options.kv_dtype == OSLO_DTYPE_F32 || r.options.kv_dtype == kv_->kv_dtype(),
             OSLO_ERR_INVALID_ARGUMENT, "request: kv_cache_dtype ", dtype_name(r.options.kv_dtype),
             ", but the engine's KV cache is ", dtype_name(kv_->kv_dtype()),
             " (oslo_engine_options.kv_dtype)");
  OSLO_CHECK(r.stop.empty() || decode_, OSLO_ERR_INVALID_ARGUMENT,
             "request: stop strings need the engine's tokenizer");
  for (size_t i = 0; i < r.stop.size(); ++i)
    OSLO_CHECK(!r.stop[i].empty(), OSLO_ERR_INVALID_ARGUMENT, "request: stop string ", i,
               " is empty");
  const int64_t len = static_cast<int64_t>(r.prompt.size()) + r.options.max_new_tokens;
  OSLO_CHECK(cfg.max_positions <= 0 || len - 1 <= cfg.max_positions, OSLO_ERR_INVALID_ARGUMENT,
             "request: ", r.prompt.size(), " prompt tokens + max_new_tokens ",
             r.options.max_new_tokens, " exceed the model's ", cfg.max_positions, " positions");
  OSLO_CHECK(cfg.sliding_window == 0 || len - 1 <= cfg.sliding_window, OSLO_ERR_NOT_SUPPORTED,
             cfg.model_type, ": sequences longer than the sliding window (", cfg.sliding_window,
             ") are not supported");
  const int64_t capacity = pool_->num_blocks() * pool_->block_size();
  OSLO_CHECK(len - 1 <= capacity, OSLO_ERR_INVALID_ARGUMENT, "request: ", r.prompt.size(),
             " prompt tokens + max_new_tokens ", r.options.max_new_tokens,
             " need more than the KV pool's ", capacity, " positions");
  std::lock_guard<std::mutex> lock(mu_);
  OSLO_CHECK(!stop_, OSLO_ERR_INVALID_ARGUMENT, "serving: the engine is shut down");
  const int64_t id = next_id_++;
  inbox_.emplace_back(id, std::move(r));
  known_.insert(id);
  work_.notify_all();
  return id;
}

bool Engine::cancel(int64_t id) {
  OSLO_CHECK(leader_, OSLO_ERR_INVALID_ARGUMENT,
             "serving: requests are cancelled on world rank 0 (this is rank ",
             stack_.ctx.topology().world_rank(), ")");
  std::lock_guard<std::mutex> lock(mu_);
  if (!known_.count(id) || cancels_.count(id)) return false;
  cancels_.insert(id);
  work_.notify_all();
  return true;
}

void Engine::shutdown() {
  OSLO_CHECK(leader_, OSLO_ERR_INVALID_ARGUMENT,
             "serving: the engine is shut down on world rank 0 (this is rank ",
             stack_.ctx.topology().world_rank(), ")");
  std::lock_guard<std::mutex> lock(mu_);
  stop_ = true;
  work_.notify_all();
}

bool Engine::stopped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stop_seen_;
}

bool Engine::idle() const {
  std::lock_guard<std::mutex> lock(mu_);
  return inbox_.empty() && cancels_.empty() && stats_.running == 0 && stats_.waiting == 0;
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void Engine::finish(Live& l, Finish f, std::vector<Event>& events, const std::string& error,
                    oslo_status status) {
  Event* e = nullptr;
  for (Event& x : events)
    if (x.id == l.id) e = &x;
  if (!e) {
    events.push_back(Event{});
    e = &events.back();
    e->id = l.id;
  }
  if (l.text && f != Finish::kStop) e->text += l.text->flush();
  e->finish = f;
  e->error = error;
  e->status = status;
  sched_->remove(l.id);
  const int64_t id = l.id;
  live_.erase(id);
  std::lock_guard<std::mutex> lock(mu_);
  known_.erase(id);
  cancels_.erase(id);
  running_ids_.erase(id);
}

Engine::Incoming Engine::take_incoming() {
  Incoming in;
  if (leader_) {
    std::unique_lock<std::mutex> lock(mu_);
    const bool busy = sched_->running() > 0 || sched_->waiting() > 0;
    if (!busy && inbox_.empty() && cancels_.empty() && !stop_)
      work_.wait_for(lock, std::chrono::milliseconds(opt_.idle_wait_ms),
                     [&] { return !inbox_.empty() || !cancels_.empty() || stop_; });
    in.requests.swap(inbox_);
    // A cancel of a request added in the same breath is applied after it.
    for (int64_t id : cancels_) in.cancels.push_back(id);
    std::sort(in.cancels.begin(), in.cancels.end());
    in.stop = stop_;
  }
  return in;
}

void Engine::share(Incoming& in) {
  if (!ctl_) return;
  const std::string msg =
      ctl_->broadcast_string(leader_ ? encode(in.requests, in.cancels, in.stop) : "", 0);
  if (!leader_) decode_into(msg, in.requests, in.cancels, in.stop);
}

void Engine::apply(Incoming& in, std::vector<Event>& events) {
  for (auto& item : in.requests) {
    auto l = std::make_unique<Live>();
    l->id = item.first;
    l->req = std::move(item.second);
    if (decode_) l->text = std::make_unique<TextStream>(decode_, l->req.stop);
    l->seq = &sched_->add(l->id, l->req.prompt, l->req.options.max_new_tokens);
    live_.emplace(l->id, std::move(l));
  }
  std::vector<int64_t> ids = in.cancels;
  if (in.stop) {
    for (auto& kv : live_) ids.push_back(kv.first);
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  }
  for (int64_t id : ids) {
    auto it = live_.find(id);
    if (it != live_.end()) finish(*it->second, Finish::kCancelled, events);
  }
  if (in.stop) {
    stopped_ = true;
    std::lock_guard<std::mutex> lock(mu_);
    stop_seen_ = true;
    stop_ = true;
  }
}

std::vector<Event> Engine::step() {
  std::vector<Event> events;
  step(events);
  return events;
}

namespace {
oslo_status status_of(const std::exception& ex) {
  const auto* e = dynamic_cast<const Error*>(&ex);
  return e ? e->status() : OSLO_ERR_INTERNAL;
}
}  // namespace

void Engine::fail_all(const std::exception& ex, Incoming* taken, std::vector<Event>& events) {
  const oslo_status st = status_of(ex);
  // Requests the step took in but never started.
  if (taken)
    for (const auto& item : taken->requests) {
      events.push_back(Event{});
      Event& e = events.back();
      e.id = item.first;
      e.finish = Finish::kError;
      e.status = st;
      e.error = ex.what();
      std::lock_guard<std::mutex> lock(mu_);
      known_.erase(item.first);
      cancels_.erase(item.first);
    }
  // The cache may be half written: every live request ends.
  std::vector<int64_t> ids;
  for (auto& kv : live_) ids.push_back(kv.first);
  std::sort(ids.begin(), ids.end());
  for (int64_t id : ids) finish(*live_.at(id), Finish::kError, events, ex.what(), st);
  publish();
}

void Engine::publish() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.running = static_cast<int64_t>(sched_->running());
  stats_.waiting = static_cast<int64_t>(sched_->waiting());
  stats_.blocks_used = pool_->used_blocks();
  stats_.kv_bytes_used =
      stats_.blocks_used * PagedKV::block_bytes(stack_, pool_->block_size(), kv_->kv_dtype());
  stats_.prefix_queries = pool_->queries();
  stats_.prefix_hits = pool_->hits();
  int64_t cached = 0;
  running_ids_.clear();
  for (auto& kv : live_) {
    cached += kv.second->seq->computed;
    if (kv.second->seq->running) running_ids_.insert(kv.first);
  }
  stats_.cached_tokens = cached;
}

void Engine::step(std::vector<Event>& events) {
  if (stopped_) return;
  Incoming in = take_incoming();
  try {
    share(in);
  } catch (const std::exception& ex) {
    fail_all(ex, &in, events);
    throw;
  }
  apply(in, events);
  if (stopped_) {
    publish();
    return;
  }
  const StepPlan plan = sched_->schedule();
  if (!plan.chunks.empty()) {
    try {
      run_plan(plan, events);
    } catch (const std::exception& ex) {
      fail_all(ex, nullptr, events);
      throw;
    }
  }
  publish();
}

State Engine::state(int64_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!known_.count(id)) return State::kUnknown;
  return running_ids_.count(id) ? State::kRunning : State::kWaiting;
}

void Engine::run_plan(const StepPlan& plan, std::vector<Event>& events) {
  Backend& be = stack_.ctx.backend();
  const auto& bp = stack_.ctx.backend_ptr();
  for (const BlockCopy& c : plan.copies) kv_->copy_block(c.src, c.dst);
  // The step's tokens: every chunk's, one after the other (a batch of one
  // row of T tokens, each at its own position).
  std::vector<int64_t> ids, positions;
  std::vector<PagedChunk> chunks;
  int64_t prompt_tokens = 0;
  for (const Chunk& c : plan.chunks) {
    PagedChunk pc;
    pc.start = c.start;
    pc.n = c.n;
    pc.row = static_cast<int64_t>(ids.size());
    pc.blocks = &c.seq->blocks;
    chunks.push_back(pc);
    for (int64_t p = c.start; p < c.start + c.n; ++p) {
      ids.push_back(c.seq->tokens[static_cast<size_t>(p)]);
      positions.push_back(p);
    }
    prompt_tokens += std::max<int64_t>(0, std::min(c.start + c.n, c.seq->prompt_len) - c.start);
  }
  const int64_t T = static_cast<int64_t>(ids.size());
  kv_->begin_step(chunks);
  const Tensor hidden = runner_.run_stack(
      ids, positions, {}, 1, T,
      [&](size_t li, const View& q, const View& k, const View& v, const View& out) {
        kv_->attend(li, q, k, v, out);
      },
      true);
  sched_->commit(plan);

  // The sampled chunks' last hidden rows: greedy ones through the head's
  // argmax, the others through their logits.
  std::vector<const Chunk*> greedy, full;
  for (const Chunk& c : plan.chunks) {
    if (!c.sample) continue;
    const Live& l = *live_.at(c.seq->id);
    (needs_scores(l.req.options, l.generated) ? full : greedy).push_back(&c);
  }
  const int64_t H = stack_.cfg.hidden_size;
  auto rows_of = [&](const std::vector<const Chunk*>& cs) {
    Tensor t = scratch(bp, OSLO_DTYPE_F32, {static_cast<int64_t>(cs.size()), H});
    for (size_t i = 0; i < cs.size(); ++i) {
      const size_t ci = static_cast<size_t>(cs[i] - plan.chunks.data());
      const int64_t row = chunks[ci].row + cs[i]->n - 1;
      be.copy(static_cast<char*>(t.data()) + i * H * sizeof(float),
              static_cast<const char*>(hidden.data()) + row * H * sizeof(float),
              static_cast<size_t>(H) * sizeof(float), CopyKind::DeviceToDevice);
    }
    return t;
  };
  // Every rank runs the head (collective); the leader chooses the tokens and
  // sends them to the others: msg = [outcome, token per sampled chunk].
  std::vector<CausalLM::Choice> choice;
  std::vector<float> logits;
  if (!greedy.empty()) {
    const Tensor h = rows_of(greedy);
    choice = runner_.argmax_of(view(h), static_cast<int64_t>(greedy.size()));
  }
  if (!full.empty()) {
    const Tensor h = rows_of(full);
    logits = runner_.logits_of(view(h), static_cast<int64_t>(full.size()));
  }
  // msg = [outcome, token per sampled chunk], the leader's.
  std::vector<int64_t> msg(1, 0);
  for (const Chunk& c : plan.chunks)
    if (c.sample) msg.push_back(0);
  leader_decides(ctl_, msg, "serving: the step's tokens", [&] {
    std::unordered_map<int64_t, int64_t> chosen;  // request id -> token
    for (size_t i = 0; i < greedy.size(); ++i) {
      OSLO_CHECK(choice[i].logit == choice[i].logit, OSLO_ERR_INVALID_ARGUMENT,
                 "serving: the model returned NaN logits for request ", greedy[i]->seq->id);
      chosen[greedy[i]->seq->id] = choice[i].token;
    }
    const int64_t V = stack_.cfg.vocab_size;
    for (size_t i = 0; i < full.size(); ++i) {
      const Live& l = *live_.at(full[i]->seq->id);
      chosen[l.id] = choose_token(logits.data() + static_cast<int64_t>(i) * V, V, l.seq->tokens,
                                  l.generated, l.req.options, 0);
    }
    size_t k = 1;
    for (const Chunk& c : plan.chunks)
      if (c.sample) msg[k++] = chosen.at(c.seq->id);
    return 0;
  });
  std::unordered_map<int64_t, int64_t> next;  // request id -> token
  {
    size_t k = 1;
    for (const Chunk& c : plan.chunks)
      if (c.sample) next[c.seq->id] = msg[k++];
  }

  int64_t generated = 0;
  for (const Chunk& c : plan.chunks) {
    if (!c.sample) continue;
    Live& l = *live_.at(c.seq->id);
    const int64_t tok = next.at(l.id);
    sched_->append(*l.seq, tok);
    ++l.generated;
    ++generated;
    events.push_back(Event{});
    Event& e = events.back();
    e.id = l.id;
    e.tokens.push_back(tok);
    bool stopped = false;
    if (l.text) {
      TextStream::Piece piece = l.text->push(tok);
      e.text = piece.text;
      stopped = piece.stopped;
    }
    const auto& eos = l.req.options.eos_token_ids;
    if (stopped)
      finish(l, Finish::kStop, events);
    else if (std::find(eos.begin(), eos.end(), tok) != eos.end())
      finish(l, Finish::kEos, events);
    else if (l.generated >= l.req.options.max_new_tokens)
      finish(l, Finish::kLength, events);
  }
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.steps;
  stats_.prompt_tokens += prompt_tokens;
  stats_.generated_tokens += generated;
}

}  // namespace serve
}  // namespace oslo
