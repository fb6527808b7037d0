#include "core/checkpoint/model_checkpoint.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_set>
#include <utility>

#include "core/checkpoint/fs_util.hpp"
#include "core/checkpoint/model_io_internal.hpp"
#include "core/common/dtype.hpp"
#include "core/common/error.hpp"
#include "core/common/log.hpp"
#include "core/tensor/view.hpp"

namespace oslo {

const char* const kModelManifest = "oslo_checkpoint.json";

namespace {

namespace st = safetensors;
using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

constexpr const char* kFormatName = "oslo-checkpoint";
constexpr int kVersion = 2;
constexpr size_t kMaxManifestBytes = size_t{1} << 30;
constexpr uint64_t kStageBytes = uint64_t{16} << 20;

bool starts_with(const std::string& s, const char* p) {
  size_t n = std::strlen(p);
  return s.size() >= n && s.compare(0, n, p) == 0;
}
bool ends_with(const std::string& s, const char* p) {
  size_t n = std::strlen(p);
  return s.size() >= n && s.compare(s.size() - n, n, p) == 0;
}

std::string hex64(uint64_t v) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  return buf;
}

// --------------------------------------------------------------------------
// Manifest parsing (versions 1 and 2)
// --------------------------------------------------------------------------

class Schema {
 public:
  explicit Schema(std::string source) : source_(std::move(source)) {}
  [[noreturn]] void bad(const std::string& where, const std::string& what) const {
    fail(OSLO_ERR_FORMAT, source_, ": ", where, ": ", what);
  }
  void exact_keys(const json& obj, const std::string& where,
                  const std::vector<const char*>& keys) const {
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
  st::Dtype dtype(const json& v, const std::string& where) const {
    std::string name = string(v, where);
    st::Dtype sd;
    oslo_dtype od;
    if (!st::parse_dtype(name, &sd) || !st::to_oslo(sd, &od))
      bad(where, "unsupported dtype " + quote(name));
    return sd;
  }

 private:
  std::string source_;
};

}  // namespace

ParsedManifest parse_model_manifest(const std::string& dir) {
  const std::string path = fsutil::join(dir, kModelManifest);
  if (!fsutil::exists(path))
    fail(OSLO_ERR_IO, "no ", kModelManifest, " in ", clip(dir, kQuotedPathMax));
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
  if (!j.is_object()) sc.bad("manifest", "must be an object");
  if (!j.contains("format") || !j["format"].is_string() || j["format"] != kFormatName)
    sc.bad("format", std::string("is not '") + kFormatName + "'");
  if (!j.contains("version")) sc.bad("manifest", "missing field 'version'");
  ParsedManifest m;
  m.version = static_cast<int>(sc.integer(j["version"], "version", 1, INT32_MAX));
  if (m.version != 1 && m.version != 2)
    sc.bad("version", "format version " + std::to_string(m.version) +
                          " is not supported (this build reads versions 1 and 2)");
  const bool v2 = m.version == 2;
  std::vector<const char*> top = {"format",
                                  "version",
                                  "save_id",
                                  "tensor_parallel_size",
                                  "pipeline_parallel_size",
                                  "data_parallel_size",
                                  "files",
                                  "tensors"};
  if (v2) {
    top.push_back("model_config");
    top.push_back("extra_files");
  }
  sc.exact_keys(j, "manifest", top);
  m.save_id = sc.string(j["save_id"], "save_id");
  m.layout.tp_size =
      static_cast<int>(sc.integer(j["tensor_parallel_size"], "tensor_parallel_size", 1, INT32_MAX));
  m.layout.pp_size = static_cast<int>(
      sc.integer(j["pipeline_parallel_size"], "pipeline_parallel_size", 1, INT32_MAX));
  m.layout.dp_size =
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
      if (!plain_file_name(f) || f == kModelManifest)
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
  for (auto it = tensors.begin(); it != tensors.end(); ++it) {
    const std::string where = "tensor " + quote(it.key());
    const json& t = it.value();
    sc.exact_keys(t, where, {"dtype", "shape", "split_dim", "shards"});
    SourceTensor mt;
    mt.name = it.key();
    mt.dtype = sc.dtype(t["dtype"], where + ".dtype");
    mt.shape = sc.shape(t["shape"], where + ".shape");
    const int nd = static_cast<int>(mt.shape.size());
    mt.split_dim = static_cast<int>(sc.integer(t["split_dim"], where + ".split_dim", -1, nd - 1));
    const json& shards = t["shards"];
    if (!shards.is_array()) sc.bad(where + ".shards", "must be an array");
    std::set<std::pair<std::string, std::string>> keys;
    for (size_t i = 0; i < shards.size(); ++i) {
      const std::string sw = where + ".shards[" + std::to_string(i) + "]";
      const json& s = shards[i];
      SourceShard ms;
      std::vector<const char*> keys_needed = {"file", "key"};
      if (mt.split_dim >= 0) {
        keys_needed.push_back("offset");
        keys_needed.push_back("length");
      }
      if (v2) {
        keys_needed.push_back("bytes");
        keys_needed.push_back("crc32c");
      }
      sc.exact_keys(s, sw, keys_needed);
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
      mt.shards.push_back(ms);
    }
    if (mt.split_dim < 0) {
      if (mt.shards.size() != 1)
        sc.bad(where + ".shards", "a replicated tensor needs exactly one shard");
    } else {
      std::sort(mt.shards.begin(), mt.shards.end(),
                [](const SourceShard& a, const SourceShard& b) { return a.offset < b.offset; });
      int64_t next = 0;
      for (const SourceShard& s : mt.shards) {
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
      for (const SourceShard& s : mt.shards) {
        uint64_t n = st::dtype_bits(mt.dtype) / 8;
        for (int d = 0; d < nd; ++d)
          n *= static_cast<uint64_t>(d == mt.split_dim ? s.length : mt.shape[d]);
        if (n != s.bytes)
          sc.bad(where + ".shards", "shard " + quote(s.key) + " records " +
                                        std::to_string(s.bytes) + " bytes, its shape needs " +
                                        std::to_string(n));
      }
    }
    m.tensors.push_back(std::move(mt));
  }
  return m;
}

namespace {

// --------------------------------------------------------------------------
// Failure agreement (as checkpoint.cpp)
// --------------------------------------------------------------------------

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
      message = "out of memory in a model save or load";
    } catch (const std::exception& e) {
      status = OSLO_ERR_INTERNAL;
      message = std::string("model checkpoint: ") + e.what();
    }
  }
};

std::pair<int, oslo_status> agree(Communicator& world, const Failure& f) {
  // Host memory: a group of one does not communicate (its communicator's
  // buffers are device memory).
  if (world.size() == 1) return {f.failed() ? 0 : -1, f.status};
  int32_t v[2] = {f.failed() ? world.rank() + 1 : 0, static_cast<int32_t>(f.status)};
  world.all_reduce(v, v, 2, OSLO_DTYPE_I32, OSLO_REDUCE_MAX);
  return {v[0] - 1, static_cast<oslo_status>(v[1])};
}

// Every rank learns the lowest failing rank's status and message; throws on
// every rank if any failed.
void agree_and_throw(Communicator& world, const Failure& f, const std::string& what) {
  if (world.size() == 1) {
    if (f.failed()) throw Error(f.status, f.message);
    return;
  }
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
    fail(f.status, what, " failed on world rank ", first, " (this rank): ", f.message);
  const auto status = static_cast<oslo_status>(buf[0]);
  const size_t len = std::min<size_t>(static_cast<uint32_t>(buf[1]), kWords * 4);
  const std::string theirs(reinterpret_cast<const char*>(buf.data() + 2), len);
  fail(status > OSLO_OK && status < OSLO_STATUS_COUNT ? status : OSLO_ERR_INTERNAL, what,
       " failed on world rank ", first, ": ", theirs,
       f.failed() ? "; this rank failed too: " + clip(f.message, 300) : std::string());
}

