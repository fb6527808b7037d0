// Shared by the sharded checkpoint tests (test_checkpoint.cpp: saves and
// loads at every tensor-parallel size, dtype conversion, tensor x data x
// pipeline parallel saves; test_checkpoint_failures.cpp: load errors, failed
// and crashed saves, the bytes a load reads): tensors split as ranks hold
// them, saves and loads with ranks as threads, and the per-test directory.
#pragma once

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

namespace ckpt_cases {

using ckpt_test::contains;
using ckpt_test::status_of;
using oslo::CheckpointLayout;
using oslo::ParamShard;

inline std::string g_dir;  // per-test temporary directory
inline std::string ckpt_dir() {
  return g_dir + "/ckpt";
}

inline int setup(void**) {
  g_dir = ckpt_test::temp_dir();
  return 0;
}
inline int teardown(void**) {
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

inline int64_t numel(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

inline Full make_full(const Def& d, int version) {
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
inline Local make_local(const Full& full, int split_dim, int r, int tp, oslo_dtype dtype,
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

inline std::vector<Local> make_locals(
    const std::vector<Full>& fulls, int r, int tp, unsigned char fill,
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

inline std::vector<ParamShard> params_of(const std::vector<Local>& ls) {
  std::vector<ParamShard> ps;
  for (const Local& l : ls) ps.push_back(l.p);
  return ps;
}

// Checks every local buffer against its expected content; returns the name of
// the first mismatch ("" if none).
inline std::string first_mismatch(const std::vector<Local>& ls) {
  for (const Local& l : ls)
    if (l.buf != l.expect) return l.p.name;
  return "";
}

inline std::vector<Def> main_defs() {
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

inline std::vector<Full> make_fulls(const std::vector<Def>& defs, int version) {
  std::vector<Full> fulls;
  for (const Def& d : defs) fulls.push_back(make_full(d, version));
  return fulls;
}

inline CheckpointLayout tp_layout(int r, int tp) {
  CheckpointLayout l;
  l.tp_rank = r;
  l.tp_size = tp;
  l.world_rank = r;
  l.world_size = tp;
  return l;
}

// Saves `fulls` at tensor-parallel size tp (ranks as threads).
inline std::vector<ckpt_test::RankResult> save_tp(const std::string& dir,
                                                  const std::vector<Full>& fulls, int tp) {
  oslo::HashStore store;
  return ckpt_test::run_ranks(tp, [&](int r) {
    std::vector<Local> ls = make_locals(fulls, r, tp, 0);
    oslo::Control comm(std::make_shared<ckpt_test::StoreComm>(&store, r, tp));
    oslo::save_checkpoint(dir, params_of(ls), tp_layout(r, tp), comm);
  });
}

inline void assert_all_ok(const std::vector<ckpt_test::RankResult>& res) {
  for (size_t r = 0; r < res.size(); ++r)
    if (res[r].status != OSLO_OK)
      fprintf(stderr, "rank %zu: status %d: %s\n", r, res[r].status, res[r].message.c_str());
  for (const auto& x : res) assert_int_equal(x.status, OSLO_OK);
}

// Loads at tensor-parallel size tp on every rank and compares; returns "" or
// a description of the first mismatch.
inline std::string load_and_compare(const std::string& dir, const std::vector<Full>& fulls, int tp,
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

inline nlohmann::json read_manifest(const std::string& dir) {
  return nlohmann::json::parse(ckpt_test::read_bytes(dir + "/oslo_checkpoint.json"));
}

// The tests of test_checkpoint_failures.cpp (run by test_checkpoint.cpp's main).
void test_load_errors(void**);
void test_failed_save_keeps_previous(void**);
void test_crash_at_every_step(void**);
void test_reads_only_needed_bytes(void**);

}  // namespace ckpt_cases
