#include "core/checkpoint/manifest.hpp"

#include "core/common/dtype.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <set>
#include <unordered_set>
#include <utility>

#include "core/checkpoint/fs_util.hpp"
#include "core/common/error.hpp"
#include "core/common/log.hpp"
#include "core/common/shape_str.hpp"

namespace oslo {

const char* const kCheckpointManifest = "oslo_checkpoint.json";
const char* const kTrainingSection = "training";

namespace st = safetensors;
using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

namespace {

constexpr size_t kMaxManifestBytes = size_t{1} << 30;

bool starts_with(const std::string& s, const std::string& p) {
  return s.size() >= p.size() && s.compare(0, p.size(), p) == 0;
}
bool ends_with(const std::string& s, const std::string& p) {
  return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}

}  // namespace

bool plain_file_name(const std::string& f) {
  return !f.empty() && f != "." && f != ".." && f.find('/') == std::string::npos &&
         f.find('\0') == std::string::npos;
}

std::string hex32(uint32_t v) {
  char buf[12];
  std::snprintf(buf, sizeof buf, "%08" PRIx32, v);
  return buf;
}

std::string hex64(uint64_t v) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  return buf;
}

bool ManifestTensor::quantized() const {
  return dtype_is_block(quant);
}

std::vector<uint64_t> stored_piece_shape(oslo_dtype quant, const std::vector<int64_t>& shape,
                                         int split_dim, int64_t length) {
  std::vector<uint64_t> b(shape.begin(), shape.end());
  if (split_dim >= 0) b[split_dim] = static_cast<uint64_t>(length);
  if (!dtype_is_block(quant) || b.empty()) return b;
  uint64_t rows = 1;
  for (size_t i = 0; i + 1 < b.size(); ++i) rows *= b[i];
  return {rows, dtype_bytes(quant, static_cast<int64_t>(b.back()))};
}

uint64_t box_nbytes(st::Dtype dtype, oslo_dtype quant, const std::vector<int64_t>& shape,
                    int split_dim, int64_t length) {
  return st::tensor_nbytes(dtype, stored_piece_shape(quant, shape, split_dim, length));
}

uint64_t ManifestTensor::nbytes() const {
  if (quantized() && !shape.empty()) {
    uint64_t rows = 1;
    for (size_t i = 0; i + 1 < shape.size(); ++i) rows *= static_cast<uint64_t>(shape[i]);
    return rows * dtype_bytes(quant, shape.back());
  }
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);  // validated when read
  return n * st::dtype_bits(dtype) / 8;
}

// --------------------------------------------------------------------------
// Strict JSON accessors
// --------------------------------------------------------------------------

void StrictJson::bad(const std::string& where, const std::string& what) const {
  fail(OSLO_ERR_FORMAT, source_, ": ", where, ": ", what);
}

void StrictJson::exact_keys(const json& obj, const std::string& where,
                            const std::vector<std::string>& keys) const {
  if (!obj.is_object()) bad(where, "must be an object");
  for (const std::string& k : keys)
    if (!obj.contains(k)) bad(where, "missing field '" + k + "'");
  for (auto it = obj.begin(); it != obj.end(); ++it)
    if (std::find(keys.begin(), keys.end(), it.key()) == keys.end())
      bad(where, "unknown field " + quote(it.key()));
}

int64_t StrictJson::integer(const json& v, const std::string& where, int64_t lo, int64_t hi) const {
  int64_t x;
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) bad(where, "integer out of range");
    x = static_cast<int64_t>(u);
  } else if (v.is_number_integer()) {
    x = v.get<int64_t>();
  } else {
    bad(where, "must be an integer");
  }
  if (x < lo || x > hi)
    bad(where, "value " + std::to_string(x) + " is outside [" + std::to_string(lo) + ", " +
                   std::to_string(hi) + "]");
  return x;
}

std::string StrictJson::string(const json& v, const std::string& where) const {
  if (!v.is_string()) bad(where, "must be a string");
  return v.get<std::string>();
}

