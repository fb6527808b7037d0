#include "core/checkpoint/checkpoint.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "core/checkpoint/fs_util.hpp"
#include "core/checkpoint/safetensors.hpp"
#include "core/common/dtype.hpp"
#include "core/common/error.hpp"
#include "core/common/log.hpp"

namespace oslo {

const char* const kCheckpointManifest = "oslo_checkpoint.json";

namespace {

namespace st = safetensors;
using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

constexpr int kFormatVersion = 1;
constexpr const char* kFormatName = "oslo-checkpoint";
constexpr const char* kShardMetaKey = "oslo";
constexpr size_t kMaxManifestBytes = size_t{1} << 30;
constexpr size_t kBounceBytes = size_t{8} << 20;

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::string hex64(uint64_t v) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  return buf;
}

std::string shard_file_name(const std::string& save_id, int tp, int pp) {
  return "shard-" + save_id + "-tp" + std::to_string(tp) + "-pp" + std::to_string(pp) +
         ".safetensors";
}

bool starts_with(const std::string& s, const char* prefix) {
  size_t n = std::strlen(prefix);
  return s.size() >= n && s.compare(0, n, prefix) == 0;
}

bool ends_with(const std::string& s, const char* suffix) {
  size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// A plain file name inside the checkpoint directory (no path traversal).
bool valid_file_name(const std::string& f) {
  return !f.empty() && f != "." && f != ".." && f.find('/') == std::string::npos &&
         f.find('\0') == std::string::npos;
}

bool is_float(oslo_dtype dt) {
  return dt == OSLO_DTYPE_F32 || dt == OSLO_DTYPE_F16 || dt == OSLO_DTYPE_BF16;
}

// --------------------------------------------------------------------------
// Parameter validation (save and load)
// --------------------------------------------------------------------------

struct ParamGeom {
  int64_t real_rows = 0;  // split tensors: local rows inside the global tensor
  uint64_t local_numel = 0;
};

ParamGeom check_param(const ParamShard& p) {
  const std::string who = "parameter " + quote(p.name);
  OSLO_CHECK(!p.name.empty(), OSLO_ERR_INVALID_ARGUMENT, "parameter with an empty name");
  OSLO_CHECK(st::valid_utf8(p.name.data(), p.name.size()) && p.name != "__metadata__",
             OSLO_ERR_INVALID_ARGUMENT, who, ": name must be valid UTF-8 other than __metadata__");
  OSLO_CHECK(dtype_valid(static_cast<int>(p.dtype)), OSLO_ERR_DTYPE, who, ": unknown dtype ",
             static_cast<int>(p.dtype));
  const int nd = static_cast<int>(p.global_shape.size());
  OSLO_CHECK(p.local_shape.size() == p.global_shape.size(), OSLO_ERR_INVALID_ARGUMENT, who,
             ": local shape ", shape_str(p.local_shape), " and global shape ",
             shape_str(p.global_shape), " differ in rank");
  OSLO_CHECK(p.split_dim >= -1 && p.split_dim < nd, OSLO_ERR_INVALID_ARGUMENT, who, ": split_dim ",
             p.split_dim, " is out of range for ", nd, " dimensions");
  for (int d = 0; d < nd; ++d) {
    OSLO_CHECK(p.global_shape[d] >= 0 && p.local_shape[d] >= 0, OSLO_ERR_INVALID_ARGUMENT, who,
               ": negative extent in shape");
    if (d != p.split_dim)
      OSLO_CHECK(p.local_shape[d] == p.global_shape[d], OSLO_ERR_INVALID_ARGUMENT, who,
                 ": local shape ", shape_str(p.local_shape), " differs from global shape ",
                 shape_str(p.global_shape), " outside split_dim ", p.split_dim);
  }
  ParamGeom g;
  if (p.split_dim < 0) {
    OSLO_CHECK(p.offset == 0, OSLO_ERR_INVALID_ARGUMENT, who, ": replicated but offset is ",
               p.offset);
  } else {
    OSLO_CHECK(p.offset >= 0, OSLO_ERR_INVALID_ARGUMENT, who, ": negative offset ", p.offset);
    const int64_t G = p.global_shape[p.split_dim];
    const int64_t L = p.local_shape[p.split_dim];
    g.real_rows = p.offset >= G ? 0 : std::min<int64_t>(L, G - p.offset);
  }
  uint64_t n = 1;
  for (int64_t d : p.local_shape)
    OSLO_CHECK(!__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n), OSLO_ERR_INVALID_ARGUMENT,
               who, ": local shape overflows");
  uint64_t bytes;
  OSLO_CHECK(!__builtin_mul_overflow(n, dtype_size(p.dtype), &bytes) &&
                 bytes <= static_cast<uint64_t>(INT64_MAX),
             OSLO_ERR_INVALID_ARGUMENT, who, ": local shape overflows");
  uint64_t gn = 1;
  for (int64_t d : p.global_shape)
    OSLO_CHECK(!__builtin_mul_overflow(gn, static_cast<uint64_t>(d), &gn) &&
                   gn <= static_cast<uint64_t>(INT64_MAX) / 8,
               OSLO_ERR_INVALID_ARGUMENT, who, ": global shape ", shape_str(p.global_shape),
               " overflows");
  OSLO_CHECK(n == 0 || p.data != nullptr, OSLO_ERR_INVALID_ARGUMENT, who, ": data is NULL");
  g.local_numel = n;
  return g;
}

void check_unique(const std::vector<ParamShard>& params) {
  std::unordered_set<std::string> names;
  for (const ParamShard& p : params)
    OSLO_CHECK(names.insert(p.name).second, OSLO_ERR_INVALID_ARGUMENT, "parameter ", quote(p.name),
               " appears twice");
}

void check_layout(const CheckpointLayout& l, const Communicator& world) {
  auto in = [](int r, int n) { return n > 0 && r >= 0 && r < n; };
  OSLO_CHECK(in(l.tp_rank, l.tp_size) && in(l.pp_rank, l.pp_size) && in(l.dp_rank, l.dp_size) &&
                 in(l.world_rank, l.world_size),
             OSLO_ERR_INVALID_ARGUMENT, "checkpoint layout has a rank outside its group");
  OSLO_CHECK(static_cast<int64_t>(l.tp_size) * l.pp_size * l.dp_size == l.world_size,
             OSLO_ERR_INVALID_ARGUMENT, "checkpoint layout: tp ", l.tp_size, " x pp ", l.pp_size,
             " x dp ", l.dp_size, " is not the world size ", l.world_size);
  OSLO_CHECK(world.rank() == l.world_rank && world.size() == l.world_size,
             OSLO_ERR_INVALID_ARGUMENT, "checkpoint layout says world rank ", l.world_rank, " of ",
             l.world_size, " but the communicator is rank ", world.rank(), " of ", world.size());
}

// --------------------------------------------------------------------------
// Dtype conversion between oslo dtypes (float <-> float, int <-> int)
// --------------------------------------------------------------------------

void convert(oslo_dtype sdt, const void* src, oslo_dtype ddt, void* dst, size_t n,
             const std::string& tensor) {
  if (n == 0) return;
  if (sdt == ddt) {
    std::memcpy(dst, src, n * dtype_size(sdt));
    return;
  }
  if (is_float(sdt) && is_float(ddt)) {
    if (sdt == OSLO_DTYPE_F32) {
      from_f32(ddt, static_cast<const float*>(src), dst, n);
    } else if (ddt == OSLO_DTYPE_F32) {
      to_f32(sdt, src, static_cast<float*>(dst), n);
    } else {
      float tmp[1024];
      const char* s = static_cast<const char*>(src);
      char* d = static_cast<char*>(dst);
      for (size_t i = 0; i < n; i += 1024) {
        size_t m = std::min<size_t>(1024, n - i);
        to_f32(sdt, s + i * 2, tmp, m);
        from_f32(ddt, tmp, d + i * 2, m);
      }
    }
    return;
  }
  if (sdt == OSLO_DTYPE_I32 && ddt == OSLO_DTYPE_I64) {
    for (size_t i = 0; i < n; ++i) {
      int32_t v;
      std::memcpy(&v, static_cast<const char*>(src) + 4 * i, 4);
      int64_t w = v;
      std::memcpy(static_cast<char*>(dst) + 8 * i, &w, 8);
    }
    return;
  }
  if (sdt == OSLO_DTYPE_I64 && ddt == OSLO_DTYPE_I32) {
    for (size_t i = 0; i < n; ++i) {
      int64_t v;
      std::memcpy(&v, static_cast<const char*>(src) + 8 * i, 8);
      OSLO_CHECK(v >= INT32_MIN && v <= INT32_MAX, OSLO_ERR_DTYPE, "tensor ", quote(tensor),
                 ": value ", v, " does not fit the i32 parameter");
      int32_t w = static_cast<int32_t>(v);
      std::memcpy(static_cast<char*>(dst) + 4 * i, &w, 4);
    }
    return;
  }
  fail(OSLO_ERR_DTYPE, "tensor ", quote(tensor), ": cannot convert ", dtype_name(sdt), " to ",
       dtype_name(ddt));
}

bool convertible(oslo_dtype a, oslo_dtype b) {
  return a == b || (is_float(a) && is_float(b)) || (!is_float(a) && !is_float(b));
}

// --------------------------------------------------------------------------
// Manifest
// --------------------------------------------------------------------------

struct ManifestShard {
  std::string file;
  std::string key;
  int64_t offset = 0;  // along split_dim (0 for replicated)
  int64_t length = 0;  // rows along split_dim (the whole extent for replicated)
};

struct ManifestTensor {
  oslo_dtype dtype = OSLO_DTYPE_F32;
  std::vector<int64_t> shape;
  int split_dim = -1;
  std::vector<ManifestShard> shards;  // sorted by offset
};

struct Manifest {
  std::string save_id;
  int tp_size = 1, pp_size = 1, dp_size = 1;
  std::vector<std::string> files;
  std::map<std::string, ManifestTensor> tensors;
};

// Strict accessors: any deviation is OSLO_ERR_FORMAT naming the place.
class Schema {
 public:
  explicit Schema(std::string source) : source_(std::move(source)) {}

