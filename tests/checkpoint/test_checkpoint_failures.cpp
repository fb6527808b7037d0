// Sharded checkpoints, what goes wrong: every load error, failed and
// crashed saves (the previous checkpoint stays loadable and unchanged), and
// that a load reads only the bytes it needs. Part of the test_checkpoint
// executable (ctest checkpoint_test_checkpoint), whose main is in
// test_checkpoint.cpp; the helpers are checkpoint_common.hpp.
#include <atomic>

#include "tests/checkpoint/checkpoint_common.hpp"

namespace ckpt_cases {

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

static thread_local int t_rank = -1;
static std::atomic<int> g_fail_rank{-1};
static const char* g_fail_point = "";

static void thread_fault_hook(const char* point, const std::string&) {
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
static const char* g_crash_point = "";
static std::string g_crash_path_part;

static void crash_hook(const char* point, const std::string& path) {
  if (std::strcmp(point, g_crash_point) == 0 && contains(path, g_crash_path_part)) _exit(42);
}

static int save_single(const std::string& dir, const std::vector<Full>& fulls) {
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

}  // namespace ckpt_cases
