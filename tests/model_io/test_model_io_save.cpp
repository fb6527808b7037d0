// test_model_io, saving: at TP 2 as threads and as processes, then load at
// TP 4 and 1, merge and reshard; a collective failure, data-parallel saves,
// crash safety, the model's own files carried through merge.
#include "model_io_util.hpp"

namespace mio {

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

}  // namespace mio