  [[noreturn]] void bad(const std::string& where, const std::string& what) const {
    fail(OSLO_ERR_FORMAT, source_, ": ", where, ": ", what);
  }
  void exact_keys(const json& obj, const std::string& where,
                  std::initializer_list<const char*> keys) const {
    if (!obj.is_object()) bad(where, "must be an object");
    for (const char* k : keys)
      if (!obj.contains(k)) bad(where, std::string("missing field '") + k + "'");
    for (auto it = obj.begin(); it != obj.end(); ++it) {
      bool known = false;
      for (const char* k : keys) known = known || it.key() == k;
      if (!known) bad(where, "unknown field " + quote(it.key()));
    }
  }
  int64_t integer(const json& v, const std::string& where, int64_t lo, int64_t hi) const {
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
  std::string string(const json& v, const std::string& where) const {
    if (!v.is_string()) bad(where, "must be a string");
    return v.get<std::string>();
  }
  std::vector<int64_t> shape(const json& v, const std::string& where) const {
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
  oslo_dtype dtype(const json& v, const std::string& where) const {
    std::string name = string(v, where);
    st::Dtype sd;
    oslo_dtype od;
    if (!st::parse_dtype(name, &sd) || !st::to_oslo(sd, &od))
      bad(where, "unsupported dtype " + quote(name));
    return od;
  }

 private:
  std::string source_;
};

Manifest parse_manifest(const std::string& dir) {
  const std::string path = fsutil::join(dir, kCheckpointManifest);
  if (!fsutil::exists(path))
    fail(OSLO_ERR_IO, "no ", kCheckpointManifest, " in ", clip(dir, kQuotedPathMax));
  const std::string text = fsutil::read_small_file(path, kMaxManifestBytes);
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    std::string what = e.what();
    size_t p = what.find("] ");
    fail(OSLO_ERR_FORMAT, clip(path, kQuotedPathMax),
         ": invalid JSON: ", clip(p == std::string::npos ? what : what.substr(p + 2), 200));
  }
  Schema sc(clip(path, kQuotedPathMax));
  sc.exact_keys(j, "manifest",
                {"format", "version", "save_id", "tensor_parallel_size", "pipeline_parallel_size",
                 "data_parallel_size", "files", "tensors"});
  if (sc.string(j["format"], "format") != kFormatName)
    sc.bad("format", std::string("is not '") + kFormatName + "'");
  int64_t version = sc.integer(j["version"], "version", 1, INT64_MAX);
  if (version != kFormatVersion)
    sc.bad("version", "format version " + std::to_string(version) +
                          " is not supported (this build reads version " +
                          std::to_string(kFormatVersion) + ")");
  Manifest m;
  m.save_id = sc.string(j["save_id"], "save_id");
  m.tp_size =
      static_cast<int>(sc.integer(j["tensor_parallel_size"], "tensor_parallel_size", 1, INT32_MAX));
  m.pp_size = static_cast<int>(
      sc.integer(j["pipeline_parallel_size"], "pipeline_parallel_size", 1, INT32_MAX));
  m.dp_size =
      static_cast<int>(sc.integer(j["data_parallel_size"], "data_parallel_size", 1, INT32_MAX));
  const json& files = j["files"];
  if (!files.is_array()) sc.bad("files", "must be an array of file names");
  std::unordered_set<std::string> file_set;
  for (size_t i = 0; i < files.size(); ++i) {
    std::string where = "files[" + std::to_string(i) + "]";
    std::string f = sc.string(files[i], where);
    if (!valid_file_name(f)) sc.bad(where, quote(f) + " is not a plain file name");
    if (!file_set.insert(f).second) sc.bad(where, quote(f) + " is listed twice");
    m.files.push_back(f);
  }
  const json& tensors = j["tensors"];
  if (!tensors.is_object()) sc.bad("tensors", "must be an object");
  for (auto it = tensors.begin(); it != tensors.end(); ++it) {
    const std::string where = "tensor " + quote(it.key());
    const json& t = it.value();
    sc.exact_keys(t, where, {"dtype", "shape", "split_dim", "shards"});
    ManifestTensor mt;
    mt.dtype = sc.dtype(t["dtype"], where + ".dtype");
    mt.shape = sc.shape(t["shape"], where + ".shape");
    const int nd = static_cast<int>(mt.shape.size());
    mt.split_dim = static_cast<int>(sc.integer(t["split_dim"], where + ".split_dim", -1, nd - 1));
    const json& shards = t["shards"];
    if (!shards.is_array()) sc.bad(where + ".shards", "must be an array");
    for (size_t i = 0; i < shards.size(); ++i) {
      const std::string sw = where + ".shards[" + std::to_string(i) + "]";
      const json& s = shards[i];
      ManifestShard ms;
      if (mt.split_dim < 0) {
        sc.exact_keys(s, sw, {"file", "key"});
        ms.offset = 0;
        ms.length = nd > 0 ? mt.shape[0] : 1;
      } else {
        sc.exact_keys(s, sw, {"file", "key", "offset", "length"});
        ms.offset = sc.integer(s["offset"], sw + ".offset", 0, INT64_MAX);
        ms.length = sc.integer(s["length"], sw + ".length", 1, INT64_MAX);
      }
      ms.file = sc.string(s["file"], sw + ".file");
      ms.key = sc.string(s["key"], sw + ".key");
      if (!valid_file_name(ms.file))
        sc.bad(sw + ".file", quote(ms.file) + " is not a plain file name");
      if (!file_set.count(ms.file)) sc.bad(sw + ".file", quote(ms.file) + " is not in 'files'");
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
    m.tensors.emplace(it.key(), std::move(mt));
  }
  return m;
}

// --------------------------------------------------------------------------
// Save
// --------------------------------------------------------------------------

// Per-tensor record in a shard file's __metadata__["oslo"].
struct ShardRecord {
  std::string name;
  oslo_dtype dtype = OSLO_DTYPE_F32;
  std::vector<int64_t> shape;  // global
  int split_dim = -1;
  int64_t offset = 0;
  int64_t length = 0;  // rows stored along split_dim (split tensors)
  bool stored = false;
  int tp = 0, pp = 0;
  std::string file;
};

std::vector<uint64_t> to_u64(const std::vector<int64_t>& v) {
  return std::vector<uint64_t>(v.begin(), v.end());
}

// Writes this rank's shard file.
void write_shard(const std::string& dir, const std::string& save_id,
                 const std::vector<ParamShard>& params, const CheckpointLayout& layout) {
  const std::string file = shard_file_name(save_id, layout.tp_rank, layout.pp_rank);
  std::vector<st::WriteEntry> entries;
  std::vector<std::unique_ptr<char[]>> copies;  // compacted slices of padded tensors
  ojson records = ojson::object();
  for (const ParamShard& p : params) {
    const ParamGeom g = check_param(p);
    ojson rec;
    rec["dtype"] = st::dtype_name(st::from_oslo(p.dtype));
    rec["shape"] = p.global_shape;
    rec["split_dim"] = p.split_dim;
    bool stored;
    std::vector<int64_t> shape = p.global_shape;
    const void* data = p.data;
    if (p.split_dim < 0) {
      rec["offset"] = 0;
      rec["length"] = 0;
      stored = layout.tp_rank == 0;
    } else {
      const int d = p.split_dim;
      rec["offset"] = p.offset;
      rec["length"] = g.real_rows;
      stored = g.real_rows > 0;
      shape[d] = g.real_rows;
      if (stored && g.real_rows < p.local_shape[d] && d > 0 && g.local_numel > 0) {
        // Padding along an inner dimension: gather the real rows of every
        // outer index into a compact buffer.
        const size_t es = dtype_size(p.dtype);
        size_t outer = 1, inner = 1;
        for (int k = 0; k < d; ++k) outer *= static_cast<size_t>(p.local_shape[k]);
        for (size_t k = d + 1; k < p.local_shape.size(); ++k)
          inner *= static_cast<size_t>(p.local_shape[k]);
        const size_t src_row = static_cast<size_t>(p.local_shape[d]) * inner * es;
        const size_t dst_row = static_cast<size_t>(g.real_rows) * inner * es;
        std::unique_ptr<char[]> buf(new char[outer * dst_row]);
        for (size_t o = 0; o < outer; ++o)
          std::memcpy(buf.get() + o * dst_row, static_cast<const char*>(p.data) + o * src_row,
                      dst_row);
        data = buf.get();
        copies.push_back(std::move(buf));
      }
    }
    rec["stored"] = stored;
    records[p.name] = std::move(rec);
    if (stored) entries.push_back({p.name, st::from_oslo(p.dtype), to_u64(shape), data});
  }
  ojson meta;
  meta["version"] = kFormatVersion;
  meta["save_id"] = save_id;
  meta["tp_rank"] = layout.tp_rank;
  meta["tp_size"] = layout.tp_size;
  meta["pp_rank"] = layout.pp_rank;
  meta["pp_size"] = layout.pp_size;
  meta["tensors"] = std::move(records);
  std::map<std::string, std::string> metadata{{kShardMetaKey, meta.dump()}};
  st::write_file(fsutil::join(dir, file), entries, &metadata);
  fsutil::fault_point("save.after_shard_write", fsutil::join(dir, file));
}

// Reads the records of one shard file written by this save (rank 0, after
// every writer finished) and checks them against the file's tensors.
std::vector<ShardRecord> read_shard_records(const std::string& dir, const std::string& file,
                                            const std::string& save_id, int tp, int pp,
                                            const CheckpointLayout& layout) {
  const std::string path = fsutil::join(dir, file);
  st::Reader rd(path);
  Schema sc(clip(path, kQuotedPathMax));
  auto mit = rd.header().metadata.find(kShardMetaKey);
  if (mit == rd.header().metadata.end()) sc.bad("__metadata__", "missing the 'oslo' entry");
  json meta;
  try {
    meta = json::parse(mit->second);
  } catch (const json::exception& e) {
    sc.bad("__metadata__.oslo", std::string("invalid JSON: ") + e.what());
  }
  sc.exact_keys(meta, "__metadata__.oslo",
                {"version", "save_id", "tp_rank", "tp_size", "pp_rank", "pp_size", "tensors"});
  if (sc.integer(meta["version"], "version", 0, INT64_MAX) != kFormatVersion ||
      sc.string(meta["save_id"], "save_id") != save_id ||
      sc.integer(meta["tp_rank"], "tp_rank", 0, INT32_MAX) != tp ||
      sc.integer(meta["pp_rank"], "pp_rank", 0, INT32_MAX) != pp ||
      sc.integer(meta["tp_size"], "tp_size", 0, INT32_MAX) != layout.tp_size ||
      sc.integer(meta["pp_size"], "pp_size", 0, INT32_MAX) != layout.pp_size)
    sc.bad("__metadata__.oslo", "does not belong to this save (save id " + save_id + ", tp " +
                                    std::to_string(tp) + ", pp " + std::to_string(pp) + ")");
  const json& ts = meta["tensors"];
  if (!ts.is_object()) sc.bad("__metadata__.oslo.tensors", "must be an object");
  std::vector<ShardRecord> out;
  for (auto it = ts.begin(); it != ts.end(); ++it) {
    const std::string where = "record of " + quote(it.key());
    const json& r = it.value();
    sc.exact_keys(r, where, {"dtype", "shape", "split_dim", "offset", "length", "stored"});
    ShardRecord rec;
    rec.name = it.key();
    rec.dtype = sc.dtype(r["dtype"], where + ".dtype");
    rec.shape = sc.shape(r["shape"], where + ".shape");
    rec.split_dim = static_cast<int>(sc.integer(r["split_dim"], where + ".split_dim", -1,
                                                static_cast<int64_t>(rec.shape.size()) - 1));
    rec.offset = sc.integer(r["offset"], where + ".offset", 0, INT64_MAX);
    rec.length = sc.integer(r["length"], where + ".length", 0, INT64_MAX);
    if (!r["stored"].is_boolean()) sc.bad(where + ".stored", "must be a boolean");
    rec.stored = r["stored"].get<bool>();
    rec.tp = tp;
    rec.pp = pp;
    rec.file = file;
    if (rec.stored) {
      std::vector<int64_t> expect = rec.shape;
      if (rec.split_dim >= 0) expect[rec.split_dim] = rec.length;
      const st::TensorInfo& ti = rd.at(rec.name);
      if (ti.dtype != st::from_oslo(rec.dtype) || ti.shape != to_u64(expect))
        sc.bad("tensor " + quote(rec.name), "stored dtype/shape differ from its record");
    }
    out.push_back(std::move(rec));
  }
  return out;
}

// Rank 0: merges the records of every shard file into the manifest text.
std::string build_manifest(const std::string& dir, const std::string& save_id,
                           const CheckpointLayout& layout, std::vector<std::string>* files_out) {
  std::map<std::string, std::vector<ShardRecord>> by_name;
  std::vector<std::string> files;
  for (int pp = 0; pp < layout.pp_size; ++pp)
    for (int tp = 0; tp < layout.tp_size; ++tp) {
      const std::string file = shard_file_name(save_id, tp, pp);
      files.push_back(file);
      std::vector<ShardRecord> recs;
      try {
        recs = read_shard_records(dir, file, save_id, tp, pp, layout);
      } catch (const Error& e) {
        if (e.status() != OSLO_ERR_IO) throw;
        fail(OSLO_ERR_IO, e.what(), " (world rank 0 reads every shard: is ", quote_path(dir),
             " on a file system shared by all ranks?)");
      }
      for (ShardRecord& r : recs) by_name[r.name].push_back(std::move(r));
    }

  ojson tensors = ojson::object();
  for (auto& kv : by_name) {
    const std::string& name = kv.first;
    std::vector<ShardRecord>& recs = kv.second;
    // A tensor held by several pipeline stages (tied weights) is taken from
    // the first stage; every copy must describe the same tensor.
    int pp0 = layout.pp_size;
    for (const ShardRecord& r : recs) pp0 = std::min(pp0, r.pp);
    const ShardRecord* ref = nullptr;
    for (const ShardRecord& r : recs)
      if (r.pp == pp0 && (!ref || r.tp < ref->tp)) ref = &r;
    for (const ShardRecord& r : recs)
      OSLO_CHECK(r.dtype == ref->dtype && r.shape == ref->shape && r.split_dim == ref->split_dim,
                 OSLO_ERR_INVALID_ARGUMENT, "tensor ", quote(name), ": rank tp", r.tp, "/pp", r.pp,
                 " saves ", dtype_name(r.dtype), " ", shape_str(r.shape), " split_dim ",
                 r.split_dim, " but rank tp", ref->tp, "/pp", ref->pp, " saves ",
                 dtype_name(ref->dtype), " ", shape_str(ref->shape), " split_dim ", ref->split_dim);
    ojson shards = ojson::array();
    if (ref->split_dim < 0) {
      const ShardRecord* owner = nullptr;
      for (const ShardRecord& r : recs)
        if (r.pp == pp0 && r.tp == 0 && r.stored) owner = &r;
      OSLO_CHECK(owner, OSLO_ERR_INVALID_ARGUMENT, "replicated tensor ", quote(name),
                 " is not held by tensor-parallel rank 0 of pipeline stage ", pp0);
      ojson s;
      s["file"] = owner->file;
      s["key"] = name;
      shards.push_back(std::move(s));
    } else {
      std::vector<const ShardRecord*> parts;
      for (const ShardRecord& r : recs)
        if (r.pp == pp0 && r.stored) parts.push_back(&r);
      std::sort(parts.begin(), parts.end(),
                [](const ShardRecord* a, const ShardRecord* b) { return a->offset < b->offset; });
      const int64_t G = ref->shape[ref->split_dim];
      int64_t next = 0;
      for (const ShardRecord* r : parts) {
        OSLO_CHECK(r->offset == next, OSLO_ERR_INVALID_ARGUMENT, "tensor ", quote(name),
                   ": the tensor-parallel slices ",
                   r->offset > next ? "leave rows " : "overlap at rows ", std::min(next, r->offset),
                   "..", std::max(next, r->offset), r->offset > next ? " unsaved" : "",
                   " (split_dim ", ref->split_dim, ", extent ", G, ")");
        OSLO_CHECK(!__builtin_add_overflow(next, r->length, &next), OSLO_ERR_INVALID_ARGUMENT,
                   "tensor ", quote(name), ": slice rows overflow");
        ojson s;
        s["file"] = r->file;
        s["key"] = name;
        s["offset"] = r->offset;
        s["length"] = r->length;
        shards.push_back(std::move(s));
      }
      OSLO_CHECK(next == G, OSLO_ERR_INVALID_ARGUMENT, "tensor ", quote(name),
                 ": the tensor-parallel slices cover rows 0..", next, " of ", G,
                 " along split_dim ", ref->split_dim);
    }
    ojson t;
    t["dtype"] = st::dtype_name(st::from_oslo(ref->dtype));
    t["shape"] = ref->shape;
    t["split_dim"] = ref->split_dim;
    t["shards"] = std::move(shards);
    tensors[name] = std::move(t);
  }
  ojson m;
  m["format"] = kFormatName;
  m["version"] = kFormatVersion;
  m["save_id"] = save_id;
  m["tensor_parallel_size"] = layout.tp_size;
  m["pipeline_parallel_size"] = layout.pp_size;
  m["data_parallel_size"] = layout.dp_size;
  m["files"] = files;
  m["tensors"] = std::move(tensors);
  *files_out = files;
  return m.dump(1) + "\n";
}

// Rank 0, after the new manifest is durable: removes shard files no manifest
// refers to any more and temporaries of interrupted saves. Never throws.
void remove_stale_files(const std::string& dir, const std::vector<std::string>& keep) {
  Logger log;
  std::set<std::string> keep_set(keep.begin(), keep.end());
  std::vector<std::string> names;
  try {
    names = fsutil::list_dir(dir);
  } catch (const Error& e) {
    log.log(LogLevel::Warn, "checkpoint: cannot clean up old shards: ", e.what());
    return;
  }
  bool removed = false;
  for (const std::string& n : names) {
    bool shard = starts_with(n, "shard-") && ends_with(n, ".safetensors");
    bool shard_tmp = starts_with(n, "shard-") && n.find(".safetensors.tmp.") != std::string::npos;
    bool manifest_tmp = fsutil::is_temp_of(n, kCheckpointManifest);
    if ((shard && !keep_set.count(n)) || shard_tmp || manifest_tmp) {
      const std::string path = fsutil::join(dir, n);
      if (::unlink(path.c_str()) != 0) {
        int e = errno;
        log.log(LogLevel::Warn, "checkpoint: cannot remove old file '", path,
                "': ", fsutil::errno_text(e));
      } else {
        removed = true;
      }
    }
    fsutil::fault_point("save.cleanup_step", fsutil::join(dir, n));
  }
  if (removed) {
    try {
      fsutil::fsync_dir(dir);
    } catch (const Error& e) {
      log.log(LogLevel::Warn, "checkpoint: ", e.what());
    }
  }
}

// Captures an exception from a step of the save so that the rank can still
// take part in the collectives that tell everyone about it.
struct Failure {
  oslo_status status = OSLO_OK;
  std::string message;
  bool failed() const { return status != OSLO_OK; }
  template <typename Fn>
  void run(Fn&& fn) {
    if (failed()) return;
    try {
      fn();
    } catch (const Error& e) {
      status = e.status();
      message = e.what();
    } catch (const std::bad_alloc&) {
      status = OSLO_ERR_OUT_OF_MEMORY;
      message = "out of memory in a checkpoint save or load";
    } catch (const std::exception& e) {
      status = OSLO_ERR_INTERNAL;
      message = std::string("checkpoint: ") + e.what();
    }
  }
};

// All-reduces (failing world rank + 1, status) with MAX; returns it.
std::pair<int, oslo_status> agree(Communicator& world, const Failure& f) {
  // Host memory: a group of one does not communicate (its communicator's
  // buffers are device memory).
  if (world.size() == 1) return {f.failed() ? 0 : -1, f.status};
  int32_t v[2] = {f.failed() ? world.rank() + 1 : 0, static_cast<int32_t>(f.status)};
  world.all_reduce(v, v, 2, OSLO_DTYPE_I32, OSLO_REDUCE_MAX);
  return {v[0] - 1, static_cast<oslo_status>(v[1])};
}

void remove_quietly(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    int e = errno;
    Logger().log(LogLevel::Warn, "checkpoint: cannot remove '", path, "': ", fsutil::errno_text(e));
  }
}

// --------------------------------------------------------------------------
// Load
// --------------------------------------------------------------------------

// Copies runs of elements from one shard tensor into a destination buffer,
// converting the dtype; consecutive runs that are adjacent in the file are
// read with one pread (only bytes that are needed are ever read).
class RunCopier {
 public:
  RunCopier(const st::Reader& rd, const st::TensorInfo& ti, oslo_dtype sdt, void* dst,
            oslo_dtype ddt, std::vector<uint64_t>* bounce, const std::string& name)
      : rd_(rd),
        ti_(ti),
        sdt_(sdt),
        ddt_(ddt),
        dst_(static_cast<char*>(dst)),
        bounce_(bounce),
        name_(name),
        ss_(dtype_size(sdt)),
        ds_(dtype_size(ddt)),
        cap_(kBounceBytes / ss_) {}
  ~RunCopier() = default;

