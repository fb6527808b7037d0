// The helpers of test_model_io (model_io_util.hpp).
#include "model_io_util.hpp"

namespace mio {

// ---------------------------------------------------------------------------
// The fake model
// ---------------------------------------------------------------------------

std::vector<Def> model_defs() {
  return {{"wte.weight", OSLO_DTYPE_F32, {kVocab, kH}},
          {"attn.c_attn.weight", OSLO_DTYPE_BF16, {kH, 3 * kH}},
          {"attn.k_proj.weight", OSLO_DTYPE_F16, {kKv * kHeadDim, kH}},
          {"mlp.c_proj.weight", OSLO_DTYPE_F32, {4 * kH, kH}},
          {"mlp.c_fc.bias", OSLO_DTYPE_F16, {4 * kH}},
          {"ln_f.weight", OSLO_DTYPE_F32, {kH}},
          {"pos.ids", OSLO_DTYPE_I64, {16}},
          {"step", OSLO_DTYPE_I32, {}}};
}

// Placements of tensor-parallel rank r of tp (the sharding rules the models
// issue writes for real models).
std::vector<oslo::Placement> plan(int tp, int r) {
  std::vector<oslo::Placement> out;
  auto base = [](const std::string& n, std::vector<int64_t> shape) {
    oslo::Placement p;
    p.name = n;
    p.global_shape = std::move(shape);
    return p;
  };
  {  // vocabulary-parallel embedding, padded to a multiple of tp
    oslo::Placement p = base("wte.weight", {kVocab, kH});
    const int64_t per = (kVocab + tp - 1) / tp;
    p.split_dim = 0;
    p.local_extent = per;
    const int64_t s = r * per, e = std::min<int64_t>(kVocab, s + per);
    if (e > s) p.segments.push_back({s, e - s, 0, true});
    out.push_back(p);
  }
  {  // fused c_attn [in, 3H]: q, k, v each split by heads; held transposed
    oslo::Placement p = base("attn.c_attn.weight", {kH, 3 * kH});
    p.split_dim = 1;
    p.transpose = true;
    const int hp = kHeads / tp;
    int64_t at = 0;
    for (int part = 0; part < 3; ++part)
      for (int h = r * hp; h < (r + 1) * hp; ++h) {
        p.segments.push_back({part * kH + h * kHeadDim, kHeadDim, at, true});
        at += kHeadDim;
      }
    p.local_extent = at;
    out.push_back(p);
  }
  {  // grouped-query KV heads: with tp > kv, ranks share a head
    oslo::Placement p = base("attn.k_proj.weight", {kKv * kHeadDim, kH});
    p.split_dim = 0;
    if (tp <= kKv) {
      const int hp = kKv / tp;
      p.segments.push_back({r * hp * kHeadDim, hp * kHeadDim, 0, true});
      p.local_extent = hp * kHeadDim;
    } else {
      const int head = r * kKv / tp;
      const bool owner = r == 0 || (r - 1) * kKv / tp != head;
      p.segments.push_back({head * kHeadDim, kHeadDim, 0, owner});
      p.local_extent = kHeadDim;
    }
    out.push_back(p);
  }
  {  // row-parallel Conv1D weight [in, out], split along in, held [out, in/tp]
    oslo::Placement p = base("mlp.c_proj.weight", {4 * kH, kH});
    p.split_dim = 0;
    p.transpose = true;
    const int64_t per = 4 * kH / tp;
    p.segments.push_back({r * per, per, 0, true});
    p.local_extent = per;
    out.push_back(p);
  }
  {
    oslo::Placement p = base("mlp.c_fc.bias", {4 * kH});
    p.split_dim = 0;
    const int64_t per = 4 * kH / tp;
    p.segments.push_back({r * per, per, 0, true});
    p.local_extent = per;
    out.push_back(p);
  }
  for (const char* n : {"ln_f.weight", "pos.ids", "step"}) {
    oslo::Placement p = base(n, n == std::string("ln_f.weight") ? std::vector<int64_t>{kH}
                                : n == std::string("pos.ids")   ? std::vector<int64_t>{16}
                                                                : std::vector<int64_t>{});
    p.replica_owner = r == 0;
    out.push_back(p);
  }
  return out;
}

double value_of(const Def& d, size_t i, int seed) {
  if (!oslo::dtype_is_float(d.dtype)) return static_cast<double>((i * 7 + seed * 13) % 1000) - 300;
  // Multiples of 1/8 below 32 are exact in bf16 (8 significant bits) and f16.
  long k = static_cast<long>((i * 37 + static_cast<size_t>(seed) * 11 + d.name.size()) % 255) - 127;
  return static_cast<double>(k) / 8.0;
}

std::vector<Full> make_fulls(int seed) {
  std::vector<Full> out;
  for (const Def& d : model_defs()) {
    Full f;
    f.def = d;
    size_t n = 1;
    for (int64_t e : d.shape) n *= static_cast<size_t>(e);
    f.v.resize(n);
    for (size_t i = 0; i < n; ++i) f.v[i] = value_of(d, i, seed);
    const size_t es = oslo::dtype_size(d.dtype);
    f.bytes.resize(n * es);
    for (size_t i = 0; i < n; ++i) {
      char* p = &f.bytes[i * es];
      switch (d.dtype) {
        case OSLO_DTYPE_F32: {
          float x = static_cast<float>(f.v[i]);
          std::memcpy(p, &x, 4);
          break;
        }
        case OSLO_DTYPE_BF16: {
          uint16_t h = oslo::f32_to_bf16(static_cast<float>(f.v[i]));
          std::memcpy(p, &h, 2);
          break;
        }
        case OSLO_DTYPE_F16: {
          uint16_t h = oslo::f32_to_f16(static_cast<float>(f.v[i]));
          std::memcpy(p, &h, 2);
          break;
        }
        case OSLO_DTYPE_I32: {
          int32_t x = static_cast<int32_t>(f.v[i]);
          std::memcpy(p, &x, 4);
          break;
        }
        case OSLO_DTYPE_I64: {
          int64_t x = static_cast<int64_t>(f.v[i]);
          std::memcpy(p, &x, 8);
          break;
        }
        default: std::abort();
      }
    }
    out.push_back(std::move(f));
  }
  return out;
}

std::vector<uint64_t> u64(const std::vector<int64_t>& s) {
  return std::vector<uint64_t>(s.begin(), s.end());
}

void write_text(const std::string& path, const std::string& text) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  std::fwrite(text.data(), 1, text.size(), f);
  std::fclose(f);
}

