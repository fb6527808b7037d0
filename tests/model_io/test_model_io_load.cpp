// test_model_io, loading: local shapes, HF folders (single file, sharded
// index, dtype conversion) at every rank, inspect, version-1 checkpoints.
#include "model_io_util.hpp"

namespace mio {

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

}  // namespace mio