  // n elements from source element src into destination element dst.
  void add(uint64_t src, uint64_t dst, uint64_t n) {
    if (n == 0) return;
    if (sdt_ == ddt_ && n >= cap_) {  // large same-dtype run: straight into place
      flush();
      rd_.read(ti_, src * ss_, n * ss_, dst_ + dst * ds_);
      return;
    }
    while (n > 0) {
      uint64_t piece = std::min<uint64_t>(n, cap_);
      if (!runs_.empty() && (src != batch_src_ + batch_n_ || batch_n_ + piece > cap_)) flush();
      if (runs_.empty()) {
        batch_src_ = src;
        batch_n_ = 0;
      }
      runs_.push_back({dst, piece, batch_n_});
      batch_n_ += piece;
      src += piece;
      dst += piece;
      n -= piece;
    }
  }

  void flush() {
    if (runs_.empty()) return;
    const size_t bytes = static_cast<size_t>(batch_n_ * ss_);
    if (bounce_->size() * 8 < bytes) bounce_->resize((bytes + 7) / 8);
    char* b = reinterpret_cast<char*>(bounce_->data());
    rd_.read(ti_, batch_src_ * ss_, bytes, b);
    for (const Run& r : runs_)
      convert(sdt_, b + r.bounce * ss_, ddt_, dst_ + r.dst * ds_, static_cast<size_t>(r.n), name_);
    runs_.clear();
    batch_n_ = 0;
  }

