// Sharded checkpoints with ranks as threads: save at TP=2 and load at TP=1,
// 2, 3 and 4 (split along dims 0, 1 and 2, replicated, padded vocabulary,
// 0-d and empty tensors), re-split along another dimension, dtype
// conversion, tensor x data x pipeline parallel saves, every load error,
// failed and crashed saves (the previous checkpoint stays loadable and
// unchanged), and that a load reads only the bytes it needs.
#include <sys/wait.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

#include "core/checkpoint/checkpoint.hpp"
#include "core/checkpoint/fs_util.hpp"
#include "core/checkpoint/safetensors.hpp"
#include "core/comm/self_communicator.hpp"
#include "tests/checkpoint/ckpt_test_util.hpp"

// cmocka last: it defines a fail() macro that clashes with oslo::fail. It has
// no extern "C" of its own.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
extern "C" {
// clang-format off
#include <cmocka.h>
// clang-format on
}

using ckpt_test::contains;
using ckpt_test::status_of;
using oslo::CheckpointLayout;
using oslo::ParamShard;

namespace {

std::string g_dir;  // per-test temporary directory
std::string ckpt_dir() {
  return g_dir + "/ckpt";
}

int setup(void**) {
  g_dir = ckpt_test::temp_dir();
  return 0;
}
int teardown(void**) {
  oslo::fsutil::set_fault_hook(nullptr);
  ckpt_test::remove_tree(g_dir);
  return 0;
}

// ------------------------------------------------------------------ tensors

struct Def {
  std::string name;
  oslo_dtype dtype;
  std::vector<int64_t> shape;
  int split_dim;
};

// A full (global) tensor in its dtype.
struct Full {
  Def def;
  std::vector<char> bytes;
};

int64_t numel(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

Full make_full(const Def& d, int version) {
  Full f{d, {}};
  const int64_t n = numel(d.shape);
  const size_t es = oslo::dtype_size(d.dtype);
  f.bytes.resize(static_cast<size_t>(n) * es);
  uint32_t h = 2166136261u;
  for (char c : d.name) h = (h ^ static_cast<unsigned char>(c)) * 16777619u;
  for (int64_t i = 0; i < n; ++i) {
    double v = static_cast<double>((h + 7919u * static_cast<uint32_t>(i)) % 20011u) / 64.0 - 150.0 +
               1000.0 * version;
    char* p = f.bytes.data() + i * es;
    switch (d.dtype) {
      case OSLO_DTYPE_F32: {
        float x = static_cast<float>(v);
        std::memcpy(p, &x, 4);
        break;
      }
      case OSLO_DTYPE_F16: {
        uint16_t x = oslo::f32_to_f16(static_cast<float>(v / 8));
        std::memcpy(p, &x, 2);
        break;
      }
      case OSLO_DTYPE_BF16: {
        uint16_t x = oslo::f32_to_bf16(static_cast<float>(v));
        std::memcpy(p, &x, 2);
        break;
      }
      case OSLO_DTYPE_I32: {
        int32_t x = static_cast<int32_t>(v * 64);
        std::memcpy(p, &x, 4);
        break;
      }
      case OSLO_DTYPE_I64: {
        int64_t x = static_cast<int64_t>(v * 64) * 1001;  // fits i32 (converted in a test)
        std::memcpy(p, &x, 8);
        break;
      }
      default: std::abort();
    }
  }
  return f;
}

// A local buffer of one rank plus the ParamShard describing it.
struct Local {
  ParamShard p;
  std::vector<char> buf;
  std::vector<char> expect;  // expected content after a load
};

// Slice of `full` for rank r of tp along split_dim (-1: everything), with the
// padded layout of oslo's layers: ceil(G / tp) rows per rank.
Local make_local(const Full& full, int split_dim, int r, int tp, oslo_dtype dtype,
                 unsigned char fill) {
  Local l;
  l.p.name = full.def.name;
  l.p.dtype = dtype;
  l.p.global_shape = full.def.shape;
  l.p.split_dim = split_dim;
  l.p.local_shape = full.def.shape;
  int64_t real = 0;
  if (split_dim >= 0) {
    const int64_t G = full.def.shape[split_dim];
    const int64_t L = (G + tp - 1) / tp;
    l.p.offset = L * r;
    l.p.local_shape[split_dim] = L;
    real = std::max<int64_t>(0, std::min<int64_t>(L, G - l.p.offset));
  }
  const size_t ses = oslo::dtype_size(full.def.dtype), des = oslo::dtype_size(dtype);
  const int64_t n = numel(l.p.local_shape);
  l.buf.assign(static_cast<size_t>(n) * des, static_cast<char>(fill));
  l.expect.assign(static_cast<size_t>(n) * des, 0);
  // Expected content: converted slice, zero padding.
  int64_t outer = 1, inner = 1, G = 1, L = 1;
  const int d = split_dim;
  if (d >= 0) {
    for (int k = 0; k < d; ++k) outer *= full.def.shape[k];
    for (size_t k = d + 1; k < full.def.shape.size(); ++k) inner *= full.def.shape[k];
    G = full.def.shape[d];
    L = l.p.local_shape[d];
  } else {
    inner = numel(full.def.shape);
    real = 1;
  }
  std::vector<float> tmp(1);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t row = 0; row < real; ++row)
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t src = (o * G + l.p.offset + row) * inner + i;
        const int64_t dst = (o * L + row) * inner + i;
        const char* s = full.bytes.data() + src * ses;
        char* e = l.expect.data() + dst * des;
        if (full.def.dtype == dtype) {
          std::memcpy(e, s, des);
        } else if (full.def.dtype == OSLO_DTYPE_I64 && dtype == OSLO_DTYPE_I32) {
          int64_t v;
          std::memcpy(&v, s, 8);
          int32_t w = static_cast<int32_t>(v);
          std::memcpy(e, &w, 4);
        } else if (oslo::dtype_is_float(full.def.dtype) && oslo::dtype_is_float(dtype)) {
          oslo::to_f32(full.def.dtype, s, tmp.data(), 1);
          oslo::from_f32(dtype, tmp.data(), e, 1);
        }
      }
  // For saving: the buffer holds the slice and garbage padding.
  if (fill == 0) {
    l.buf = l.expect;
    if (d >= 0 && !l.buf.empty())
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t row = real; row < L; ++row)
          std::memset(l.buf.data() + ((o * L + row) * inner) * des, 0x7f,
                      static_cast<size_t>(inner) * des);
  }
  l.p.data = l.buf.empty() ? nullptr : l.buf.data();
  return l;
}

