// The checkpoint manifest (oslo_checkpoint.json): one schema, one reader for
// format versions 1 and 2, one writer. Parameter-set checkpoints
// (checkpoint.cpp, version 1) and model checkpoints (model_save.cpp,
// model_tools.cpp, weight_source.cpp, version 2) both go through it. The
// format, the checks and the policy for later extensions are in
// core/checkpoint/FORMAT.md ("Manifest").
//
// Internal to the checkpoint tier (not installed). No global state; every
// function is safe to call from several threads on different directories.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/checkpoint/safetensors.hpp"

namespace oslo {

// Name of the manifest inside a checkpoint directory: "oslo_checkpoint.json".
extern const char* const kCheckpointManifest;

// The "format" value of every manifest.
constexpr const char* kManifestFormat = "oslo-checkpoint";
// The newest version this build writes and reads.
constexpr int kManifestVersion = 2;

// A plain file name inside a folder: not empty, no '/', not "." or "..", no NUL.
bool plain_file_name(const std::string& f);
// 8 lowercase hex digits (a CRC32C as the manifest spells it).
std::string hex32(uint32_t v);
// 16 lowercase hex digits (a save id).
std::string hex64(uint64_t v);

// Strict accessors for a JSON document read from `source` (a path for
// messages): any deviation throws OSLO_ERR_FORMAT "<source>: <where>: <what>".
class StrictJson {
 public:
  explicit StrictJson(std::string source) : source_(std::move(source)) {}
  [[noreturn]] void bad(const std::string& where, const std::string& what) const;
  // `obj` is an object holding every key of `keys` and nothing else.
  void exact_keys(const nlohmann::json& obj, const std::string& where,
                  const std::vector<std::string>& keys) const;
  // An integer in [lo, hi].
  int64_t integer(const nlohmann::json& v, const std::string& where, int64_t lo, int64_t hi) const;
  std::string string(const nlohmann::json& v, const std::string& where) const;
  // An array of non-negative extents whose product (times 8 bytes) fits int64.
  std::vector<int64_t> shape(const nlohmann::json& v, const std::string& where) const;
  // A safetensors dtype name that oslo loads (F32, F16, BF16, I32, I64).
  safetensors::Dtype dtype(const nlohmann::json& v, const std::string& where) const;