 private:
  struct Run {
    uint64_t dst, n, bounce;
  };
  const st::Reader& rd_;
  const st::TensorInfo& ti_;
  oslo_dtype sdt_, ddt_;
  char* dst_;
  std::vector<uint64_t>* bounce_;
  const std::string& name_;
  uint64_t ss_, ds_, cap_;
  std::vector<Run> runs_;
  uint64_t batch_src_ = 0, batch_n_ = 0;
};

std::vector<uint64_t> strides_of(const std::vector<int64_t>& shape) {
  std::vector<uint64_t> s(shape.size());
  uint64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    s[i] = acc;
    acc *= static_cast<uint64_t>(shape[i]);
  }
  return s;
}

// Copies the box [lo, hi) of global coordinates. The source tensor (shape
// sshape) starts at global coordinates sorg, the destination (dshape) at dorg.
void copy_box(RunCopier& rc, const std::vector<int64_t>& lo, const std::vector<int64_t>& hi,
              const std::vector<int64_t>& sorg, const std::vector<int64_t>& sshape,
              const std::vector<int64_t>& dorg, const std::vector<int64_t>& dshape) {
  const int nd = static_cast<int>(lo.size());
  for (int j = 0; j < nd; ++j)
    if (hi[j] <= lo[j]) return;  // empty
  if (nd == 0) {
    rc.add(0, 0, 1);
    rc.flush();
    return;
  }
  // Innermost dimension where the box is narrower than the source or the
  // destination: everything inside it is one contiguous run in both.
  int k = 0;
  for (int j = nd - 1; j >= 0; --j)
    if (hi[j] - lo[j] != sshape[j] || hi[j] - lo[j] != dshape[j]) {
      k = j;
      break;
    }
  const std::vector<uint64_t> ss = strides_of(sshape), ds = strides_of(dshape);
  const uint64_t run = static_cast<uint64_t>(hi[k] - lo[k]) * ss[k];
  std::vector<int64_t> idx(lo.begin(), lo.begin() + k);
  for (;;) {
    uint64_t so = static_cast<uint64_t>(lo[k] - sorg[k]) * ss[k];
    uint64_t dof = static_cast<uint64_t>(lo[k] - dorg[k]) * ds[k];
    for (int j = 0; j < k; ++j) {
      so += static_cast<uint64_t>(idx[j] - sorg[j]) * ss[j];
      dof += static_cast<uint64_t>(idx[j] - dorg[j]) * ds[j];
    }
    rc.add(so, dof, run);
    int j = k - 1;
    for (; j >= 0; --j) {
      if (++idx[j] < hi[j]) break;
      idx[j] = lo[j];
    }
    if (j < 0) break;
  }
  rc.flush();
}

struct LoadPiece {
  const ManifestShard* shard;
  const st::TensorInfo* info;
  st::Reader* reader;
};

struct LoadPlan {
  const ParamShard* param;
  const ManifestTensor* tensor;
  int64_t real_rows;
  std::vector<LoadPiece> pieces;
};

}  // namespace

