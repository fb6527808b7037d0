// Internal helpers shared by weight_source.cpp and model_checkpoint.cpp (not
// installed, not part of any API).
#pragma once

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "core/checkpoint/weight_source.hpp"

namespace oslo {

// The manifest file of an oslo checkpoint ("oslo_checkpoint.json").
extern const char* const kModelManifest;

// A plain file name inside a folder: not empty, no '/', not "." or "..", no NUL.
inline bool plain_file_name(const std::string& f) {
  return !f.empty() && f != "." && f != ".." && f.find('/') == std::string::npos &&
         f.find('\0') == std::string::npos;
}

inline std::string hex32(uint32_t v) {
  char buf[12];
  std::snprintf(buf, sizeof buf, "%08" PRIx32, v);
  return buf;
}

inline std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

struct ParsedManifest {
  int version = 0;
  std::string save_id;
  SourceLayout layout;
  std::vector<std::string> files;
  std::vector<SourceTensor> tensors;
  std::string config_json;  // version 2: model_config dumped (indent 2); empty if null
  std::vector<std::string> extra_files;
};

// Parses and validates oslo_checkpoint.json of `dir` (version 1 or 2).
// OSLO_ERR_IO if missing; OSLO_ERR_FORMAT naming the field otherwise.
ParsedManifest parse_model_manifest(const std::string& dir);

}  // namespace oslo