 private:
  std::string source_;
};

// One stored piece of a tensor: rows [offset, offset + length) along the
// tensor's split_dim (the whole tensor when split_dim is -1: offset 0,
// length the first extent, or 1 for a scalar) under `key` in `file` (a plain
// name inside the checkpoint folder).
struct ManifestShard {
  std::string file;
  std::string key;
  int64_t offset = 0;
  int64_t length = 0;
  uint64_t bytes = 0;    // bytes of the stored piece (version 2; 0 in version 1)
  bool has_crc = false;  // version 2 records a CRC32C of the piece's bytes
  uint32_t crc32c = 0;
};

struct ManifestTensor {
  std::string name;
  safetensors::Dtype dtype = safetensors::Dtype::F32;  // stored dtype
  std::vector<int64_t> shape;                          // global shape
  int split_dim = -1;                                  // -1: stored whole (one shard)
  std::vector<ManifestShard> shards;                   // sorted by offset, tiling split_dim
  // A block-quantized tensor (docs/QUANTIZATION.md): its block dtype
  // (OSLO_DTYPE_Q8_0, ...), stored as rows of whole blocks (dtype U8);
  // `shape` is then the logical shape in elements, its last dimension whole
  // blocks. OSLO_DTYPE_F32 (the default): a plain tensor of `dtype`.
  oslo_dtype quant = OSLO_DTYPE_F32;
  bool quantized() const;
  uint64_t nbytes() const;  // bytes of the whole tensor
};

// A whole manifest. Version 1 has no model_config, extra_files, bytes or
// crc32c; the writer leaves them out for version 1.
struct Manifest {
  int version = kManifestVersion;
  std::string save_id;
  int tp_size = 1, pp_size = 1, dp_size = 1;
  std::string config_json;               // version 2: model_config as JSON text; empty: null
  std::vector<std::string> extra_files;  // version 2: plain names, copied with the checkpoint
  std::vector<std::string> files;        // every shard file, plain names
  std::vector<ManifestTensor> tensors;   // sorted by name
  // Extension sections (FORMAT.md "Extending the manifest"): top-level keys
  // beyond the version's own, each a JSON object, kept verbatim. A reader
  // accepts only the sections its options name.
  std::map<std::string, nlohmann::json> sections;
};

// ---- Training section (FORMAT.md "Training checkpoints") ----
//
// A training checkpoint is a version-2 model checkpoint whose manifest has a
// top-level section "training" and which also stores, for every parameter P
// and every optimizer state S (AdamW: exp_avg, exp_avg_sq; SGD with momentum:
// momentum_buffer), the tensor "optimizer/S/P": f32, P's global shape, saved
// with P's placement. Hugging Face names never hold '/', so these names
// cannot collide with a model tensor.

// The section's key in the manifest: "training".
extern const char* const kTrainingSection;
// The version of the section's layout this build writes and reads.
constexpr int kTrainingSectionVersion = 1;
// "optimizer/<state>/<param>": the stored name of parameter `param`'s
// optimizer state `state`.
std::string optimizer_tensor_name(const std::string& state, const std::string& param);

// The training section, as written by save_training_checkpoint
// (core/train/train_checkpoint.hpp).
struct TrainingSection {
  int version = kTrainingSectionVersion;
  nlohmann::json trainer = nlohmann::json::object();  // Trainer::state(): an object
  std::vector<std::string> state_names;               // optimizer state kept per parameter
  std::vector<std::string> parameters;                // model tensors the optimizer updates
  nlohmann::json user_state;                          // the caller's JSON value, verbatim
  // Every optimizer tensor name (state_names x parameters).
  std::vector<std::string> optimizer_tensors() const;
};

// Validates a training section against the manifest's tensors and returns
// it. Errors: OSLO_ERR_FORMAT "<source>: training...: <what>": not exactly the
// keys version, trainer, optimizer_state, parameters, user_state; a version
// other than kTrainingSectionVersion; trainer not an object with a string
// "optimizer"; a state name that is empty, holds '/' or is listed twice; a
// parameter listed twice, missing from `tensors` or itself an optimizer
// tensor; an optimizer tensor missing, not F32 or not of its parameter's
// shape; a tensor named "optimizer/..." that the section does not list.
TrainingSection parse_training_section(const nlohmann::json& section,
                                       const std::vector<ManifestTensor>& tensors,
                                       const std::string& source);
// The section as the manifest stores it (a JSON object; the writer emits its
// keys sorted). Pure.
nlohmann::json training_section_json(const TrainingSection& t);

// What one rank of a save holds of one tensor: a stored piece (`stored`:
// rows [offset, offset + length) along split_dim under `key` in `file`; the
// whole tensor when split_dim is -1), or a declaration (the rank holds the
// tensor but stores nothing of it), so that every rank's view of the
// tensor's dtype, shape and split can be compared.
struct ManifestPiece {
  std::string name, key;
  safetensors::Dtype dtype = safetensors::Dtype::F32;
  std::vector<int64_t> shape;  // global
  int split_dim = -1;
  int64_t offset = 0, length = 0;
  bool stored = false;
  uint64_t bytes = 0;  // version 2
  uint32_t crc = 0;    // version 2
  std::string file;
  int tp = 0, pp = 0;                 // the writing rank's position
  oslo_dtype quant = OSLO_DTYPE_F32;  // block dtype of a quantized tensor (dtype U8)
};

// Bytes of a box of a tensor of this stored dtype (and block dtype `quant`
// when quantized, ManifestTensor::quant) and logical shape whose extent
// along split_dim is `length` (split_dim -1: the whole shape).
uint64_t box_nbytes(safetensors::Dtype dtype, oslo_dtype quant, const std::vector<int64_t>& shape,
                    int split_dim, int64_t length);
// The shape a stored piece of such a box has in its safetensors file: the
// box's shape, or for a quantized tensor [rows, bytes per row] (U8).
std::vector<uint64_t> stored_piece_shape(oslo_dtype quant, const std::vector<int64_t>& shape,
                                         int split_dim, int64_t length);

// Builds the manifest's tensors (sorted by name) from the pieces of every
// rank. A tensor held by several pipeline stages (tied weights) is taken
// from the first stage that holds it. Errors, OSLO_ERR_INVALID_ARGUMENT
// naming the tensor and the ranks: two ranks disagree on its dtype, shape or
// split_dim; a replicated tensor stored by no rank or by several; stored
// rows that leave a hole, overlap (two owners) or overflow.
std::vector<ManifestTensor> assemble_tensors(const std::vector<ManifestPiece>& pieces);

struct ManifestReadOptions {
  // Versions this reader accepts; another is OSLO_ERR_FORMAT "format version
  // N is not supported (<why>)".
  int min_version = 1;
  int max_version = kManifestVersion;
  // Says why a version above max_version is refused; empty: "this build
  // reads versions 1 to <max>".
  std::string newer_version_note;
  // Extension sections this reader accepts (FORMAT.md); any other unknown
  // top-level key is OSLO_ERR_FORMAT "unknown field". An accepted
  // kTrainingSection is validated (parse_training_section; version 2 only).
  std::vector<std::string> sections;
};

// Reads and validates <dir>/oslo_checkpoint.json. Errors: OSLO_ERR_IO (no
// manifest, unreadable, larger than 1 GiB); OSLO_ERR_FORMAT naming the file
// and the field: invalid JSON, not an object, wrong format or version,
// missing or unknown fields, non-integer or out-of-range numbers, sizes < 1,
// unsupported dtypes, overflowing shapes, split_dim out of range, file names
// that are not plain or listed twice, extra_files naming the manifest or
// listed twice, a shard naming a file not in "files", one file/key pair used
// twice by a tensor, a replicated tensor without exactly one shard, shards
// that leave rows out, overlap or overflow, and (version 2) a model_config
// that is neither an object nor null, a crc32c that is not 8 lowercase hex
// digits, a byte count that disagrees with dtype and shape. Never reads a
// shard file.
Manifest read_manifest(const std::string& dir, const ManifestReadOptions& options = {});
// The same for manifest text already in memory; `source` names it in errors.
Manifest parse_manifest(const std::string& text, const std::string& source,
                        const ManifestReadOptions& options = {});

// A model config as version 2 stores it: empty (or only white space: null)
// or the text of a JSON object. Otherwise OSLO_ERR_INVALID_ARGUMENT "model
// config is not valid JSON" / "must be a JSON object".
void check_model_config(const std::string& config_json);

// A shard as the manifest spells it: file, key, then offset and length
// (`split`: a tensor with a split_dim), then bytes (`with_bytes`) and
// crc32c (if s.has_crc). Also the shard rows of `oslo inspect --json`.
nlohmann::ordered_json shard_json(const ManifestShard& s, bool split, bool with_bytes);

// The manifest as JSON text (indent 1, a final newline; keys in the order of
// FORMAT.md). Checks that the text reads back with read_manifest's checks
// (accepting m's own sections): a manifest this writer would refuse to read
// is OSLO_ERR_INVALID_ARGUMENT naming the reason, never written.
std::string manifest_text(const Manifest& m);

// Writes <dir>/oslo_checkpoint.json atomically (temporary, fsync, rename,
// fsync of the folder): the commit point of a save. Fault points
// "save.before_manifest" and "save.after_manifest". Errors: as
// manifest_text, OSLO_ERR_IO.
void write_manifest(const std::string& dir, const Manifest& m);

// After a manifest is durable: removes shard files ("shard-*.safetensors")
// it does not list in `keep`, and temporaries of interrupted saves (of shard
// files, of the manifest, of the `extras`). Logs what it cannot remove;
// never throws. Fault point "save.cleanup_step" after each entry.
void remove_stale_files(const std::string& dir, const std::vector<std::string>& keep,
                        const std::vector<std::string>& extras = {});

// unlink(path); ENOENT is fine; any other failure is logged as a warning.
void remove_quietly(const std::string& path);

}  // namespace oslo