std::vector<Local> make_locals(const std::vector<Full>& fulls, int r, int tp, unsigned char fill,
                               const std::map<std::string, int>& split_override = {},
                               const std::map<std::string, oslo_dtype>& dtype_override = {}) {
  std::vector<Local> out;
  for (const Full& f : fulls) {
    int sd = f.def.split_dim;
    auto it = split_override.find(f.def.name);
    if (it != split_override.end()) sd = it->second;
    oslo_dtype dt = f.def.dtype;
    auto jt = dtype_override.find(f.def.name);
    if (jt != dtype_override.end()) dt = jt->second;
    out.push_back(make_local(f, sd, r, tp, dt, fill));
  }
  for (Local& l : out) l.p.data = l.buf.empty() ? nullptr : l.buf.data();
  return out;
}

std::vector<ParamShard> params_of(const std::vector<Local>& ls) {
  std::vector<ParamShard> ps;
  for (const Local& l : ls) ps.push_back(l.p);
  return ps;
}

// Checks every local buffer against its expected content; returns the name of
// the first mismatch ("" if none).
std::string first_mismatch(const std::vector<Local>& ls) {
  for (const Local& l : ls)
    if (l.buf != l.expect) return l.p.name;
  return "";
}

std::vector<Def> main_defs() {
  return {
      {"embed.weight", OSLO_DTYPE_F32, {11, 4}, 0},  // vocabulary 11: padded at tp 2, 3, 4
      {"col.weight", OSLO_DTYPE_F32, {10, 6}, 0},
      {"col.bias", OSLO_DTYPE_F32, {10}, 0},
      {"row.weight", OSLO_DTYPE_F32, {6, 10}, 1},
      {"pad.inner", OSLO_DTYPE_F32, {3, 7, 5}, 1},  // padded along an inner dimension
      {"cube", OSLO_DTYPE_F32, {2, 3, 9}, 2},
      {"ln.weight", OSLO_DTYPE_F32, {6}, -1},
      {"scalar", OSLO_DTYPE_F32, {}, -1},
      {"ids", OSLO_DTYPE_I64, {5}, -1},
      {"half", OSLO_DTYPE_BF16, {8, 3}, 0},
      {"h16", OSLO_DTYPE_F16, {3, 8}, 1},
      {"empty", OSLO_DTYPE_F32, {0, 4}, 0},
      {"empty.inner", OSLO_DTYPE_F32, {4, 0}, 0},
  };
}

std::vector<Full> make_fulls(const std::vector<Def>& defs, int version) {
  std::vector<Full> fulls;
  for (const Def& d : defs) fulls.push_back(make_full(d, version));
  return fulls;
}

CheckpointLayout tp_layout(int r, int tp) {
  CheckpointLayout l;
  l.tp_rank = r;
  l.tp_size = tp;
  l.world_rank = r;
  l.world_size = tp;
  return l;
}

// Saves `fulls` at tensor-parallel size tp (ranks as threads).
std::vector<ckpt_test::RankResult> save_tp(const std::string& dir, const std::vector<Full>& fulls,
                                           int tp) {
  oslo::HashStore store;
  return ckpt_test::run_ranks(tp, [&](int r) {
    std::vector<Local> ls = make_locals(fulls, r, tp, 0);
    oslo::Control comm(std::make_shared<ckpt_test::StoreComm>(&store, r, tp));
    oslo::save_checkpoint(dir, params_of(ls), tp_layout(r, tp), comm);
  });
}