std::string read_text(const std::string& path) {
  std::string out;
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return out;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  std::fclose(f);
  return out;
}

const char* kConfig =
    "{\"model_type\": \"fake\", \"n_embd\": 24, \"n_head\": 12, \"vocab_size\": 50}";

// An HF folder: one model.safetensors, or `files` files with an index.
void write_hf(const std::string& dir, const std::vector<Full>& fulls, int files) {
  oslo::fsutil::make_dirs(dir);
  std::map<std::string, std::string> meta{{"format", "pt"}};
  write_text(dir + "/config.json", kConfig);
  write_text(dir + "/tokenizer.json", "{\"version\": \"1.0\"}");
  if (files <= 1) {
    std::vector<st::WriteEntry> es;
    for (const Full& f : fulls)
      es.push_back({f.def.name, st::from_oslo(f.def.dtype), u64(f.def.shape), f.bytes.data()});
    st::write_file(dir + "/model.safetensors", es, &meta);
    return;
  }
  json wm = json::object();
  uint64_t total = 0;
  for (int k = 0; k < files; ++k) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", k + 1, files);
    std::vector<st::WriteEntry> es;
    for (size_t i = static_cast<size_t>(k); i < fulls.size(); i += static_cast<size_t>(files)) {
      const Full& f = fulls[i];
      es.push_back({f.def.name, st::from_oslo(f.def.dtype), u64(f.def.shape), f.bytes.data()});
      wm[f.def.name] = name;
      total += f.bytes.size();
    }
    st::write_file(dir + "/" + name, es, &meta);
  }
  json index = {{"metadata", {{"total_size", total}}}, {"weight_map", wm}};
  write_text(dir + "/model.safetensors.index.json", index.dump(2));
}