std::vector<int64_t> StrictJson::shape(const json& v, const std::string& where) const {
  if (!v.is_array()) bad(where, "must be an array of non-negative integers");
  std::vector<int64_t> s;
  uint64_t n = 1;
  for (size_t i = 0; i < v.size(); ++i) {
    s.push_back(integer(v[i], where + "[" + std::to_string(i) + "]", 0, INT64_MAX));
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(s.back()), &n) ||
        n > static_cast<uint64_t>(INT64_MAX) / 8)
      bad(where, "shape " + shape_str(s) + " overflows");
  }
  return s;
}

st::Dtype StrictJson::dtype(const json& v, const std::string& where) const {
  std::string name = string(v, where);
  st::Dtype sd;
  oslo_dtype od;
  if (!st::parse_dtype(name, &sd) || !st::to_oslo(sd, &od))
    bad(where, "unsupported dtype " + quote(name));
  return sd;
}

// --------------------------------------------------------------------------
// Reader
// --------------------------------------------------------------------------

namespace {

std::vector<std::string> top_level_keys(int version) {
  std::vector<std::string> keys = {"format",
                                   "version",
                                   "save_id",
                                   "tensor_parallel_size",
                                   "pipeline_parallel_size",
                                   "data_parallel_size",
                                   "files",
                                   "tensors"};
  if (version >= 2) {
    keys.push_back("model_config");
    keys.push_back("extra_files");
  }
  return keys;
}

ManifestTensor read_tensor(const StrictJson& sc, const std::string& name, const json& t, bool v2,
                           const std::unordered_set<std::string>& file_set) {
  const std::string where = "tensor " + quote(name);
  const bool has_quant = t.is_object() && t.contains("quant");
  if (has_quant)
    sc.exact_keys(t, where, {"dtype", "shape", "split_dim", "shards", "quant"});
  else
    sc.exact_keys(t, where, {"dtype", "shape", "split_dim", "shards"});
  ManifestTensor mt;
  mt.name = name;
  if (has_quant) {  // stored as bytes: U8, which no oslo dtype names
    if (sc.string(t["dtype"], where + ".dtype") != "U8")
      sc.bad(where + ".dtype", "a quantized tensor is stored as U8");
    mt.dtype = st::Dtype::U8;
  } else {
    mt.dtype = sc.dtype(t["dtype"], where + ".dtype");
  }
  mt.shape = sc.shape(t["shape"], where + ".shape");
  const int nd = static_cast<int>(mt.shape.size());
  int64_t qblock = 1;
  if (has_quant) {
    // A block-quantized tensor (docs/QUANTIZATION.md): stored as U8 rows of
    // whole blocks; `shape` is the logical one.
    const std::string q = sc.string(t["quant"], where + ".quant");
    oslo_dtype qd;
    if (!dtype_parse(q.c_str(), &qd) || !dtype_is_block(qd))
      sc.bad(where + ".quant",
             quote(q) + " is not a block-quantized dtype (q8_0, q4_0, q4_k, q6_k)");
    if (nd < 1) sc.bad(where + ".shape", "a quantized tensor has at least one dimension");
    int64_t bb;
    dtype_block(qd, &qblock, &bb);
    if (mt.shape[nd - 1] % qblock != 0)
      sc.bad(where + ".shape", "rows of " + std::to_string(mt.shape[nd - 1]) +
                                   " elements are not whole blocks of " + std::to_string(qblock));
    mt.quant = qd;
  }
  mt.split_dim = static_cast<int>(sc.integer(t["split_dim"], where + ".split_dim", -1, nd - 1));
  const json& shards = t["shards"];
  if (!shards.is_array()) sc.bad(where + ".shards", "must be an array");
  std::set<std::pair<std::string, std::string>> keys;
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string sw = where + ".shards[" + std::to_string(i) + "]";
    const json& s = shards[i];
    std::vector<std::string> needed = {"file", "key"};
    if (mt.split_dim >= 0) {
      needed.push_back("offset");
      needed.push_back("length");
    }
    if (v2) {
      needed.push_back("bytes");
      needed.push_back("crc32c");
    }
    sc.exact_keys(s, sw, needed);
    ManifestShard ms;
    if (mt.split_dim < 0) {
      ms.offset = 0;
      ms.length = nd > 0 ? mt.shape[0] : 1;
    } else {
      ms.offset = sc.integer(s["offset"], sw + ".offset", 0, INT64_MAX);
      ms.length = sc.integer(s["length"], sw + ".length", 1, INT64_MAX);
    }
    ms.file = sc.string(s["file"], sw + ".file");
    ms.key = sc.string(s["key"], sw + ".key");
    if (!plain_file_name(ms.file))
      sc.bad(sw + ".file", quote(ms.file) + " is not a plain file name");
    if (!file_set.count(ms.file)) sc.bad(sw + ".file", quote(ms.file) + " is not in 'files'");
    if (!keys.insert({ms.file, ms.key}).second)
      sc.bad(sw, "file and key are used twice by this tensor");
    if (v2) {
      ms.bytes = static_cast<uint64_t>(sc.integer(s["bytes"], sw + ".bytes", 0, INT64_MAX));
      const std::string c = sc.string(s["crc32c"], sw + ".crc32c");
      if (c.size() != 8 || c.find_first_not_of("0123456789abcdef") != std::string::npos)
        sc.bad(sw + ".crc32c", "must be 8 lowercase hex digits");
      ms.crc32c = static_cast<uint32_t>(std::stoul(c, nullptr, 16));
      ms.has_crc = true;
    }
    if (mt.quantized() && mt.split_dim == nd - 1 &&
        (ms.offset % qblock != 0 || ms.length % qblock != 0))
      sc.bad(sw,
             "a shard of a quantized tensor must start and end on a block boundary (blocks "
             "of " +
                 std::to_string(qblock) + ")");
    mt.shards.push_back(ms);
  }
  if (mt.split_dim < 0) {
    if (mt.shards.size() != 1)
      sc.bad(where + ".shards", "a replicated tensor needs exactly one shard");
  } else {
    std::sort(mt.shards.begin(), mt.shards.end(),
              [](const ManifestShard& a, const ManifestShard& b) { return a.offset < b.offset; });
    int64_t next = 0;
    for (const ManifestShard& s : mt.shards) {
      if (s.offset != next)
        sc.bad(where + ".shards", s.offset > next
                                      ? "rows " + std::to_string(next) + ".." +
                                            std::to_string(s.offset) + " are in no shard"
                                      : "shards overlap at row " + std::to_string(s.offset));
      if (__builtin_add_overflow(next, s.length, &next))
        sc.bad(where + ".shards", "shard rows overflow");
    }
    if (next != mt.shape[mt.split_dim])
      sc.bad(where + ".shards", "shards cover rows 0.." + std::to_string(next) + " of " +
                                    std::to_string(mt.shape[mt.split_dim]));
  }
  if (v2) {
    // The recorded byte sizes must match dtype and shape.
    for (const ManifestShard& s : mt.shards) {
      const uint64_t n = box_nbytes(mt.dtype, mt.quant, mt.shape, mt.split_dim, s.length);
      if (n != s.bytes)
        sc.bad(where + ".shards", "shard " + quote(s.key) + " records " + std::to_string(s.bytes) +
                                      " bytes, its shape needs " + std::to_string(n));
    }
  }
  return mt;
}

}  // namespace

