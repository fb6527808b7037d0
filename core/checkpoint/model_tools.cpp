// The offline tools over any WeightSource: reshard (a checkpoint to another
// tensor-parallel size), merge (into an ordinary Hugging Face folder, with
// the model's own files: kModelFiles), inspect and its renderings.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "core/checkpoint/fs_util.hpp"
#include "core/checkpoint/model_checkpoint.hpp"
#include "core/checkpoint/model_io_internal.hpp"
#include "core/common/dtype.hpp"
#include "core/common/error.hpp"
#include "core/common/shape_str.hpp"

namespace oslo {

using namespace model_io;  // and its aliases st, json, ojson

namespace {

bool starts_with(const std::string& s, const std::string& p) {
  return s.size() >= p.size() && s.compare(0, p.size(), p) == 0;
}
bool ends_with(const std::string& s, const std::string& p) {
  return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
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

}  // namespace

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
  // A training checkpoint: each parameter's optimizer state is placed like
  // the parameter (re-sliced with it); its master weights keep their dtype.
  TrainingSection training;
  const bool is_training = src.training(&training);
  OSLO_CHECK(!is_training || !options.convert, OSLO_ERR_INVALID_ARGUMENT,
             "reshard: ", quote_path(src_path),
             " is a training checkpoint; converting its dtype would round the master weights "
             "it resumes from (reshard it without a dtype, or merge it for a converted model)");
  const std::set<std::string> trained(training.parameters.begin(), training.parameters.end());
  std::vector<std::vector<Placement>> plans(new_tp);
  std::set<std::string> planned;
  for (int r = 0; r < new_tp; ++r) {
    plans[r] = planner(new_tp, r);
    const size_t n_model = plans[r].size();
    for (size_t i = 0; i < n_model; ++i) {
      if (!trained.count(plans[r][i].name)) continue;
      for (const std::string& state : training.state_names) {
        Placement q = plans[r][i];
        q.name = optimizer_tensor_name(state, q.name);
        plans[r].push_back(std::move(q));
      }
    }
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
  std::vector<ManifestPiece> records;
  uint64_t total = 0, done = 0;
  std::vector<RankPlan> rank_plans(new_tp);
  for (int r = 0; r < new_tp; ++r) {
    std::vector<const Placement*> ps;
    std::vector<st::Dtype> dts;
    std::vector<oslo_dtype> quants;  // quantized tensors keep their blocks
    for (const Placement& p : plans[r]) {
      ps.push_back(&p);
      dts.push_back(out_dtype(src.at(p.name)));
      quants.push_back(src.at(p.name).quant);
    }
    plan_pieces(ps, dts, quants, &rank_plans[r]);
    for (size_t ri : rank_plans[r].stored) total += rank_plans[r].records[ri].bytes;
  }
  if (options.progress) options.progress(0, total);
  try {
    for (int r = 0; r < new_tp; ++r) {
      RankPlan& plan = rank_plans[r];
      plan.produce = [&](size_t ri, std::vector<char>& buf) {
        const ManifestPiece& rec = plan.records[ri];
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
    Manifest man = model_manifest(dst, save_id, new_tp, 1, 1, src.config_json(), extras, files,
                                  records, false);
    man.sections = src.sections();  // the training section travels unchanged
    for (const std::string& e : extras) {
      const std::string from = fsutil::join(src.folder(), e), to = fsutil::join(dst, e);
      if (from != to) copy_file_atomically(from, to);
    }
    src.release();
    write_manifest(dst, man);
  } catch (...) {
    for (const std::string& f : files) remove_quietly(fsutil::join(dst, f));
    throw;
  }
  remove_stale_files(dst, files, extras);
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
  // A training checkpoint merges to its weights only: the optimizer state
  // is not part of a Hugging Face model.
  std::set<std::string> skip;
  TrainingSection training;
  if (src.training(&training))
    for (const std::string& n : training.optimizer_tensors()) skip.insert(n);
  // A Hugging Face folder holds no block-quantized tensors: they are written
  // dequantized (f32, or the dtype asked for). `reshard --tp 1` keeps them
  // quantized, in an oslo checkpoint.
  auto out_dtype = [&](const SourceTensor& t) {
    oslo_dtype od;
    if (t.quantized()) return options.convert ? st::from_oslo(options.dtype) : st::Dtype::F32;
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
    if (skip.count(t.name)) continue;
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
  auto training = src.sections().find(kTrainingSection);
  if (training != src.sections().end()) {
    in.has_training = true;
    in.training = training->second;
  }
  std::set<std::string> files;
  for (const SourceTensor& t : src.tensors()) {
    InspectTensor it;
    it.name = t.name;
    it.dtype = st::dtype_name(t.dtype);
    it.shape = t.shape;
    it.split_dim = t.split_dim;
    it.bytes = t.nbytes();
    for (const SourceShard& s : t.shards) {
      it.shards.push_back(s);
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
  if (in.has_training) {
    // The section was validated when read: these keys are there.
    const json& t = in.training;
    std::string states;
    for (const json& s : t["optimizer_state"])
      states += (states.empty() ? "" : ", ") + s.get<std::string>();
    o += "training: section version " + t["version"].dump() + ", optimizer state [" + states +
         "] of " + std::to_string(t["parameters"].size()) +
         " parameters (tensors optimizer/<state>/<parameter>)\n";
    o += "trainer:  " + clip(t["trainer"].dump(), 400) + "\n";
    o += "user:     " + clip(t["user_state"].dump(), 400) + "\n";
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
  if (in.has_training) j["training"] = ojson::parse(in.training.dump());
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
    for (const InspectShard& s : t.shards) sh.push_back(shard_json(s, t.split_dim >= 0, true));
    x["shards"] = std::move(sh);
    ts.push_back(std::move(x));
  }
  j["tensors"] = std::move(ts);
  return j.dump(1) + "\n";
}

}  // namespace oslo
