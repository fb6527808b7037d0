// oslo reshard: a checkpoint rewritten for another tensor-parallel size.
#include "tools/oslo/cli.hpp"

#include <cstdint>
#include <cstdio>
#include <string>

#include "core/model/sharding.hpp"

namespace oslo_cli {

namespace {

const char* kReshardHelp =
    "usage: oslo reshard SRC DST --tp N [--dtype f32|bf16|f16]\n"
    "Rewrites the parallel checkpoint or Hugging Face folder SRC as a parallel\n"
    "checkpoint DST for tensor-parallel size N, offline, reading only the slices each\n"
    "new rank needs.\n";

}  // namespace

int cmd_reshard(int argc, char** argv) {
  Args a = parse(argc, argv, 2, {"help"}, {"tp", "dtype"});
  if (a.has("help")) return std::printf("%s", kReshardHelp), 0;
  if (a.pos.size() != 2 || !a.has("tp")) die("reshard needs SRC, DST and --tp N (see --help)", 2);
  const int64_t tp = to_int(a.get("tp"), "--tp");
  if (tp < 1 || tp > 4096) die("--tp must be in [1, 4096]", 2);
  oslo::ReshardOptions o;
  if (a.has("dtype")) {
    o.convert = true;
    o.dtype = static_cast<oslo_dtype>(dtype_of(a.get("dtype")));
    if (o.dtype != OSLO_DTYPE_F32 && o.dtype != OSLO_DTYPE_BF16 && o.dtype != OSLO_DTYPE_F16)
      die("--dtype must be f32, bf16 or f16 here; `oslo quantize` makes a quantized checkpoint", 2);
  }
  o.progress = progress("reshard");
  oslo::reshard(a.pos[0], a.pos[1], static_cast<int>(tp), oslo::model_planner(a.pos[0]), o);
  std::fprintf(stderr, "oslo: resharded %s to TP=%lld in %s\n", a.pos[0].c_str(),
               static_cast<long long>(tp), a.pos[1].c_str());
  return 0;
}

}  // namespace oslo_cli
