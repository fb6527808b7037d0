#include "core/checkpoint/weight_source.hpp"

#include "core/quant/quant.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>
#include <utility>

#include "core/checkpoint/box_copy.hpp"
#include "core/checkpoint/fs_util.hpp"
#include "core/checkpoint/gguf_source.hpp"
#include "core/checkpoint/gptq_source.hpp"
#include "core/checkpoint/manifest.hpp"
#include "core/common/convert.hpp"
#include "core/common/dtype.hpp"
#include "core/common/error.hpp"
#include "core/common/shape_str.hpp"

namespace oslo {

namespace st = safetensors;
using json = nlohmann::json;

const char* source_kind_name(SourceKind k) {
  switch (k) {
    case SourceKind::HfSingle: return "hf-single";
    case SourceKind::HfSharded: return "hf-sharded";
    case SourceKind::OsloCheckpoint: return "oslo-checkpoint";
    case SourceKind::SafetensorsFile: return "safetensors-file";
    case SourceKind::GgufFile: return "gguf-file";
  }
  return "unknown";
}

// --------------------------------------------------------------------------
// Files
// --------------------------------------------------------------------------

struct WeightSource::File {
  std::string path;
  std::unique_ptr<st::Reader> reader;
  int map_fd = -1;
  void* map = nullptr;
  size_t map_size = 0;
  std::set<std::string> checked;  // keys validated against the listing
  ~File() {
    if (map) ::munmap(map, map_size);
    if (map_fd >= 0) ::close(map_fd);
  }
};

WeightSource::~WeightSource() = default;

void WeightSource::release() {
  files_.clear();
}

WeightSource::File& WeightSource::file(const std::string& name) {
  auto it = files_.find(name);
  if (it != files_.end()) return *it->second;
  auto f = std::make_unique<File>();
  f->path = fsutil::join(folder_, name);
  f->reader = std::make_unique<st::Reader>(f->path);
  ++files_opened_;
  if (mode_ == ReadMode::Mmap) {
    f->map_fd = ::open(f->path.c_str(), O_RDONLY | O_CLOEXEC);
    if (f->map_fd < 0) {
      int e = errno;
      fail(OSLO_ERR_IO, "cannot open ", quote_path(f->path), ": ", fsutil::errno_text(e));
    }
    struct stat sb;
    OSLO_CHECK(::fstat(f->map_fd, &sb) == 0, OSLO_ERR_IO, "cannot stat ", quote_path(f->path));
    f->map_size = static_cast<size_t>(sb.st_size);
    const st::Header& h = f->reader->header();
    OSLO_CHECK(f->map_size >= h.data_start() + h.data_size, OSLO_ERR_FORMAT, f->path,
               ": file shrank after it was opened");
    if (f->map_size > 0) {
      void* p = ::mmap(nullptr, f->map_size, PROT_READ, MAP_SHARED, f->map_fd, 0);
      if (p == MAP_FAILED) {
        int e = errno;
        fail(OSLO_ERR_IO, "cannot map ", quote_path(f->path), ": ", fsutil::errno_text(e));
      }
      f->map = p;
    }
  }
  return *files_.emplace(name, std::move(f)).first->second;
}

void WeightSource::read_bytes(const SourceShard& sh, File& f, const st::TensorInfo& ti,
                              uint64_t offset, uint64_t bytes, void* dst) {
  if (bytes == 0) return;
  if (mode_ == ReadMode::Mmap && f.map) {
    OSLO_CHECK(offset <= ti.nbytes() && bytes <= ti.nbytes() - offset, OSLO_ERR_INTERNAL,
               "read outside tensor ", quote(ti.name));
    const uint64_t pos = f.reader->header().data_start() + ti.begin + offset;
    std::memcpy(dst, static_cast<const char*>(f.map) + pos, static_cast<size_t>(bytes));
    // Drop the pages just copied so that they do not stay in the resident set.
    const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    const uint64_t a = pos / page * page, b = std::min<uint64_t>(f.map_size, pos + bytes);
    ::madvise(static_cast<char*>(f.map) + a, static_cast<size_t>(b - a), MADV_DONTNEED);
  } else {
    f.reader->read(ti, offset, bytes, dst);
  }
  bytes_read_ += bytes;
  ++read_calls_;
  if (sh.has_crc) {
    CrcProgress& p = crc_[{sh.file, sh.key}];
    if (p.broken || offset != p.next) {
      p.broken = true;
      if (offset == 0) p = CrcProgress{};  // a fresh pass from the start
    }
    if (!p.broken && offset == p.next) {
      p.crc = crc32c(p.crc, dst, static_cast<size_t>(bytes));
      p.next += bytes;
      if (p.next == ti.nbytes()) {
        const uint32_t got = p.crc;
        crc_.erase({sh.file, sh.key});
        OSLO_CHECK(got == sh.crc32c, OSLO_ERR_FORMAT, f.path, ": tensor ", quote(sh.key),
                   ": checksum mismatch (CRC32C of the data is ", hex32(got),
                   ", the manifest records ", hex32(sh.crc32c), ")");
      }
    }
  }
}

// --------------------------------------------------------------------------
// Opening
// --------------------------------------------------------------------------

namespace {

bool is_dir(const std::string& p) {
  struct stat sb;
  return ::stat(p.c_str(), &sb) == 0 && S_ISDIR(sb.st_mode);
}

bool is_regular(const std::string& p) {
  struct stat sb;
  return ::stat(p.c_str(), &sb) == 0 && S_ISREG(sb.st_mode);
}

SourceTensor whole_tensor(const st::TensorInfo& ti, const std::string& file) {
  SourceTensor t;
  t.name = ti.name;
  t.dtype = ti.dtype;
  for (uint64_t d : ti.shape) {
    OSLO_CHECK(d <= static_cast<uint64_t>(INT64_MAX), OSLO_ERR_FORMAT, file, ": tensor ",
               quote(ti.name), ": extent ", d, " is too large");
    t.shape.push_back(static_cast<int64_t>(d));
  }
  SourceShard sh;
  sh.file = fsutil::base_name(file);
  sh.key = ti.name;
  sh.offset = 0;
  sh.length = t.shape.empty() ? 1 : t.shape[0];
  sh.bytes = ti.nbytes();
  t.shards.push_back(sh);
  return t;
}

}  // namespace

WeightSource::WeightSource(const std::string& path, ReadMode mode) : path_(path), mode_(mode) {
  OSLO_CHECK(!path.empty(), OSLO_ERR_INVALID_ARGUMENT, "weight source path is empty");
  if (is_dir(path)) {
    folder_ = path;
    if (fsutil::exists(fsutil::join(path, kCheckpointManifest))) {
      open_oslo();
    } else if (fsutil::exists(fsutil::join(path, "model.safetensors"))) {
      open_hf_single("model.safetensors");
    } else if (fsutil::exists(fsutil::join(path, "model.safetensors.index.json"))) {
      open_hf_index();
    } else {
      fail(OSLO_ERR_IO, "no ", kCheckpointManifest,
           ", model.safetensors or model.safetensors.index.json in ", quote_path(path),
           fsutil::exists(fsutil::join(path, "pytorch_model.bin"))
               ? " (pytorch_model.bin is not supported: convert it to safetensors)"
               : "");
    }
  } else if (is_regular(path) && is_gguf_path(path)) {
    folder_ = fsutil::parent_dir(path);
    open_gguf();
  } else if (is_regular(path)) {
    folder_ = fsutil::parent_dir(path);
    kind_ = SourceKind::SafetensorsFile;
    st::Reader rd(path);
    for (const st::TensorInfo& ti : rd.tensors()) tensors_.push_back(whole_tensor(ti, path));
  } else {
    fail(OSLO_ERR_IO, "weight source ", quote_path(path),
         " does not exist or is not a file or folder");
  }
  if (kind_ == SourceKind::HfSingle || kind_ == SourceKind::HfSharded)
    gptq_ = GptqAdapter::open(config_json_, fsutil::join(folder_, "config.json"), tensors_);
  std::sort(tensors_.begin(), tensors_.end(),
            [](const SourceTensor& a, const SourceTensor& b) { return a.name < b.name; });
  for (size_t i = 0; i < tensors_.size(); ++i) index_[tensors_[i].name] = i;
}

const std::vector<std::string>& model_file_names() {
  static const std::vector<std::string> names = {
      "generation_config.json",   // generation defaults
      "tokenizer.json",           // Hugging Face tokenizers
      "tokenizer_config.json",    // tokenizer class, special tokens, chat template
      "special_tokens_map.json",  //
      "added_tokens.json",        //
      "tokenizer.model",          // SentencePiece (LLaMA, Mistral, Gemma)
      "spiece.model",             // SentencePiece (T5, ALBERT)
      "sentencepiece.bpe.model",  // SentencePiece (XLM-R)
      "vocab.txt",                // WordPiece (BERT)
      "vocab.json",               // byte-level BPE (GPT-2, RoBERTa)
      "merges.txt",               //
      "chat_template.jinja",      // chat template saved on its own (transformers >= 4.43)
      "chat_template.json",       //
  };
  return names;
}

void WeightSource::list_extra_files(bool hf) {
  if (!hf) return;
  for (const std::string& n : model_file_names())
    if (is_regular(fsutil::join(folder_, n))) extra_files_.push_back(n);
  std::sort(extra_files_.begin(), extra_files_.end());
}

void WeightSource::open_hf_single(const std::string& name) {
  kind_ = SourceKind::HfSingle;
  File& f = file(name);
  for (const st::TensorInfo& ti : f.reader->tensors()) {
    tensors_.push_back(whole_tensor(ti, f.path));
    f.checked.insert(ti.name);
  }
  const std::string cfg = fsutil::join(folder_, "config.json");
  if (is_regular(cfg)) config_json_ = fsutil::read_small_file(cfg, size_t{64} << 20);
  list_extra_files(true);
}

void WeightSource::open_hf_index() {
  kind_ = SourceKind::HfSharded;
  const std::string ipath = fsutil::join(folder_, "model.safetensors.index.json");
  const std::string where = clip(ipath, kQuotedPathMax);
  json j;
  try {
    j = json::parse(fsutil::read_small_file(ipath, size_t{256} << 20));
  } catch (const json::exception& e) {
    fail(OSLO_ERR_FORMAT, where, ": invalid JSON: ", clip(e.what(), 200));
  }
  OSLO_CHECK(j.is_object(), OSLO_ERR_FORMAT, where, ": the index must be a JSON object");
  OSLO_CHECK(j.contains("weight_map") && j["weight_map"].is_object(), OSLO_ERR_FORMAT, where,
             ": missing or malformed 'weight_map' (an object of tensor name -> file name)");
  if (j.contains("metadata"))
    OSLO_CHECK(j["metadata"].is_object() || j["metadata"].is_null(), OSLO_ERR_FORMAT, where,
               ": 'metadata' must be an object");
  std::map<std::string, std::string> wm;  // tensor -> file
  std::vector<std::string> files;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    OSLO_CHECK(it.value().is_string(), OSLO_ERR_FORMAT, where, ": weight_map[", quote(it.key()),
               "] must be a file name");
    const std::string fn = it.value().get<std::string>();
    OSLO_CHECK(plain_file_name(fn), OSLO_ERR_FORMAT, where, ": weight_map[", quote(it.key()),
               "] = ", quote(fn), " is not a plain file name inside the folder");
    wm[it.key()] = fn;
    if (std::find(files.begin(), files.end(), fn) == files.end()) files.push_back(fn);
  }
  OSLO_CHECK(!wm.empty(), OSLO_ERR_FORMAT, where, ": weight_map is empty");
  std::map<std::string, std::string> seen;  // tensor -> file it was found in
  for (const std::string& fn : files) {
    const std::string fp = fsutil::join(folder_, fn);
    OSLO_CHECK(fsutil::exists(fp), OSLO_ERR_IO, where, ": shard file ", quote(fn),
               " listed in weight_map does not exist");
    File& f = file(fn);
    for (const st::TensorInfo& ti : f.reader->tensors()) {
      auto s = seen.find(ti.name);
      OSLO_CHECK(s == seen.end(), OSLO_ERR_FORMAT, "tensor ", quote(ti.name),
                 " is in two files: ", quote(s == seen.end() ? std::string() : s->second), " and ",
                 quote(fn), " (", where, ")");
      seen[ti.name] = fn;
      auto w = wm.find(ti.name);
      OSLO_CHECK(w != wm.end(), OSLO_ERR_FORMAT, fp, ": tensor ", quote(ti.name),
                 " is not in the weight_map of ", where);
      OSLO_CHECK(w->second == fn, OSLO_ERR_FORMAT, fp, ": tensor ", quote(ti.name),
                 " is in this file but weight_map says ", quote(w->second));
      tensors_.push_back(whole_tensor(ti, fp));
      f.checked.insert(ti.name);
    }
  }
  for (const auto& kv : wm)
    OSLO_CHECK(seen.count(kv.first), OSLO_ERR_FORMAT, "tensor ", quote(kv.first),
               " of the weight_map is not in ", quote(fsutil::join(folder_, kv.second)));
  const std::string cfg = fsutil::join(folder_, "config.json");
  if (is_regular(cfg)) config_json_ = fsutil::read_small_file(cfg, size_t{64} << 20);
  list_extra_files(true);
}

