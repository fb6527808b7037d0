// Internal helpers shared by the model I/O files of the checkpoint tier (not
// installed, not part of any API):
//   model_load.cpp   load_placed, load_placed_collective, run_agreed, and the
//                    placement helpers below;
//   model_save.cpp   save_placed and the shard-file writer below (also used
//                    by reshard);
//   model_tools.cpp  the offline tools: reshard, merge, inspect.
// The manifest itself is core/checkpoint/manifest.hpp.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/backend/backend.hpp"
#include "core/checkpoint/manifest.hpp"
#include "core/checkpoint/placement.hpp"
#include "core/checkpoint/safetensors.hpp"

namespace oslo {
namespace model_io {

namespace st = safetensors;
using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

// ---- Placements (model_load.cpp) ----

// Validates a placement on its own (OSLO_ERR_INVALID_ARGUMENT naming `who`):
// split_dim in range, non-negative extents, transpose only for 2-D, segments
// inside both the global and the local extent, none for a replicated one.
void check_placement(const Placement& p, const std::string& who);
// Key of a stored segment: the name if the rank holds one segment of the
// tensor, else name@global_start.
std::string seg_key(const Placement& p, const Segment& s);
// The local tensor's shape in the Hugging Face layout (before any transpose).
std::vector<int64_t> hf_local_shape(const Placement& p);
uint64_t numel_of(const std::vector<int64_t>& s);
// Copies rows [r0, r0 + n) along `dim` between a tensor of `shape` (a) and a
// compact buffer of those rows (b), on the host; a_to_b picks the direction.
void copy_rows(const std::vector<int64_t>& shape, int dim, int64_t r0, int64_t n, size_t es,
               char* a, char* b, bool a_to_b);

// RAII device scratch of `bytes` on a backend.
struct DeviceBuf {
  Backend& b;
  void* p = nullptr;
  size_t n = 0;
  DeviceBuf(Backend& be, size_t bytes) : b(be), n(bytes) { p = b.allocate(bytes); }
  ~DeviceBuf() { b.deallocate(p, n); }
  DeviceBuf(const DeviceBuf&) = delete;
  DeviceBuf& operator=(const DeviceBuf&) = delete;
};

// ---- Shard files (model_save.cpp) ----

// shard-<id>-tp<TT>-pp<PP>.safetensors, ranks zero-padded to at least 2 digits.
std::string shard_file_name(const std::string& save_id, int tp, int tp_size, int pp, int pp_size);
// A fresh save id whose rank-0 shard file does not exist in `dir`.
std::string new_save_id(const std::string& dir);

// Fills a buffer with the bytes of one entry (resizing it to exactly those).
using ProduceFn = std::function<void(size_t index, std::vector<char>& buf)>;

// Writes a safetensors file atomically, producing each tensor's bytes on
// demand so that only one tensor is in memory at a time; `on_bytes` gets the
// bytes of each entry written. Returns the CRC32C of each entry.
std::vector<uint32_t> write_streaming(const std::string& path,
                                      std::vector<safetensors::WriteEntry> entries,
                                      const std::map<std::string, std::string>* metadata,
                                      const ProduceFn& produce,
                                      const std::function<void(uint64_t)>& on_bytes);

// What one rank stores: records plus how to produce each stored piece.
struct RankPlan {
  std::vector<ManifestPiece> records;  // declarations and pieces
  std::vector<size_t> stored;          // indexes of stored records
  ProduceFn produce;                   // (index into records, buffer)
};

// Plans the pieces of one rank from placements (stored dtype per placement,
// and its block dtype for a quantized tensor, else OSLO_DTYPE_F32).
void plan_pieces(const std::vector<const Placement*>& placements,
                 const std::vector<safetensors::Dtype>& dtypes,
                 const std::vector<oslo_dtype>& quants, RankPlan* plan);

// Writes one rank's shard file; fills bytes/crc/file/tp/pp of its records.
void write_rank_file(const std::string& dir, const std::string& file, const std::string& save_id,
                     int tp, int tp_size, int pp, int pp_size, RankPlan& plan,
                     const std::function<void(uint64_t)>& on_bytes);

// The version-2 manifest of every rank's records (tiling checked by
// assemble_tensors). check_headers: first read every shard file's header in
// `dir` and check that it holds what the records say.
Manifest model_manifest(const std::string& dir, const std::string& save_id, int tp_size,
                        int pp_size, int dp_size, const std::string& config_json,
                        const std::vector<std::string>& extra_files,
                        const std::vector<std::string>& files,
                        const std::vector<ManifestPiece>& records, bool check_headers);

// Copies a file to `to` atomically (OSLO_ERR_IO naming the paths).
void copy_file_atomically(const std::string& from, const std::string& to);

}  // namespace model_io
}  // namespace oslo
