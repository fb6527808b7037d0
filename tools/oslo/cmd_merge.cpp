// oslo merge: a parallel checkpoint as one ordinary Hugging Face folder.
#include "tools/oslo/cli.hpp"

#include <cstdint>
#include <cstdio>
#include <string>

namespace oslo_cli {

namespace {

const char* kMergeHelp =
    "usage: oslo merge SRC DST [--max-shard-size BYTES] [--dtype f32|bf16|f16] [--overwrite]\n"
    "Writes the parallel checkpoint (or Hugging Face folder) SRC as one ordinary Hugging\n"
    "Face folder DST (model.safetensors, or shards + model.safetensors.index.json above\n"
    "--max-shard-size; config.json and tokenizer files) that transformers loads.\n"
    "Offline (one process), streams tensor by tensor, DST appears atomically.\n";

}  // namespace

int cmd_merge(int argc, char** argv) {
  Args a = parse(argc, argv, 2, {"overwrite", "help"}, {"max-shard-size", "dtype"});
  if (a.has("help")) return std::printf("%s", kMergeHelp), 0;
  if (a.pos.size() != 2) die("merge needs SRC and DST (see --help)", 2);
  oslo::MergeOptions o;
  if (a.has("max-shard-size"))
    o.max_shard_bytes = static_cast<uint64_t>(to_int(a.get("max-shard-size"), "--max-shard-size"));
  o.overwrite = a.has("overwrite");
  if (a.has("dtype")) {
    o.convert = true;
    o.dtype = static_cast<oslo_dtype>(dtype_of(a.get("dtype")));
    if (o.dtype != OSLO_DTYPE_F32 && o.dtype != OSLO_DTYPE_BF16 && o.dtype != OSLO_DTYPE_F16)
      die("--dtype must be f32, bf16 or f16 here; `oslo quantize` makes a quantized checkpoint", 2);
  }
  o.progress = progress("merge");
  oslo::merge(a.pos[0], a.pos[1], o);
  std::fprintf(stderr, "oslo: merged %s into %s\n", a.pos[0].c_str(), a.pos[1].c_str());
  return 0;
}

}  // namespace oslo_cli