// Gathers one string from every rank on every rank.
std::vector<std::string> all_gather_strings(Communicator& world, const std::string& s) {
  const int n = world.size();
  if (n == 1) return {s};  // host memory: no communication in a group of one
  int32_t len = static_cast<int32_t>(s.size());
  int32_t maxlen = len;
  world.all_reduce(&maxlen, &maxlen, 1, OSLO_DTYPE_I32, OSLO_REDUCE_MAX);
  const size_t words = 1 + (static_cast<size_t>(maxlen) + 3) / 4;
  std::vector<int32_t> mine(words, 0), all(words * n, 0);
  mine[0] = len;
  std::memcpy(mine.data() + 1, s.data(), s.size());
  world.all_gather(mine.data(), all.data(), words, OSLO_DTYPE_I32);
  std::vector<std::string> out;
  for (int r = 0; r < n; ++r) {
    const int32_t* p = all.data() + words * r;
    out.emplace_back(reinterpret_cast<const char*>(p + 1), static_cast<size_t>(p[0]));
  }
  return out;
}

void remove_quietly(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    int e = errno;
    Logger().log(LogLevel::Warn, "model checkpoint: cannot remove '", path,
                 "': ", fsutil::errno_text(e));
  }
}

void remove_tree_quietly(const std::string& path) {
  struct stat sb;
  if (::lstat(path.c_str(), &sb) != 0) return;
  if (S_ISDIR(sb.st_mode)) {
    std::vector<std::string> names;
    try {
      names = fsutil::list_dir(path);
    } catch (const Error&) {
    }
    for (const std::string& n : names) remove_tree_quietly(fsutil::join(path, n));
    ::rmdir(path.c_str());
  } else {
    ::unlink(path.c_str());
  }
}

// --------------------------------------------------------------------------
// Placement validation
// --------------------------------------------------------------------------

void check_placement(const Placement& p, const std::string& who) {
  const int nd = static_cast<int>(p.global_shape.size());
  OSLO_CHECK(!p.name.empty(), OSLO_ERR_INVALID_ARGUMENT, "placement with an empty name");
  OSLO_CHECK(p.split_dim >= -1 && p.split_dim < nd, OSLO_ERR_INVALID_ARGUMENT, who, ": split_dim ",
             p.split_dim, " is out of range for ", nd, " dimensions");
  for (int64_t d : p.global_shape)
    OSLO_CHECK(d >= 0, OSLO_ERR_INVALID_ARGUMENT, who, ": negative extent in global shape ",
               shape_str(p.global_shape));
  OSLO_CHECK(!p.transpose || nd == 2, OSLO_ERR_INVALID_ARGUMENT, who,
             ": transpose needs a 2-D tensor, the global shape is ", shape_str(p.global_shape));
  if (p.split_dim < 0) {
    OSLO_CHECK(p.segments.empty(), OSLO_ERR_INVALID_ARGUMENT, who,
               ": a replicated placement has no segments");
    return;
  }
  const int64_t G = p.global_shape[p.split_dim];
  OSLO_CHECK(p.local_extent >= 0, OSLO_ERR_INVALID_ARGUMENT, who, ": negative local_extent");
  for (const Segment& s : p.segments) {
    OSLO_CHECK(s.length >= 1 && s.global_start >= 0 && s.global_start <= G - s.length,
               OSLO_ERR_INVALID_ARGUMENT, who, ": segment [", s.global_start, ", ",
               s.global_start + s.length, ") is outside the global extent ", G, " of split_dim ",
               p.split_dim);
    OSLO_CHECK(s.local_start >= 0 && s.local_start <= p.local_extent - s.length,
               OSLO_ERR_INVALID_ARGUMENT, who, ": segment at local [", s.local_start, ", ",
               s.local_start + s.length, ") is outside the local extent ", p.local_extent);
  }
}

// Key of a stored segment: the name if the rank holds one segment of the
// tensor, else name@global_start.
std::string seg_key(const Placement& p, const Segment& s) {
  return p.segments.size() == 1 ? p.name : p.name + "@" + std::to_string(s.global_start);
}

// RAII device scratch.
struct DeviceBuf {
  Backend& b;
  void* p = nullptr;
  size_t n = 0;
  DeviceBuf(Backend& be, size_t bytes) : b(be), n(bytes) { p = b.allocate(bytes); }
  ~DeviceBuf() { b.deallocate(p, n); }
  DeviceBuf(const DeviceBuf&) = delete;
  DeviceBuf& operator=(const DeviceBuf&) = delete;
};

std::vector<int64_t> hf_local_shape(const Placement& p) {
  std::vector<int64_t> s = p.global_shape;
  if (p.split_dim >= 0) s[p.split_dim] = p.local_extent;
  return s;
}

uint64_t numel_of(const std::vector<int64_t>& s) {
  uint64_t n = 1;
  for (int64_t d : s) n *= static_cast<uint64_t>(d);
  return n;
}

// Copies rows [r0, r0 + n) along `dim` between a tensor of `shape` (a) and a
// compact buffer of those rows (b), on the host.
void copy_rows(const std::vector<int64_t>& shape, int dim, int64_t r0, int64_t n, size_t es,
               char* a, char* b, bool a_to_b) {
  size_t outer = 1, inner = es;
  for (int k = 0; k < dim; ++k) outer *= static_cast<size_t>(shape[k]);
  for (size_t k = dim + 1; k < shape.size(); ++k) inner *= static_cast<size_t>(shape[k]);
  const size_t arow = static_cast<size_t>(shape[dim]) * inner,
               brow = static_cast<size_t>(n) * inner;
  for (size_t o = 0; o < outer; ++o) {
    char* pa = a + o * arow + static_cast<size_t>(r0) * inner;
    char* pb = b + o * brow;
    if (a_to_b)
      std::memcpy(pb, pa, brow);
    else
      std::memcpy(pa, pb, brow);
  }
}

}  // namespace

// --------------------------------------------------------------------------
// Load
// --------------------------------------------------------------------------