void assert_all_ok(const std::vector<ckpt_test::RankResult>& res) {
  for (size_t r = 0; r < res.size(); ++r)
    if (res[r].status != OSLO_OK)
      fprintf(stderr, "rank %zu: status %d: %s\n", r, res[r].status, res[r].message.c_str());
  for (const auto& x : res) assert_int_equal(x.status, OSLO_OK);
}

// Loads at tensor-parallel size tp on every rank and compares; returns "" or
// a description of the first mismatch.
std::string load_and_compare(const std::string& dir, const std::vector<Full>& fulls, int tp,
                             const std::map<std::string, int>& split_override = {},
                             const std::map<std::string, oslo_dtype>& dtype_override = {}) {
  for (int r = 0; r < tp; ++r) {
    std::vector<Local> ls = make_locals(fulls, r, tp, 0xAB, split_override, dtype_override);
    std::string msg;
    oslo_status s = status_of([&] { oslo::load_checkpoint(dir, params_of(ls)); }, &msg);
    if (s != OSLO_OK) return "tp " + std::to_string(tp) + " rank " + std::to_string(r) + ": " + msg;
    std::string bad = first_mismatch(ls);
    if (!bad.empty())
      return "tp " + std::to_string(tp) + " rank " + std::to_string(r) + ": tensor " + bad;
  }
  return "";
}

nlohmann::json read_manifest(const std::string& dir) {
  return nlohmann::json::parse(ckpt_test::read_bytes(dir + "/oslo_checkpoint.json"));
}

// --------------------------------------------------------------------- tests

void test_save_tp2_load_any_tp(void**) {
  const std::vector<Full> fulls = make_fulls(main_defs(), 1);
  assert_all_ok(save_tp(ckpt_dir(), fulls, 2));

  // The directory: the manifest and one shard per tensor-parallel rank.
  nlohmann::json m = read_manifest(ckpt_dir());
  assert_true(m["format"] == "oslo-checkpoint" && m["version"] == 1);
  assert_true(m["tensor_parallel_size"] == 2 && m["pipeline_parallel_size"] == 1);
  const std::string id = m["save_id"];
  assert_true(
      ckpt_test::list(ckpt_dir()) ==
      std::vector<std::string>({"oslo_checkpoint.json", "shard-" + id + "-tp0-pp0.safetensors",
                                "shard-" + id + "-tp1-pp0.safetensors"}));
  // Only real rows are saved: the padded vocabulary's shards hold 6 + 5 rows.
  auto& emb = m["tensors"]["embed.weight"];
  assert_true(emb["shape"] == nlohmann::json({11, 4}) && emb["split_dim"] == 0);
  assert_int_equal(emb["shards"].size(), 2);
  assert_true(emb["shards"][0]["offset"] == 0 && emb["shards"][0]["length"] == 6);
  assert_true(emb["shards"][1]["offset"] == 6 && emb["shards"][1]["length"] == 5);
  assert_int_equal(m["tensors"]["ln.weight"]["shards"].size(), 1);  // replicated: once
  assert_int_equal(m["tensors"]["empty"]["shards"].size(), 0);
  {
    oslo::safetensors::Reader r1(ckpt_dir() + "/shard-" + id + "-tp1-pp0.safetensors");
    assert_true(r1.at("embed.weight").shape == std::vector<uint64_t>({5, 4}));
    assert_true(r1.at("pad.inner").shape == std::vector<uint64_t>({3, 3, 5}));
    assert_null(r1.find("ln.weight"));
  }

  for (int tp : {1, 2, 3, 4}) {
    std::string err = load_and_compare(ckpt_dir(), fulls, tp);
    if (!err.empty()) fprintf(stderr, "%s\n", err.c_str());
    assert_true(err.empty());
  }
  // Re-split along other dimensions (and replicated <-> split).
  std::map<std::string, int> resplit = {
      {"col.weight", 1},    {"row.weight", 0}, {"ln.weight", 0}, {"cube", 1},
      {"embed.weight", -1}, {"pad.inner", 2},  {"half", 1},      {"h16", 0}};
  for (int tp : {1, 3, 4}) {
    std::string err = load_and_compare(ckpt_dir(), fulls, tp, resplit);
    if (!err.empty()) fprintf(stderr, "%s\n", err.c_str());
    assert_true(err.empty());
  }
  // Save again at TP=3 from a TP=3 load, then load at TP=2: still the same.
  assert_all_ok(save_tp(ckpt_dir(), fulls, 3));
  assert_true(load_and_compare(ckpt_dir(), fulls, 2).empty());
  assert_true(load_and_compare(ckpt_dir(), fulls, 1).empty());
  assert_int_equal(read_manifest(ckpt_dir())["tensor_parallel_size"], 3);
}