Manifest parse_manifest(const std::string& text, const std::string& source,
                        const ManifestReadOptions& options) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    std::string what = e.what();
    size_t p = what.find("] ");
    fail(OSLO_ERR_FORMAT, clip(source, kQuotedPathMax),
         ": invalid JSON: ", clip(p == std::string::npos ? what : what.substr(p + 2), 200));
  }
  StrictJson sc(clip(source, kQuotedPathMax));
  if (!j.is_object()) sc.bad("manifest", "must be an object");
  if (!j.contains("format")) sc.bad("manifest", "missing field 'format'");
  if (sc.string(j["format"], "format") != kManifestFormat)
    sc.bad("format", std::string("is not '") + kManifestFormat + "'");
  if (!j.contains("version")) sc.bad("manifest", "missing field 'version'");
  Manifest m;
  const int64_t version = sc.integer(j["version"], "version", 1, INT64_MAX);
  if (version < options.min_version || version > options.max_version) {
    std::string why = options.newer_version_note;
    if (why.empty() || version < options.min_version)
      why = options.min_version == options.max_version
                ? "this reader reads version " + std::to_string(options.max_version)
                : "this build reads versions " + std::to_string(options.min_version) + " to " +
                      std::to_string(options.max_version);
    sc.bad("version",
           "format version " + std::to_string(version) + " is not supported (" + why + ")");
  }
  m.version = static_cast<int>(version);
  const bool v2 = m.version >= 2;
  std::vector<std::string> top = top_level_keys(m.version);
  for (const std::string& s : options.sections)
    if (j.contains(s)) top.push_back(s);
  sc.exact_keys(j, "manifest", top);
  for (const std::string& s : options.sections) {
    if (!j.contains(s)) continue;
    if (!j[s].is_object()) sc.bad(s, "must be an object");
    m.sections[s] = j[s];
  }
  m.save_id = sc.string(j["save_id"], "save_id");
  m.tp_size =
      static_cast<int>(sc.integer(j["tensor_parallel_size"], "tensor_parallel_size", 1, INT32_MAX));
  m.pp_size = static_cast<int>(
      sc.integer(j["pipeline_parallel_size"], "pipeline_parallel_size", 1, INT32_MAX));
  m.dp_size =
      static_cast<int>(sc.integer(j["data_parallel_size"], "data_parallel_size", 1, INT32_MAX));
  if (v2) {
    const json& mc = j["model_config"];
    if (!mc.is_object() && !mc.is_null()) sc.bad("model_config", "must be an object or null");
    if (mc.is_object()) m.config_json = mc.dump(2) + "\n";
    const json& ef = j["extra_files"];
    if (!ef.is_array()) sc.bad("extra_files", "must be an array of file names");
    std::set<std::string> seen;
    for (size_t i = 0; i < ef.size(); ++i) {
      const std::string w = "extra_files[" + std::to_string(i) + "]";
      std::string f = sc.string(ef[i], w);
      if (!plain_file_name(f) || f == kCheckpointManifest)
        sc.bad(w, quote(f) + " is not a plain file name");
      if (!seen.insert(f).second) sc.bad(w, quote(f) + " is listed twice");
      m.extra_files.push_back(f);
    }
  }
  const json& files = j["files"];
  if (!files.is_array()) sc.bad("files", "must be an array of file names");
  std::unordered_set<std::string> file_set;
  for (size_t i = 0; i < files.size(); ++i) {
    std::string where = "files[" + std::to_string(i) + "]";
    std::string f = sc.string(files[i], where);
    if (!plain_file_name(f)) sc.bad(where, quote(f) + " is not a plain file name");
    if (!file_set.insert(f).second) sc.bad(where, quote(f) + " is listed twice");
    m.files.push_back(f);
  }
  const json& tensors = j["tensors"];
  if (!tensors.is_object()) sc.bad("tensors", "must be an object");
  for (auto it = tensors.begin(); it != tensors.end(); ++it)  // sorted by name
    m.tensors.push_back(read_tensor(sc, it.key(), it.value(), v2, file_set));
  auto training = m.sections.find(kTrainingSection);
  if (training != m.sections.end()) {
    if (!v2) sc.bad(kTrainingSection, "a training section needs manifest version 2");
    (void)parse_training_section(training->second, m.tensors, source);
  }
  return m;
}