// ---------------------------------------------------------------------------
// Local tensors and their expected values
// ---------------------------------------------------------------------------

std::shared_ptr<oslo::Backend> cpu() {
  static std::shared_ptr<oslo::Backend> b = oslo::create_backend("cpu", oslo::BackendOptions{});
  return b;
}

oslo_dtype local_dtype(const Def& d, bool convert) {
  if (!convert) return d.dtype;
  switch (d.dtype) {  // another dtype of the same kind
    case OSLO_DTYPE_F32: return OSLO_DTYPE_BF16;
    case OSLO_DTYPE_BF16: return OSLO_DTYPE_F32;
    case OSLO_DTYPE_F16: return OSLO_DTYPE_F32;
    case OSLO_DTYPE_I64: return OSLO_DTYPE_I32;
    default: return OSLO_DTYPE_I64;
  }
}

std::vector<oslo::PlacedTensor> make_locals(const std::shared_ptr<oslo::Backend>& be, int tp, int r,
                                            bool convert) {
  std::vector<oslo::PlacedTensor> out;
  std::vector<Def> defs = model_defs();
  for (oslo::Placement& p : plan(tp, r)) {
    const Def* d = nullptr;
    for (const Def& x : defs)
      if (x.name == p.name) d = &x;
    oslo::PlacedTensor pt;
    pt.tensor = oslo::Tensor::empty_like_shape(be, local_dtype(*d, convert), p.local_shape());
    // Garbage, so that unwritten padding shows.
    be->fill(oslo::make_view(pt.tensor.data(), pt.tensor.dtype(), pt.tensor.shape()), 99.0);
    pt.placement = std::move(p);
    out.push_back(std::move(pt));
  }
  return out;
}

std::vector<double> to_f64(const oslo::Tensor& t) {
  std::vector<char> host(t.nbytes());
  if (!host.empty())
    t.backend().copy(host.data(), t.data(), host.size(), oslo::CopyKind::DeviceToHost);
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) {
    const char* p = host.data() + i * oslo::dtype_size(t.dtype());
    float f;
    switch (t.dtype()) {
      case OSLO_DTYPE_I32: {
        int32_t x;
        std::memcpy(&x, p, 4);
        v[i] = x;
        continue;
      }
      case OSLO_DTYPE_I64: {
        int64_t x;
        std::memcpy(&x, p, 8);
        v[i] = static_cast<double>(x);
        continue;
      }
      default: oslo::to_f32(t.dtype(), p, &f, 1); v[i] = f;
    }
  }
  return v;
}

