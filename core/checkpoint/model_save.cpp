// Model save: save_placed (a parallel model into an oslo checkpoint,
// manifest version 2) and the shard-file writer it shares with reshard
// (model_io_internal.hpp).
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_set>
#include <utility>

#include "core/checkpoint/fs_util.hpp"
#include "core/checkpoint/model_checkpoint.hpp"
#include "core/checkpoint/model_io_internal.hpp"
#include "core/comm/agreement.hpp"
#include "core/common/crc32c.hpp"
#include "core/common/dtype.hpp"
#include "core/common/error.hpp"
#include "core/common/shape_str.hpp"
#include "core/tensor/view.hpp"

namespace oslo {

using namespace model_io;  // and its aliases st, json, ojson

namespace {

json record_to_json(const ManifestPiece& r) {
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
              {"pp", r.pp},
              {"quant", static_cast<int>(r.quant)}};
}

ManifestPiece record_from_json(const json& j) {
  ManifestPiece r;
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
  r.quant = static_cast<oslo_dtype>(j.at("quant").get<int>());
  r.tp = j.at("tp").get<int>();
  r.pp = j.at("pp").get<int>();
  return r;
}

int digits_for(int size) {
  int d = 1;
  for (int v = std::max(1, size - 1); v >= 10; v /= 10) ++d;
  return std::max(2, d);
}

std::map<std::string, std::string> shard_metadata(const std::string& save_id, int tp, int tp_size,
                                                  int pp, int pp_size) {
  const ojson meta = {{"version", kManifestVersion}, {"save_id", save_id}, {"tp_rank", tp},
                      {"tp_size", tp_size},          {"pp_rank", pp},      {"pp_size", pp_size}};
  return {{"format", "pt"}, {"oslo", meta.dump()}};
}

std::vector<std::string> extra_names(const std::vector<std::string>& paths) {
  std::vector<std::string> names;
  std::set<std::string> seen;
  for (const std::string& p : paths) {
    const std::string n = fsutil::base_name(p);
    OSLO_CHECK(plain_file_name(n) && n != kCheckpointManifest && n.compare(0, 6, "shard-") != 0,
               OSLO_ERR_INVALID_ARGUMENT, "extra file ", quote_path(p),
               " cannot be stored in a checkpoint under the name ", quote(n));
    OSLO_CHECK(seen.insert(n).second, OSLO_ERR_INVALID_ARGUMENT, "two extra files are named ",
               quote(n));
    names.push_back(n);
  }
  return names;
}

}  // namespace