// --------------------------------------------------------------------------
// Training section
// --------------------------------------------------------------------------

std::string optimizer_tensor_name(const std::string& state, const std::string& param) {
  return "optimizer/" + state + "/" + param;
}

std::vector<std::string> TrainingSection::optimizer_tensors() const {
  std::vector<std::string> out;
  for (const std::string& s : state_names)
    for (const std::string& p : parameters) out.push_back(optimizer_tensor_name(s, p));
  return out;
}

TrainingSection parse_training_section(const json& j, const std::vector<ManifestTensor>& tensors,
                                       const std::string& source) {
  StrictJson sc(clip(source, kQuotedPathMax));
  const std::string w = kTrainingSection;
  sc.exact_keys(j, w, {"version", "trainer", "optimizer_state", "parameters", "user_state"});
  TrainingSection t;
  const int64_t version = sc.integer(j["version"], w + ".version", 1, INT64_MAX);
  if (version != kTrainingSectionVersion)
    sc.bad(w + ".version", "training section version " + std::to_string(version) +
                               " is not supported (this build reads version " +
                               std::to_string(kTrainingSectionVersion) + ")");
  t.version = static_cast<int>(version);
  t.trainer = j["trainer"];
  if (!t.trainer.is_object() || !t.trainer.contains("optimizer") ||
      !t.trainer["optimizer"].is_string())
    sc.bad(w + ".trainer", "must be an object with a string \"optimizer\"");
  auto names = [&](const char* key, std::vector<std::string>* out) {
    const json& a = j[key];
    if (!a.is_array()) sc.bad(w + "." + key, "must be an array of strings");
    std::set<std::string> seen;
    for (size_t i = 0; i < a.size(); ++i) {
      const std::string wi = w + "." + key + "[" + std::to_string(i) + "]";
      out->push_back(sc.string(a[i], wi));
      if (!seen.insert(out->back()).second) sc.bad(wi, quote(out->back()) + " is listed twice");
    }
  };
  names("optimizer_state", &t.state_names);
  names("parameters", &t.parameters);
  t.user_state = j["user_state"];
  for (const std::string& s : t.state_names)
    if (s.empty() || s.find('/') != std::string::npos)
      sc.bad(w + ".optimizer_state", quote(s) + " is not a state name (empty, or holds '/')");
  std::map<std::string, const ManifestTensor*> by_name;
  for (const ManifestTensor& mt : tensors) by_name[mt.name] = &mt;
  for (const std::string& p : t.parameters) {
    if (starts_with(p, "optimizer/"))
      sc.bad(w + ".parameters", quote(p) + " is an optimizer tensor, not a parameter");
    auto it = by_name.find(p);
    if (it == by_name.end())
      sc.bad(w + ".parameters", "parameter " + quote(p) + " is not in 'tensors'");
    for (const std::string& s : t.state_names) {
      const std::string o = optimizer_tensor_name(s, p);
      auto ot = by_name.find(o);
      if (ot == by_name.end())
        sc.bad(w, "optimizer state " + quote(o) + " of parameter " + quote(p) +
                      " is not in 'tensors'");
      if (ot->second->dtype != st::Dtype::F32 || ot->second->shape != it->second->shape)
        sc.bad("tensor " + quote(o), "optimizer state must be F32 of its parameter's shape " +
                                         shape_str(it->second->shape) + ", is " +
                                         st::dtype_name(ot->second->dtype) + " " +
                                         shape_str(ot->second->shape));
    }
  }
  const std::vector<std::string> listed = t.optimizer_tensors();
  const std::set<std::string> listed_set(listed.begin(), listed.end());
  for (const ManifestTensor& mt : tensors)
    if (starts_with(mt.name, "optimizer/") && !listed_set.count(mt.name))
      sc.bad("tensor " + quote(mt.name),
             "an optimizer tensor that the training section does not list");
  return t;
}