void load_placed(WeightSource& src, std::vector<PlacedTensor>& tensors, Backend& backend,
                 ModelLoadStats* stats, const ProgressFn& progress) {
  const uint64_t b0 = src.bytes_read(), c0 = src.read_calls(), f0 = src.files_opened();
  std::unordered_set<std::string> names;
  std::vector<const SourceTensor*> srcs;
  uint64_t total = 0;
  for (const PlacedTensor& pt : tensors) {
    const Placement& p = pt.placement;
    const std::string who = "tensor " + quote(p.name);
    check_placement(p, who);
    OSLO_CHECK(names.insert(p.name).second, OSLO_ERR_INVALID_ARGUMENT, who, " is placed twice");
    const SourceTensor& t = src.at(p.name);
    OSLO_CHECK(t.shape == p.global_shape, OSLO_ERR_SHAPE, who, ": ", quote_path(src.path()),
               " has shape ", shape_str(t.shape), " but the model expects ",
               shape_str(p.global_shape));
    OSLO_CHECK(pt.tensor.defined(), OSLO_ERR_INVALID_ARGUMENT, who, ": no local tensor");
    OSLO_CHECK(pt.tensor.shape() == p.local_shape(), OSLO_ERR_SHAPE, who, ": the local tensor is ",
               shape_str(pt.tensor.shape()), " but the placement needs ",
               shape_str(p.local_shape()));
    oslo_dtype sdt;
    OSLO_CHECK(
        st::to_oslo(t.dtype, &sdt) && dtype_is_float(sdt) == dtype_is_float(pt.tensor.dtype()),
        OSLO_ERR_DTYPE, who, ": cannot load ", st::dtype_name(t.dtype), " from ",
        quote_path(src.path()), " into a ", dtype_name(pt.tensor.dtype()), " tensor");
    if (p.split_dim < 0)
      src.check_tensor(t);
    else
      for (const Segment& s : p.segments)
        src.check_tensor(t, p.split_dim, s.global_start, s.length);
    srcs.push_back(&t);
    total += pt.tensor.nbytes();
  }

  std::vector<char> stage;
  uint64_t done = 0, staging = 0;
  if (progress) progress(0, total);
  for (size_t i = 0; i < tensors.size(); ++i) {
    PlacedTensor& pt = tensors[i];
    const Placement& p = pt.placement;
    const SourceTensor& t = *srcs[i];
    const oslo_dtype dt = pt.tensor.dtype();
    const st::Dtype out = st::from_oslo(dt);
    const size_t es = dtype_size(dt);
    char* dev = static_cast<char*>(pt.tensor.data());
    const std::vector<int64_t> lshape = hf_local_shape(p);
    const int nd = static_cast<int>(lshape.size());
    if (pt.tensor.nbytes() == 0) continue;
    // Rows of the split dimension no segment covers: padding.
    bool contiguous = !p.transpose;
    for (int k = 0; k < p.split_dim; ++k) contiguous = contiguous && lshape[k] == 1;
    if (contiguous) {
      // Rows (along dim 0, or along split_dim with only unit dimensions
      // before it) are contiguous in the local tensor: stream in chunks.
      const int d = p.split_dim < 0 ? (nd > 0 ? 0 : -1) : p.split_dim;
      uint64_t row_elems = 1;
      for (int k = d + 1; k < nd; ++k) row_elems *= static_cast<uint64_t>(lshape[k]);
      const uint64_t row_bytes = std::max<uint64_t>(1, row_elems * es);
      const int64_t chunk = static_cast<int64_t>(std::max<uint64_t>(1, kStageBytes / row_bytes));
      struct Piece {
        int64_t gstart, lstart, len;
      };
      std::vector<Piece> pieces;
      if (p.split_dim < 0)
        pieces.push_back({0, 0, d < 0 ? 1 : lshape[0]});
      else
        for (const Segment& s : p.segments)
          pieces.push_back({s.global_start, s.local_start, s.length});
      for (const Piece& pc : pieces) {
        for (int64_t r = 0; r < pc.len; r += chunk) {
          const int64_t n = std::min(chunk, pc.len - r);
          const size_t bytes = static_cast<size_t>(n * row_bytes);
          if (stage.size() < bytes) stage.resize(bytes);
          staging = std::max<uint64_t>(staging, bytes);
          if (d < 0)
            src.read_box(t, -1, 0, 0, out, stage.data());  // a scalar
          else
            src.read_box(t, d, pc.gstart + r, n, out, stage.data());
          backend.copy(dev + static_cast<size_t>(pc.lstart + r) * row_bytes, stage.data(), bytes,
                       CopyKind::HostToDevice);
          done += bytes;
          if (progress) progress(done, total);
        }
      }
      if (p.split_dim >= 0) {
        std::vector<std::pair<int64_t, int64_t>> cov;
        for (const Segment& s : p.segments)
          cov.push_back({s.local_start, s.local_start + s.length});
        std::sort(cov.begin(), cov.end());
        int64_t at = 0;
        cov.push_back({p.local_extent, p.local_extent});
        for (const auto& c : cov) {
          if (c.first > at) {
            std::vector<int64_t> zs = lshape;
            zs[d] = c.first - at;
            backend.fill(make_view(dev + static_cast<size_t>(at) * row_bytes, dt, zs), 0.0);
            done += static_cast<uint64_t>(c.first - at) * row_bytes;
          }
          at = std::max(at, c.second);
        }
      }
    } else {
      // Assemble the local tensor (HF layout) on the host, then copy it (and
      // transpose it on the backend).
      const size_t bytes = static_cast<size_t>(numel_of(lshape) * es);
      size_t seg_max = 0;
      for (const Segment& s : p.segments) {
        std::vector<int64_t> ss = p.global_shape;
        ss[p.split_dim] = s.length;
        seg_max = std::max<size_t>(seg_max, static_cast<size_t>(numel_of(ss) * es));
      }
      // One segment filling the local tensor (no padding) is read in place.
      const bool whole =
          p.split_dim < 0 || (p.segments.size() == 1 && p.segments[0].local_start == 0 &&
                              p.segments[0].length == p.local_extent);
      if (whole) seg_max = 0;
      if (stage.size() < bytes + seg_max) stage.resize(bytes + seg_max);
      staging = std::max<uint64_t>(staging, bytes + seg_max);
      char* host = stage.data();
      char* seg = stage.data() + bytes;
      if (p.split_dim < 0) {
        src.read_box(t, -1, 0, 0, out, host);
      } else if (whole) {
        src.read_box(t, p.split_dim, p.segments[0].global_start, p.segments[0].length, out, host);
      } else {
        std::memset(host, 0, bytes);  // padding rows
        for (const Segment& s : p.segments) {
          src.read_box(t, p.split_dim, s.global_start, s.length, out, seg);
          copy_rows(lshape, p.split_dim, s.local_start, s.length, es, host, seg, false);
        }
      }
      if (!p.transpose) {
        backend.copy(dev, host, bytes, CopyKind::HostToDevice);
      } else {
        DeviceBuf tmp(backend, bytes);
        backend.copy(tmp.p, host, bytes, CopyKind::HostToDevice);
        backend.convert(make_view(dev, dt, pt.tensor.shape()),
                        transposed(make_view(tmp.p, dt, lshape)));
        backend.synchronize();
      }
      done += bytes;
      if (progress) progress(done, total);
    }
  }
  if (stats) {
    stats->bytes_read += src.bytes_read() - b0;
    stats->read_calls += src.read_calls() - c0;
    stats->files_opened += src.files_opened() - f0;
    stats->tensors += tensors.size();
    stats->staging_bytes = std::max(stats->staging_bytes, staging);
  }
}

void load_placed_collective(const std::string& path, std::vector<PlacedTensor>& tensors,
                            Backend& backend, Communicator& world, ModelLoadStats* stats,
                            const ProgressFn& progress) {
  Failure f;
  f.run([&] {
    WeightSource src(path);
    load_placed(src, tensors, backend, stats, progress);
  });
  agree_and_throw(world, f, "model load from " + quote_path(path));
}

void run_agreed(Communicator& world, const std::string& what, const std::function<void()>& body) {
  Failure f;
  f.run(body);
  agree_and_throw(world, f, what);
}

// --------------------------------------------------------------------------
// Writing shard files
// --------------------------------------------------------------------------

namespace {

// One piece a rank stores: `key` in its shard file.
struct PieceRecord {
  std::string name, key;
  st::Dtype dtype = st::Dtype::F32;
  std::vector<int64_t> shape;  // global
  int split_dim = -1;
  int64_t offset = 0, length = 0;
  bool stored = false;  // false: a declaration only (the rank holds the tensor, owns nothing)
  uint64_t bytes = 0;
  uint32_t crc = 0;
  std::string file;
  int tp = 0, pp = 0;
};

json record_to_json(const PieceRecord& r) {
  return json{{"name", r.name},
              {"key", r.key},
              {"dtype", st::dtype_name(r.dtype)},
              {"shape", r.shape},
              {"split_dim", r.split_dim},
              {"offset", r.offset},
              {"length", r.length},
              {"stored", r.stored},
              {"bytes", r.bytes},
              {"crc", r.crc},
              {"file", r.file},
              {"tp", r.tp},
              {"pp", r.pp}};
}

PieceRecord record_from_json(const json& j) {
  PieceRecord r;
  r.name = j.at("name").get<std::string>();
  r.key = j.at("key").get<std::string>();
  OSLO_CHECK(st::parse_dtype(j.at("dtype").get<std::string>(), &r.dtype), OSLO_ERR_INTERNAL,
             "bad dtype in a piece record");
  r.shape = j.at("shape").get<std::vector<int64_t>>();
  r.split_dim = j.at("split_dim").get<int>();
  r.offset = j.at("offset").get<int64_t>();
  r.length = j.at("length").get<int64_t>();
  r.stored = j.at("stored").get<bool>();
  r.bytes = j.at("bytes").get<uint64_t>();
  r.crc = j.at("crc").get<uint32_t>();
  r.file = j.at("file").get<std::string>();
  r.tp = j.at("tp").get<int>();
  r.pp = j.at("pp").get<int>();
  return r;
}

int digits_for(int size) {
  int d = 1;
  for (int v = std::max(1, size - 1); v >= 10; v /= 10) ++d;
  return std::max(2, d);
}

std::string shard_file_name(const std::string& save_id, int tp, int tp_size, int pp, int pp_size) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "-tp%0*d-pp%0*d", digits_for(tp_size), tp, digits_for(pp_size),
                pp);
  return "shard-" + save_id + buf + ".safetensors";
}

