// The manifest module (core/checkpoint/manifest.hpp) on its own: what the
// writer writes reads back equal (versions 1 and 2, extension sections);
// the reader's version range, section policy and the checks the two former
// readers did not share; the writer refuses what the reader would reject;
// and the failure agreement (core/comm/agreement.hpp) with ranks as threads.
#include <algorithm>
#include <functional>
#include <new>
#include <string>
#include <vector>

#include "core/checkpoint/manifest.hpp"
#include "core/comm/agreement.hpp"
#include "tests/checkpoint/ckpt_test_util.hpp"

// cmocka last: it defines a fail() macro that clashes with oslo::fail.
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
namespace st = oslo::safetensors;

namespace {

// A two-file manifest: a tensor split along dim 0 and a replicated one.
oslo::Manifest sample(int version) {
  oslo::Manifest m;
  m.version = version;
  m.save_id = "0123456789abcdef";
  m.tp_size = 2;
  m.files = {"shard-a.safetensors", "shard-b.safetensors"};
  oslo::ManifestTensor w;
  w.name = "w";
  w.dtype = st::Dtype::BF16;
  w.shape = {6, 4};
  w.split_dim = 0;
  w.shards = {{"shard-a.safetensors", "w", 0, 4, 32, true, 0xdeadbeef},
              {"shard-b.safetensors", "w", 4, 2, 16, true, 0x00000001}};
  oslo::ManifestTensor b;
  b.name = "b";
  b.dtype = st::Dtype::F32;
  b.shape = {4};
  b.shards = {{"shard-a.safetensors", "b", 0, 4, 16, true, 0x12345678}};
  m.tensors = {b, w};
  if (version >= 2) {
    m.config_json = "{\"model_type\": \"llama\", \"hidden_size\": 4}";
    m.extra_files = {"tokenizer.json"};
  }
  return m;
}

void expect_same(const oslo::Manifest& a, const oslo::Manifest& b) {
  assert_int_equal(a.version, b.version);
  assert_true(a.save_id == b.save_id);
  assert_int_equal(a.tp_size, b.tp_size);
  assert_true(a.files == b.files && a.extra_files == b.extra_files);
  assert_int_equal(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    const oslo::ManifestTensor &x = a.tensors[i], &y = b.tensors[i];
    assert_true(x.name == y.name && x.dtype == y.dtype && x.shape == y.shape);
    assert_int_equal(x.split_dim, y.split_dim);
    assert_int_equal(x.shards.size(), y.shards.size());
    for (size_t k = 0; k < x.shards.size(); ++k) {
      assert_true(x.shards[k].file == y.shards[k].file && x.shards[k].key == y.shards[k].key);
      assert_int_equal(x.shards[k].offset, y.shards[k].offset);
      assert_int_equal(x.shards[k].length, y.shards[k].length);
      if (a.version >= 2) {
        assert_int_equal(x.shards[k].bytes, y.shards[k].bytes);
        assert_int_equal(x.shards[k].crc32c, y.shards[k].crc32c);
      }
    }
  }
}

void test_round_trip(void**) {
  for (int v : {1, 2}) {
    const oslo::Manifest m = sample(v);
    const std::string text = oslo::manifest_text(m);
    const oslo::Manifest back = oslo::parse_manifest(text, "mem");
    expect_same(m, back);
    // Version 1 carries no version-2 fields.
    assert_true(contains(text, "crc32c") == (v == 2));
    assert_true(contains(text, "model_config") == (v == 2));
    if (v == 2) assert_true(contains(back.config_json, "\"model_type\": \"llama\""));
  }
}

void test_versions_and_sections(void**) {
  std::string msg;
  const std::string v2 = oslo::manifest_text(sample(2));
  oslo::ManifestReadOptions only1;
  only1.max_version = 1;
  only1.newer_version_note = "a test reader";
  assert_int_equal(status_of([&] { oslo::parse_manifest(v2, "mem", only1); }, &msg),
                   OSLO_ERR_FORMAT);
  assert_true(contains(msg, "format version 2 is not supported (a test reader)"));

  // An extension section (a made-up one: "training" has its own checks,
  // test_training_section): written, then read only by a reader that names it.
  oslo::Manifest m = sample(2);
  m.sections["example"] = nlohmann::json{{"step", 7}};
  const std::string text = oslo::manifest_text(m);
  assert_int_equal(status_of([&] { oslo::parse_manifest(text, "mem"); }, &msg), OSLO_ERR_FORMAT);
  assert_true(contains(msg, "unknown field 'example'"));
  oslo::ManifestReadOptions with;
  with.sections = {"example"};
  const oslo::Manifest back = oslo::parse_manifest(text, "mem", with);
  assert_int_equal(back.sections.at("example")["step"].get<int>(), 7);
  // A reader naming a section still reads manifests without it.
  assert_int_equal(oslo::parse_manifest(v2, "mem", with).sections.size(), 0);
  // A section must be an object and may not replace a field of the format.
  nlohmann::json j = nlohmann::json::parse(text);
  j["example"] = 3;
  assert_int_equal(status_of([&] { oslo::parse_manifest(j.dump(), "mem", with); }, &msg),
                   OSLO_ERR_FORMAT);
  assert_true(contains(msg, "example: must be an object"));
  m.sections.clear();
  m.sections["files"] = nlohmann::json::object();
  assert_int_equal(status_of([&] { oslo::manifest_text(m); }, &msg), OSLO_ERR_INVALID_ARGUMENT);
}

// The training section (FORMAT.md "Training checkpoints"): read back equal,
// and each of the reader's checks.
oslo::Manifest training_sample() {
  oslo::Manifest m = sample(2);
  const std::vector<oslo::ManifestTensor> params = m.tensors;
  for (const char* state : {"exp_avg", "exp_avg_sq"})
    for (oslo::ManifestTensor t : params) {
      t.name = oslo::optimizer_tensor_name(state, t.name);
      t.dtype = st::Dtype::F32;
      for (oslo::ManifestShard& s : t.shards)
        s.bytes = static_cast<uint64_t>(s.length) * 4 * (t.shape.size() > 1 ? t.shape[1] : 1);
      m.tensors.push_back(t);
    }
  std::sort(
      m.tensors.begin(), m.tensors.end(),
      [](const oslo::ManifestTensor& a, const oslo::ManifestTensor& b) { return a.name < b.name; });
  oslo::TrainingSection t;
  t.trainer = {{"optimizer", "adamw"}, {"updates", 10}};
  t.state_names = {"exp_avg", "exp_avg_sq"};
  t.parameters = {"b", "w"};
  t.user_state = {{"data_position", 20}, {"seed", 1}};
  m.sections[oslo::kTrainingSection] = oslo::training_section_json(t);
  return m;
}

void test_training_section(void**) {
  std::string msg;
  oslo::ManifestReadOptions with;
  with.sections = {oslo::kTrainingSection};
  const oslo::Manifest m = training_sample();
  const std::string text = oslo::manifest_text(m);
  const oslo::Manifest back = oslo::parse_manifest(text, "mem", with);
  const oslo::TrainingSection t =
      oslo::parse_training_section(back.sections.at("training"), back.tensors, "mem");
  assert_true(t.state_names == std::vector<std::string>({"exp_avg", "exp_avg_sq"}));
  assert_true(t.parameters == std::vector<std::string>({"b", "w"}));
  assert_int_equal(t.trainer["updates"].get<int>(), 10);
  assert_int_equal(t.user_state["data_position"].get<int>(), 20);
  assert_int_equal(t.optimizer_tensors().size(), 4);
  assert_true(t.optimizer_tensors()[0] == "optimizer/exp_avg/b");
  // A reader that does not name the section refuses it.
  assert_int_equal(status_of([&] { oslo::parse_manifest(text, "mem"); }, &msg), OSLO_ERR_FORMAT);
  assert_true(contains(msg, "unknown field 'training'"));
  // Each check: an edit of the manifest's JSON and the words of its error.
  struct Case {
    const char* what;
    std::function<void(nlohmann::json&)> edit;
  };
  const std::vector<Case> cases = {
      {"unknown field 'extra'", [](nlohmann::json& j) { j["training"]["extra"] = 1; }},
      {"missing field 'user_state'", [](nlohmann::json& j) { j["training"].erase("user_state"); }},
      {"training section version 2 is not supported",
       [](nlohmann::json& j) { j["training"]["version"] = 2; }},
      {"must be an object with a string",
       [](nlohmann::json& j) { j["training"]["trainer"] = nlohmann::json::array(); }},
      {"is listed twice",
       [](nlohmann::json& j) { j["training"]["optimizer_state"].push_back("exp_avg"); }},
      {"is not a state name",
       [](nlohmann::json& j) { j["training"]["optimizer_state"][0] = "a/b"; }},
      {"parameter 'nope' is not in 'tensors'",
       [](nlohmann::json& j) { j["training"]["parameters"].push_back("nope"); }},
      {"is an optimizer tensor, not a parameter",
       [](nlohmann::json& j) { j["training"]["parameters"].push_back("optimizer/exp_avg/b"); }},
      {"optimizer state 'optimizer/exp_avg/w' of parameter 'w' is not in 'tensors'",
       [](nlohmann::json& j) { j["tensors"].erase("optimizer/exp_avg/w"); }},
      {"optimizer state must be F32",
       [](nlohmann::json& j) {
         j["tensors"]["optimizer/exp_avg/b"] = j["tensors"]["b"];
         j["tensors"]["optimizer/exp_avg/b"]["shards"][0]["key"] = "optimizer/exp_avg/b";
         j["tensors"]["optimizer/exp_avg/b"]["shape"] = {2};
         j["tensors"]["optimizer/exp_avg/b"]["shards"][0]["bytes"] = 8;
       }},
      {"an optimizer tensor that the training section does not list",
       [](nlohmann::json& j) { j["training"]["optimizer_state"] = {"exp_avg"}; }},
      {"a training section needs manifest version 2",
       [](nlohmann::json& j) {
         j["version"] = 1;
         j.erase("model_config");
         j.erase("extra_files");
         for (auto& t : j["tensors"])
           for (auto& s : t["shards"]) {
             s.erase("bytes");
             s.erase("crc32c");
           }
       }},
  };
  for (const Case& c : cases) {
    nlohmann::json j = nlohmann::json::parse(text);
    c.edit(j);
    const oslo_status s = status_of([&] { oslo::parse_manifest(j.dump(), "mem", with); }, &msg);
    if (s != OSLO_ERR_FORMAT || !contains(msg, c.what))
      print_error("case '%s': status %d, message %s\n", c.what, s, msg.c_str());
    assert_int_equal(s, OSLO_ERR_FORMAT);
    assert_true(contains(msg, c.what));
  }
  // The writer refuses a training section the reader would reject.
  oslo::Manifest bad = training_sample();
  bad.tensors.erase(bad.tensors.begin());  // "b", a listed parameter
  assert_int_equal(status_of([&] { oslo::manifest_text(bad); }, &msg), OSLO_ERR_INVALID_ARGUMENT);
  assert_true(contains(msg, "parameter 'b' is not in 'tensors'"));
}

// Checks either former reader had and the other lacked hold for both
// versions.
void test_union_of_checks(void**) {
  std::string msg;
  for (int v : {1, 2}) {
    nlohmann::json j = nlohmann::json::parse(oslo::manifest_text(sample(v)));
    // One file/key pair used twice by a tensor (offsets that would tile).
    nlohmann::json d = j;
    d["tensors"]["w"]["shards"][1]["file"] = "shard-a.safetensors";
    assert_int_equal(status_of([&] { oslo::parse_manifest(d.dump(), "mem"); }, &msg),
                     OSLO_ERR_FORMAT);
    assert_true(contains(msg, "file and key are used twice"));
    d = j;
    d["files"][1] = "shard-a.safetensors";
    assert_int_equal(status_of([&] { oslo::parse_manifest(d.dump(), "mem"); }, &msg),
                     OSLO_ERR_FORMAT);
    assert_true(contains(msg, "listed twice"));
    d = j;
    d["format"] = 5;
    assert_int_equal(status_of([&] { oslo::parse_manifest(d.dump(), "mem"); }, &msg),
                     OSLO_ERR_FORMAT);
    d = j;
    d["version"] = 99;
    assert_int_equal(status_of([&] { oslo::parse_manifest(d.dump(), "mem"); }, &msg),
                     OSLO_ERR_FORMAT);
    assert_true(contains(msg, "format version 99 is not supported"));
  }
}

// The writer refuses what the reader would reject, and assembles tensors
// from pieces with the tiling checks.
void test_writer_checks(void**) {
  std::string msg;
  oslo::Manifest m = sample(2);
  m.tensors[1].dtype = st::Dtype::F64;  // not an oslo dtype
  assert_int_equal(status_of([&] { oslo::manifest_text(m); }, &msg), OSLO_ERR_INVALID_ARGUMENT);
  assert_true(contains(msg, "unsupported dtype 'F64'"));
  m = sample(2);
  m.config_json = "[1]";
  assert_int_equal(status_of([&] { oslo::manifest_text(m); }, &msg), OSLO_ERR_INVALID_ARGUMENT);
  m = sample(1);
  m.extra_files = {"tokenizer.json"};
  assert_int_equal(status_of([&] { oslo::manifest_text(m); }, &msg), OSLO_ERR_INVALID_ARGUMENT);

  auto piece = [](int tp, int64_t off, int64_t len, bool stored) {
    oslo::ManifestPiece p;
    p.name = "w";
    p.key = "w";
    p.shape = {6, 4};
    p.split_dim = 0;
    p.offset = off;
    p.length = len;
    p.stored = stored;
    p.file = "f" + std::to_string(tp);
    p.tp = tp;
    return p;
  };
  std::vector<oslo::ManifestTensor> ts =
      oslo::assemble_tensors({piece(1, 3, 3, true), piece(0, 0, 3, true)});
  assert_int_equal(ts.size(), 1);
  assert_int_equal(ts[0].shards.size(), 2);
  assert_true(ts[0].shards[0].file == "f0");
  auto refused = [&](const std::vector<oslo::ManifestPiece>& pieces, const char* needle) {
    assert_int_equal(status_of([&] { oslo::assemble_tensors(pieces); }, &msg),
                     OSLO_ERR_INVALID_ARGUMENT);
    assert_true(contains(msg, needle));
  };
  refused({piece(0, 0, 3, true), piece(1, 4, 2, true)}, "leave rows 3..4 unsaved");
  refused({piece(0, 0, 4, true), piece(1, 3, 3, true)}, "two owners");
  oslo::ManifestPiece other = piece(1, 3, 3, true);
  other.shape = {7, 4};
  refused({piece(0, 0, 3, true), other}, "[7, 4]");
  assert_true(contains(msg, "[7, 4]") && contains(msg, "[6, 4]"));
}

// agree_on_outcome: nothing failed -> every rank returns; ranks 1 and 2 of 3
// fail -> every rank throws rank 1's status, rank 2 adds its own, cleanup
// runs everywhere.
void test_agreement(void**) {
  oslo::HashStore store;
  auto ok = ckpt_test::run_ranks(3, [&](int r) {
    oslo::Control comm(std::make_shared<ckpt_test::StoreComm>(&store, r, 3, "ok"));
    oslo::LocalOutcome mine("test");
    mine.run([] {});
    oslo::agree_on_outcome(comm, mine, "step");
  });
  for (const auto& res : ok) assert_int_equal(res.status, OSLO_OK);

  std::vector<int> cleaned(3, 0);
  oslo::HashStore store2;
  auto bad = ckpt_test::run_ranks(3, [&](int r) {
    oslo::Control comm(std::make_shared<ckpt_test::StoreComm>(&store2, r, 3, "bad"));
    oslo::LocalOutcome mine("test");
    mine.run([&] {
      if (r == 1) throw oslo::Error(OSLO_ERR_SHAPE, "rank one's shape error");
      if (r == 2) throw std::bad_alloc();
    });
    // A later step runs only where no earlier one failed (rank 0 here).
    mine.run([&] {
      if (r > 0) throw oslo::Error(OSLO_ERR_INTERNAL, "a later step that must not run");
    });
    oslo::agree_on_outcome(comm, mine, "step", [&] { cleaned[r] = 1; });
  });
  for (int r = 0; r < 3; ++r) {
    assert_int_equal(bad[r].status, OSLO_ERR_SHAPE);
    assert_true(contains(bad[r].message, "step failed on world rank 1"));
    assert_true(contains(bad[r].message, "rank one's shape error"));
    assert_int_equal(cleaned[r], 1);
  }
  assert_true(contains(bad[1].message, "(this rank)"));
  assert_true(contains(bad[2].message, "this rank failed too: out of memory in test"));
  assert_false(contains(bad[0].message, "must not run"));
}

}  // namespace

int main() {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trip),      cmocka_unit_test(test_versions_and_sections),
      cmocka_unit_test(test_union_of_checks), cmocka_unit_test(test_writer_checks),
      cmocka_unit_test(test_agreement),       cmocka_unit_test(test_training_section),
  };
  return cmocka_run_group_tests(tests, nullptr, nullptr);
}