void test_dtype_conversion(void**) {
  const std::vector<Full> fulls = make_fulls(main_defs(), 2);
  assert_all_ok(save_tp(ckpt_dir(), fulls, 2));
  std::map<std::string, oslo_dtype> to_bf16 = {
      {"embed.weight", OSLO_DTYPE_BF16}, {"col.weight", OSLO_DTYPE_BF16},
      {"row.weight", OSLO_DTYPE_F16},    {"half", OSLO_DTYPE_F32},
      {"h16", OSLO_DTYPE_BF16},          {"ids", OSLO_DTYPE_I32},
      {"scalar", OSLO_DTYPE_F16}};
  for (int tp : {1, 2, 3}) {
    std::string err = load_and_compare(ckpt_dir(), fulls, tp, {}, to_bf16);
    if (!err.empty()) fprintf(stderr, "%s\n", err.c_str());
    assert_true(err.empty());
  }
  // Float <-> integer is refused.
  std::vector<Local> ls = make_locals(fulls, 0, 1, 0xAB, {}, {{"col.bias", OSLO_DTYPE_I32}});
  std::string msg;
  assert_int_equal(status_of([&] { oslo::load_checkpoint(ckpt_dir(), params_of(ls)); }, &msg),
                   OSLO_ERR_DTYPE);
  assert_true(contains(msg, "col.bias"));
}

// world 8 = tp 2 x dp 2 x pp 2, Megatron order; a weight tied across stages.
void test_tp_dp_pp(void**) {
  const std::vector<Def> stage0 = {{"embed.weight", OSLO_DTYPE_F32, {11, 4}, 0},
                                   {"l0.w", OSLO_DTYPE_F32, {6, 4}, 0},
                                   {"l0.ln", OSLO_DTYPE_F32, {4}, -1}};
  const std::vector<Def> stage1 = {{"l1.w", OSLO_DTYPE_F32, {4, 6}, 1},
                                   {"head.ln", OSLO_DTYPE_F32, {4}, -1},
                                   {"embed.weight", OSLO_DTYPE_F32, {11, 4}, 0}};
  const std::vector<Full> f0 = make_fulls(stage0, 3), f1 = make_fulls(stage1, 3);
  oslo::HashStore store;
  auto res = ckpt_test::run_ranks(8, [&](int g) {
    CheckpointLayout l;
    l.tp_size = 2;
    l.dp_size = 2;
    l.pp_size = 2;
    l.world_size = 8;
    l.world_rank = g;
    l.tp_rank = g % 2;
    l.dp_rank = (g / 2) % 2;
    l.pp_rank = g / 4;
    std::vector<Local> ls = make_locals(l.pp_rank == 0 ? f0 : f1, l.tp_rank, 2, 0);
    oslo::Control comm(std::make_shared<ckpt_test::StoreComm>(&store, g, 8));
    oslo::save_checkpoint(ckpt_dir(), params_of(ls), l, comm);
  });
  assert_all_ok(res);
  nlohmann::json m = read_manifest(ckpt_dir());
  assert_true(m["tensor_parallel_size"] == 2 && m["pipeline_parallel_size"] == 2 &&
              m["data_parallel_size"] == 2);
  assert_int_equal(ckpt_test::list(ckpt_dir()).size(), 5);  // 4 shards + manifest
  assert_int_equal(m["tensors"].size(), 5);
  // The tied weight comes from the first stage.
  assert_true(contains(m["tensors"]["embed.weight"]["shards"][0]["file"], "-pp0."));
  std::vector<Full> all = f0;
  all.push_back(f1[0]);
  all.push_back(f1[1]);
  for (int tp : {1, 2, 4}) assert_true(load_and_compare(ckpt_dir(), all, tp).empty());
}

void test_old_shards_removed(void**) {
  const std::vector<Full> v1 = make_fulls(main_defs(), 1), v2 = make_fulls(main_defs(), 2);
  assert_all_ok(save_tp(ckpt_dir(), v1, 2));
  const std::string id1 = read_manifest(ckpt_dir())["save_id"];
  // Debris of an interrupted save: an orphan shard and temporaries.
  ckpt_test::write_bytes(ckpt_dir() + "/shard-00000000deadbeef-tp0-pp0.safetensors", "x");
  ckpt_test::write_bytes(ckpt_dir() + "/shard-00000000deadbeef-tp1-pp0.safetensors.tmp.1.2", "x");
  ckpt_test::write_bytes(ckpt_dir() + "/oslo_checkpoint.json.tmp.1.2", "x");
  ckpt_test::write_bytes(ckpt_dir() + "/user-notes.txt", "keep me");
  assert_all_ok(save_tp(ckpt_dir(), v2, 4));
  nlohmann::json m = read_manifest(ckpt_dir());
  const std::string id2 = m["save_id"];
  assert_true(id1 != id2);
  std::vector<std::string> want = {"oslo_checkpoint.json", "user-notes.txt"};
  for (const auto& f : m["files"]) want.push_back(f);
  std::sort(want.begin(), want.end());
  assert_true(ckpt_test::list(ckpt_dir()) == want);
  assert_int_equal(m["files"].size(), 4);
  assert_true(load_and_compare(ckpt_dir(), v2, 3).empty());
}

