// Sharded checkpoints with ranks as threads, what works: save at TP=2 and
// load at TP=1, 2, 3 and 4 (split along dims 0, 1 and 2, replicated, padded
// vocabulary, 0-d and empty tensors), re-split along another dimension,
// dtype conversion, tensor x data x pipeline parallel saves, old shards
// removed. What goes wrong (every load error, failed and crashed saves, the
// bytes a load reads) is test_checkpoint_failures.cpp, linked into the same
// executable and run by this file's main (ctest checkpoint_test_checkpoint);
// the helpers both share are checkpoint_common.hpp.
#include "tests/checkpoint/checkpoint_common.hpp"

namespace ckpt_cases {

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

}  // namespace ckpt_cases

using namespace ckpt_cases;

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