// Writes a safetensors file atomically, producing each tensor's bytes on
// demand (`produce(i, buf)` fills buf with entries[i]'s bytes), so that only
// one tensor is in memory at a time. Returns the CRC32C of each entry.
std::vector<uint32_t> write_streaming(
    const std::string& path, std::vector<st::WriteEntry> entries,
    const std::map<std::string, std::string>* metadata,
    const std::function<void(size_t, std::vector<char>&)>& produce,
    const std::function<void(uint64_t)>& on_bytes) {
  static const char kPlaceholder = 0;
  for (st::WriteEntry& e : entries) e.data = &kPlaceholder;  // never read by serialize_header
  std::vector<size_t> order;
  const std::string head = st::serialize_header(entries, metadata, &order);
  std::vector<uint32_t> crcs(entries.size(), 0);
  std::vector<char> buf;
  fsutil::write_atomically(path, [&](int fd) {
    fsutil::write_all(fd, head.data(), head.size(), path);
    for (size_t i : order) {
      const uint64_t n = st::tensor_nbytes(entries[i].dtype, entries[i].shape);
      if (n == 0) continue;
      buf.clear();
      produce(i, buf);
      OSLO_CHECK(buf.size() == n, OSLO_ERR_INTERNAL, "tensor ", quote(entries[i].name),
                 ": produced ", buf.size(), " bytes, expected ", n);
      crcs[i] = crc32c(0, buf.data(), buf.size());
      fsutil::write_all(fd, buf.data(), buf.size(), path);
      if (on_bytes) on_bytes(n);
    }
  });
  return crcs;
}

std::map<std::string, std::string> shard_metadata(const std::string& save_id, int tp, int tp_size,
                                                  int pp, int pp_size) {
  ojson meta;
  meta["version"] = kVersion;
  meta["save_id"] = save_id;
  meta["tp_rank"] = tp;
  meta["tp_size"] = tp_size;
  meta["pp_rank"] = pp;
  meta["pp_size"] = pp_size;
  return {{"format", "pt"}, {"oslo", meta.dump()}};
}

// What one rank stores: records plus how to produce each stored piece.
struct RankPlan {
  std::vector<PieceRecord> records;  // declarations and pieces
  std::vector<size_t> stored;        // indexes of stored records
  std::function<void(size_t rec, std::vector<char>&)> produce;
};

// Plans the pieces of one rank from placements (dtype per placement).
void plan_pieces(const std::vector<const Placement*>& placements,
                 const std::vector<st::Dtype>& dtypes, RankPlan* plan) {
  for (size_t i = 0; i < placements.size(); ++i) {
    const Placement& p = *placements[i];
    PieceRecord base;
    base.name = p.name;
    base.dtype = dtypes[i];
    base.shape = p.global_shape;
    base.split_dim = p.split_dim;
    bool any = false;
    if (p.split_dim < 0) {
      if (p.replica_owner) {
        PieceRecord r = base;
        r.key = p.name;
        r.stored = true;
        r.offset = 0;
        r.length = p.global_shape.empty() ? 1 : p.global_shape[0];
        r.bytes = st::tensor_nbytes(r.dtype, std::vector<uint64_t>(r.shape.begin(), r.shape.end()));
        plan->stored.push_back(plan->records.size());
        plan->records.push_back(r);
        any = true;
      }
    } else {
      for (const Segment& s : p.segments) {
        if (!s.owner) continue;
        PieceRecord r = base;
        r.key = seg_key(p, s);
        r.stored = true;
        r.offset = s.global_start;
        r.length = s.length;
        std::vector<uint64_t> shp(r.shape.begin(), r.shape.end());
        shp[p.split_dim] = static_cast<uint64_t>(s.length);
        r.bytes = st::tensor_nbytes(r.dtype, shp);
        plan->stored.push_back(plan->records.size());
        plan->records.push_back(r);
        any = true;
      }
    }
    if (!any) plan->records.push_back(base);  // declaration
  }
}

// Writes one rank's shard file; fills bytes/crc/file of its records.
void write_rank_file(const std::string& dir, const std::string& file, const std::string& save_id,
                     int tp, int tp_size, int pp, int pp_size, RankPlan& plan,
                     const std::function<void(uint64_t)>& on_bytes) {
  std::vector<st::WriteEntry> entries;
  std::set<std::string> keys;
  for (size_t ri : plan.stored) {
    PieceRecord& r = plan.records[ri];
    OSLO_CHECK(keys.insert(r.key).second, OSLO_ERR_INVALID_ARGUMENT, "tensor ", quote(r.name),
               ": key ", quote(r.key), " is used twice in one shard file");
    std::vector<uint64_t> shp(r.shape.begin(), r.shape.end());
    if (r.split_dim >= 0) shp[r.split_dim] = static_cast<uint64_t>(r.length);
    entries.push_back({r.key, r.dtype, shp, nullptr});
  }
  auto meta = shard_metadata(save_id, tp, tp_size, pp, pp_size);
  std::vector<uint32_t> crcs = write_streaming(
      fsutil::join(dir, file), entries, &meta,
      [&](size_t i, std::vector<char>& buf) { plan.produce(plan.stored[i], buf); }, on_bytes);
  for (size_t i = 0; i < plan.stored.size(); ++i) plan.records[plan.stored[i]].crc = crcs[i];
  for (PieceRecord& r : plan.records) {
    r.file = file;
    r.tp = tp;
    r.pp = pp;
  }
  fsutil::fault_point("save.after_shard_write", fsutil::join(dir, file));
}

// Builds the version-2 manifest from every rank's records; checks tiling.
std::string build_manifest(const std::string& dir, const std::string& save_id, int tp_size,
                           int pp_size, int dp_size, const std::string& config_json,
                           const std::vector<std::string>& extra_files,
                           const std::vector<std::string>& files,
                           const std::vector<PieceRecord>& records, bool check_headers) {
  if (check_headers) {
    // The files must be visible here (a shared file system) and hold what
    // the records say.
    std::map<std::string, std::unique_ptr<st::Reader>> readers;
    for (const std::string& f : files) {
      try {
        readers[f] = std::make_unique<st::Reader>(fsutil::join(dir, f));
      } catch (const Error& e) {
        if (e.status() != OSLO_ERR_IO) throw;
        fail(OSLO_ERR_IO, e.what(), " (world rank 0 reads every shard: is ", quote_path(dir),
             " on a file system shared by all ranks?)");
      }
    }
    for (const PieceRecord& r : records) {
      if (!r.stored) continue;
      auto it = readers.find(r.file);
      OSLO_CHECK(it != readers.end(), OSLO_ERR_INTERNAL, "record names an unknown file");
      const st::TensorInfo& ti = it->second->at(r.key);
      OSLO_CHECK(ti.dtype == r.dtype && ti.nbytes() == r.bytes, OSLO_ERR_IO, it->second->path(),
                 ": tensor ", quote(r.key), " differs from what its writer recorded");
    }
  }
  std::map<std::string, std::vector<const PieceRecord*>> by_name;
  for (const PieceRecord& r : records) by_name[r.name].push_back(&r);
  ojson tensors = ojson::object();
  for (auto& kv : by_name) {
    const std::string& name = kv.first;
    int pp0 = INT32_MAX;
    for (const PieceRecord* r : kv.second) pp0 = std::min(pp0, r->pp);
    const PieceRecord* ref = nullptr;
    for (const PieceRecord* r : kv.second)
      if (r->pp == pp0 && (!ref || r->tp < ref->tp)) ref = r;
    for (const PieceRecord* r : kv.second)
      OSLO_CHECK(r->dtype == ref->dtype && r->shape == ref->shape && r->split_dim == ref->split_dim,
                 OSLO_ERR_INVALID_ARGUMENT, "tensor ", quote(name), ": rank tp", r->tp, "/pp",
                 r->pp, " holds ", st::dtype_name(r->dtype), " ", shape_str(r->shape),
                 " split_dim ", r->split_dim, " but rank tp", ref->tp, "/pp", ref->pp, " holds ",
                 st::dtype_name(ref->dtype), " ", shape_str(ref->shape), " split_dim ",
                 ref->split_dim);
    std::vector<const PieceRecord*> parts;
    for (const PieceRecord* r : kv.second)
      if (r->pp == pp0 && r->stored) parts.push_back(r);
    std::sort(parts.begin(), parts.end(), [](const PieceRecord* a, const PieceRecord* b) {
      return a->offset != b->offset ? a->offset < b->offset : a->tp < b->tp;
    });
    ojson shards = ojson::array();
    auto shard_json = [&](const PieceRecord* r, bool split) {
      ojson s;
      s["file"] = r->file;
      s["key"] = r->key;
      if (split) {
        s["offset"] = r->offset;
        s["length"] = r->length;
      }
      s["bytes"] = r->bytes;
      s["crc32c"] = hex32(r->crc);
      return s;
    };
    if (ref->split_dim < 0) {
      OSLO_CHECK(parts.size() == 1, OSLO_ERR_INVALID_ARGUMENT, "replicated tensor ", quote(name),
                 parts.empty() ? " has no owner (no rank's placement says replica_owner)"
                               : " has " + std::to_string(parts.size()) + " owners");
      shards.push_back(shard_json(parts[0], false));
    } else {
      const int64_t G = ref->shape[ref->split_dim];
      int64_t next = 0;
      for (const PieceRecord* r : parts) {
        OSLO_CHECK(r->offset == next, OSLO_ERR_INVALID_ARGUMENT, "tensor ", quote(name),
                   ": the owned segments ", r->offset > next ? "leave rows " : "overlap at rows ",
                   std::min(next, r->offset), "..", std::max(next, r->offset),
                   r->offset > next ? " unsaved" : " (two owners)", " (split_dim ", ref->split_dim,
                   ", extent ", G, ")");
        next += r->length;
        shards.push_back(shard_json(r, true));
      }
      OSLO_CHECK(next == G, OSLO_ERR_INVALID_ARGUMENT, "tensor ", quote(name),
                 ": the owned segments cover rows 0..", next, " of ", G, " along split_dim ",
                 ref->split_dim);
    }
    ojson t;
    t["dtype"] = st::dtype_name(ref->dtype);
    t["shape"] = ref->shape;
    t["split_dim"] = ref->split_dim;
    t["shards"] = std::move(shards);
    tensors[name] = std::move(t);
  }
  ojson m;
  m["format"] = kFormatName;
  m["version"] = kVersion;
  m["save_id"] = save_id;
  m["tensor_parallel_size"] = tp_size;
  m["pipeline_parallel_size"] = pp_size;
  m["data_parallel_size"] = dp_size;
  if (config_json.find_first_not_of(" \t\r\n") == std::string::npos) {
    m["model_config"] = nullptr;
  } else {
    ojson cfg;
    try {
      cfg = ojson::parse(config_json);
    } catch (const ojson::exception& e) {
      fail(OSLO_ERR_INVALID_ARGUMENT, "model config is not valid JSON: ", clip(e.what(), 200));
    }
    OSLO_CHECK(cfg.is_object(), OSLO_ERR_INVALID_ARGUMENT, "model config must be a JSON object");
    m["model_config"] = std::move(cfg);
  }
  m["extra_files"] = extra_files;
  m["files"] = files;
  m["tensors"] = std::move(tensors);
  return m.dump(1) + "\n";
}