// The expected local values (in the placement's local layout), computed
// from the full tensor with plain index arithmetic.
std::vector<double> expected_local(const Full& f, const oslo::Placement& p) {
  const std::vector<int64_t>& g = f.def.shape;
  std::vector<int64_t> ls = g;  // HF-layout local shape
  if (p.split_dim >= 0) ls[p.split_dim] = p.local_extent;
  size_t n = 1;
  for (int64_t e : ls) n *= static_cast<size_t>(e);
  std::vector<double> hf(n, 0.0);
  const int nd = static_cast<int>(g.size());
  std::vector<int64_t> idx(nd, 0);
  for (size_t li = 0; li < n; ++li) {
    // local multi-index
    size_t rem = li;
    for (int k = nd - 1; k >= 0; --k) {
      idx[k] = static_cast<int64_t>(rem % static_cast<size_t>(ls[k]));
      rem /= static_cast<size_t>(ls[k]);
    }
    std::vector<int64_t> gi = idx;
    bool real = true;
    if (p.split_dim >= 0) {
      real = false;
      for (const oslo::Segment& s : p.segments)
        if (idx[p.split_dim] >= s.local_start && idx[p.split_dim] < s.local_start + s.length) {
          gi[p.split_dim] = s.global_start + idx[p.split_dim] - s.local_start;
          real = true;
        }
    }
    if (!real) continue;
    size_t gflat = 0;
    for (int k = 0; k < nd; ++k)
      gflat = gflat * static_cast<size_t>(g[k]) + static_cast<size_t>(gi[k]);
    hf[li] = f.v[gflat];
  }
  if (!p.transpose) return hf;
  std::vector<double> t(n);
  for (int64_t a = 0; a < ls[0]; ++a)
    for (int64_t b = 0; b < ls[1]; ++b)
      t[static_cast<size_t>(b * ls[0] + a)] = hf[static_cast<size_t>(a * ls[1] + b)];
  return t;
}

// Empty if every local tensor equals its expectation.
std::string mismatch(const std::vector<oslo::PlacedTensor>& ls, const std::vector<Full>& fulls) {
  for (const oslo::PlacedTensor& pt : ls) {
    const Full* f = nullptr;
    for (const Full& x : fulls)
      if (x.def.name == pt.placement.name) f = &x;
    if (!f) return "no full tensor " + pt.placement.name;
    std::vector<double> got = to_f64(pt.tensor), want = expected_local(*f, pt.placement);
    if (got.size() != want.size()) return pt.placement.name + ": size differs";
    for (size_t i = 0; i < got.size(); ++i)
      if (got[i] != want[i])
        return pt.placement.name + ": element " + std::to_string(i) + " is " +
               std::to_string(got[i]) + ", expected " + std::to_string(want[i]);
  }
  return "";
}

// Bytes a rank must read: every segment it holds (owned or not), in the
// stored dtype, plus replicated tensors whole.
uint64_t share_bytes(int tp, int r) {
  uint64_t n = 0;
  std::vector<Def> defs = model_defs();
  for (const oslo::Placement& p : plan(tp, r)) {
    const Def* d = nullptr;
    for (const Def& x : defs)
      if (x.name == p.name) d = &x;
    uint64_t row = oslo::dtype_size(d->dtype);
    for (size_t k = 0; k < p.global_shape.size(); ++k)
      if (static_cast<int>(k) != p.split_dim) row *= static_cast<uint64_t>(p.global_shape[k]);
    if (p.split_dim < 0) {
      n += row;
      continue;
    }
    for (const oslo::Segment& s : p.segments) n += row * static_cast<uint64_t>(s.length);
  }
  return n;
}

bool has(const std::string& s, const std::string& sub) {
  return s.find(sub) != std::string::npos;
}

std::string fresh_dir() {
  return oslo_test::temp_dir("oslo-model-io");
}

// Loads `path` at every rank of `tp` and compares; returns the first error.
std::string load_and_compare(const std::string& path, int tp, const std::vector<Full>& fulls,
                             bool convert, std::vector<uint64_t>* bytes) {
  for (int r = 0; r < tp; ++r) {
    std::vector<oslo::PlacedTensor> ls = make_locals(cpu(), tp, r, convert);
    oslo::ModelLoadStats stats;
    std::string err;
    oslo_status s = status_of(
        [&] {
          oslo::WeightSource src(path);
          oslo::load_placed(src, ls, *cpu(), &stats);
        },
        &err);
    if (s != OSLO_OK) return "tp " + std::to_string(tp) + " rank " + std::to_string(r) + ": " + err;
    std::string m = mismatch(ls, fulls);
    if (!m.empty()) return "tp " + std::to_string(tp) + " rank " + std::to_string(r) + ": " + m;
    if (bytes) bytes->push_back(stats.bytes_read);
  }
  return "";
}

