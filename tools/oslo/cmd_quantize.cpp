// oslo quantize: a model's linear weights quantized into a parallel
// checkpoint (docs/QUANTIZATION.md).
#include <cstdio>
#include <string>

#include "core/common/dtype.hpp"
#include "tools/oslo/cli.hpp"

namespace oslo_cli {

namespace {

const char* kQuantizeHelp =
    "usage: oslo quantize IN OUT --dtype q8_0|q4_0|q4_k|q6_k [--tp N] [--threads N] [--timeout S]\n"
    "Loads the Hugging Face folder or parallel checkpoint IN with the weights of its\n"
    "blocks' linear layers quantized to DTYPE (each rank quantizes only its own\n"
    "slice; the embeddings and the head keep their dtype) and saves the parallel\n"
    "checkpoint OUT, which loads quantized as it is. Alone it writes a checkpoint at\n"
    "TP 1; with --tp N under oslo-run (N ranks) one at TP N; `oslo reshard` moves it\n"
    "to another size whose cuts fall on block boundaries.\n";

}  // namespace

int cmd_quantize(int argc, char** argv) {
  Args a = parse(argc, argv, 2, {"help"}, model_options({}));
  if (a.has("help")) return std::printf("%s", kQuantizeHelp), 0;
  if (a.pos.size() != 2) die("quantize needs IN and OUT (see --help)", 2);
  if (!a.has("dtype")) die("quantize needs --dtype (q8_0 or q4_0)", 2);
  const int dt = dtype_of(a.get("dtype"));
  if (!oslo::dtype_is_block(dt))
    die("--dtype must name a quantized format (q8_0, q4_0, q4_k, q6_k), got \"" + a.get("dtype") +
            "\"",
        2);
  a.opts["model"] = {a.pos[0]};
  oslo_context* ctx = context(a);
  oslo_model* m = load_model(ctx, a);
  check(oslo_model_save(m, a.pos[1].c_str()), "save " + a.pos[1]);
  oslo_model_destroy(m);
  oslo_context_destroy(ctx);
  if (g_rank == 0)
    std::fprintf(stderr, "oslo: quantized %s to %s in %s\n", a.pos[0].c_str(),
                 a.get("dtype").c_str(), a.pos[1].c_str());
  return 0;
}

}  // namespace oslo_cli