void check_config_text(const std::string& config_json) {
  if (config_json.find_first_not_of(" \t\r\n") == std::string::npos) return;
  json cfg;
  try {
    cfg = json::parse(config_json);
  } catch (const json::exception& e) {
    fail(OSLO_ERR_INVALID_ARGUMENT, "model config is not valid JSON: ", clip(e.what(), 200));
  }
  OSLO_CHECK(cfg.is_object(), OSLO_ERR_INVALID_ARGUMENT, "model config must be a JSON object");
}

// Copies a file into dir/name atomically.
void copy_file_atomically(const std::string& from, const std::string& to) {
  FILE* in = std::fopen(from.c_str(), "rb");
  if (!in) {
    int e = errno;
    fail(OSLO_ERR_IO, "cannot open ", quote_path(from), ": ", fsutil::errno_text(e));
  }
  try {
    fsutil::write_atomically(to, [&](int fd) {
      char buf[1 << 16];
      size_t n;
      while ((n = std::fread(buf, 1, sizeof buf, in)) > 0) fsutil::write_all(fd, buf, n, to);
      OSLO_CHECK(!std::ferror(in), OSLO_ERR_IO, "cannot read ", quote_path(from));
    });
  } catch (...) {
    std::fclose(in);
    throw;
  }
  std::fclose(in);
}

std::vector<std::string> extra_names(const std::vector<std::string>& paths) {
  std::vector<std::string> names;
  std::set<std::string> seen;
  for (const std::string& p : paths) {
    const std::string n = fsutil::base_name(p);
    OSLO_CHECK(plain_file_name(n) && n != kModelManifest && !starts_with(n, "shard-"),
               OSLO_ERR_INVALID_ARGUMENT, "extra file ", quote_path(p),
               " cannot be stored in a checkpoint under the name ", quote(n));
    OSLO_CHECK(seen.insert(n).second, OSLO_ERR_INVALID_ARGUMENT, "two extra files are named ",
               quote(n));
    names.push_back(n);
  }
  return names;
}

// After the new manifest is durable: removes shard files it does not name
// and temporaries of interrupted saves. Never throws.
void remove_stale(const std::string& dir, const std::vector<std::string>& keep,
                  const std::vector<std::string>& extras) {
  std::set<std::string> keep_set(keep.begin(), keep.end());
  std::vector<std::string> names;
  try {
    names = fsutil::list_dir(dir);
  } catch (const Error& e) {
    Logger().log(LogLevel::Warn, "model checkpoint: cannot clean up: ", e.what());
    return;
  }
  for (const std::string& n : names) {
    const bool shard = starts_with(n, "shard-") && ends_with(n, ".safetensors");
    bool tmp = n.find(".tmp.") != std::string::npos &&
               (starts_with(n, "shard-") || fsutil::is_temp_of(n, kModelManifest));
    for (const std::string& e : extras) tmp = tmp || fsutil::is_temp_of(n, e);
    if ((shard && !keep_set.count(n)) || tmp) remove_quietly(fsutil::join(dir, n));
    fsutil::fault_point("save.cleanup_step", fsutil::join(dir, n));
  }
  try {
    fsutil::fsync_dir(dir);
  } catch (const Error& e) {
    Logger().log(LogLevel::Warn, "model checkpoint: ", e.what());
  }
}

void write_manifest(const std::string& dir, const std::string& text) {
  fsutil::fault_point("save.before_manifest", dir);
  const std::string path = fsutil::join(dir, kModelManifest);
  fsutil::write_atomically(path,
                           [&](int fd) { fsutil::write_all(fd, text.data(), text.size(), path); });
  fsutil::fault_point("save.after_manifest", path);
}

std::string new_save_id(const std::string& dir) {
  std::string id;
  do {
    id = hex64(fsutil::random_u64());
  } while (fsutil::exists(fsutil::join(dir, "shard-" + id + "-tp00-pp00.safetensors")));
  return id;
}

}  // namespace

// --------------------------------------------------------------------------
// Save
// --------------------------------------------------------------------------

