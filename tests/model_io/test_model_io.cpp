// Model I/O over placements: loading each rank's slices from Hugging Face
// folders (single file and sharded index) and oslo checkpoints, saving a
// parallel model (ranks as threads and as processes), merging into a Hugging
// Face folder, resharding offline, inspecting, bytes read per rank, and
// hostile inputs. A fake "model" of a few tensors covers the cases real
// models have: a fused [in, 3H] tensor split per q/k/v and per head and held
// transposed, grouped-query KV heads replicated on two ranks, a padded
// vocabulary, a transposed row-parallel weight, a replicated norm, integer
// tensors, and bf16/f16/f32. Every loaded tensor is compared with the
// expectation computed independently from the full tensors (in f64).
//
// Usage: test_model_io                 run the cmocka suite
//        test_model_io --emit DIR      write DIR/hf (original) and DIR/merged
//                                      (the original saved at TP 2 and merged
//                                      with a small max shard size), for the
//                                      Python check
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/capi/handles.hpp"
#include "core/checkpoint/fs_util.hpp"
#include "core/checkpoint/model_checkpoint.hpp"
#include "core/checkpoint/placement.hpp"
#include "core/checkpoint/safetensors.hpp"
#include "core/checkpoint/weight_source.hpp"
#include "core/comm/self_communicator.hpp"
#include "core/common/dtype.hpp"
#include "core/common/error.hpp"
#include "core/context/context.hpp"
#include "core/tensor/tensor.hpp"
#include "tests/common/temp_dir.hpp"

// cmocka last: it defines a macro named fail.
// clang-format off
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
extern "C" {
#include <cmocka.h>
}
// clang-format on