// ---------------------------------------------------------------------------
// Multi-rank saves: ranks as threads or processes, each with a real context
// ---------------------------------------------------------------------------

// Loads from `from` at TP `tp` (world = tp) and saves into `to`; returns the
// rank's error ("" if none). `bad_rank` gets a placement with a wrong name.
std::string rank_load_save(int rank, int world, const std::string& store, const std::string& from,
                           const std::string& to, int bad_rank, int tp) {
  if (tp == 0) tp = world;
  std::string cfg =
      "{\"rank\": " + std::to_string(rank) + ", \"world_size\": " + std::to_string(world) +
      ", \"tensor_parallel_size\": " + std::to_string(tp) + ", \"init_method\": \"file://" + store +
      "\", \"timeout_seconds\": 60, \"num_threads\": 1}";
  oslo_context* ctx = nullptr;
  if (oslo_context_create(cfg.c_str(), &ctx) != OSLO_OK)
    return std::string("context: ") + oslo_last_error();
  std::string err;
  {
    oslo::Context& c = *ctx->impl;
    const oslo::Topology& topo = c.topology();
    std::vector<oslo::PlacedTensor> ls = make_locals(c.backend_ptr(), tp, topo.tp_rank());
    if (rank == bad_rank) ls[0].placement.name = "no.such.tensor";
    oslo::Control& w = c.control(OSLO_GROUP_WORLD);
    status_of([&] { oslo::load_placed_collective(from, ls, c.backend(), w); }, &err);
    if (err.empty() && !to.empty()) {
      oslo::CheckpointLayout lay;
      lay.tp_rank = topo.tp_rank();
      lay.tp_size = tp;
      lay.dp_rank = topo.dp_rank();
      lay.dp_size = world / tp;
      lay.world_rank = rank;
      lay.world_size = world;
      status_of(
          [&] {
            oslo::WeightSource src(from);
            oslo::save_placed(to, ls, src.config_json(), src.extra_file_paths(), lay, w);
          },
          &err);
    }
  }
  oslo_context_destroy(ctx);
  return err;
}

std::vector<std::string> run_threads(int world, const std::function<std::string(int)>& fn) {
  std::vector<std::string> errs(world);
  std::vector<std::thread> ts;
  for (int r = 0; r < world; ++r) ts.emplace_back([&, r] { errs[r] = fn(r); });
  for (auto& t : ts) t.join();
  return errs;
}

// Each rank a process; returns each rank's error ("" if none).
std::vector<std::string> run_procs(int world, const std::string& dir,
                                   const std::function<std::string(int)>& fn) {
  std::vector<pid_t> pids;
  std::fflush(nullptr);
  for (int r = 0; r < world; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      std::string e = fn(r);
      write_text(dir + "/err." + std::to_string(r), e);
      std::fflush(nullptr);
      _exit(e.empty() ? 0 : 1);
    }
    pids.push_back(pid);
  }
  std::vector<std::string> errs(world);
  for (int r = 0; r < world; ++r) {
    int status = 0;
    waitpid(pids[r], &status, 0);
    errs[r] = read_text(dir + "/err." + std::to_string(r));
    if (!WIFEXITED(status) || (WEXITSTATUS(status) != 0 && errs[r].empty()))
      errs[r] = "process died, status " + std::to_string(status);
  }
  return errs;
}

void assert_all_ok(const std::vector<std::string>& errs) {
  for (size_t r = 0; r < errs.size(); ++r)
    if (!errs[r].empty()) std::fprintf(stderr, "rank %zu: %s\n", r, errs[r].c_str());
  for (const std::string& e : errs) assert_true(e.empty());
}

void assert_ok(const std::string& err) {
  if (!err.empty()) std::fprintf(stderr, "%s\n", err.c_str());
  assert_true(err.empty());
}

}  // namespace mio