// --------------------------------------------------------------------------

void save_checkpoint(const std::string& dir, const std::vector<ParamShard>& params,
                     const CheckpointLayout& layout, Communicator& world) {
  Failure f;
  f.run([&] {
    OSLO_CHECK(!dir.empty(), OSLO_ERR_INVALID_ARGUMENT, "checkpoint directory is empty");
    check_layout(layout, world);
    check_unique(params);
    for (const ParamShard& p : params) check_param(p);
  });

  // World rank 0 picks the save id; it names the new shard files, so a save
  // never overwrites a file the current manifest refers to.
  uint64_t id = 0;
  if (world.rank() == 0) {
    f.run([&] {
      do {
        id = fsutil::random_u64();
      } while (fsutil::exists(fsutil::join(dir, shard_file_name(hex64(id), 0, 0))));
    });
  }
  if (world.size() > 1) world.broadcast(&id, 1, OSLO_DTYPE_I64, 0);
  const std::string save_id = hex64(id);

  const bool writer = layout.dp_rank == 0;
  std::string my_file;  // set before writing: a failure after the rename must remove it
  if (writer) {
    f.run([&] {
      fsutil::make_dirs(dir);
      my_file = shard_file_name(save_id, layout.tp_rank, layout.pp_rank);
      write_shard(dir, save_id, params, layout);
    });
  }

  std::pair<int, oslo_status> outcome;
  try {
    outcome = agree(world, f);
  } catch (...) {
    if (!my_file.empty()) remove_quietly(fsutil::join(dir, my_file));
    throw;
  }
  if (outcome.first >= 0) {
    if (!my_file.empty()) remove_quietly(fsutil::join(dir, my_file));
    if (f.failed()) throw Error(f.status, f.message);
    fail(outcome.second, "checkpoint save to ", quote_path(dir), " failed on world rank ",
         outcome.first, " (see that rank's error); the previous checkpoint is unchanged");
  }

  // Every shard is durable: world rank 0 commits the manifest.
  std::vector<std::string> files;
  if (world.rank() == 0) {
    f.run([&] {
      fsutil::fault_point("save.before_manifest", dir);
      const std::string text = build_manifest(dir, save_id, layout, &files);
      const std::string path = fsutil::join(dir, kCheckpointManifest);
      fsutil::write_atomically(
          path, [&](int fd) { fsutil::write_all(fd, text.data(), text.size(), path); });
      fsutil::fault_point("save.after_manifest", path);
    });
    if (f.failed()) {
      for (int pp = 0; pp < layout.pp_size; ++pp)
        for (int tp = 0; tp < layout.tp_size; ++tp)
          remove_quietly(fsutil::join(dir, shard_file_name(save_id, tp, pp)));
    } else {
      remove_stale_files(dir, files);
    }
  }
  outcome = agree(world, f);
  if (outcome.first >= 0) {
    if (f.failed()) throw Error(f.status, f.message);
    fail(outcome.second, "checkpoint save to ", quote_path(dir), " failed on world rank ",
         outcome.first, " (see that rank's error); the previous checkpoint is unchanged");
  }
}