namespace {

namespace st = oslo::safetensors;
using json = nlohmann::json;

// ---------------------------------------------------------------------------
// The fake model
// ---------------------------------------------------------------------------

constexpr int kHeads = 12, kHeadDim = 2, kH = kHeads * kHeadDim, kKv = 2, kVocab = 50;

struct Def {
  std::string name;
  oslo_dtype dtype;
  std::vector<int64_t> shape;
};

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

// A full tensor: its values (exact in its dtype) and its bytes.
struct Full {
  Def def;
  std::vector<double> v;
  std::string bytes;
};

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
                                            bool convert = false) {
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

template <typename Fn>
oslo_status status_of(Fn&& fn, std::string* msg = nullptr) {
  try {
    fn();
  } catch (const oslo::Error& e) {
    if (msg) *msg = e.what();
    return e.status();
  }
  return OSLO_OK;
}

bool has(const std::string& s, const std::string& sub) {
  return s.find(sub) != std::string::npos;
}

std::string fresh_dir() {
  return oslo_test::temp_dir("oslo-model-io");
}

// Loads `path` at every rank of `tp` and compares; returns the first error.
std::string load_and_compare(const std::string& path, int tp, const std::vector<Full>& fulls,
                             bool convert = false, std::vector<uint64_t>* bytes = nullptr) {
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
                           const std::string& to, int bad_rank = -1, int tp = 0) {
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

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

void test_local_shape(void**) {
  oslo::Placement p;
  p.global_shape = {8, 6};
  p.split_dim = 1;
  p.local_extent = 4;
  assert_true((p.local_shape() == std::vector<int64_t>{8, 4}));
  p.transpose = true;
  assert_true((p.local_shape() == std::vector<int64_t>{4, 8}));
  p.split_dim = -1;
  assert_true((p.local_shape() == std::vector<int64_t>{6, 8}));
}

// HF folders (single file and sharded index) at TP 1..4: every rank's
// slices equal the full tensors', and each rank reads exactly its share.
void test_load_hf(void**) {
  const std::vector<Full> fulls = make_fulls(1);
  const std::string dir = fresh_dir();
  uint64_t total = 0;
  for (const Full& f : fulls) total += f.bytes.size();
  for (int files : {1, 3}) {
    const std::string hf = dir + "/hf" + std::to_string(files);
    write_hf(hf, fulls, files);
    oslo::WeightSource src(hf);
    assert_int_equal(src.kind() == oslo::SourceKind::HfSingle ? 1 : 3, files);
    assert_int_equal(src.tensors().size(), fulls.size());
    assert_true(has(src.config_json(), "\"fake\""));
    assert_int_equal(src.extra_files().size(), 1);
    assert_string_equal(src.extra_files()[0].c_str(), "tokenizer.json");
    for (int tp = 1; tp <= 4; ++tp) {
      std::vector<uint64_t> bytes;
      assert_ok(load_and_compare(hf, tp, fulls, false, &bytes));
      uint64_t sum = 0;
      for (int r = 0; r < tp; ++r) {
        assert_int_equal(bytes[r], share_bytes(tp, r));
        sum += bytes[r];
      }
      if (files == 1)
        std::printf(
            "hf load tp=%d: bytes read per rank %s of %llu total (sum %llu)\n", tp,
            [&] {
              std::string s;
              for (uint64_t b : bytes) s += std::to_string(b) + " ";
              return s;
            }()
                .c_str(),
            static_cast<unsigned long long>(total), static_cast<unsigned long long>(sum));
    }
    // Loading into other dtypes (bf16 <-> f32, f16 -> f32, i64 -> i32).
    assert_ok(load_and_compare(hf, 2, fulls, true));
  }
  // The mmap reader gives the same bytes.
  {
    std::vector<oslo::PlacedTensor> ls = make_locals(cpu(), 3, 1);
    oslo::WeightSource src(dir + "/hf3", oslo::ReadMode::Mmap);
    oslo::load_placed(src, ls, *cpu());
    assert_ok(mismatch(ls, fulls));
  }
  // A single .safetensors file.
  assert_ok(load_and_compare(dir + "/hf1/model.safetensors", 4, fulls));
  oslo_test::remove_tree(dir);
}

// Save at TP 2 (threads, then processes), load at TP 4 and 1, merge, reshard.
void save_load_merge(bool procs) {
  const std::vector<Full> fulls = make_fulls(2);
  const std::string dir = fresh_dir();
  const std::string hf = dir + "/hf", ck = dir + "/ckpt";
  write_hf(hf, fulls, 2);
  auto body = [&](int r) { return rank_load_save(r, 2, dir + "/store", hf, ck); };
  assert_all_ok(procs ? run_procs(2, dir, body) : run_threads(2, body));

  // The manifest: version 2, layout, config, zero-padded names, checksums.
  json m = json::parse(read_text(ck + "/oslo_checkpoint.json"));
  assert_int_equal(m["version"].get<int>(), 2);
  assert_int_equal(m["tensor_parallel_size"].get<int>(), 2);
  assert_string_equal(m["model_config"]["model_type"].get<std::string>().c_str(), "fake");
  assert_true(m["extra_files"] == json::array({"tokenizer.json"}));
  assert_true(has(m["files"][1].get<std::string>(), "-tp01-pp00.safetensors"));
  const json& attn = m["tensors"]["attn.c_attn.weight"];
  assert_int_equal(attn["split_dim"].get<int>(), 1);
  assert_int_equal(attn["shards"].size(), 3 * kHeads);  // one per part and head
  assert_true(has(attn["shards"][1]["key"].get<std::string>(), "@"));
  assert_int_equal(m["tensors"]["attn.k_proj.weight"]["shards"].size(), 2);
  assert_int_equal(
      m["tensors"]["attn.c_attn.weight"]["shards"][0]["crc32c"].get<std::string>().size(), 8);
  assert_true(read_text(ck + "/tokenizer.json") == read_text(hf + "/tokenizer.json"));

  for (int tp : {1, 2, 3}) assert_ok(load_and_compare(ck, tp, fulls));
  {  // at TP 4 each rank reads exactly its share of the TP 2 checkpoint
    std::vector<uint64_t> b4;
    assert_ok(load_and_compare(ck, 4, fulls, false, &b4));
    for (int r = 0; r < 4; ++r) assert_int_equal(b4[r], share_bytes(4, r));
  }

  // Merge: tensors byte-equal to the original HF folder's.
  const std::string merged = dir + "/merged";
  oslo::merge(ck, merged);
  {
    st::Reader rd(merged + "/model.safetensors");
    assert_int_equal(rd.tensors().size(), fulls.size());
    for (const Full& f : fulls) {
      const st::TensorInfo& ti = rd.at(f.def.name);
      std::string b(ti.nbytes(), '\0');
      rd.read(ti, 0, ti.nbytes(), &b[0]);
      assert_true(b == f.bytes);
      assert_true(ti.shape == u64(f.def.shape));
    }
    assert_true(rd.header().metadata.at("format") == "pt");
    assert_true(json::parse(read_text(merged + "/config.json")) == json::parse(kConfig));
    assert_true(read_text(merged + "/tokenizer.json") == read_text(hf + "/tokenizer.json"));
  }
  // Refuses a non-empty destination; replaces it when asked.
  std::string err;
  assert_int_equal(status_of([&] { oslo::merge(ck, merged); }, &err), OSLO_ERR_INVALID_ARGUMENT);
  assert_true(has(err, "not empty"));
  oslo::MergeOptions mo;
  mo.overwrite = true;
  mo.max_shard_bytes = 2000;
  uint64_t last_done = 0, last_total = 1;
  mo.progress = [&](uint64_t d, uint64_t t) {
    last_done = d;
    last_total = t;
  };
  oslo::merge(ck, merged, mo);
  assert_true(last_done == last_total);
  {
    json idx = json::parse(read_text(merged + "/model.safetensors.index.json"));
    uint64_t total = 0;
    for (const Full& f : fulls) total += f.bytes.size();
    assert_int_equal(idx["metadata"]["total_size"].get<uint64_t>(), total);
    assert_int_equal(idx["weight_map"].size(), fulls.size());
    std::set<std::string> files;
    for (auto it = idx["weight_map"].begin(); it != idx["weight_map"].end(); ++it)
      files.insert(it.value().get<std::string>());
    assert_true(files.size() > 1);
    char want[64];
    std::snprintf(want, sizeof want, "model-00001-of-%05zu.safetensors", files.size());
    assert_true(files.count(want));
    assert_false(oslo::fsutil::exists(merged + "/model.safetensors"));
    assert_ok(load_and_compare(merged, 3, fulls));
  }

  // Reshard 2 -> 4: same format; loads equal at 4 and 1.
  const std::string r4 = dir + "/r4";
  oslo::reshard(ck, r4, 4, plan);
  json m4 = json::parse(read_text(r4 + "/oslo_checkpoint.json"));
  assert_int_equal(m4["tensor_parallel_size"].get<int>(), 4);
  assert_int_equal(m4["files"].size(), 4);
  assert_true(m4["model_config"] == m["model_config"]);
  assert_ok(load_and_compare(r4, 4, fulls));
  assert_ok(load_and_compare(r4, 1, fulls));
  // Resharding in place (back to 2), with a dtype conversion.
  oslo::ReshardOptions ro;
  ro.convert = true;
  ro.dtype = OSLO_DTYPE_F32;
  oslo::reshard(r4, r4, 2, plan, ro);
  assert_ok(load_and_compare(r4, 2, fulls));
  assert_int_equal(oslo::fsutil::list_dir(r4).size(), 2 + 2);  // manifest, tokenizer, 2 shards
  oslo_test::remove_tree(dir);
}

void test_save_threads(void**) {
  save_load_merge(false);
}
void test_save_procs(void**) {
  save_load_merge(true);
}

// A rank that fails makes every rank fail with its status and message.
void test_collective_failure(void**) {
  const std::vector<Full> fulls = make_fulls(3);
  const std::string dir = fresh_dir();
  write_hf(dir + "/hf", fulls, 1);
  std::vector<std::string> errs = run_threads(
      2, [&](int r) { return rank_load_save(r, 2, dir + "/store", dir + "/hf", "", 1); });
  for (const std::string& e : errs) {
    assert_true(has(e, "world rank 1"));
    assert_true(has(e, "no.such.tensor"));
  }
  oslo_test::remove_tree(dir);
}

// World 4 = TP 2 x DP 2: only data-parallel rank 0 writes.
void test_save_dp(void**) {
  const std::vector<Full> fulls = make_fulls(8);
  const std::string dir = fresh_dir();
  write_hf(dir + "/hf", fulls, 1);
  assert_all_ok(run_threads(4, [&](int r) {
    return rank_load_save(r, 4, dir + "/store", dir + "/hf", dir + "/ck", -1, 2);
  }));
  json m = json::parse(read_text(dir + "/ck/oslo_checkpoint.json"));
  assert_int_equal(m["data_parallel_size"].get<int>(), 2);
  assert_int_equal(m["files"].size(), 2);
  assert_int_equal(oslo::fsutil::list_dir(dir + "/ck").size(), 4);
  assert_ok(load_and_compare(dir + "/ck", 3, fulls));
  oslo_test::remove_tree(dir);
}

// A save killed at any step leaves the previous checkpoint loadable (or the
// new one, once the manifest is renamed); the next save removes the debris.
const char* g_crash_point = "";
std::string g_crash_part;
void crash_hook(const char* point, const std::string& path) {
  if (std::strcmp(point, g_crash_point) == 0 && has(path, g_crash_part)) _exit(42);
}

void save_single(const std::string& dir, const std::string& hf) {
  std::vector<oslo::PlacedTensor> ls = make_locals(cpu(), 1, 0);
  oslo::WeightSource src(hf);
  oslo::load_placed(src, ls, *cpu());
  oslo::Control self(std::make_shared<oslo::SelfCommunicator>());
  oslo::save_placed(dir, ls, src.config_json(), src.extra_file_paths(), oslo::CheckpointLayout{},
                    self);
}

void test_crash_safety(void**) {
  const std::string dir = fresh_dir();
  std::vector<std::vector<Full>> v = {make_fulls(11), make_fulls(12), make_fulls(13)};
  for (int i = 0; i < 3; ++i) write_hf(dir + "/hf" + std::to_string(i), v[i], 1);
  const std::string ck = dir + "/ck";
  struct Crash {
    const char* point;
    const char* part;
    bool new_visible;
  };
  const Crash crashes[] = {
      {"atomic.before_rename", ".safetensors", false},
      {"atomic.after_rename", ".safetensors", false},
      {"save.after_shard_write", "", false},
      {"atomic.before_rename", "tokenizer.json", false},
      {"save.before_manifest", "", false},
      {"atomic.before_rename", "oslo_checkpoint.json", false},
      {"atomic.after_rename", "oslo_checkpoint.json", true},
      {"save.after_manifest", "", true},
      {"save.cleanup_step", "", true},
  };
  for (const Crash& c : crashes) {
    oslo_test::remove_tree(ck);
    save_single(ck, dir + "/hf0");
    std::fflush(nullptr);
    pid_t pid = fork();
    if (pid == 0) {
      g_crash_point = c.point;
      g_crash_part = c.part;
      oslo::fsutil::set_fault_hook(crash_hook);
      try {
        save_single(ck, dir + "/hf1");
      } catch (...) {
        _exit(1);
      }
      _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 42)
      std::fprintf(stderr, "crash at %s (%s): status %d\n", c.point, c.part, status);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 42);
    assert_ok(load_and_compare(ck, 2, c.new_visible ? v[1] : v[0]));
    save_single(ck, dir + "/hf2");
    assert_ok(load_and_compare(ck, 3, v[2]));
    json m = json::parse(read_text(ck + "/oslo_checkpoint.json"));
    std::vector<std::string> want = {"oslo_checkpoint.json", m["files"][0], "tokenizer.json"};
    std::sort(want.begin(), want.end());
    std::vector<std::string> got = oslo::fsutil::list_dir(ck);
    std::sort(got.begin(), got.end());
    assert_true(got == want);
  }
  oslo_test::remove_tree(dir);
}

// Inspect: text and JSON.
void test_inspect(void**) {
  const std::vector<Full> fulls = make_fulls(4);
  const std::string dir = fresh_dir();
  write_hf(dir + "/hf", fulls, 3);
  oslo::Inspection in = oslo::inspect(dir + "/hf");
  assert_string_equal(in.kind.c_str(), "hf-sharded");
  assert_int_equal(in.tensors.size(), fulls.size());
  assert_int_equal(in.files.size(), 3);
  std::string text = oslo::render_text(in);
  assert_true(has(text, "attn.c_attn.weight"));
  assert_true(has(text, "model_type=\"fake\""));
  json j = json::parse(oslo::render_json(in));
  assert_string_equal(j["format"].get<std::string>().c_str(), "hf-sharded");
  assert_int_equal(j["tensors"].size(), fulls.size());
  // An oslo checkpoint written by reshard.
  oslo::reshard(dir + "/hf", dir + "/ck", 2, plan);
  in = oslo::inspect(dir + "/ck");
  text = oslo::render_text(in);
  std::printf("%s", text.c_str());
  assert_true(has(text, "tp 2, pp 1, dp 1"));
  j = json::parse(oslo::render_json(in));
  assert_int_equal(j["layout"]["tensor_parallel_size"].get<int>(), 2);
  assert_int_equal(j["manifest_version"].get<int>(), 2);
  oslo_test::remove_tree(dir);
}

// Reading a version-1 checkpoint (save_checkpoint's format).
void test_reads_v1(void**) {
  const std::vector<Full> fulls = make_fulls(5);
  const std::string dir = fresh_dir();
  write_hf(dir + "/hf", fulls, 1);
  oslo::reshard(dir + "/hf", dir + "/ck", 2, plan);
  // Rewrite the manifest as version 1 (drop the version-2 fields).
  json m = json::parse(read_text(dir + "/ck/oslo_checkpoint.json"));
  m["version"] = 1;
  m.erase("model_config");
  m.erase("extra_files");
  for (auto& t : m["tensors"])
    for (auto& s : t["shards"]) {
      s.erase("bytes");
      s.erase("crc32c");
    }
  write_text(dir + "/ck/oslo_checkpoint.json", m.dump());
  oslo::WeightSource src(dir + "/ck");
  assert_int_equal(src.manifest_version(), 1);
  assert_ok(load_and_compare(dir + "/ck", 3, fulls));
  oslo_test::remove_tree(dir);
}

// Merge (and save, reshard) carry the model's own files, the ones
// oslo::model_file_names() lists, and nothing else the folder holds.
void test_merge_model_files(void**) {
  const std::vector<Full> fulls = make_fulls(8);
  const std::string dir = fresh_dir();
  const std::string hf = dir + "/hf";
  write_hf(hf, fulls, 1);
  const std::vector<std::string> model_files = {"generation_config.json",
                                                "tokenizer_config.json",
                                                "special_tokens_map.json",
                                                "added_tokens.json",
                                                "tokenizer.model",
                                                "vocab.txt",
                                                "vocab.json",
                                                "merges.txt"};
  for (const std::string& f : model_files) write_text(hf + "/" + f, "model file " + f + "\n");
  // Not the model's: notes, a training log, an optimizer state, a script.
  const std::vector<std::string> strays = {"notes.txt", "trainer_state.json", "optimizer.pt",
                                           "run.sh"};
  for (const std::string& f : strays) write_text(hf + "/" + f, "stray " + f + "\n");
  const std::vector<std::string> listed = oslo::model_file_names();
  for (const std::string& f : model_files)
    assert_true(std::find(listed.begin(), listed.end(), f) != listed.end());
  std::vector<std::string> want = model_files;
  want.push_back("tokenizer.json");
  std::sort(want.begin(), want.end());
  {
    oslo::WeightSource src(hf);
    assert_true(src.extra_files() == want);
  }
  auto check = [&](const std::string& out, bool hf_folder) {
    for (const std::string& f : want)
      assert_true(read_text(out + "/" + f) == read_text(hf + "/" + f));
    for (const std::string& f : strays) assert_false(oslo::fsutil::exists(out + "/" + f));
    if (hf_folder)
      assert_true(json::parse(read_text(out + "/config.json")) == json::parse(kConfig));
  };
  oslo::merge(hf, dir + "/m1");  // an HF folder rewritten
  check(dir + "/m1", true);
  oslo::reshard(hf, dir + "/ck", 2, plan);  // through a checkpoint
  check(dir + "/ck", false);
  assert_true(json::parse(read_text(dir + "/ck/oslo_checkpoint.json"))["extra_files"] ==
              json(want));
  oslo::merge(dir + "/ck", dir + "/m2");
  check(dir + "/m2", true);
  assert_ok(load_and_compare(dir + "/m2", 2, fulls));
  oslo_test::remove_tree(dir);
}

// Corrupt, truncated and hostile inputs are named errors.
void test_hostile(void**) {
  const std::vector<Full> fulls = make_fulls(6);
  const std::string dir = fresh_dir();
  auto expect = [&](const std::string& path, oslo_status want, const std::string& part) {
    std::string err;
    oslo_status s = status_of(
        [&] {
          oslo::WeightSource src(path);
          std::vector<oslo::PlacedTensor> ls = make_locals(cpu(), 2, 0);
          oslo::load_placed(src, ls, *cpu());
        },
        &err);
    if (s != want || !has(err, part))
      std::fprintf(stderr, "%s: got %d '%s', want %d '%s'\n", path.c_str(), s, err.c_str(), want,
                   part.c_str());
    assert_int_equal(s, want);
    assert_true(has(err, part));
  };
  int n = 0;
  auto fresh_hf = [&](int files) {
    std::string d = dir + "/h" + std::to_string(n++);
    write_hf(d, fulls, files);
    return d;
  };
  const std::string idx = "/model.safetensors.index.json";
  {  // bad index JSON
    std::string d = fresh_hf(3);
    write_text(d + idx, "{\"weight_map\": {");
    expect(d, OSLO_ERR_FORMAT, "invalid JSON");
    write_text(d + idx, "[1, 2]");
    expect(d, OSLO_ERR_FORMAT, "JSON object");
  }
  {  // weight_map pointing outside the folder
    std::string d = fresh_hf(3);
    json j = json::parse(read_text(d + idx));
    j["weight_map"]["wte.weight"] = "../h0/model-00001-of-00003.safetensors";
    write_text(d + idx, j.dump());
    expect(d, OSLO_ERR_FORMAT, "not a plain file name");
  }
  {  // missing shard file
    std::string d = fresh_hf(3);
    ::unlink((d + "/model-00002-of-00003.safetensors").c_str());
    expect(d, OSLO_ERR_IO, "does not exist");
  }
  {  // a tensor in two files
    std::string d = fresh_hf(3);
    const Full& f = fulls[1];
    std::vector<st::WriteEntry> es = {
        {f.def.name, st::from_oslo(f.def.dtype), u64(f.def.shape), f.bytes.data()}};
    st::write_file(d + "/extra.safetensors", es);
    json j = json::parse(read_text(d + idx));
    j["weight_map"]["zz.other"] = "extra.safetensors";
    write_text(d + idx, j.dump());
    expect(d, OSLO_ERR_FORMAT, "is in two files");
  }
  {  // a tensor of the weight_map missing from its file
    std::string d = fresh_hf(3);
    json j = json::parse(read_text(d + idx));
    j["weight_map"]["ghost.weight"] = "model-00001-of-00003.safetensors";
    write_text(d + idx, j.dump());
    expect(d, OSLO_ERR_FORMAT, "ghost.weight");
  }
  {  // a truncated safetensors file
    std::string d = fresh_hf(1);
    std::string b = read_text(d + "/model.safetensors");
    write_text(d + "/model.safetensors", b.substr(0, b.size() - 100));
    expect(d, OSLO_ERR_FORMAT, "truncated");
    write_text(d + "/model.safetensors", b.substr(0, 5));
    expect(d, OSLO_ERR_FORMAT, "too short");
  }
  {  // a tensor the model needs is missing: named, with the file
    std::string d = fresh_hf(1);
    std::vector<Full> less(fulls.begin() + 1, fulls.end());
    write_hf(d, less, 1);
    expect(d, OSLO_ERR_FORMAT, "'wte.weight' is not in");
    expect(d, OSLO_ERR_FORMAT, "model.safetensors");
  }
  {  // wrong global shape: both shapes named
    std::string d = fresh_hf(1);
    std::vector<Full> other = fulls;
    other[5].def.shape = {kH + 1};
    other[5].v.resize(kH + 1);
    other[5].bytes.resize((kH + 1) * 4);
    write_hf(d, other, 1);
    expect(d, OSLO_ERR_SHAPE, "[25]");
    expect(d, OSLO_ERR_SHAPE, "[24]");
  }
  // Oslo checkpoints.
  const std::string ck0 = dir + "/ck0";
  oslo::reshard(fresh_hf(1), ck0, 2, plan);
  auto fresh_ck = [&]() {
    std::string d = dir + "/c" + std::to_string(n++);
    std::string cmd = "cp -r '" + ck0 + "' '" + d + "'";
    assert_int_equal(std::system(cmd.c_str()), 0);
    return d;
  };
  const std::string man = "/oslo_checkpoint.json";
  {  // checksum mismatch: one byte of a piece flipped
    std::string d = fresh_ck();
    json m = json::parse(read_text(d + man));
    const std::string file = m["tensors"]["mlp.c_proj.weight"]["shards"][0]["file"];
    const std::string key = m["tensors"]["mlp.c_proj.weight"]["shards"][0]["key"];
    std::string b = read_text(d + "/" + file);
    st::Header h = st::parse_buffer(b.data(), b.size(), "x");
    const st::TensorInfo* ti = h.find(key);
    b[h.data_start() + ti->begin + 5] ^= 0x40;
    write_text(d + "/" + file, b);
    expect(d, OSLO_ERR_FORMAT, "checksum mismatch");
    std::string err;
    assert_int_equal(status_of([&] { oslo::merge(d, d + ".merged"); }, &err), OSLO_ERR_FORMAT);
    assert_true(has(err, "checksum mismatch"));
    assert_false(oslo::fsutil::exists(d + ".merged"));
  }
  {  // manifest tiling with a hole, then with an overlap
    std::string d = fresh_ck();
    json m = json::parse(read_text(d + man));
    json good = m;
    m["tensors"]["mlp.c_fc.bias"]["shards"][1]["offset"] = 49;
    write_text(d + man, m.dump());
    expect(d, OSLO_ERR_FORMAT, "are in no shard");
    m = good;
    m["tensors"]["mlp.c_fc.bias"]["shards"][1]["offset"] = 47;
    write_text(d + man, m.dump());
    expect(d, OSLO_ERR_FORMAT, "overlap");
    m = good;
    m["tensors"]["ln_f.weight"]["shards"][0]["file"] = "../x.safetensors";
    write_text(d + man, m.dump());
    expect(d, OSLO_ERR_FORMAT, "not a plain file name");
    m = good;
    m["version"] = 3;
    write_text(d + man, m.dump());
    expect(d, OSLO_ERR_FORMAT, "version 3");
    m = good;
    m["tensors"]["ln_f.weight"]["shards"][0]["bytes"] = 4;
    write_text(d + man, m.dump());
    expect(d, OSLO_ERR_FORMAT, "records 4 bytes");
    write_text(d + man, "{\"format\": \"oslo-checkpoint\", ");
    expect(d, OSLO_ERR_FORMAT, "invalid JSON");
  }
  {  // a shard file missing, and one whose key disagrees with the manifest
    std::string d = fresh_ck();
    json m = json::parse(read_text(d + man));
    ::unlink((d + "/" + m["files"][0].get<std::string>()).c_str());
    expect(d, OSLO_ERR_IO, m["files"][0].get<std::string>());
    d = fresh_ck();
    m["tensors"]["ln_f.weight"]["shards"][0]["key"] = "pos.ids";
    write_text(d + man, m.dump());
    expect(d, OSLO_ERR_FORMAT, "but the manifest expects");
  }
  {  // not a checkpoint at all
    std::string d = dir + "/empty";
    oslo::fsutil::make_dirs(d);
    expect(d, OSLO_ERR_IO, "no oslo_checkpoint.json");
    expect(dir + "/nope", OSLO_ERR_IO, "does not exist");
  }
  {  // a placement whose segment leaves the tensor
    std::string err;
    oslo_status s = status_of(
        [&] {
          oslo::WeightSource src(ck0);
          std::vector<oslo::PlacedTensor> ls = make_locals(cpu(), 2, 0);
          ls[4].placement.segments[0].global_start = 90;
          oslo::load_placed(src, ls, *cpu());
        },
        &err);
    assert_int_equal(s, OSLO_ERR_INVALID_ARGUMENT);
    assert_true(has(err, "outside the global extent"));
  }
  {  // saving placements that do not tile: holes and two owners
    std::string err;
    auto holes = [](int tp, int r) {
      std::vector<oslo::Placement> p = plan(tp, r);
      if (r == 1) p[4].segments[0].owner = false;
      return p;
    };
    assert_int_equal(status_of([&] { oslo::reshard(ck0, dir + "/bad", 2, holes); }, &err),
                     OSLO_ERR_INVALID_ARGUMENT);
    assert_true(has(err, "cover rows 0..48 of 96"));
    auto twice = [](int tp, int r) {
      std::vector<oslo::Placement> p = plan(tp, r);
      p[2].segments[0].owner = true;
      return p;
    };
    assert_int_equal(status_of([&] { oslo::reshard(ck0, dir + "/bad", 4, twice); }, &err),
                     OSLO_ERR_INVALID_ARGUMENT);
    assert_true(has(err, "two owners"));
    assert_false(oslo::fsutil::exists(dir + "/bad/oslo_checkpoint.json"));
  }
  {  // random mutations of a manifest and of an index: errors, never a crash
    std::mt19937 rng(1234);
    const std::string good_man = read_text(ck0 + man);
    const std::string hfd = fresh_hf(3);
    const std::string good_idx = read_text(hfd + idx);
    const std::string chars = "0123456789-\"{}[],:@./ abcxyz";
    int errors = 0;
    for (int i = 0; i < 400; ++i) {
      const bool m = i % 2 == 0;
      std::string text = m ? good_man : good_idx;
      for (int k = 0; k < 1 + i % 3; ++k) text[rng() % text.size()] = chars[rng() % chars.size()];
      const std::string path = m ? ck0 : hfd;
      write_text(path + (m ? man : idx), text);
      oslo_status s = status_of([&] {
        oslo::WeightSource src(path);
        std::vector<oslo::PlacedTensor> ls = make_locals(cpu(), 2, static_cast<int>(rng() % 2));
        oslo::load_placed(src, ls, *cpu());
      });
      errors += s != OSLO_OK;
    }
    write_text(ck0 + man, good_man);
    std::printf("mutations: %d of 400 rejected, the rest still load\n", errors);
    assert_true(errors > 100);
  }
  oslo_test::remove_tree(dir);
}

int emit(const std::string& dir) {
  const std::vector<Full> fulls = make_fulls(7);
  oslo::fsutil::make_dirs(dir);
  write_hf(dir + "/hf", fulls, 1);
  oslo::reshard(dir + "/hf", dir + "/ck", 2, plan);
  oslo::MergeOptions mo;
  mo.max_shard_bytes = 3000;
  oslo::merge(dir + "/ck", dir + "/merged", mo);
  oslo::merge(dir + "/ck", dir + "/merged1");
  return 0;
}

// Peak resident memory of a load with each read mode: a child process per
// mode loads rank 0's half (TP 2) of a `mb` MiB f32 tensor; prints the peak
// resident set (VmHWM) above the baseline (the local tensor allocated and
// touched). Used to choose the default read mode (FORMAT.md, "Reading"), and
// as a regression test: fails if the pread peak exceeds the staging buffer
// by more than 16 MiB, or if either mode's resident set stays more than
// 8 MiB above the baseline after the load. DIR "-": a temporary folder.
long status_kib(const char* field) {
  std::string s = read_text("/proc/self/status");
  size_t p = s.find(field);
  return p == std::string::npos ? -1 : std::atol(s.c_str() + p + std::strlen(field) + 1);
}

int rss_bench(std::string dir, int mb) {
  const bool temp = dir == "-";
  if (temp) dir = fresh_dir();
  oslo::fsutil::make_dirs(dir + "/hf");
  int failures = 0;
  const int64_t rows = int64_t{mb} * 256, cols = 1024;
  {
    std::vector<float> v(static_cast<size_t>(rows * cols));
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 1000);
    st::write_file(dir + "/hf/model.safetensors",
                   {{"w", st::Dtype::F32, {uint64_t(rows), uint64_t(cols)}, v.data()}});
  }
  for (oslo::ReadMode mode : {oslo::ReadMode::Pread, oslo::ReadMode::Mmap}) {
    std::fflush(nullptr);
    pid_t pid = fork();
    if (pid == 0) {
      std::vector<oslo::PlacedTensor> ls(1);
      ls[0].placement.name = "w";
      ls[0].placement.global_shape = {rows, cols};
      ls[0].placement.split_dim = 0;
      ls[0].placement.local_extent = rows / 2;
      ls[0].placement.segments.push_back({0, rows / 2, 0, true});
      ls[0].tensor = oslo::Tensor::zeros(cpu(), OSLO_DTYPE_F32, {rows / 2, cols});
      cpu()->fill(oslo::make_view(ls[0].tensor.data(), OSLO_DTYPE_F32, {rows / 2, cols}), 1.0);
      const long base = status_kib("VmRSS:");
      oslo::WeightSource src(dir + "/hf", mode);
      oslo::ModelLoadStats stats;
      const auto t0 = std::chrono::steady_clock::now();
      oslo::load_placed(src, ls, *cpu(), &stats);
      const double sec =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const long after = status_kib("VmRSS:");
      src.release();
      std::printf(
          "%s: file %d MiB, read %llu MiB; peak RSS above baseline %ld MiB, RSS after "
          "the load %ld MiB above baseline (staging %llu MiB); %.2f GB/s (warm page cache)\n",
          mode == oslo::ReadMode::Pread ? "pread" : "mmap ", mb,
          static_cast<unsigned long long>(stats.bytes_read >> 20),
          (status_kib("VmHWM:") - base) / 1024, (after - base) / 1024,
          static_cast<unsigned long long>(stats.staging_bytes >> 20),
          static_cast<double>(stats.bytes_read) / sec / 1e9);
      const long peak_mib = (status_kib("VmHWM:") - base) / 1024;
      const long limit = static_cast<long>(stats.staging_bytes >> 20) + 16;
      bool ok = (after - base) / 1024 <= 8;
      if (mode == oslo::ReadMode::Pread) ok = ok && peak_mib <= limit;
#if defined(__SANITIZE_ADDRESS__)
      // ASan keeps freed memory (the staging buffer) in quarantine: the
      // numbers are printed, not checked.
      ok = true;
#endif
      if (!ok) std::printf("FAIL: resident set above the limits\n");
      std::fflush(nullptr);
      _exit(ok ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    failures += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  if (temp) oslo_test::remove_tree(dir);
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::string(argv[1]) == "--rss") return rss_bench(argv[2], std::atoi(argv[3]));
  if (argc == 3 && std::string(argv[1]) == "--emit") {
    try {
      return emit(argv[2]);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s\n", e.what());
      return 1;
    }
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_local_shape),        cmocka_unit_test(test_load_hf),
      cmocka_unit_test(test_save_threads),       cmocka_unit_test(test_save_procs),
      cmocka_unit_test(test_collective_failure), cmocka_unit_test(test_save_dp),
      cmocka_unit_test(test_crash_safety),       cmocka_unit_test(test_inspect),
      cmocka_unit_test(test_reads_v1),           cmocka_unit_test(test_hostile),
      cmocka_unit_test(test_merge_model_files),
  };
  return cmocka_run_group_tests(tests, nullptr, nullptr);
}