json training_section_json(const TrainingSection& t) {
  json j = json::object();
  j["version"] = t.version;
  j["trainer"] = t.trainer;
  j["optimizer_state"] = t.state_names;
  j["parameters"] = t.parameters;
  j["user_state"] = t.user_state;
  return j;
}

Manifest read_manifest(const std::string& dir, const ManifestReadOptions& options) {
  const std::string path = fsutil::join(dir, kCheckpointManifest);
  if (!fsutil::exists(path))
    fail(OSLO_ERR_IO, "no ", kCheckpointManifest, " in ", clip(dir, kQuotedPathMax));
  return parse_manifest(fsutil::read_small_file(path, kMaxManifestBytes), path, options);
}

// --------------------------------------------------------------------------
// Writer
// --------------------------------------------------------------------------

void check_model_config(const std::string& config_json) {
  if (config_json.find_first_not_of(" \t\r\n") == std::string::npos) return;
  json cfg;
  try {
    cfg = json::parse(config_json);
  } catch (const json::exception& e) {
    fail(OSLO_ERR_INVALID_ARGUMENT, "model config is not valid JSON: ", clip(e.what(), 200));
  }
  OSLO_CHECK(cfg.is_object(), OSLO_ERR_INVALID_ARGUMENT, "model config must be a JSON object");
}

ojson shard_json(const ManifestShard& s, bool split, bool with_bytes) {
  ojson js;
  js["file"] = s.file;
  js["key"] = s.key;
  if (split) {
    js["offset"] = s.offset;
    js["length"] = s.length;
  }
  if (with_bytes) js["bytes"] = s.bytes;
  if (s.has_crc) js["crc32c"] = hex32(s.crc32c);
  return js;
}

