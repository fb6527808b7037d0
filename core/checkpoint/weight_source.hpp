// Reading model weights from disk, whatever their layout: a Hugging Face
// folder (model.safetensors, or model-*.safetensors with
// model.safetensors.index.json), an oslo parallel checkpoint (manifest
// version 1 or 2, see FORMAT.md), a single .safetensors file, or a llama.cpp
// .gguf file of a LLaMA-family model (docs/QUANTIZATION.md "GGUF files":
// its tensors renamed and laid out as Hugging Face's, block-quantized ones
// listed with ManifestTensor::quant, and a config.json made from its
// metadata). Every tensor
// keeps its Hugging Face name and layout; a WeightSource lists them (dtype,
// global shape) and reads any "box" of one (the full extent in every
// dimension but one, a run [start, start + len) along it) into a host buffer,
// converting the dtype and reading only the bytes of that box.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/checkpoint/manifest.hpp"
#include "core/checkpoint/safetensors.hpp"
#include "core/common/convert.hpp"
#include "core/common/crc32c.hpp"
#include "oslo.h"

namespace oslo {

class GptqAdapter;  // gptq_source.hpp

// Progress of a long operation: `done` of `total` units (bytes of tensor
// data). Called from the thread that runs the operation; may be empty.
using ProgressFn = std::function<void(uint64_t done, uint64_t total)>;

enum class SourceKind {
  HfSingle,         // folder with model.safetensors
  HfSharded,        // folder with model.safetensors.index.json + model-*.safetensors
  OsloCheckpoint,   // folder with oslo_checkpoint.json
  SafetensorsFile,  // one .safetensors file
  GgufFile          // one llama.cpp .gguf file (gguf_source.cpp)
};
// "hf-single", "hf-sharded", "oslo-checkpoint", "safetensors-file", "gguf-file"
const char* source_kind_name(SourceKind k);

// The files of a Hugging Face model folder, besides its weights and
// config.json (which a source reads itself), that belong to the model and
// travel with it through save, reshard and merge: generation_config.json and
// the tokenizer files (tokenizer.json, tokenizer_config.json,
// special_tokens_map.json, added_tokens.json, tokenizer.model, spiece.model,
// sentencepiece.bpe.model, vocab.txt, vocab.json, merges.txt,
// chat_template.jinja, chat_template.json). The one list: FORMAT.md
// ("Model files") documents it.
const std::vector<std::string>& model_file_names();

// How tensor bytes are read. Pread is the default: the page-cache pages it
// touches never count in the process's resident set, and a file truncated
// while being read is an error instead of SIGBUS. Mmap maps each file
// read-only, copies from the mapping and drops the touched pages
// (madvise(MADV_DONTNEED)) after every run; see FORMAT.md "Reading".
enum class ReadMode { Pread, Mmap };

// The tensors of a source as the manifest module describes them: a stored
// piece (file, key, rows along split_dim, bytes, CRC32C) and a tensor (name,
// stored dtype, global shape, split_dim, pieces sorted by offset tiling
// split_dim). An HF file's tensor is one piece holding it whole.
using SourceShard = ManifestShard;
using SourceTensor = ManifestTensor;

// Parallel layout recorded by an oslo checkpoint (1/1/1 for other sources).
struct SourceLayout {
  int tp_size = 1, pp_size = 1, dp_size = 1;
};

// An open weight source. Not thread-safe (reads update counters and open
// files lazily): use one per thread. Files are held open until release() or
// destruction.
class WeightSource {
 public:
  // Opens `path`: a folder (oslo_checkpoint.json wins over model.safetensors,
  // which wins over model.safetensors.index.json, as transformers does), a
  // .safetensors file, or a .gguf file (a file whose name ends in ".gguf":
  // see gguf_source.cpp for the architectures read and the checks).
  // Validates the manifest or index and the safetensors headers it needs to
  // list tensors (an HF folder: every file's header; an oslo checkpoint:
  // headers are read when a shard is first used; a GGUF file: the whole
  // header, the metadata and every tensor against it).
  // Errors: OSLO_ERR_IO (missing path or file, unreadable), OSLO_ERR_FORMAT
  // (corrupt index/manifest/header, weight_map naming a file outside the
  // folder, a tensor in two files, shards with holes or overlaps: the
  // message names the file and the tensor or field; a GGUF file: a missing
  // tensor or one whose shape disagrees with the metadata),
  // OSLO_ERR_NOT_SUPPORTED (a GGUF architecture or tensor oslo does not read,
  // named).
  // An HF folder whose config.json has a GPTQ or AWQ quantization_config
  // lists each quantized linear as one q4_g128 tensor "<prefix>.weight"
  // (gptq_source.hpp; its errors too).
  explicit WeightSource(const std::string& path, ReadMode mode = ReadMode::Pread);
  ~WeightSource();
  WeightSource(const WeightSource&) = delete;
  WeightSource& operator=(const WeightSource&) = delete;

  SourceKind kind() const { return kind_; }
  const std::string& path() const { return path_; }
  // The folder the source's files are in (the file's folder for a single file).
  const std::string& folder() const { return folder_; }
  int manifest_version() const { return version_; }  // 0 unless an oslo checkpoint
  const std::string& save_id() const { return save_id_; }
  const SourceLayout& layout() const { return layout_; }

  // Tensors sorted by name.
  const std::vector<SourceTensor>& tensors() const { return tensors_; }
  // nullptr if absent.
  const SourceTensor* find(const std::string& name) const;
  // Like find; a missing tensor is OSLO_ERR_FORMAT naming it and the source.
  const SourceTensor& at(const std::string& name) const;