void WeightSource::open_oslo() {
  kind_ = SourceKind::OsloCheckpoint;
  ManifestReadOptions ro;
  ro.sections = {kTrainingSection};
  Manifest m = read_manifest(folder_, ro);
  version_ = m.version;
  sections_ = std::move(m.sections);
  save_id_ = m.save_id;
  layout_.tp_size = m.tp_size;
  layout_.pp_size = m.pp_size;
  layout_.dp_size = m.dp_size;
  tensors_ = std::move(m.tensors);
  config_json_ = m.config_json;
  extra_files_ = m.extra_files;
}

// --------------------------------------------------------------------------
// Lookup and reading
// --------------------------------------------------------------------------

bool WeightSource::training(TrainingSection* out) const {
  auto it = sections_.find(kTrainingSection);
  if (it == sections_.end()) return false;
  *out = parse_training_section(it->second, tensors_, fsutil::join(folder_, kCheckpointManifest));
  return true;
}

std::vector<std::string> WeightSource::extra_file_paths() const {
  std::vector<std::string> out;
  for (const std::string& n : extra_files_) out.push_back(fsutil::join(folder_, n));
  return out;
}

const SourceTensor* WeightSource::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const SourceTensor& WeightSource::at(const std::string& name) const {
  const SourceTensor* t = find(name);
  if (!t) {
    std::string where = path_;
    if (kind_ == SourceKind::HfSingle) where = fsutil::join(folder_, "model.safetensors");
    if (kind_ == SourceKind::HfSharded)
      where = fsutil::join(folder_, "model.safetensors.index.json");
    if (kind_ == SourceKind::OsloCheckpoint) where = fsutil::join(folder_, kCheckpointManifest);
    fail(OSLO_ERR_FORMAT, "tensor ", quote(name), " is not in ", quote_path(where));
  }
  return *t;
}