void load_checkpoint(const std::string& dir, const std::vector<ParamShard>& params,
                     CheckpointLoadStats* stats) {
  OSLO_CHECK(!dir.empty(), OSLO_ERR_INVALID_ARGUMENT, "checkpoint directory is empty");
  check_unique(params);
  std::vector<ParamGeom> geoms;
  for (const ParamShard& p : params) geoms.push_back(check_param(p));

  const Manifest m = parse_manifest(dir);

  // Plan everything (and open and validate every shard needed) before the
  // first byte of any parameter is written.
  std::map<std::string, std::unique_ptr<st::Reader>> readers;
  std::set<std::pair<std::string, std::string>> checked;  // (file, key) validated
  std::vector<LoadPlan> plans;
  for (size_t i = 0; i < params.size(); ++i) {
    const ParamShard& p = params[i];
    auto it = m.tensors.find(p.name);
    OSLO_CHECK(it != m.tensors.end(), OSLO_ERR_FORMAT, "tensor ", quote(p.name),
               " is not in the checkpoint in ", clip(dir, kQuotedPathMax));
    const ManifestTensor& t = it->second;
    OSLO_CHECK(t.shape == p.global_shape, OSLO_ERR_SHAPE, "tensor ", quote(p.name),
               ": the checkpoint in ", clip(dir, kQuotedPathMax), " has shape ", shape_str(t.shape),
               " but the parameter's global shape is ", shape_str(p.global_shape));
    OSLO_CHECK(convertible(t.dtype, p.dtype), OSLO_ERR_DTYPE, "tensor ", quote(p.name),
               ": cannot load the checkpoint's ", dtype_name(t.dtype), " into a ",
               dtype_name(p.dtype), " parameter");
    LoadPlan plan{&p, &t, geoms[i].real_rows, {}};
    const int l = p.split_dim, s = t.split_dim;
    for (const ManifestShard& sh : t.shards) {
      // Rows this shard holds along s, and the rows the parameter needs along l.
      if (s >= 0 && s == l &&
          (sh.offset >= p.offset + plan.real_rows || sh.offset + sh.length <= p.offset))
        continue;
      if (l >= 0 && plan.real_rows == 0) continue;
      auto rit = readers.find(sh.file);
      if (rit == readers.end())
        rit = readers.emplace(sh.file, std::make_unique<st::Reader>(fsutil::join(dir, sh.file)))
                  .first;
      st::Reader& rd = *rit->second;
      const st::TensorInfo& ti = rd.at(sh.key);
      if (checked.insert({sh.file, sh.key}).second) {
        std::vector<int64_t> expect = t.shape;
        if (s >= 0) expect[s] = sh.length;
        OSLO_CHECK(ti.dtype == st::from_oslo(t.dtype) && ti.shape == to_u64(expect),
                   OSLO_ERR_FORMAT, clip(rd.path(), kQuotedPathMax), ": tensor ", quote(sh.key),
                   " is ", st::dtype_name(ti.dtype), " ",
                   shape_str(std::vector<int64_t>(ti.shape.begin(), ti.shape.end())),
                   " but the manifest expects ", st::dtype_name(st::from_oslo(t.dtype)), " ",
                   shape_str(expect));
      }
      plan.pieces.push_back({&sh, &ti, &rd});
    }
    plans.push_back(std::move(plan));
  }

  std::vector<uint64_t> bounce;
  for (const LoadPlan& plan : plans) {
    const ParamShard& p = *plan.param;
    const ManifestTensor& t = *plan.tensor;
    const int nd = static_cast<int>(p.global_shape.size());
    const int l = p.split_dim, s = t.split_dim;
    // Box of global coordinates this parameter needs.
    std::vector<int64_t> need_lo(nd, 0), need_hi(p.global_shape), dorg(nd, 0);
    if (l >= 0) {
      need_lo[l] = p.offset;
      need_hi[l] = p.offset + plan.real_rows;
      dorg[l] = p.offset;
    }
    for (const LoadPiece& piece : plan.pieces) {
      std::vector<int64_t> lo = need_lo, hi = need_hi, sorg(nd, 0), sshape(t.shape);
      if (s >= 0) {
        sorg[s] = piece.shard->offset;
        sshape[s] = piece.shard->length;
        lo[s] = std::max(lo[s], piece.shard->offset);
        hi[s] = std::min(hi[s], piece.shard->offset + piece.shard->length);
      }
      RunCopier rc(*piece.reader, *piece.info, t.dtype, p.data, p.dtype, &bounce, p.name);
      copy_box(rc, lo, hi, sorg, sshape, dorg, p.local_shape);
    }
    // Rows past the global end (padding) are zero.
    if (l >= 0 && plan.real_rows < p.local_shape[l] && p.data != nullptr) {
      const size_t es = dtype_size(p.dtype);
      size_t outer = 1, inner = 1;
      for (int k = 0; k < l; ++k) outer *= static_cast<size_t>(p.local_shape[k]);
      for (int k = l + 1; k < nd; ++k) inner *= static_cast<size_t>(p.local_shape[k]);
      const size_t L = static_cast<size_t>(p.local_shape[l]);
      const size_t R = static_cast<size_t>(plan.real_rows);
      for (size_t o = 0; o < outer; ++o)
        std::memset(static_cast<char*>(p.data) + ((o * L + R) * inner) * es, 0,
                    (L - R) * inner * es);
    }
  }
  if (stats) {
    for (const auto& kv : readers) {
      stats->data_bytes_read += kv.second->bytes_read();
      stats->read_calls += kv.second->read_calls();
    }
    stats->files_opened += readers.size();
  }
}

