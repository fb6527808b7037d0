// Shared by the files of test_model_io (test_model_io.cpp says what it
// checks): the fake model, its full tensors and HF folders, the expected
// local slices, multi-rank saves (threads and processes), and the cases.
// Definitions in model_io_util.cpp.
#pragma once

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

namespace mio {

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

std::vector<Def> model_defs();

// Placements of tensor-parallel rank r of tp (the sharding rules the models
// issue writes for real models).
std::vector<oslo::Placement> plan(int tp, int r);

// A full tensor: its values (exact in its dtype) and its bytes.
struct Full {
  Def def;
  std::vector<double> v;
  std::string bytes;
};

double value_of(const Def& d, size_t i, int seed);

std::vector<Full> make_fulls(int seed);

std::vector<uint64_t> u64(const std::vector<int64_t>& s);

void write_text(const std::string& path, const std::string& text);

std::string read_text(const std::string& path);

extern const char* kConfig;

// An HF folder: one model.safetensors, or `files` files with an index.
void write_hf(const std::string& dir, const std::vector<Full>& fulls, int files);

// ---------------------------------------------------------------------------
// Local tensors and their expected values
// ---------------------------------------------------------------------------
std::shared_ptr<oslo::Backend> cpu();

oslo_dtype local_dtype(const Def& d, bool convert);

std::vector<oslo::PlacedTensor> make_locals(const std::shared_ptr<oslo::Backend>& be, int tp, int r,
                                            bool convert = false);

std::vector<double> to_f64(const oslo::Tensor& t);

// The expected local values (in the placement's local layout), computed
// from the full tensor with plain index arithmetic.
std::vector<double> expected_local(const Full& f, const oslo::Placement& p);

// Empty if every local tensor equals its expectation.
std::string mismatch(const std::vector<oslo::PlacedTensor>& ls, const std::vector<Full>& fulls);

// Bytes a rank must read: every segment it holds (owned or not), in the
// stored dtype, plus replicated tensors whole.
uint64_t share_bytes(int tp, int r);

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

bool has(const std::string& s, const std::string& sub);

std::string fresh_dir();

// Loads `path` at every rank of `tp` and compares; returns the first error.
std::string load_and_compare(const std::string& path, int tp, const std::vector<Full>& fulls,
                             bool convert = false, std::vector<uint64_t>* bytes = nullptr);

// ---------------------------------------------------------------------------
// Multi-rank saves: ranks as threads or processes, each with a real context
// ---------------------------------------------------------------------------
// Loads from `from` at TP `tp` (world = tp) and saves into `to`; returns the
// rank's error ("" if none). `bad_rank` gets a placement with a wrong name.
std::string rank_load_save(int rank, int world, const std::string& store, const std::string& from,
                           const std::string& to, int bad_rank = -1, int tp = 0);

std::vector<std::string> run_threads(int world, const std::function<std::string(int)>& fn);

// Each rank a process; returns each rank's error ("" if none).
std::vector<std::string> run_procs(int world, const std::string& dir,
                                   const std::function<std::string(int)>& fn);

void assert_all_ok(const std::vector<std::string>& errs);

void assert_ok(const std::string& err);

// The cases (test_model_io.cpp lists them for cmocka).
// test_model_io_hostile.cpp
void test_hostile(void**);

// test_model_io_load.cpp
void test_local_shape(void**);
void test_load_hf(void**);
void test_inspect(void**);
void test_reads_v1(void**);

// test_model_io_save.cpp
void test_save_threads(void**);
void test_save_procs(void**);
void test_collective_failure(void**);
void test_save_dp(void**);
void test_crash_safety(void**);
void test_merge_model_files(void**);

}  // namespace mio
