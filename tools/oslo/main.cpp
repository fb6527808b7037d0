// The `oslo` command: generate text, embed sentences, fine-tune (train),
// merge, reshard and inspect checkpoints, serve over HTTP, one file per command
// (cmd_<name>.cpp; cli.hpp holds what they share). Multi-rank under
// oslo-run (the tensor-parallel size is the world size unless --tp says
// otherwise); only rank 0 prints. Models, tokenizers and checkpoints go
// through the public C ABI (include/oslo.h); merge and reshard call the
// checkpoint tier directly for progress reports.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "core/common/error.hpp"
#include "tools/oslo/cli.hpp"

namespace {

const char* kHelp =
    "usage: oslo COMMAND [ARGS]   (oslo COMMAND --help for each)\n"
    "  generate  generate text with a causal model (docs/MODELS.md lists them)\n"
    "  embed     sentence embeddings and their similarity table (encoders, e.g. MiniLM)\n"
    "  merge     parallel checkpoint -> one ordinary Hugging Face folder\n"
    "  reshard   parallel checkpoint or HF folder -> parallel checkpoint at another TP\n"
    "  quantize  HF folder or checkpoint -> quantized parallel checkpoint (q8_0, q4_0, q4_k, "
    "q6_k)\n"
    "  inspect   tensors, dtypes, shapes and layout of any checkpoint or HF folder\n"
    "  train     fine-tune a causal model on a .txt or .jsonl corpus; checkpoints\n"
    "  serve     an OpenAI-compatible HTTP server (continuous batching, streaming)\n"
    "Run multi-rank commands under oslo-run, e.g.\n"
    "  oslo-run --nproc-per-node 2 oslo embed --model DIR --sentence 'a' --sentence 'b'\n";

}  // namespace

int main(int argc, char** argv) {
  using namespace oslo_cli;
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    std::printf("%s", kHelp);
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  try {
    if (cmd == "generate") return cmd_generate(argc, argv);
    if (cmd == "embed") return cmd_embed(argc, argv);
    if (cmd == "merge") return cmd_merge(argc, argv);
    if (cmd == "reshard") return cmd_reshard(argc, argv);
    if (cmd == "quantize") return cmd_quantize(argc, argv);
    if (cmd == "inspect") return cmd_inspect(argc, argv);
    if (cmd == "train") return cmd_train(argc, argv);
    if (cmd == "serve") {
#ifdef OSLO_CLI_SERVE
      return cmd_serve(argc, argv);
#else
      std::fprintf(stderr,
                   "oslo: this oslo was built without `oslo serve` (it needs cpp-httplib: "
                   "Debian's libcpp-httplib-dev)\n");
      return 2;
#endif
    }
    std::fprintf(stderr, "oslo: unknown command \"%s\"\n%s", cmd.c_str(), kHelp);
    return 2;
  } catch (const Fail& f) {
    return f.code;
  } catch (const oslo::Error& e) {
    std::fprintf(stderr, "oslo: %s: %s\n", oslo_status_string(e.status()), e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "oslo: %s\n", e.what());
    return 1;
  }
}