void WeightSource::check_tensor(const SourceTensor& t, int dim, int64_t start, int64_t len) {
  if (gguf_) return;  // every tensor was checked against the file when it was opened
  if (gptq_ && gptq_->owns(t)) return gptq_->check_tensor(*this, t);
  for (const SourceShard& sh : t.shards) {
    if (dim >= 0 && dim == t.split_dim &&
        (sh.offset >= start + len || sh.offset + sh.length <= start))
      continue;
    File& f = file(sh.file);
    if (f.checked.count(sh.key)) continue;
    const st::TensorInfo& ti = f.reader->at(sh.key);
    const std::vector<uint64_t> expect =
        stored_piece_shape(t.quant, t.shape, t.split_dim, t.split_dim >= 0 ? sh.length : 0);
    OSLO_CHECK(ti.dtype == t.dtype && ti.shape == expect, OSLO_ERR_FORMAT, f.path, ": tensor ",
               quote(sh.key), " is ", st::dtype_name(ti.dtype), " ",
               shape_str(std::vector<int64_t>(ti.shape.begin(), ti.shape.end())),
               " but the manifest expects ", st::dtype_name(t.dtype), " ",
               shape_str(std::vector<int64_t>(expect.begin(), expect.end())));
    OSLO_CHECK(sh.bytes == 0 || ti.nbytes() == sh.bytes, OSLO_ERR_FORMAT, f.path, ": tensor ",
               quote(sh.key), " holds ", ti.nbytes(), " bytes but the manifest records ", sh.bytes);
    f.checked.insert(sh.key);
  }
}

