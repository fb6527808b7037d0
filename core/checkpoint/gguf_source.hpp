// llama.cpp's GGUF files as a WeightSource (gguf_source.cpp): the state a
// source keeps for an open .gguf file, and the mapping of GGUF's tensor names
// and metadata to Hugging Face's. Internal to core/checkpoint and the
// tokenizer loader; docs/QUANTIZATION.md ("GGUF files") describes the
// behaviour.
#pragma once

#include <map>
#include <string>

#include "core/checkpoint/gguf.hpp"
#include "core/checkpoint/weight_source.hpp"

namespace oslo {

// Whether `path` names a GGUF file: its name ends in ".gguf" (any case).
// Pure; any thread.
bool is_gguf_path(const std::string& path);

// The architectures (general.architecture) a .gguf source reads, as one
// comma-separated list for messages: "gpt2, llama, qwen2".
const char* gguf_supported_architectures();

// What an open GGUF source keeps: the parsed, mapped file and, per listed
// (Hugging Face named) tensor, its GGUF tensor, whether its rows are in
// llama.cpp's rotary order (q_proj, k_proj of "llama": rows of each head
// of `head_rows` rows are interleaved, see LlamaModel.permute in
// convert_hf_to_gguf.py) and whether it is stored transposed from its
// listed shape (GPT-2's projections: [out, in] in the file, Hugging Face's
// Conv1D [in, out] listed; see WeightSource::stored_transposed).
struct WeightSource::Gguf {
  explicit Gguf(gguf::File f) : file(std::move(f)) {}
  gguf::File file;
  struct Entry {
    const gguf::TensorInfo* info = nullptr;
    int64_t head_rows = 0;    // > 0: undo the rotary permutation, heads of this many rows
    bool transposed = false;  // stored as the transpose of the listed 2-D shape
  };
  std::map<std::string, Entry> entries;  // by Hugging Face name
};

}  // namespace oslo
