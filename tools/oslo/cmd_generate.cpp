// oslo generate: continuations of prompts with a causal model.
#include "tools/oslo/cli.hpp"

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace oslo_cli {

namespace {

std::vector<int64_t> parse_ids(const std::string& s) {
  std::vector<int64_t> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) v.push_back(to_int(item, "--prompt-ids"));
  if (v.empty()) die("--prompt-ids needs comma-separated ids", 2);
  return v;
}

const char* kGenerateHelp =
    "usage: oslo generate --model DIR [--prompt TEXT]... [--prompt-ids 1,2,3]...\n"
    "                     [--max-new-tokens N] [--sample] [--temperature T] [--top-k K]\n"
    "                     [--top-p P] [--seed S] [--num-beams N] [--length-penalty X]\n"
    "                     [--dtype f32|bf16|f16] [--tokenizer DIR] [--ids] [--tp N]\n"
    "                     [--pp N [--pp-layers A,B]] [--threads N] [--device cpu|cuda[:N]] "
    "[--backend NAME]\n"
    "                     [--backend-options JSON] [--communicator auto|backend|host]\n"
    "                     [--timeout SECONDS] [--kv-dtype f32|int8]\n"
    "Generates continuations of the prompts (batched, left-padded) with the KV cache:\n"
    "greedy by default, sampling with --sample, beam search with --num-beams N > 1.\n"
    "Text prompts are tokenized with the model folder's tokenizer (or --tokenizer);\n"
    "--ids prints token ids instead of text. Under oslo-run every rank computes its\n"
    "share of each layer; rank 0 prints. --pp N cuts the blocks into N pipeline\n"
    "stages (each rank loads only its stage's weights; --tp x --pp = the world).\n"
    "--device cuda[:N] runs on the CUDA backend (device N, else each rank's local\n"
    "rank); --backend-options passes a JSON object to the backend. --timeout\n"
    "(default: $OSLO_TIMEOUT, else 300) fails the ranks when a peer stops.\n"
    "--kv-dtype int8 keeps the KV cache in int8 with a scale per token and head\n"
    "(docs/QUANTIZATION.md).\n"
    "  example: oslo-run --nproc-per-node 2 oslo generate --model M --prompt 'Hello'\n";

}  // namespace

int cmd_generate(int argc, char** argv) {
  Args a = parse(argc, argv, 2, {"sample", "ids", "help"},
                 model_options({"prompt", "prompt-ids", "max-new-tokens", "temperature", "top-k",
                                "top-p", "seed", "num-beams", "length-penalty", "kv-dtype"}));
  if (a.has("help")) return std::printf("%s", kGenerateHelp), 0;
  if (!a.pos.empty()) die("unexpected argument \"" + a.pos[0] + "\" (see --help)", 2);
  // Every option is checked before anything is loaded.
  std::vector<std::vector<int64_t>> id_prompts;
  for (const auto& p : a.all("prompt-ids")) id_prompts.push_back(parse_ids(p));
  if (a.all("prompt").empty() && id_prompts.empty())
    die("give at least one --prompt or --prompt-ids", 2);
  oslo_generate_options o;
  check(oslo_generate_options_init(&o, OSLO_GENERATE_OPTIONS_VERSION), "options");
  if (a.has("max-new-tokens"))
    o.max_new_tokens = to_int(a.get("max-new-tokens"), "--max-new-tokens");
  o.do_sample = a.has("sample");
  if (a.has("temperature"))
    o.temperature = static_cast<float>(to_num(a.get("temperature"), "--temperature"));
  if (a.has("top-k")) o.top_k = to_int(a.get("top-k"), "--top-k");
  if (a.has("top-p")) o.top_p = static_cast<float>(to_num(a.get("top-p"), "--top-p"));
  if (a.has("seed")) o.seed = static_cast<uint64_t>(to_int(a.get("seed"), "--seed"));
  if (a.has("num-beams")) o.num_beams = to_int(a.get("num-beams"), "--num-beams");
  if (a.has("length-penalty"))
    o.length_penalty = static_cast<float>(to_num(a.get("length-penalty"), "--length-penalty"));
  o.kv_cache_dtype = kv_dtype_of(a.get("kv-dtype", ""));
  if (o.max_new_tokens < 1 || o.max_new_tokens > (1 << 20))
    die("--max-new-tokens must be in [1, 2^20]", 2);

  oslo_context* ctx = context(a);
  oslo_model* m = load_model(ctx, a);
  oslo_tokenizer* tok = load_tokenizer(a, a.has("prompt") || !a.has("ids"));
  std::vector<std::vector<int64_t>> prompts;
  for (const auto& p : a.all("prompt")) prompts.push_back(encode(tok, p, true));
  for (auto& p : id_prompts) prompts.push_back(std::move(p));
  std::vector<int64_t> flat, lens;
  for (const auto& p : prompts) {
    flat.insert(flat.end(), p.begin(), p.end());
    lens.push_back(static_cast<int64_t>(p.size()));
  }
  const int64_t B = static_cast<int64_t>(prompts.size());
  std::vector<int64_t> out(static_cast<size_t>(B * o.max_new_tokens)), n(static_cast<size_t>(B));
  std::vector<float> scores(static_cast<size_t>(B));
  const auto t0 = std::chrono::steady_clock::now();
  check(
      oslo_model_generate(m, flat.data(), lens.data(), B, &o, out.data(), n.data(), scores.data()),
      "generate");
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (g_rank == 0) {
    int64_t total = 0;
    for (int64_t b = 0; b < B; ++b) {
      std::vector<int64_t> gen(out.begin() + b * o.max_new_tokens,
                               out.begin() + b * o.max_new_tokens + n[static_cast<size_t>(b)]);
      total += n[static_cast<size_t>(b)];
      if (a.has("ids") || !tok) {
        std::printf("[%lld]", static_cast<long long>(b));
        for (int64_t t : gen) std::printf(" %lld", static_cast<long long>(t));
        std::printf("\n");
      } else {
        std::printf("[%lld] %s%s\n", static_cast<long long>(b),
                    decode(tok, prompts[static_cast<size_t>(b)]).c_str(), decode(tok, gen).c_str());
      }
    }
    std::fprintf(stderr, "oslo: %lld new tokens in %.2f s (%.1f tokens/s)\n",
                 static_cast<long long>(total), dt, total / dt);
  }
  oslo_tokenizer_destroy(tok);
  oslo_model_destroy(m);
  oslo_context_destroy(ctx);
  return 0;
}

}  // namespace oslo_cli