void test_load_errors(void**) {
  const std::vector<Full> fulls = make_fulls(main_defs(), 1);
  const std::string dir = ckpt_dir();
  std::string msg;
  std::vector<Local> ls = make_locals(fulls, 0, 2, 0xAB);
  auto load = [&](const std::vector<ParamShard>& ps) {
    return status_of([&] { oslo::load_checkpoint(dir, ps); }, &msg);
  };
  // No manifest.
  assert_int_equal(load(params_of(ls)), OSLO_ERR_IO);
  assert_true(contains(msg, "no oslo_checkpoint.json in " + dir));

  assert_all_ok(save_tp(dir, fulls, 2));
  const std::string manifest_path = dir + "/oslo_checkpoint.json";
  const std::string good = ckpt_test::read_bytes(manifest_path);
  nlohmann::json m = nlohmann::json::parse(good);
  const std::string shard0 = dir + "/" + m["files"][0].get<std::string>();
  const std::string shard1 = dir + "/" + m["files"][1].get<std::string>();
  assert_int_equal(load(params_of(ls)), OSLO_OK);

  // Corrupt manifests: each is OSLO_ERR_FORMAT naming the problem.
  struct Case {
    const char* label;
    std::function<void(nlohmann::json&)> edit;
    const char* needle;
  };
  const std::vector<Case> cases = {
      {"no tensors", [](nlohmann::json& j) { j.erase("tensors"); }, "missing field 'tensors'"},
      {"extra key", [](nlohmann::json& j) { j["bogus"] = 1; }, "unknown field 'bogus'"},
      {"format", [](nlohmann::json& j) { j["format"] = "other"; }, "format"},
      {"version", [](nlohmann::json& j) { j["version"] = 2; }, "format version 2 is not supported"},
      {"dtype", [](nlohmann::json& j) { j["tensors"]["col.weight"]["dtype"] = "F64"; },
       "unsupported dtype 'F64'"},
      {"negative shape", [](nlohmann::json& j) { j["tensors"]["col.weight"]["shape"][0] = -10; },
       "tensor 'col.weight'.shape[0]"},
      {"split_dim", [](nlohmann::json& j) { j["tensors"]["col.weight"]["split_dim"] = 2; },
       "tensor 'col.weight'.split_dim"},
      {"hole", [](nlohmann::json& j) { j["tensors"]["col.weight"]["shards"].erase(0); },
       "rows 0..5 are in no shard"},
      {"overlap", [](nlohmann::json& j) { j["tensors"]["col.weight"]["shards"][1]["offset"] = 4; },
       "overlap"},
      {"short", [](nlohmann::json& j) { j["tensors"]["col.weight"]["shards"][1]["length"] = 4; },
       "cover rows 0..9 of 10"},
      {"traversal",
       [](nlohmann::json& j) {
         j["tensors"]["col.weight"]["shards"][0]["file"] = "../x.safetensors";
       },
       "not a plain file name"},
      {"unlisted file",
       [](nlohmann::json& j) {
         j["tensors"]["col.weight"]["shards"][0]["file"] = "other.safetensors";
       },
       "not in 'files'"},
      {"shard mismatch",
       [](nlohmann::json& j) {
         auto& s = j["tensors"]["col.weight"]["shards"];
         s[0]["length"] = 6;
         s[1]["offset"] = 6;
         s[1]["length"] = 4;
       },
       "but the manifest expects"},
      {"replicated shards",
       [](nlohmann::json& j) { j["tensors"]["ln.weight"]["shards"] = nlohmann::json::array(); },
       "exactly one shard"},
      {"tensors not object", [](nlohmann::json& j) { j["tensors"] = 5; },
       "tensors: must be an object"},
  };
  for (const Case& c : cases) {
    nlohmann::json j = m;
    c.edit(j);
    ckpt_test::write_bytes(manifest_path, j.dump());
    oslo_status s = load(params_of(ls));
    if (s != OSLO_ERR_FORMAT || !contains(msg, c.needle))
      fprintf(stderr, "case %s: status %d: %s\n", c.label, s, msg.c_str());
    assert_int_equal(s, OSLO_ERR_FORMAT);
    assert_true(contains(msg, c.needle));
  }
  ckpt_test::write_bytes(manifest_path, "{\"format\": ");
  assert_int_equal(load(params_of(ls)), OSLO_ERR_FORMAT);
  assert_true(contains(msg, "invalid JSON") && contains(msg, manifest_path));
  ckpt_test::write_bytes(manifest_path, good);

  // A tensor missing from the checkpoint; nothing is written to any buffer.
  {
    std::vector<Local> ls2 = make_locals(fulls, 0, 2, 0xAB);
    std::vector<ParamShard> ps = params_of(ls2);
    ParamShard extra = ps[0];
    extra.name = "nope.weight";
    ps.push_back(extra);
    assert_int_equal(load(ps), OSLO_ERR_FORMAT);
    assert_true(contains(msg, "tensor 'nope.weight' is not in the checkpoint"));
    for (const Local& l : ls2)
      for (char c : l.buf) assert_int_equal(static_cast<unsigned char>(c), 0xAB);
  }
  // Wrong global shape.
  {
    std::vector<Def> defs = main_defs();
    defs[1].shape = {10, 7};
    std::vector<Local> ls2 = make_locals(make_fulls(defs, 1), 0, 2, 0xAB);
    assert_int_equal(load(params_of(ls2)), OSLO_ERR_SHAPE);
    assert_true(contains(msg, "col.weight") && contains(msg, "[10, 6]") &&
                contains(msg, "[10, 7]"));
  }
  // Bad parameters.
  {
    std::vector<ParamShard> ps = params_of(ls);
    ps[0].split_dim = 5;
    assert_int_equal(load(ps), OSLO_ERR_INVALID_ARGUMENT);
    ps = params_of(ls);
    ps.push_back(ps[0]);
    assert_int_equal(load(ps), OSLO_ERR_INVALID_ARGUMENT);
    assert_true(contains(msg, "appears twice"));
    ps = params_of(ls);
    ps[1].local_shape[1] = 5;
    assert_int_equal(load(ps), OSLO_ERR_INVALID_ARGUMENT);
  }
  // A truncated shard.
  const std::string shard1_bytes = ckpt_test::read_bytes(shard1);
  ckpt_test::write_bytes(shard1, shard1_bytes.substr(0, shard1_bytes.size() - 3));
  {
    std::vector<Local> ls1 = make_locals(fulls, 1, 2, 0xAB);
    assert_int_equal(load(params_of(ls1)), OSLO_ERR_FORMAT);
    assert_true(contains(msg, shard1) && contains(msg, "truncated"));
  }
  // A missing shard.
  assert_int_equal(unlink(shard1.c_str()), 0);
  {
    std::vector<Local> ls1 = make_locals(fulls, 1, 2, 0xAB);
    assert_int_equal(load(params_of(ls1)), OSLO_ERR_IO);
    assert_true(contains(msg, shard1) && contains(msg, "No such file"));
  }
  // Rank 0 of TP=4 needs only shard 0, so it still loads.
  {
    std::vector<Local> l4 = make_locals(fulls, 0, 4, 0xAB);
    assert_int_equal(load(params_of(l4)), OSLO_OK);
    assert_true(first_mismatch(l4).empty());
  }
  (void)shard0;
}