std::string manifest_text(const Manifest& m) {
  OSLO_CHECK(m.version >= 1 && m.version <= kManifestVersion, OSLO_ERR_INVALID_ARGUMENT,
             "manifest version ", m.version, " cannot be written");
  const bool v2 = m.version >= 2;
  ojson out;
  out["format"] = kManifestFormat;
  out["version"] = m.version;
  out["save_id"] = m.save_id;
  out["tensor_parallel_size"] = m.tp_size;
  out["pipeline_parallel_size"] = m.pp_size;
  out["data_parallel_size"] = m.dp_size;
  if (v2) {
    check_model_config(m.config_json);
    if (m.config_json.find_first_not_of(" \t\r\n") == std::string::npos)
      out["model_config"] = nullptr;
    else
      out["model_config"] = ojson::parse(m.config_json);  // key order kept
    out["extra_files"] = m.extra_files;
  } else {
    OSLO_CHECK(m.config_json.empty() && m.extra_files.empty(), OSLO_ERR_INVALID_ARGUMENT,
               "a version-1 manifest has no model_config or extra_files");
  }
  out["files"] = m.files;
  ojson tensors = ojson::object();
  for (const ManifestTensor& t : m.tensors) {
    ojson shards = ojson::array();
    for (ManifestShard s : t.shards) {
      s.has_crc = v2;  // version 2 records every piece's checksum, version 1 none
      shards.push_back(shard_json(s, t.split_dim >= 0, v2));
    }
    ojson jt;
    jt["dtype"] = st::dtype_name(t.dtype);
    if (t.quantized()) jt["quant"] = dtype_name(t.quant);
    jt["shape"] = t.shape;
    jt["split_dim"] = t.split_dim;
    jt["shards"] = std::move(shards);
    tensors[t.name] = std::move(jt);
  }
  out["tensors"] = std::move(tensors);
  ManifestReadOptions back;
  for (const auto& kv : m.sections) {
    OSLO_CHECK(!out.contains(kv.first) && !kv.first.empty(), OSLO_ERR_INVALID_ARGUMENT,
               "manifest section ", quote(kv.first), " would replace a field of the format");
    out[kv.first] = ojson::parse(kv.second.dump());
    back.sections.push_back(kv.first);
  }
  std::string text = out.dump(1) + "\n";
  // What is written must read back: the reader's checks are the schema.
  try {
    (void)parse_manifest(text, "the manifest to write", back);
  } catch (const Error& e) {
    fail(OSLO_ERR_INVALID_ARGUMENT, "refusing to write a manifest the reader rejects: ", e.what());
  }
  return text;
}

