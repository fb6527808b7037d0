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

#include "core/checkpoint/box_copy.hpp"
#include "core/checkpoint/fs_util.hpp"
#include "core/checkpoint/manifest.hpp"
#include "core/checkpoint/safetensors.hpp"
#include "core/comm/agreement.hpp"
#include "core/common/convert.hpp"
#include "core/common/dtype.hpp"
#include "core/common/error.hpp"
#include "core/common/log.hpp"
#include "core/common/shape_str.hpp"

namespace oslo {

CheckpointLayout layout_of(const Topology& t) {
  CheckpointLayout l;
  l.tp_rank = t.tp_rank();
  l.tp_size = t.tp_size();
  l.pp_rank = t.pp_rank();
  l.pp_size = t.pp_size();
  l.dp_rank = t.dp_rank();
  l.dp_size = t.dp_size();
  l.world_rank = t.world_rank();
  l.world_size = t.world_size();
  return l;
}

namespace {

namespace st = safetensors;
using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

// Parameter-set checkpoints write and read manifest version 1 (version 2's
// checksums are verified by the model loader, WeightSource, only).
constexpr int kFormatVersion = 1;
constexpr const char* kShardMetaKey = "oslo";

std::string shard_file_name(const std::string& save_id, int tp, int pp) {
  return "shard-" + save_id + "-tp" + std::to_string(tp) + "-pp" + std::to_string(pp) +
         ".safetensors";
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

void check_layout(const CheckpointLayout& l, const Control& world) {
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
// Save
// --------------------------------------------------------------------------

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
std::vector<ManifestPiece> read_shard_records(const std::string& dir, const std::string& file,
                                              const std::string& save_id, int tp, int pp,
                                              const CheckpointLayout& layout) {
  const std::string path = fsutil::join(dir, file);
  st::Reader rd(path);
  StrictJson sc(clip(path, kQuotedPathMax));
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
  std::vector<ManifestPiece> out;
  for (auto it = ts.begin(); it != ts.end(); ++it) {
    const std::string where = "record of " + quote(it.key());
    const json& r = it.value();
    sc.exact_keys(r, where, {"dtype", "shape", "split_dim", "offset", "length", "stored"});
    ManifestPiece rec;
    rec.name = it.key();
    rec.key = it.key();
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
      if (ti.dtype != rec.dtype || ti.shape != to_u64(expect))
        sc.bad("tensor " + quote(rec.name), "stored dtype/shape differ from its record");
    }
    out.push_back(std::move(rec));
  }
  return out;
}

// Rank 0: merges the records of every shard file into the manifest.
Manifest build_manifest(const std::string& dir, const std::string& save_id,
                        const CheckpointLayout& layout) {
  std::vector<ManifestPiece> pieces;
  Manifest m;
  m.version = kFormatVersion;
  m.save_id = save_id;
  m.tp_size = layout.tp_size;
  m.pp_size = layout.pp_size;
  m.dp_size = layout.dp_size;
  for (int pp = 0; pp < layout.pp_size; ++pp)
    for (int tp = 0; tp < layout.tp_size; ++tp) {
      const std::string file = shard_file_name(save_id, tp, pp);
      m.files.push_back(file);
      std::vector<ManifestPiece> recs;
      try {
        recs = read_shard_records(dir, file, save_id, tp, pp, layout);
      } catch (const Error& e) {
        if (e.status() != OSLO_ERR_IO) throw;
        fail(OSLO_ERR_IO, e.what(), " (world rank 0 reads every shard: is ", quote_path(dir),
             " on a file system shared by all ranks?)");
      }
      for (ManifestPiece& r : recs) pieces.push_back(std::move(r));
    }
  m.tensors = assemble_tensors(pieces);
  return m;
}

// --------------------------------------------------------------------------
// Load
// --------------------------------------------------------------------------

struct LoadPiece {
  const ManifestShard* shard;
  const st::TensorInfo* info;
  st::Reader* reader;
};

struct LoadPlan {
  const ParamShard* param;
  const ManifestTensor* tensor;
  oslo_dtype dtype;  // the tensor's stored dtype
  int64_t real_rows;
  std::vector<LoadPiece> pieces;
};

}  // namespace

// --------------------------------------------------------------------------

void save_checkpoint(const std::string& dir, const std::vector<ParamShard>& params,
                     const CheckpointLayout& layout, Control& world) {
  LocalOutcome f("checkpoint save");
  const std::string what = "checkpoint save to " + quote_path(dir);
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
  {
    int64_t v = static_cast<int64_t>(id);
    world.broadcast(&v, 1, 0);
    id = static_cast<uint64_t>(v);
  }
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

  agree_on_outcome(world, f, what, [&] {
    if (!my_file.empty()) remove_quietly(fsutil::join(dir, my_file));
  });

  // Every shard is durable: world rank 0 commits the manifest.
  if (world.rank() == 0) {
    Manifest m;
    f.run([&] {
      m = build_manifest(dir, save_id, layout);
      write_manifest(dir, m);
    });
    if (f.failed()) {
      for (int pp = 0; pp < layout.pp_size; ++pp)
        for (int tp = 0; tp < layout.tp_size; ++tp)
          remove_quietly(fsutil::join(dir, shard_file_name(save_id, tp, pp)));
    } else {
      remove_stale_files(dir, m.files);
    }
  }
  agree_on_outcome(world, f, what);
}

void load_checkpoint(const std::string& dir, const std::vector<ParamShard>& params,
                     CheckpointLoadStats* stats) {
  OSLO_CHECK(!dir.empty(), OSLO_ERR_INVALID_ARGUMENT, "checkpoint directory is empty");
  check_unique(params);
  std::vector<ParamGeom> geoms;
  for (const ParamShard& p : params) geoms.push_back(check_param(p));

  ManifestReadOptions ro;
  ro.max_version = kFormatVersion;
  ro.newer_version_note =
      "parameter-set load reads version 1, whose pieces carry no checksums; a version-2 model "
      "checkpoint loads through the model loader, which verifies them";
  const Manifest m = read_manifest(dir, ro);
  std::map<std::string, const ManifestTensor*> by_name;
  for (const ManifestTensor& t : m.tensors) by_name[t.name] = &t;

  // Plan everything (and open and validate every shard needed) before the
  // first byte of any parameter is written.
  std::map<std::string, std::unique_ptr<st::Reader>> readers;
  std::set<std::pair<std::string, std::string>> checked;  // (file, key) validated
  std::vector<LoadPlan> plans;
  for (size_t i = 0; i < params.size(); ++i) {
    const ParamShard& p = params[i];
    auto it = by_name.find(p.name);
    OSLO_CHECK(it != by_name.end(), OSLO_ERR_FORMAT, "tensor ", quote(p.name),
               " is not in the checkpoint in ", clip(dir, kQuotedPathMax));
    const ManifestTensor& t = *it->second;
    oslo_dtype tdt;
    st::to_oslo(t.dtype, &tdt);  // read_manifest accepts only dtypes oslo has
    OSLO_CHECK(t.shape == p.global_shape, OSLO_ERR_SHAPE, "tensor ", quote(p.name),
               ": the checkpoint in ", clip(dir, kQuotedPathMax), " has shape ", shape_str(t.shape),
               " but the parameter's global shape is ", shape_str(p.global_shape));
    OSLO_CHECK(dtypes_convertible(tdt, p.dtype), OSLO_ERR_DTYPE, "tensor ", quote(p.name),
               ": cannot load the checkpoint's ", dtype_name(tdt), " into a ", dtype_name(p.dtype),
               " parameter");
    LoadPlan plan{&p, &t, tdt, geoms[i].real_rows, {}};
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
        OSLO_CHECK(ti.dtype == t.dtype && ti.shape == to_u64(expect), OSLO_ERR_FORMAT,
                   clip(rd.path(), kQuotedPathMax), ": tensor ", quote(sh.key), " is ",
                   st::dtype_name(ti.dtype), " ",
                   shape_str(std::vector<int64_t>(ti.shape.begin(), ti.shape.end())),
                   " but the manifest expects ", st::dtype_name(t.dtype), " ", shape_str(expect));
      }
      plan.pieces.push_back({&sh, &ti, &rd});
    }
    plans.push_back(std::move(plan));
  }

  std::vector<char> bounce;
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
      BoxSource bs;
      const st::Reader& rd = *piece.reader;
      const st::TensorInfo& ti = *piece.info;
      bs.read = [&](uint64_t off, uint64_t n, void* d) { rd.read(ti, off, n, d); };
      bs.src_size = dtype_size(plan.dtype);
      bs.dst_size = dtype_size(p.dtype);
      if (plan.dtype != p.dtype)
        bs.convert = [&](const void* from, void* to, size_t n) {
          convert_host(plan.dtype, from, p.dtype, to, n, p.name);
        };
      copy_box(bs, lo, hi, sorg, sshape, dorg, p.local_shape, p.data, &bounce);
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
                                Control& world) {
  LocalOutcome f("checkpoint load");
  f.run([&] { load_checkpoint(dir, params); });
  agree_on_outcome(world, f, "checkpoint load from " + quote_path(dir));
}

}  // namespace oslo