void WeightSource::read_box(const SourceTensor& t, int dim, int64_t start, int64_t len,
                            st::Dtype out, void* dst) {
  if (gptq_ && gptq_->owns(t)) return gptq_->read_box(*this, t, dim, start, len, out, dst);
  const int nd = static_cast<int>(t.shape.size());
  OSLO_CHECK(dim >= -1 && dim < nd, OSLO_ERR_INVALID_ARGUMENT, "tensor ", quote(t.name),
             ": box dimension ", dim, " is out of range for ", nd, " dimensions");
  // The blocks of a tensor stored transposed are boxes of the stored layout.
  std::vector<int64_t> ext = t.shape;
  if (t.quantized() && out == st::Dtype::U8 && stored_transposed(t))
    std::reverse(ext.begin(), ext.end());
  if (dim >= 0)
    OSLO_CHECK(start >= 0 && len >= 0 && start <= ext[dim] && len <= ext[dim] - start,
               OSLO_ERR_INVALID_ARGUMENT, "tensor ", quote(t.name), ": box [", start, ", ",
               start + len, ") along dimension ", dim, " is outside its extent ", ext[dim]);
  if (gguf_) {
    read_box_gguf(t, dim, start, len, out, dst);
    return;
  }
  if (t.quantized()) {
    read_box_quantized(t, dim, start, len, out, dst);
    return;
  }
  const bool raw = out == t.dtype;
  oslo_dtype sdt = OSLO_DTYPE_F32, ddt = OSLO_DTYPE_F32;
  if (!raw) {
    OSLO_CHECK(st::to_oslo(t.dtype, &sdt) && st::to_oslo(out, &ddt), OSLO_ERR_DTYPE, "tensor ",
               quote(t.name), ": cannot convert ", st::dtype_name(t.dtype), " to ",
               st::dtype_name(out));
    OSLO_CHECK(dtype_is_float(sdt) == dtype_is_float(ddt), OSLO_ERR_DTYPE, "tensor ", quote(t.name),
               ": cannot convert ", st::dtype_name(t.dtype), " to ", st::dtype_name(out));
  }
  check_tensor(t, dim, start, len);
  std::vector<int64_t> lo(nd, 0), hi(t.shape);
  if (dim >= 0) {
    lo[dim] = start;
    hi[dim] = start + len;
  }
  for (int k = 0; k < nd; ++k)
    if (hi[k] <= lo[k]) return;  // empty box
  const unsigned bits = st::dtype_bits(t.dtype);
  if (bits % 8 != 0) {
    // Sub-byte dtypes: only whole stored pieces, copied as bytes.
    OSLO_CHECK(raw && t.shards.size() == 1 && lo == std::vector<int64_t>(nd, 0) && hi == t.shape,
               OSLO_ERR_DTYPE, "tensor ", quote(t.name), ": ", st::dtype_name(t.dtype),
               " can only be read whole");
    const SourceShard& sh = t.shards[0];
    File& f = file(sh.file);
    const st::TensorInfo& ti = f.reader->at(sh.key);
    read_bytes(sh, f, ti, 0, ti.nbytes(), dst);
    return;
  }
  const uint64_t ss = bits / 8, ds = raw ? ss : dtype_size(ddt);
  std::vector<int64_t> bshape(nd);
  for (int k = 0; k < nd; ++k) bshape[k] = hi[k] - lo[k];
  std::vector<char> bounce;
  for (const SourceShard& sh : t.shards) {
    std::vector<int64_t> slo = lo, shi = hi, sorg(nd, 0), sshape(t.shape);
    if (t.split_dim >= 0) {
      const int s = t.split_dim;
      sorg[s] = sh.offset;
      sshape[s] = sh.length;
      slo[s] = std::max(slo[s], sh.offset);
      shi[s] = std::min(shi[s], sh.offset + sh.length);
      if (shi[s] <= slo[s]) continue;
    }
    File& f = file(sh.file);
    const st::TensorInfo& ti = f.reader->at(sh.key);
    BoxSource bs;
    bs.read = [&](uint64_t off, uint64_t n, void* d) { read_bytes(sh, f, ti, off, n, d); };
    bs.src_size = ss;
    bs.dst_size = ds;
    if (!raw)
      bs.convert = [&](const void* from, void* to, size_t n) {
        convert_host(sdt, from, ddt, to, n, t.name);
      };
    copy_box(bs, slo, shi, sorg, sshape, lo, bshape, dst, &bounce);
  }
}