void save_placed(const std::string& dir, const std::vector<PlacedTensor>& tensors,
                 const std::string& model_config_json, const std::vector<std::string>& extra_files,
                 const CheckpointLayout& layout, Communicator& world, const ProgressFn& progress) {
  Failure f;
  std::vector<std::string> extras;
  f.run([&] {
    OSLO_CHECK(!dir.empty(), OSLO_ERR_INVALID_ARGUMENT, "checkpoint directory is empty");
    auto in = [](int r, int n) { return n > 0 && r >= 0 && r < n; };
    OSLO_CHECK(in(layout.tp_rank, layout.tp_size) && in(layout.pp_rank, layout.pp_size) &&
                   in(layout.dp_rank, layout.dp_size) && in(layout.world_rank, layout.world_size),
               OSLO_ERR_INVALID_ARGUMENT, "checkpoint layout has a rank outside its group");
    OSLO_CHECK(static_cast<int64_t>(layout.tp_size) * layout.pp_size * layout.dp_size ==
                       layout.world_size &&
                   world.rank() == layout.world_rank && world.size() == layout.world_size,
               OSLO_ERR_INVALID_ARGUMENT, "checkpoint layout (tp ", layout.tp_size, " x pp ",
               layout.pp_size, " x dp ", layout.dp_size, ", world rank ", layout.world_rank,
               ") does not match the communicator (rank ", world.rank(), " of ", world.size(), ")");
    check_config_text(model_config_json);
    extras = extra_names(extra_files);
    std::unordered_set<std::string> names;
    for (const PlacedTensor& pt : tensors) {
      const Placement& p = pt.placement;
      const std::string who = "tensor " + quote(p.name);
      check_placement(p, who);
      OSLO_CHECK(names.insert(p.name).second, OSLO_ERR_INVALID_ARGUMENT, who, " is placed twice");
      OSLO_CHECK(pt.tensor.defined() && pt.tensor.shape() == p.local_shape(), OSLO_ERR_SHAPE, who,
                 ": the local tensor is ",
                 pt.tensor.defined() ? shape_str(pt.tensor.shape()) : std::string("undefined"),
                 " but the placement needs ", shape_str(p.local_shape()));
      OSLO_CHECK(st::valid_utf8(p.name.data(), p.name.size()) && p.name != "__metadata__",
                 OSLO_ERR_INVALID_ARGUMENT, who,
                 ": a saved name must be valid UTF-8 other than __metadata__");
    }
  });

  std::string save_id;
  {
    uint64_t id = 0;
    if (world.rank() == 0)
      f.run([&] {
        do {
          id = fsutil::random_u64();
        } while (fsutil::exists(
            fsutil::join(dir, shard_file_name(hex64(id), 0, layout.tp_size, 0, layout.pp_size))));
      });
    if (world.size() > 1) world.broadcast(&id, 1, OSLO_DTYPE_I64, 0);
    save_id = hex64(id);
  }

  const bool writer = layout.dp_rank == 0;
  const std::string my_file =
      shard_file_name(save_id, layout.tp_rank, layout.tp_size, layout.pp_rank, layout.pp_size);
  bool wrote = false;
  RankPlan plan;
  if (writer) {
    f.run([&] {
      fsutil::make_dirs(dir);
      std::vector<const Placement*> ps;
      std::vector<st::Dtype> dts;
      for (const PlacedTensor& pt : tensors) {
        ps.push_back(&pt.placement);
        dts.push_back(st::from_oslo(pt.tensor.dtype()));
      }
      plan_pieces(ps, dts, &plan);
      std::map<std::string, size_t> by_name;
      for (size_t i = 0; i < tensors.size(); ++i) by_name[tensors[i].placement.name] = i;
      // The HF-layout local tensor of the last tensor fetched from the backend.
      std::string cached;
      std::vector<char> host;
      plan.produce = [&](size_t ri, std::vector<char>& buf) {
        const PieceRecord& r = plan.records[ri];
        const PlacedTensor& pt = tensors[by_name.at(r.name)];
        const Placement& p = pt.placement;
        Backend& be = pt.tensor.backend();
        const oslo_dtype dt = pt.tensor.dtype();
        const size_t es = dtype_size(dt);
        const std::vector<int64_t> lshape = hf_local_shape(p);
        if (cached != r.name) {
          host.resize(pt.tensor.nbytes());
          if (p.transpose) {
            DeviceBuf tmp(be, pt.tensor.nbytes());
            be.convert(make_view(tmp.p, dt, lshape),
                       transposed(make_view(pt.tensor.data(), dt, pt.tensor.shape())));
            be.copy(host.data(), tmp.p, host.size(), CopyKind::DeviceToHost);
          } else if (!host.empty()) {
            be.copy(host.data(), pt.tensor.data(), host.size(), CopyKind::DeviceToHost);
          }
          cached = r.name;
        }
        if (p.split_dim < 0) {
          buf.assign(host.begin(), host.end());
          return;
        }
        const Segment* seg = nullptr;
        for (const Segment& s : p.segments)
          if (s.owner && s.global_start == r.offset) seg = &s;
        OSLO_CHECK(seg, OSLO_ERR_INTERNAL, "segment vanished");
        buf.resize(static_cast<size_t>(r.bytes));
        copy_rows(lshape, p.split_dim, seg->local_start, seg->length, es, host.data(), buf.data(),
                  true);
      };
      uint64_t total = 0, done = 0;
      for (size_t ri : plan.stored) total += plan.records[ri].bytes;
      if (progress) progress(0, total);
      wrote = true;
      write_rank_file(dir, my_file, save_id, layout.tp_rank, layout.tp_size, layout.pp_rank,
                      layout.pp_size, plan, [&](uint64_t n) {
                        done += n;
                        if (progress) progress(done, total);
                      });
    });
  }

  std::pair<int, oslo_status> outcome;
  try {
    outcome = agree(world, f);
  } catch (...) {
    if (wrote) remove_quietly(fsutil::join(dir, my_file));
    throw;
  }
  if (outcome.first >= 0) {
    if (wrote) remove_quietly(fsutil::join(dir, my_file));
    if (f.failed()) throw Error(f.status, f.message);
    fail(outcome.second, "model save to ", quote_path(dir), " failed on world rank ", outcome.first,
         " (see that rank's error); the previous checkpoint is unchanged");
  }

  // Every shard is durable: gather the records on every rank (rank 0 uses
  // them), then rank 0 commits.
  json mine = json::array();
  if (writer)
    for (const PieceRecord& r : plan.records) mine.push_back(record_to_json(r));
  const std::vector<std::string> all = all_gather_strings(world, mine.dump());
  if (world.rank() == 0) {
    f.run([&] {
      std::vector<PieceRecord> records;
      for (const std::string& s : all)
        for (const json& r : json::parse(s)) records.push_back(record_from_json(r));
      std::vector<std::string> files;
      for (int pp = 0; pp < layout.pp_size; ++pp)
        for (int tp = 0; tp < layout.tp_size; ++tp)
          files.push_back(shard_file_name(save_id, tp, layout.tp_size, pp, layout.pp_size));
      const std::string text =
          build_manifest(dir, save_id, layout.tp_size, layout.pp_size, layout.dp_size,
                         model_config_json, extras, files, records, true);
      for (size_t i = 0; i < extra_files.size(); ++i)
        copy_file_atomically(extra_files[i], fsutil::join(dir, extras[i]));
      write_manifest(dir, text);
      remove_stale(dir, files, extras);
    });
    if (f.failed())
      for (int pp = 0; pp < layout.pp_size; ++pp)
        for (int tp = 0; tp < layout.tp_size; ++tp)
          remove_quietly(
              fsutil::join(dir, shard_file_name(save_id, tp, layout.tp_size, pp, layout.pp_size)));
  }
  outcome = agree(world, f);
  if (outcome.first >= 0) {
    if (f.failed()) throw Error(f.status, f.message);
    fail(outcome.second, "model save to ", quote_path(dir), " failed on world rank ", outcome.first,
         " (see that rank's error); the previous checkpoint is unchanged");
  }
}

// --------------------------------------------------------------------------
// Reshard
// --------------------------------------------------------------------------