  // An oslo checkpoint's manifest sections (FORMAT.md "Extending the
  // manifest"); the only one accepted is kTrainingSection, already validated
  // against tensors() (a training checkpoint: weights plus optimizer state;
  // read as weights, its "optimizer/..." tensors are simply not asked for).
  // Empty for other sources.
  const std::map<std::string, nlohmann::json>& sections() const { return sections_; }
  // The training section parsed, or false if the source has none.
  bool training(TrainingSection* out) const;

  // The model config as JSON text: config.json of an HF folder, the
  // manifest's model_config of a version-2 checkpoint, the config.json
  // transformers would have for a .gguf file's model; empty if none.
  const std::string& config_json() const { return config_json_; }
  // Other files to carry along: plain names inside folder(). For an HF
  // folder the model's own files that it holds, from model_file_names()
  // (generation config, tokenizer files); any other file in the folder is
  // not the model's and is left behind. For an oslo checkpoint the
  // manifest's extra_files (what its save was given).
  const std::vector<std::string>& extra_files() const { return extra_files_; }
  // The same as paths (folder() joined with each name), as save_placed takes them.
  std::vector<std::string> extra_file_paths() const;

  // Reads the box of tensor `t` that is full in every dimension except
  // `dim`, where it is [start, start + len) (dim -1: the whole tensor), into
  // `dst`, a contiguous row-major host buffer of that box in dtype `out`.
  // `out` equal to the stored dtype copies bytes as they are (any dtype);
  // otherwise both must be F32/F16/BF16 or both I32/I64 (i64 -> i32 fails
  // with OSLO_ERR_DTYPE for a value that does not fit). A block-quantized
  // tensor (t.quant set, stored U8) reads as U8 (its blocks as they are; a
  // box along the last dimension must start and end at block boundaries)
  // or as F32/F16/BF16 (dequantized). Reads only the bytes
  // of the box. When a stored piece with a checksum has been read from its
  // first to its last byte in order (over any number of calls), its CRC32C
  // is verified (OSLO_ERR_FORMAT "checksum mismatch"). Errors:
  // OSLO_ERR_INVALID_ARGUMENT (box out of range), OSLO_ERR_DTYPE, OSLO_ERR_IO,
  // OSLO_ERR_FORMAT (shard file disagrees with the manifest, truncated file).
  void read_box(const SourceTensor& t, int dim, int64_t start, int64_t len, safetensors::Dtype out,
                void* dst);

  // Whether the source stores `t` (2-D) as the transpose of its listed
  // (Hugging Face) shape: a GGUF file's GPT-2 projections, stored [out, in]
  // as nn.Linear's for Hugging Face's Conv1D [in, out]. read_box in a float
  // dtype still returns the listed layout; read_box of its blocks (U8 of a
  // block-quantized tensor) reads boxes of the stored layout, `dim`, `start`
  // and `len` counted in the reversed shape, so model load copies the
  // blocks into a local tensor held [out, in] without dequantizing. False
  // for every other tensor and source.
  bool stored_transposed(const SourceTensor& t) const;

  // Checks that the stored pieces of `t` that overlap the box (dim, start,
  // len as in read_box; dim -1: every piece) are present with the dtype,
  // shape and size the listing promises (opens those files; reads headers
  // only). Errors: OSLO_ERR_IO, OSLO_ERR_FORMAT naming the file and key.
  void check_tensor(const SourceTensor& t, int dim = -1, int64_t start = 0, int64_t len = 0);

  // Tensor bytes read so far (headers excluded), read calls, files opened.
  uint64_t bytes_read() const { return bytes_read_; }
  uint64_t read_calls() const { return read_calls_; }
  uint64_t files_opened() const { return files_opened_; }

  // Closes every file (and unmaps, dropping cached pages); later reads
  // reopen them.
  void release();

 private:
  struct File;
  File& file(const std::string& name);
  void read_bytes(const SourceShard& sh, File& f, const safetensors::TensorInfo& ti,
                  uint64_t offset, uint64_t bytes, void* dst);
  void read_box_quantized(const SourceTensor& t, int dim, int64_t start, int64_t len,
                          safetensors::Dtype out, void* dst);
  void open_hf_single(const std::string& file);
  void open_hf_index();
  void open_oslo();
  void list_extra_files(bool hf);
  // GGUF files (gguf_source.cpp).
  struct Gguf;
  void open_gguf();
  void read_box_gguf(const SourceTensor& t, int dim, int64_t start, int64_t len,
                     safetensors::Dtype out, void* dst);
  // read_box_gguf of the tensor as stored: `shape` is its stored shape.
  void read_gguf_stored(const SourceTensor& t, const std::vector<int64_t>& shape, int dim,
                        int64_t start, int64_t len, safetensors::Dtype out, void* dst);

  std::string path_, folder_;
  SourceKind kind_ = SourceKind::HfSingle;
  ReadMode mode_;
  int version_ = 0;
  std::string save_id_;
  SourceLayout layout_;
  std::vector<SourceTensor> tensors_;
  std::map<std::string, size_t> index_;
  std::string config_json_;
  std::vector<std::string> extra_files_;
  std::map<std::string, nlohmann::json> sections_;
  std::map<std::string, std::unique_ptr<File>> files_;
  std::unique_ptr<Gguf> gguf_;
  struct CrcProgress {
    uint64_t next = 0;
    uint32_t crc = 0;
    bool broken = false;
  };
  std::map<std::pair<std::string, std::string>, CrcProgress> crc_;
  std::unique_ptr<GptqAdapter> gptq_;  // GPTQ/AWQ folders: the converted linears
  uint64_t bytes_read_ = 0, read_calls_ = 0, files_opened_ = 0;
};

}  // namespace oslo