// A block-quantized tensor: its boxes are copied in units of whole blocks
// (the stored piece [rows, row bytes] is the unit layout [..., K / block]),
// as bytes (out U8) or dequantized (out F32/F16/BF16).
void WeightSource::read_box_quantized(const SourceTensor& t, int dim, int64_t start, int64_t len,
                                      st::Dtype out, void* dst) {
  const int nd = static_cast<int>(t.shape.size());
  const std::string who = "tensor " + quote(t.name);
  oslo_dtype ddt = OSLO_DTYPE_F32;
  const bool raw = out == st::Dtype::U8;
  OSLO_CHECK(raw || (st::to_oslo(out, &ddt) && dtype_is_float(ddt)), OSLO_ERR_DTYPE, who, " (",
             dtype_name(t.quant), ") reads as U8 (its blocks) or as f32, f16 or bf16, not ",
             st::dtype_name(out));
  int64_t be, bb;
  dtype_block(t.quant, &be, &bb);
  if (dim == nd - 1)
    OSLO_CHECK(start % be == 0 && len % be == 0, OSLO_ERR_INVALID_ARGUMENT, who, ": the box [",
               start, ", ", start + len, ") of its rows would split a block of ", be,
               " elements of ", dtype_name(t.quant));
  check_tensor(t, dim, start, len);
  auto units = [&](int d, int64_t v) { return d == nd - 1 ? v / be : v; };
  std::vector<int64_t> ushape(t.shape);
  ushape[nd - 1] /= be;
  std::vector<int64_t> lo(nd, 0), hi(ushape);
  if (dim >= 0) {
    lo[dim] = units(dim, start);
    hi[dim] = units(dim, start + len);
  }
  for (int k = 0; k < nd; ++k)
    if (hi[k] <= lo[k]) return;  // empty box
  std::vector<int64_t> bshape(nd);
  for (int k = 0; k < nd; ++k) bshape[k] = hi[k] - lo[k];
  const quant::Format f = quant::format_of_dtype(t.quant);
  std::vector<char> bounce;
  std::vector<float> vals;
  for (const SourceShard& sh : t.shards) {
    std::vector<int64_t> slo = lo, shi = hi, sorg(nd, 0), sshape(ushape);
    if (t.split_dim >= 0) {
      const int s = t.split_dim;
      sorg[s] = units(s, sh.offset);
      sshape[s] = units(s, sh.length);
      slo[s] = std::max(slo[s], sorg[s]);
      shi[s] = std::min(shi[s], sorg[s] + sshape[s]);
      if (shi[s] <= slo[s]) continue;
    }
    File& fl = file(sh.file);
    const st::TensorInfo& ti = fl.reader->at(sh.key);
    BoxSource bs;
    bs.read = [&](uint64_t off, uint64_t n, void* d) { read_bytes(sh, fl, ti, off, n, d); };
    bs.src_size = static_cast<size_t>(bb);
    bs.dst_size = raw ? static_cast<size_t>(bb) : static_cast<size_t>(be) * dtype_size(ddt);
    if (!raw)
      bs.convert = [&](const void* from, void* to, size_t n) {
        vals.resize(n * static_cast<size_t>(be));
        quant::check_blocks(f, from, 1, vals.size(), t.name);  // q4_g128: z, reserved byte
        quant::dequantize_row(f, from, vals.data(), vals.size());
        from_f32(ddt, vals.data(), to, vals.size());
      };
    copy_box(bs, slo, shi, sorg, sshape, lo, bshape, dst, &bounce);
  }
  if (raw) {  // blocks read from a file: q4_g128's zero points and reserved bytes
    uint64_t rows = 1;
    for (int k = 0; k + 1 < nd; ++k) rows *= static_cast<uint64_t>(bshape[k]);
    quant::check_blocks(f, dst, rows, static_cast<uint64_t>(bshape[nd - 1] * be), t.name);
  }
}

}  // namespace oslo