thread_local int t_rank = -1;
std::atomic<int> g_fail_rank{-1};
const char* g_fail_point = "";

void thread_fault_hook(const char* point, const std::string&) {
  if (t_rank == g_fail_rank.load() && std::strcmp(point, g_fail_point) == 0)
    throw oslo::Error(OSLO_ERR_IO, std::string("injected failure at ") + point);
}

// A rank fails between its shard write and the manifest: every rank reports
// an error and the previous checkpoint is loadable and unchanged.
void test_failed_save_keeps_previous(void**) {
  const std::vector<Full> v1 = make_fulls(main_defs(), 1), v2 = make_fulls(main_defs(), 2);
  const std::string dir = ckpt_dir();
  assert_all_ok(save_tp(dir, v1, 2));
  const std::vector<std::string> files_before = ckpt_test::list(dir);
  std::map<std::string, std::string> bytes_before;
  for (const std::string& f : files_before) bytes_before[f] = ckpt_test::read_bytes(dir + "/" + f);

  oslo::fsutil::set_fault_hook(thread_fault_hook);
  struct Fault {
    int rank;
    const char* point;
  };
  for (Fault fault : {Fault{1, "save.after_shard_write"}, Fault{0, "save.after_shard_write"},
                      Fault{0, "save.before_manifest"}, Fault{1, "atomic.before_rename"},
                      Fault{0, "atomic.before_rename"}}) {
    g_fail_rank = fault.rank;
    g_fail_point = fault.point;
    oslo::HashStore store;
    auto res = ckpt_test::run_ranks(2, [&](int r) {
      t_rank = r;
      std::vector<Local> ls = make_locals(v2, r, 2, 0);
      oslo::Control comm(std::make_shared<ckpt_test::StoreComm>(&store, r, 2));
      oslo::save_checkpoint(dir, params_of(ls), tp_layout(r, 2), comm);
    });
    for (int r = 0; r < 2; ++r) {
      assert_int_equal(res[r].status, OSLO_ERR_IO);
      if (r == fault.rank) {
        assert_true(contains(res[r].message, "injected failure"));
      } else {
        assert_true(contains(res[r].message, "failed on world rank " + std::to_string(fault.rank)));
      }
    }
    if (ckpt_test::list(dir) != files_before) {
      fprintf(stderr, "fault rank %d at %s left:\n", fault.rank, fault.point);
      for (const std::string& f : ckpt_test::list(dir)) fprintf(stderr, "  %s\n", f.c_str());
    }
    assert_true(ckpt_test::list(dir) == files_before);
    for (const std::string& f : files_before)
      assert_true(ckpt_test::read_bytes(dir + "/" + f) == bytes_before[f]);
    assert_true(load_and_compare(dir, v1, 3).empty());
  }
  oslo::fsutil::set_fault_hook(nullptr);
  g_fail_rank = -1;

  // Inconsistent parameters across ranks are refused the same way.
  oslo::HashStore store;
  auto res = ckpt_test::run_ranks(2, [&](int r) {
    std::vector<Local> ls = make_locals(v2, r, 2, 0);
    std::vector<ParamShard> ps = params_of(ls);
    if (r == 1) ps[1].offset = 4;  // col.weight: overlaps rank 0's rows
    oslo::Control comm(std::make_shared<ckpt_test::StoreComm>(&store, r, 2));
    oslo::save_checkpoint(dir, ps, tp_layout(r, 2), comm);
  });
  assert_int_equal(res[0].status, OSLO_ERR_INVALID_ARGUMENT);
  assert_true(contains(res[0].message, "col.weight") && contains(res[0].message, "overlap"));
  assert_int_equal(res[1].status, OSLO_ERR_INVALID_ARGUMENT);
  assert_true(contains(res[1].message, "failed on world rank 0"));
  // A parameter that is invalid on one rank.
  oslo::HashStore store2;
  res = ckpt_test::run_ranks(2, [&](int r) {
    std::vector<Local> ls = make_locals(v2, r, 2, 0);
    std::vector<ParamShard> ps = params_of(ls);
    if (r == 1) ps[0].split_dim = 7;
    oslo::Control comm(std::make_shared<ckpt_test::StoreComm>(&store2, r, 2));
    oslo::save_checkpoint(dir, ps, tp_layout(r, 2), comm);
  });
  assert_int_equal(res[0].status, OSLO_ERR_INVALID_ARGUMENT);
  assert_int_equal(res[1].status, OSLO_ERR_INVALID_ARGUMENT);
  assert_true(contains(res[1].message, "split_dim 7"));
  assert_true(ckpt_test::list(dir) == files_before);
  for (const std::string& f : files_before)
    assert_true(ckpt_test::read_bytes(dir + "/" + f) == bytes_before[f]);
  assert_true(load_and_compare(dir, v1, 2).empty());
}