void load_checkpoint_collective(const std::string& dir, const std::vector<ParamShard>& params,
                                Communicator& world) {
  Failure f;
  f.run([&] { load_checkpoint(dir, params); });
  if (world.size() == 1) {
    if (f.failed()) throw Error(f.status, f.message);
    return;
  }
  // The lowest failing world rank, then its status and message (clipped to
  // what fits in kWords) from it: every rank reports the same failure.
  int32_t first = f.failed() ? world.rank() : world.size();
  world.all_reduce(&first, &first, 1, OSLO_DTYPE_I32, OSLO_REDUCE_MIN);
  if (first == world.size()) return;
  constexpr size_t kWords = 256;
  std::vector<int32_t> buf(2 + kWords, 0);
  if (world.rank() == first) {
    const std::string m = clip(f.message, kWords * 4 - 20);
    buf[0] = static_cast<int32_t>(f.status);
    buf[1] = static_cast<int32_t>(m.size());
    std::memcpy(buf.data() + 2, m.data(), m.size());
  }
  world.broadcast(buf.data(), buf.size(), OSLO_DTYPE_I32, first);
  if (world.rank() == first)
    fail(f.status, "checkpoint load from ", quote_path(dir), " failed on world rank ", first,
         " (this rank): ", f.message);
  const auto status = static_cast<oslo_status>(buf[0]);
  const size_t len = std::min<size_t>(static_cast<uint32_t>(buf[1]), kWords * 4);
  const std::string theirs(reinterpret_cast<const char*>(buf.data() + 2), len);
  fail(status > OSLO_OK && status < OSLO_STATUS_COUNT ? status : OSLO_ERR_INTERNAL,
       "checkpoint load from ", quote_path(dir), " failed on world rank ", first, ": ", theirs,
       f.failed() ? "; this rank failed too: " + clip(f.message, 300) : std::string());
}

}  // namespace oslo
