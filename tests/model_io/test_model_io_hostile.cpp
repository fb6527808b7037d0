// test_model_io, hostile inputs: corrupt, truncated and crafted folders
// are named errors, never crashes.
#include "model_io_util.hpp"

namespace mio {

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

}  // namespace mio