void reshard(const std::string& src_path, const std::string& dst, int new_tp,
             const Planner& planner, const ReshardOptions& options) {
  OSLO_CHECK(new_tp >= 1, OSLO_ERR_INVALID_ARGUMENT, "reshard: tensor-parallel size ", new_tp,
             " must be >= 1");
  OSLO_CHECK(planner, OSLO_ERR_INVALID_ARGUMENT, "reshard: no planner");
  OSLO_CHECK(!dst.empty(), OSLO_ERR_INVALID_ARGUMENT, "reshard: destination is empty");
  if (options.convert)
    OSLO_CHECK(dtype_is_float(options.dtype), OSLO_ERR_DTYPE,
               "reshard: the target dtype must be f32, f16 or bf16");
  WeightSource src(src_path);
  std::vector<std::vector<Placement>> plans(new_tp);
  std::set<std::string> planned;
  for (int r = 0; r < new_tp; ++r) {
    plans[r] = planner(new_tp, r);
    std::set<std::string> names;
    for (const Placement& p : plans[r]) {
      const std::string who = "tensor " + quote(p.name) + " (rank " + std::to_string(r) + ")";
      check_placement(p, who);
      OSLO_CHECK(names.insert(p.name).second, OSLO_ERR_INVALID_ARGUMENT, who, " is placed twice");
      const SourceTensor& t = src.at(p.name);
      OSLO_CHECK(t.shape == p.global_shape, OSLO_ERR_SHAPE, who, ": ", quote_path(src_path),
                 " has shape ", shape_str(t.shape), " but the planner says ",
                 shape_str(p.global_shape));
      src.check_tensor(t);
      planned.insert(p.name);
    }
  }
  // Tensors the planner does not know stay whole, on rank 0.
  for (const SourceTensor& t : src.tensors()) {
    if (planned.count(t.name)) continue;
    Placement p;
    p.name = t.name;
    p.global_shape = t.shape;
    p.split_dim = -1;
    p.replica_owner = true;
    plans[0].push_back(p);
  }
  auto out_dtype = [&](const SourceTensor& t) {
    oslo_dtype od;
    if (options.convert && st::to_oslo(t.dtype, &od) && dtype_is_float(od))
      return st::from_oslo(options.dtype);
    return t.dtype;
  };
  const std::vector<std::string> extras = src.extra_files();
  fsutil::make_dirs(dst);
  const std::string save_id = new_save_id(dst);
  std::vector<std::string> files;
  std::vector<PieceRecord> records;
  uint64_t total = 0, done = 0;
  std::vector<RankPlan> rank_plans(new_tp);
  for (int r = 0; r < new_tp; ++r) {
    std::vector<const Placement*> ps;
    std::vector<st::Dtype> dts;
    for (const Placement& p : plans[r]) {
      ps.push_back(&p);
      dts.push_back(out_dtype(src.at(p.name)));
    }
    plan_pieces(ps, dts, &rank_plans[r]);
    for (size_t ri : rank_plans[r].stored) total += rank_plans[r].records[ri].bytes;
  }
  if (options.progress) options.progress(0, total);
  try {
    for (int r = 0; r < new_tp; ++r) {
      RankPlan& plan = rank_plans[r];
      plan.produce = [&](size_t ri, std::vector<char>& buf) {
        const PieceRecord& rec = plan.records[ri];
        const SourceTensor& t = src.at(rec.name);
        buf.resize(static_cast<size_t>(rec.bytes));
        src.read_box(t, rec.split_dim, rec.split_dim < 0 ? 0 : rec.offset,
                     rec.split_dim < 0 ? 0 : rec.length, rec.dtype, buf.data());
      };
      const std::string file = shard_file_name(save_id, r, new_tp, 0, 1);
      files.push_back(file);
      write_rank_file(dst, file, save_id, r, new_tp, 0, 1, plan, [&](uint64_t n) {
        done += n;
        if (options.progress) options.progress(done, total);
      });
      records.insert(records.end(), plan.records.begin(), plan.records.end());
    }
    const std::string text = build_manifest(dst, save_id, new_tp, 1, 1, src.config_json(), extras,
                                            files, records, false);
    for (const std::string& e : extras) {
      const std::string from = fsutil::join(src.folder(), e), to = fsutil::join(dst, e);
      if (from != to) copy_file_atomically(from, to);
    }
    src.release();
    write_manifest(dst, text);
  } catch (...) {
    for (const std::string& f : files) remove_quietly(fsutil::join(dst, f));
    throw;
  }
  remove_stale(dst, files, extras);
}

// --------------------------------------------------------------------------
// Merge
// --------------------------------------------------------------------------

void merge(const std::string& src_path, const std::string& dst_arg, const MergeOptions& options) {
  std::string dst = dst_arg;
  while (dst.size() > 1 && dst.back() == '/') dst.pop_back();
  OSLO_CHECK(!dst.empty(), OSLO_ERR_INVALID_ARGUMENT, "merge: destination is empty");
  if (options.convert)
    OSLO_CHECK(dtype_is_float(options.dtype), OSLO_ERR_DTYPE,
               "merge: the target dtype must be f32, f16 or bf16");
  struct stat sb;
  bool dst_exists = ::stat(dst.c_str(), &sb) == 0;
  if (dst_exists) {
    OSLO_CHECK(S_ISDIR(sb.st_mode), OSLO_ERR_INVALID_ARGUMENT, "merge: destination ",
               quote_path(dst), " exists and is not a folder");
    OSLO_CHECK(options.overwrite || fsutil::list_dir(dst).empty(), OSLO_ERR_INVALID_ARGUMENT,
               "merge: destination ", quote_path(dst),
               " is not empty (pass overwrite to replace it)");
  }
  WeightSource src(src_path);
  OSLO_CHECK(!src.tensors().empty(), OSLO_ERR_FORMAT, "merge: ", quote_path(src_path),
             " holds no tensors");
  auto out_dtype = [&](const SourceTensor& t) {
    oslo_dtype od;
    if (options.convert && st::to_oslo(t.dtype, &od) && dtype_is_float(od))
      return st::from_oslo(options.dtype);
    return t.dtype;
  };
  // Plan files as transformers' save_pretrained splits: tensors in order,
  // a new file when the next tensor would exceed the limit.
  std::vector<std::vector<const SourceTensor*>> groups(1);
  std::vector<uint64_t> group_bytes(1, 0);
  uint64_t total = 0;
  for (const SourceTensor& t : src.tensors()) {
    std::vector<uint64_t> shp(t.shape.begin(), t.shape.end());
    const uint64_t n = st::tensor_nbytes(out_dtype(t), shp);
    if (options.max_shard_bytes > 0 && !groups.back().empty() &&
        group_bytes.back() + n > options.max_shard_bytes) {
      groups.emplace_back();
      group_bytes.push_back(0);
    }
    groups.back().push_back(&t);
    group_bytes.back() += n;
    total += n;
  }
  const bool sharded = groups.size() > 1;
  const std::string parent = fsutil::parent_dir(dst);
  fsutil::make_dirs(parent);
  const std::string tmp = fsutil::temp_name(dst);
  if (::mkdir(tmp.c_str(), 0755) != 0) {
    int e = errno;
    fail(OSLO_ERR_IO, "merge: cannot create ", quote_path(tmp), ": ", fsutil::errno_text(e));
  }
  try {
    uint64_t done = 0;
    if (options.progress) options.progress(0, total);
    std::map<std::string, std::string> meta{{"format", "pt"}};
    json weight_map = json::object();
    char name[64];
    for (size_t g = 0; g < groups.size(); ++g) {
      std::string file = "model.safetensors";
      if (sharded) {
        std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", g + 1, groups.size());
        file = name;
      }
      std::vector<st::WriteEntry> entries;
      for (const SourceTensor* t : groups[g]) {
        entries.push_back({t->name, out_dtype(*t),
                           std::vector<uint64_t>(t->shape.begin(), t->shape.end()), nullptr});
        weight_map[t->name] = file;
      }
      write_streaming(
          fsutil::join(tmp, file), entries, &meta,
          [&](size_t i, std::vector<char>& buf) {
            const SourceTensor& t = *groups[g][i];
            buf.resize(static_cast<size_t>(st::tensor_nbytes(entries[i].dtype, entries[i].shape)));
            src.read_box(t, -1, 0, 0, entries[i].dtype, buf.data());
          },
          [&](uint64_t n) {
            done += n;
            if (options.progress) options.progress(done, total);
          });
    }
    if (sharded) {
      json index;
      index["metadata"] = json{{"total_size", total}};
      index["weight_map"] = weight_map;
      const std::string text = index.dump(2) + "\n";
      const std::string p = fsutil::join(tmp, "model.safetensors.index.json");
      fsutil::write_atomically(p,
                               [&](int fd) { fsutil::write_all(fd, text.data(), text.size(), p); });
    }
    if (!src.config_json().empty()) {
      const std::string p = fsutil::join(tmp, "config.json");
      const std::string& text = src.config_json();
      fsutil::write_atomically(p,
                               [&](int fd) { fsutil::write_all(fd, text.data(), text.size(), p); });
    }
    for (const std::string& e : src.extra_files())
      copy_file_atomically(fsutil::join(src.folder(), e), fsutil::join(tmp, e));
    src.release();
    fsutil::fsync_dir(tmp);
    std::string old;
    if (dst_exists) {
      if (fsutil::list_dir(dst).empty()) {
        ::rmdir(dst.c_str());
      } else {
        old = fsutil::temp_name(dst) + ".old";
        if (::rename(dst.c_str(), old.c_str()) != 0) {
          int e = errno;
          fail(OSLO_ERR_IO, "merge: cannot move ", quote_path(dst),
               " aside: ", fsutil::errno_text(e));
        }
      }
    }
    if (::rename(tmp.c_str(), dst.c_str()) != 0) {
      int e = errno;
      if (!old.empty()) (void)::rename(old.c_str(), dst.c_str());
      fail(OSLO_ERR_IO, "merge: cannot rename ", quote_path(tmp), " to ", quote_path(dst), ": ",
           fsutil::errno_text(e));
    }
    fsutil::fsync_dir(parent);
    if (!old.empty()) remove_tree_quietly(old);
  } catch (...) {
    remove_tree_quietly(tmp);
    throw;
  }
}