// A real crash (the process dies) at every step of a save: the directory
// then holds either the old or the new checkpoint, never a mix, and the next
// save clears the debris.
const char* g_crash_point = "";
std::string g_crash_path_part;

void crash_hook(const char* point, const std::string& path) {
  if (std::strcmp(point, g_crash_point) == 0 && contains(path, g_crash_path_part)) _exit(42);
}

int save_single(const std::string& dir, const std::vector<Full>& fulls) {
  std::vector<Local> ls = make_locals(fulls, 0, 1, 0);
  oslo::Control comm(std::make_shared<oslo::SelfCommunicator>());
  oslo::save_checkpoint(dir, params_of(ls), CheckpointLayout{}, comm);
  return 0;
}

void test_crash_at_every_step(void**) {
  const std::vector<Full> v1 = make_fulls(main_defs(), 1), v2 = make_fulls(main_defs(), 2),
                          v3 = make_fulls(main_defs(), 3);
  const std::string dir = ckpt_dir();
  struct Crash {
    const char* point;
    const char* path_part;
    bool new_visible;  // the new checkpoint is committed at that point
  };
  const Crash crashes[] = {
      {"atomic.before_rename", ".safetensors", false},
      {"atomic.after_rename", ".safetensors", false},
      {"save.after_shard_write", "", false},
      {"save.before_manifest", "", false},
      {"atomic.before_rename", "oslo_checkpoint.json", false},
      {"atomic.after_rename", "oslo_checkpoint.json", true},
      {"save.after_manifest", "", true},
      {"save.cleanup_step", "", true},
  };
  for (const Crash& c : crashes) {
    ckpt_test::remove_tree(dir);
    save_single(dir, v1);
    std::fflush(nullptr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
      g_crash_point = c.point;
      g_crash_path_part = c.path_part;
      oslo::fsutil::set_fault_hook(crash_hook);
      try {
        save_single(dir, v2);
      } catch (...) {
        _exit(1);
      }
      _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 42)
      fprintf(stderr, "crash at %s (%s): child status %d\n", c.point, c.path_part, status);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 42);
    std::string err = load_and_compare(dir, c.new_visible ? v2 : v1, 2);
    if (!err.empty()) fprintf(stderr, "crash at %s (%s): %s\n", c.point, c.path_part, err.c_str());
    assert_true(err.empty());
    // The next save works and leaves no debris.
    save_single(dir, v3);
    nlohmann::json m = read_manifest(dir);
    std::vector<std::string> want = {"oslo_checkpoint.json", m["files"][0]};
    std::sort(want.begin(), want.end());
    assert_true(ckpt_test::list(dir) == want);
    assert_true(load_and_compare(dir, v3, 3).empty());
  }
}

