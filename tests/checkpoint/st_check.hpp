// Shared by the fuzzer (tests/fuzz) and the corpus replay test: parses a
// whole file held in memory and, when it is accepted, checks the parser's
// invariants and that re-serializing it gives a file that parses to the
// same tensors, metadata and bytes. Returns true if the input was accepted;
// any failed invariant aborts (so the fuzzer reports it).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "core/checkpoint/safetensors.hpp"
#include "core/common/error.hpp"

namespace st_check {

[[noreturn]] inline void die(const char* what) {
  std::fprintf(stderr, "safetensors invariant violated: %s\n", what);
  std::abort();
}

inline bool check_buffer(const uint8_t* data, size_t size) {
  namespace st = oslo::safetensors;
  st::Header h;
  try {
    h = st::parse_buffer(data, size, "input");
  } catch (const oslo::Error& e) {
    if (e.status() != OSLO_ERR_FORMAT) die("an error other than OSLO_ERR_FORMAT");
    if (std::strncmp(e.what(), "input: ", 7) != 0) die("error message does not name the file");
    return false;
  }
  // Layout invariants.
  if (h.data_start() + h.data_size != size) die("data buffer does not end at EOF");
  uint64_t pos = 0;
  std::vector<st::WriteEntry> entries;
  for (const st::TensorInfo& t : h.tensors) {
    if (t.begin != pos || t.end < t.begin) die("tensors do not tile the buffer");
    pos = t.end;
    if (h.find(t.name) != &t) die("index does not find a tensor");
    entries.push_back({t.name, t.dtype, t.shape, data + h.data_start() + t.begin});
  }
  if (pos != h.data_size) die("data size mismatch");
  if (h.index.size() != h.tensors.size()) die("duplicate names survived");
  // Round trip through the writer.
  std::string again;
  try {
    again = st::serialize(entries, h.has_metadata ? &h.metadata : nullptr);
  } catch (const oslo::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    die("an accepted file cannot be written back");
  }
  st::Header h2;
  try {
    h2 = st::parse_buffer(again.data(), again.size(), "again");
  } catch (const oslo::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    die("a written file is rejected");
  }
  if (h2.data_start() % 8 != 0) die("written data is not 8-byte aligned");
  if (h2.tensors.size() != h.tensors.size() || h2.has_metadata != h.has_metadata ||
      h2.metadata != h.metadata)
    die("round trip changed the header");
  for (const st::TensorInfo& t : h.tensors) {
    const st::TensorInfo* u = h2.find(t.name);
    if (!u || u->dtype != t.dtype || u->shape != t.shape || u->nbytes() != t.nbytes())
      die("round trip changed a tensor");
    if (t.nbytes() && std::memcmp(again.data() + h2.data_start() + u->begin,
                                  data + h.data_start() + t.begin, t.nbytes()) != 0)
      die("round trip changed tensor bytes");
  }
  // Writing the re-parsed file again is a fixed point.
  std::vector<st::WriteEntry> entries2;
  for (const st::TensorInfo& t : h2.tensors)
    entries2.push_back({t.name, t.dtype, t.shape, again.data() + h2.data_start() + t.begin});
  if (st::serialize(entries2, h2.has_metadata ? &h2.metadata : nullptr) != again)
    die("serialization is not deterministic");
  return true;
}

}  // namespace st_check