// --------------------------------------------------------------------------
// Inspect
// --------------------------------------------------------------------------

Inspection inspect(const std::string& path) {
  WeightSource src(path);
  Inspection in;
  in.path = path;
  in.kind = source_kind_name(src.kind());
  in.manifest_version = src.manifest_version();
  in.save_id = src.save_id();
  in.layout = src.layout();
  in.extra_files = src.extra_files();
  std::set<std::string> files;
  for (const SourceTensor& t : src.tensors()) {
    InspectTensor it;
    it.name = t.name;
    it.dtype = st::dtype_name(t.dtype);
    it.shape = t.shape;
    it.split_dim = t.split_dim;
    it.bytes = t.nbytes();
    for (const SourceShard& s : t.shards) {
      it.shards.push_back({s.file, s.key, s.offset, s.length, s.bytes, s.has_crc, s.crc32c});
      files.insert(s.file);
    }
    in.total_bytes += it.bytes;
    in.tensors.push_back(std::move(it));
  }
  in.files.assign(files.begin(), files.end());
  if (!src.config_json().empty()) {
    json cfg;
    try {
      cfg = json::parse(src.config_json());
    } catch (const json::exception& e) {
      fail(OSLO_ERR_FORMAT, quote_path(path), ": config is not valid JSON: ", clip(e.what(), 200));
    }
    in.has_config = true;
    if (cfg.is_object()) {
      for (const char* k :
           {"model_type", "architectures", "torch_dtype", "vocab_size", "hidden_size", "n_embd",
            "num_hidden_layers", "n_layer", "num_attention_heads", "n_head", "num_key_value_heads",
            "intermediate_size", "n_inner", "max_position_embeddings", "n_positions",
            "tie_word_embeddings"})
        if (cfg.contains(k)) in.config_summary.push_back({k, cfg[k].dump()});
    }
  }
  return in;
}

namespace {

std::string human_bytes(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%" PRIu64 " B", b);
  else
    std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

std::string pad(const std::string& s, size_t w) {
  return s.size() >= w ? s : s + std::string(w - s.size(), ' ');
}
std::string lpad(const std::string& s, size_t w) {
  return s.size() >= w ? s : std::string(w - s.size(), ' ') + s;
}

// "shard-<id>-tp00-pp00.safetensors" -> "tp00-pp00"; other names as they are.
std::string short_file(const std::string& f, const std::string& save_id) {
  const std::string pre = "shard-" + save_id + "-", suf = ".safetensors";
  if (!save_id.empty() && starts_with(f, pre.c_str()) && ends_with(f, suf.c_str()) &&
      f.size() > pre.size() + suf.size())
    return f.substr(pre.size(), f.size() - pre.size() - suf.size());
  return f;
}

}  // namespace

std::string render_text(const Inspection& in) {
  std::string o;
  o += "path:     " + in.path + "\n";
  o += "format:   " + in.kind;
  if (in.manifest_version) o += " (manifest version " + std::to_string(in.manifest_version) + ")";
  o += "\n";
  if (in.kind == "oslo-checkpoint") {
    o += "save id:  " + in.save_id + "\n";
    o += "layout:   tp " + std::to_string(in.layout.tp_size) + ", pp " +
         std::to_string(in.layout.pp_size) + ", dp " + std::to_string(in.layout.dp_size) + "\n";
  }
  o += "tensors:  " + std::to_string(in.tensors.size()) + ", " + human_bytes(in.total_bytes) +
       " (" + std::to_string(in.total_bytes) + " bytes) in " + std::to_string(in.files.size()) +
       " file" + (in.files.size() == 1 ? "" : "s") + "\n";
  if (in.has_config) {
    o += "config:  ";
    if (in.config_summary.empty()) o += " (no known keys)";
    for (const auto& kv : in.config_summary) o += " " + kv.first + "=" + kv.second;
    o += "\n";
  } else {
    o += "config:   none\n";
  }
  if (!in.extra_files.empty()) {
    o += "files:   ";
    for (const std::string& f : in.extra_files) o += " " + f;
    o += "\n";
  }
  o += "\n";
  size_t wn = 4, wd = 5, ws = 5;
  std::vector<std::string> shapes;
  for (const InspectTensor& t : in.tensors) {
    wn = std::max(wn, t.name.size());
    wd = std::max(wd, t.dtype.size());
    shapes.push_back(shape_str(t.shape));
    ws = std::max(ws, shapes.back().size());
  }
  o += pad("name", wn) + "  " + pad("dtype", wd) + "  " + pad("shape", ws) + "  split  " +
       lpad("bytes", 12) + "  stored in" +
       (in.kind == "oslo-checkpoint" ? " (shard-" + in.save_id + "-*.safetensors)" : "") + "\n";
  for (size_t i = 0; i < in.tensors.size(); ++i) {
    const InspectTensor& t = in.tensors[i];
    o += pad(t.name, wn) + "  " + pad(t.dtype, wd) + "  " + pad(shapes[i], ws) + "  " +
         lpad(t.split_dim < 0 ? "-" : std::to_string(t.split_dim), 5) + "  " +
         lpad(std::to_string(t.bytes), 12) + "  ";
    // Long lists show the first two pieces, an ellipsis and the last one.
    const size_t ns = t.shards.size();
    for (size_t k = 0; k < ns; ++k) {
      if (ns > 4 && k >= 2 && k + 1 < ns) {
        if (k == 2) o += ", ...";
        continue;
      }
      const InspectShard& s = t.shards[k];
      if (k) o += ", ";
      o += short_file(s.file, in.save_id);
      if (s.key != t.name) o += ":" + s.key.substr(std::min(s.key.size(), t.name.size()));
      if (t.split_dim >= 0)
        o += "[" + std::to_string(s.offset) + ":" + std::to_string(s.offset + s.length) + "]";
    }
    if (ns > 4) o += " (" + std::to_string(ns) + " pieces)";
    o += "\n";
  }
  return o;
}

std::string render_json(const Inspection& in) {
  ojson j;
  j["path"] = in.path;
  j["format"] = in.kind;
  if (in.manifest_version) j["manifest_version"] = in.manifest_version;
  if (in.kind == "oslo-checkpoint") {
    j["save_id"] = in.save_id;
    j["layout"] = ojson{{"tensor_parallel_size", in.layout.tp_size},
                        {"pipeline_parallel_size", in.layout.pp_size},
                        {"data_parallel_size", in.layout.dp_size}};
  }
  if (in.has_config) {
    ojson c = ojson::object();
    for (const auto& kv : in.config_summary) c[kv.first] = ojson::parse(kv.second);
    j["config"] = c;
  } else {
    j["config"] = nullptr;
  }
  j["extra_files"] = in.extra_files;
  j["files"] = in.files;
  j["total_bytes"] = in.total_bytes;
  ojson ts = ojson::array();
  for (const InspectTensor& t : in.tensors) {
    ojson x;
    x["name"] = t.name;
    x["dtype"] = t.dtype;
    x["shape"] = t.shape;
    x["split_dim"] = t.split_dim;
    x["bytes"] = t.bytes;
    ojson sh = ojson::array();
    for (const InspectShard& s : t.shards) {
      ojson y;
      y["file"] = s.file;
      y["key"] = s.key;
      if (t.split_dim >= 0) {
        y["offset"] = s.offset;
        y["length"] = s.length;
      }
      y["bytes"] = s.bytes;
      if (s.has_crc) y["crc32c"] = hex32(s.crc32c);
      sh.push_back(std::move(y));
    }
    x["shards"] = std::move(sh);
    ts.push_back(std::move(x));
  }
  j["tensors"] = std::move(ts);
  return j.dump(1) + "\n";
}

}  // namespace oslo