std::vector<ManifestTensor> assemble_tensors(const std::vector<ManifestPiece>& pieces) {
  std::map<std::string, std::vector<const ManifestPiece*>> by_name;
  for (const ManifestPiece& r : pieces) by_name[r.name].push_back(&r);
  std::vector<ManifestTensor> out;
  for (auto& kv : by_name) {
    const std::string& name = kv.first;
    int pp0 = INT32_MAX;
    for (const ManifestPiece* r : kv.second) pp0 = std::min(pp0, r->pp);
    const ManifestPiece* ref = nullptr;
    for (const ManifestPiece* r : kv.second)
      if (r->pp == pp0 && (!ref || r->tp < ref->tp)) ref = r;
    for (const ManifestPiece* r : kv.second)
      OSLO_CHECK(r->dtype == ref->dtype && r->quant == ref->quant && r->shape == ref->shape &&
                     r->split_dim == ref->split_dim,
                 OSLO_ERR_INVALID_ARGUMENT, "tensor ", quote(name), ": rank tp", r->tp, "/pp",
                 r->pp, " holds ", st::dtype_name(r->dtype), " ", shape_str(r->shape),
                 " split_dim ", r->split_dim, " but rank tp", ref->tp, "/pp", ref->pp, " holds ",
                 st::dtype_name(ref->dtype), " ", shape_str(ref->shape), " split_dim ",
                 ref->split_dim);
    std::vector<const ManifestPiece*> parts;
    for (const ManifestPiece* r : kv.second)
      if (r->pp == pp0 && r->stored) parts.push_back(r);
    std::sort(parts.begin(), parts.end(), [](const ManifestPiece* a, const ManifestPiece* b) {
      return a->offset != b->offset ? a->offset < b->offset : a->tp < b->tp;
    });
    ManifestTensor t;
    t.name = name;
    t.dtype = ref->dtype;
    t.quant = ref->quant;
    t.shape = ref->shape;
    t.split_dim = ref->split_dim;
    auto shard_of = [](const ManifestPiece* r) {
      ManifestShard s;
      s.file = r->file;
      s.key = r->key;
      s.offset = r->offset;
      s.length = r->length;
      s.bytes = r->bytes;
      s.has_crc = true;
      s.crc32c = r->crc;
      return s;
    };
    if (ref->split_dim < 0) {
      OSLO_CHECK(parts.size() == 1, OSLO_ERR_INVALID_ARGUMENT, "replicated tensor ", quote(name),
                 parts.empty() ? " has no owner (no rank stores it)"
                               : " has " + std::to_string(parts.size()) + " owners");
      t.shards.push_back(shard_of(parts[0]));
      t.shards.back().offset = 0;
      t.shards.back().length = t.shape.empty() ? 1 : t.shape[0];
    } else {
      const int64_t G = ref->shape[ref->split_dim];
      int64_t next = 0;
      for (const ManifestPiece* r : parts) {
        OSLO_CHECK(r->offset == next, OSLO_ERR_INVALID_ARGUMENT, "tensor ", quote(name),
                   ": the owned segments ", r->offset > next ? "leave rows " : "overlap at rows ",
                   std::min(next, r->offset), "..", std::max(next, r->offset),
                   r->offset > next ? " unsaved" : " (two owners)", " (split_dim ", ref->split_dim,
                   ", extent ", G, ")");
        OSLO_CHECK(!__builtin_add_overflow(next, r->length, &next), OSLO_ERR_INVALID_ARGUMENT,
                   "tensor ", quote(name), ": stored rows overflow");
        t.shards.push_back(shard_of(r));
      }
      OSLO_CHECK(next == G, OSLO_ERR_INVALID_ARGUMENT, "tensor ", quote(name),
                 ": the owned segments cover rows 0..", next, " of ", G, " along split_dim ",
                 ref->split_dim);
    }
    out.push_back(std::move(t));
  }
  return out;
}

void write_manifest(const std::string& dir, const Manifest& m) {
  const std::string text = manifest_text(m);
  fsutil::fault_point("save.before_manifest", dir);
  const std::string path = fsutil::join(dir, kCheckpointManifest);
  fsutil::write_atomically(path,
                           [&](int fd) { fsutil::write_all(fd, text.data(), text.size(), path); });
  fsutil::fault_point("save.after_manifest", path);
}

// --------------------------------------------------------------------------
// Cleanup after a commit
// --------------------------------------------------------------------------

void remove_quietly(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    int e = errno;
    Logger().log(LogLevel::Warn, "checkpoint: cannot remove '", path, "': ", fsutil::errno_text(e));
  }
}

void remove_stale_files(const std::string& dir, const std::vector<std::string>& keep,
                        const std::vector<std::string>& extras) {
  std::set<std::string> keep_set(keep.begin(), keep.end());
  std::vector<std::string> names;
  try {
    names = fsutil::list_dir(dir);
  } catch (const Error& e) {
    Logger().log(LogLevel::Warn, "checkpoint: cannot clean up old shards: ", e.what());
    return;
  }
  bool removed = false;
  for (const std::string& n : names) {
    const bool shard = starts_with(n, "shard-") && ends_with(n, ".safetensors");
    bool tmp = n.find(".tmp.") != std::string::npos &&
               (starts_with(n, "shard-") || fsutil::is_temp_of(n, kCheckpointManifest));
    for (const std::string& e : extras) tmp = tmp || fsutil::is_temp_of(n, e);
    if ((shard && !keep_set.count(n)) || tmp) {
      remove_quietly(fsutil::join(dir, n));
      removed = true;
    }
    fsutil::fault_point("save.cleanup_step", fsutil::join(dir, n));
  }
  if (!removed) return;
  try {
    fsutil::fsync_dir(dir);
  } catch (const Error& e) {
    Logger().log(LogLevel::Warn, "checkpoint: ", e.what());
  }
}

}  // namespace oslo