// A rank reads only the bytes of its own slice.
void test_reads_only_needed_bytes(void**) {
  const std::vector<Def> defs = {{"A", OSLO_DTYPE_F32, {1000, 16}, 0},
                                 {"B", OSLO_DTYPE_F32, {16, 1000}, 1},
                                 {"R", OSLO_DTYPE_F32, {64}, -1}};
  const std::vector<Full> fulls = make_fulls(defs, 1);
  const std::string dir = ckpt_dir();
  assert_all_ok(save_tp(dir, fulls, 2));

  // TP=4 rank 1 needs A rows 250..500 and B columns 250..500 (both inside
  // shard 0) and R (shard 0).
  std::vector<Local> ls = make_locals(fulls, 1, 4, 0xAB);
  oslo::CheckpointLoadStats stats;
  oslo::load_checkpoint(dir, params_of(ls), &stats);
  assert_true(first_mismatch(ls).empty());
  assert_int_equal(stats.data_bytes_read, (250 * 16 + 16 * 250 + 64) * 4);
  assert_int_equal(stats.files_opened, 1);
  assert_int_equal(stats.read_calls, 1 + 16 + 1);  // A: one run; B: one run per row; R

  // TP=4 rank 2 needs shard 1 (A, B) and shard 0 (R).
  ls = make_locals(fulls, 2, 4, 0xAB);
  stats = {};
  oslo::load_checkpoint(dir, params_of(ls), &stats);
  assert_true(first_mismatch(ls).empty());
  assert_int_equal(stats.data_bytes_read, (250 * 16 + 16 * 250 + 64) * 4);
  assert_int_equal(stats.files_opened, 2);

  // TP=1 (replicated load of B, which was split along dim 1): whole rows of
  // each shard are contiguous in the file, so they are read in big runs.
  ls = make_locals(fulls, 0, 1, 0xAB);
  stats = {};
  oslo::load_checkpoint(dir, params_of(ls), &stats);
  assert_true(first_mismatch(ls).empty());
  assert_int_equal(stats.data_bytes_read, (1000 * 16 + 16 * 1000 + 64) * 4);
  assert_true(stats.read_calls <= 6);

  // Overwrite every byte rank 1 of TP=4 does not need with garbage: its load
  // is still exact.
  nlohmann::json m = read_manifest(dir);
  for (const auto& f : m["files"]) {
    const std::string path = dir + "/" + f.get<std::string>();
    oslo::safetensors::Header h;
    {
      oslo::safetensors::Reader rd(path);
      h = rd.header();
    }
    std::string bytes = ckpt_test::read_bytes(path);
    std::string keep(bytes.size(), 0);
    const bool first = contains(path, "-tp0-");
    for (const auto& t : h.tensors) {
      const uint64_t base = h.data_start() + t.begin;
      if (!first) continue;
      if (t.name == "R") keep.replace(base, t.nbytes(), t.nbytes(), 1);
      if (t.name == "A") keep.replace(base + 250 * 16 * 4, 250 * 16 * 4, 250 * 16 * 4, 1);
      if (t.name == "B")  // shard 0 holds B[:, 0:500]; rank 1 needs columns 250..500
        for (int row = 0; row < 16; ++row)
          keep.replace(base + (row * 500 + 250) * 4, 250 * 4, 250 * 4, 1);
    }
    for (size_t i = h.data_start(); i < bytes.size(); ++i)
      if (!keep[i]) bytes[i] = static_cast<char>(0xFF);
    ckpt_test::write_bytes(path, bytes);
  }
  ls = make_locals(fulls, 1, 4, 0xAB);
  oslo::load_checkpoint(dir, params_of(ls));
  assert_true(first_mismatch(ls).empty());
  // ... while rank 0 (which needs some of the garbage) sees it.
  ls = make_locals(fulls, 0, 4, 0xAB);
  oslo::load_checkpoint(dir, params_of(ls));
  assert_false(first_mismatch(ls).empty());
}

}  // namespace

int main() {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_save_tp2_load_any_tp, setup, teardown),
      cmocka_unit_test_setup_teardown(test_dtype_conversion, setup, teardown),
      cmocka_unit_test_setup_teardown(test_tp_dp_pp, setup, teardown),
      cmocka_unit_test_setup_teardown(test_old_shards_removed, setup, teardown),
      cmocka_unit_test_setup_teardown(test_load_errors, setup, teardown),
      cmocka_unit_test_setup_teardown(test_failed_save_keeps_previous, setup, teardown),
      cmocka_unit_test_setup_teardown(test_crash_at_every_step, setup, teardown),
      cmocka_unit_test_setup_teardown(test_reads_only_needed_bytes, setup, teardown),
  };
  return cmocka_run_group_tests(tests, nullptr, nullptr);
}