namespace model_io {

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

// Plans the pieces of one rank from placements (dtype per placement).
void plan_pieces(const std::vector<const Placement*>& placements,
                 const std::vector<st::Dtype>& dtypes, const std::vector<oslo_dtype>& quants,
                 RankPlan* plan) {
  for (size_t i = 0; i < placements.size(); ++i) {
    const Placement& p = *placements[i];
    ManifestPiece base;
    base.name = p.name;
    base.dtype = dtypes[i];
    base.quant = quants[i];
    base.shape = p.global_shape;
    base.split_dim = p.split_dim;
    bool any = false;
    if (p.split_dim < 0) {
      if (p.replica_owner) {
        ManifestPiece r = base;
        r.key = p.name;
        r.stored = true;
        r.offset = 0;
        r.length = p.global_shape.empty() ? 1 : p.global_shape[0];
        r.bytes = box_nbytes(r.dtype, r.quant, r.shape, -1, 0);
        plan->stored.push_back(plan->records.size());
        plan->records.push_back(r);
        any = true;
      }
    } else {
      for (const Segment& s : p.segments) {
        if (!s.owner) continue;
        ManifestPiece r = base;
        r.key = seg_key(p, s);
        r.stored = true;
        r.offset = s.global_start;
        r.length = s.length;
        r.bytes = box_nbytes(r.dtype, r.quant, r.shape, p.split_dim, s.length);
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
    ManifestPiece& r = plan.records[ri];
    OSLO_CHECK(keys.insert(r.key).second, OSLO_ERR_INVALID_ARGUMENT, "tensor ", quote(r.name),
               ": key ", quote(r.key), " is used twice in one shard file");
    entries.push_back(
        {r.key, r.dtype, stored_piece_shape(r.quant, r.shape, r.split_dim, r.length), nullptr});
  }
  auto meta = shard_metadata(save_id, tp, tp_size, pp, pp_size);
  std::vector<uint32_t> crcs = write_streaming(
      fsutil::join(dir, file), entries, &meta,
      [&](size_t i, std::vector<char>& buf) { plan.produce(plan.stored[i], buf); }, on_bytes);
  for (size_t i = 0; i < plan.stored.size(); ++i) plan.records[plan.stored[i]].crc = crcs[i];
  for (ManifestPiece& r : plan.records) {
    r.file = file;
    r.tp = tp;
    r.pp = pp;
  }
  fsutil::fault_point("save.after_shard_write", fsutil::join(dir, file));
}

Manifest model_manifest(const std::string& dir, const std::string& save_id, int tp_size,
                        int pp_size, int dp_size, const std::string& config_json,
                        const std::vector<std::string>& extra_files,
                        const std::vector<std::string>& files,
                        const std::vector<ManifestPiece>& records, bool check_headers) {
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
    for (const ManifestPiece& r : records) {
      if (!r.stored) continue;
      auto it = readers.find(r.file);
      OSLO_CHECK(it != readers.end(), OSLO_ERR_INTERNAL, "record names an unknown file");
      const st::TensorInfo& ti = it->second->at(r.key);
      OSLO_CHECK(ti.dtype == r.dtype && ti.nbytes() == r.bytes, OSLO_ERR_IO, it->second->path(),
                 ": tensor ", quote(r.key), " differs from what its writer recorded");
    }
  }
  Manifest m;
  m.version = kManifestVersion;
  m.save_id = save_id;
  m.tp_size = tp_size;
  m.pp_size = pp_size;
  m.dp_size = dp_size;
  m.config_json = config_json;
  m.extra_files = extra_files;
  m.files = files;
  m.tensors = assemble_tensors(records);
  return m;
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

std::string new_save_id(const std::string& dir) {
  std::string id;
  do {
    id = hex64(fsutil::random_u64());
  } while (fsutil::exists(fsutil::join(dir, "shard-" + id + "-tp00-pp00.safetensors")));
  return id;
}

}  // namespace model_io

// --------------------------------------------------------------------------
// Save
// --------------------------------------------------------------------------

void save_placed(const std::string& dir, const std::vector<PlacedTensor>& tensors,
                 const std::string& model_config_json, const std::vector<std::string>& extra_files,
                 const CheckpointLayout& layout, Control& world, const ProgressFn& progress,
                 const std::map<std::string, nlohmann::json>& sections) {
  LocalOutcome f("model save");
  const std::string what = "model save to " + quote_path(dir);
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
    check_model_config(model_config_json);
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
    int64_t v = static_cast<int64_t>(id);
    world.broadcast(&v, 1, 0);
    id = static_cast<uint64_t>(v);
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
      std::vector<oslo_dtype> quants;
      for (const PlacedTensor& pt : tensors) {
        ps.push_back(&pt.placement);
        const oslo_dtype dt = pt.tensor.dtype();
        const bool q = dtype_is_block(dt);
        OSLO_CHECK(!q || (!pt.placement.transpose && pt.tensor.ndim() == 2), OSLO_ERR_NOT_SUPPORTED,
                   "tensor ", quote(pt.placement.name), ": saving a ", dtype_name(dt),
                   " tensor the model holds transposed from its file's layout (a Conv1D weight) "
                   "is not supported; save the model loaded in a float dtype");
        dts.push_back(q ? st::Dtype::U8 : st::from_oslo(dt));
        quants.push_back(q ? dt : OSLO_DTYPE_F32);
      }
      plan_pieces(ps, dts, quants, &plan);
      std::map<std::string, size_t> by_name;
      for (size_t i = 0; i < tensors.size(); ++i) by_name[tensors[i].placement.name] = i;
      // The HF-layout local tensor of the last tensor fetched from the backend.
      std::string cached;
      std::vector<char> host;
      plan.produce = [&](size_t ri, std::vector<char>& buf) {
        const ManifestPiece& r = plan.records[ri];
        const PlacedTensor& pt = tensors[by_name.at(r.name)];
        const Placement& p = pt.placement;
        Backend& be = pt.tensor.backend();
        const oslo_dtype dt = pt.tensor.dtype();
        // A block-quantized tensor [R, C] is copied in units of whole blocks.
        int64_t blk = 1, bb = 0;
        if (dtype_is_block(dt)) dtype_block(dt, &blk, &bb);
        const size_t es = dtype_is_block(dt) ? static_cast<size_t>(bb) : dtype_size(dt);
        std::vector<int64_t> lshape = hf_local_shape(p);
        if (dtype_is_block(dt)) lshape.back() /= blk;
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
        const int64_t unit = p.split_dim == static_cast<int>(lshape.size()) - 1 ? blk : 1;
        copy_rows(lshape, p.split_dim, seg->local_start / unit, seg->length / unit, es, host.data(),
                  buf.data(), true);
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

  agree_on_outcome(world, f, what, [&] {
    if (wrote) remove_quietly(fsutil::join(dir, my_file));
  });

  // Every shard is durable: gather the records on every rank (rank 0 uses
  // them), then rank 0 commits.
  json mine = json::array();
  if (writer)
    for (const ManifestPiece& r : plan.records) mine.push_back(record_to_json(r));
  const std::vector<std::string> all = world.all_gather_strings(mine.dump());
  if (world.rank() == 0) {
    f.run([&] {
      std::vector<ManifestPiece> records;
      for (const std::string& s : all)
        for (const json& r : json::parse(s)) records.push_back(record_from_json(r));
      std::vector<std::string> files;
      for (int pp = 0; pp < layout.pp_size; ++pp)
        for (int tp = 0; tp < layout.tp_size; ++tp)
          files.push_back(shard_file_name(save_id, tp, layout.tp_size, pp, layout.pp_size));
      Manifest man = model_manifest(dir, save_id, layout.tp_size, layout.pp_size, layout.dp_size,
                                    model_config_json, extras, files, records, true);
      man.sections = sections;
      (void)manifest_text(man);  // refuses a bad section before the extra files are copied
      for (size_t i = 0; i < extra_files.size(); ++i)
        copy_file_atomically(extra_files[i], fsutil::join(dir, extras[i]));
      write_manifest(dir, man);
      remove_stale_files(dir, files, extras);
    });
    if (f.failed())
      for (int pp = 0; pp < layout.pp_size; ++pp)
        for (int tp = 0; tp < layout.tp_size; ++tp)
          remove_quietly(
              fsutil::join(dir, shard_file_name(save_id, tp, layout.tp_size, pp, layout.pp_size)));
  }
  agree_on_outcome(world, f, what);
}

}  // namespace oslo
