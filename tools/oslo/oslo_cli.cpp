// The `oslo` command: generate text, embed sentences, merge, reshard and
// inspect checkpoints. Multi-rank under oslo-run (the tensor-parallel size is
// the world size unless --tp says otherwise); only rank 0 prints. Models,
// tokenizers and checkpoints go through the public C ABI (include/oslo.h);
// merge and reshard call the checkpoint tier directly for progress reports.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "core/checkpoint/model_checkpoint.hpp"
#include "core/common/error.hpp"
#include "core/model/sharding.hpp"
#include "oslo.h"

namespace {

int g_rank = 0;

struct Fail {
  int code;
};

void die(const std::string& msg, int code = 1) {
  if (g_rank == 0) std::fprintf(stderr, "oslo: %s\n", msg.c_str());
  throw Fail{code};
}

void check(oslo_status st, const std::string& what) {
  if (st != OSLO_OK) die(what + ": " + oslo_status_string(st) + ": " + oslo_last_error());
}

// --name value / --flag arguments after the subcommand.
struct Args {
  std::map<std::string, std::vector<std::string>> opts;
  std::vector<std::string> pos;
  bool has(const std::string& k) const { return opts.count(k) != 0; }
  std::string get(const std::string& k, const std::string& def = "") const {
    auto it = opts.find(k);
    return it == opts.end() ? def : it->second.back();
  }
  const std::vector<std::string>& all(const std::string& k) const {
    static const std::vector<std::string> none;
    auto it = opts.find(k);
    return it == opts.end() ? none : it->second;
  }
};

Args parse(int argc, char** argv, int first, const std::vector<std::string>& flags,
           const std::vector<std::string>& valued) {
  Args a;
  for (int i = first; i < argc; ++i) {
    std::string s = argv[i];
    if (s.rfind("--", 0) == 0) {
      const std::string k = s.substr(2);
      bool is_flag = false, is_valued = false;
      for (const auto& f : flags) is_flag |= f == k;
      for (const auto& v : valued) is_valued |= v == k;
      if (is_flag) {
        a.opts[k].push_back("1");
      } else if (is_valued) {
        if (i + 1 >= argc) die("--" + k + " needs a value", 2);
        a.opts[k].push_back(argv[++i]);
      } else {
        die("unknown option " + s + " (see --help)", 2);
      }
    } else {
      a.pos.push_back(s);
    }
  }
  return a;
}

int64_t to_int(const std::string& s, const std::string& what) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end || errno) die(what + ": not an integer: \"" + s + "\"", 2);
  return v;
}

double to_num(const std::string& s, const std::string& what) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end || !std::isfinite(v)) die(what + ": not a number: \"" + s + "\"", 2);
  return v;
}

int dtype_of(const std::string& s) {
  if (s.empty()) return -1;
  if (s == "f32" || s == "float32") return OSLO_DTYPE_F32;
  if (s == "bf16" || s == "bfloat16") return OSLO_DTYPE_BF16;
  if (s == "f16" || s == "float16") return OSLO_DTYPE_F16;
  die("--dtype must be f32, bf16 or f16, got \"" + s + "\"", 2);
  return -1;
}

// A rendezvous file for a single-rank run (removed at exit).
std::string single_store() {
  static std::string path;
  if (path.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    path = std::string(tmp && *tmp ? tmp : "/tmp") + "/oslo-cli-" + std::to_string(getpid());
    std::atexit([] { std::remove(path.c_str()); });
  }
  return path;
}

// A context for this process: the world from the launcher's environment
// (oslo-run, torchrun, mpirun, srun) or a single rank.
oslo_context* context(const Args& a) {
  const char* ws = std::getenv("WORLD_SIZE");
  const char* ompi = std::getenv("OMPI_COMM_WORLD_SIZE");
  const int world = ws ? std::atoi(ws) : ompi ? std::atoi(ompi) : 1;
  const int tp = a.has("tp") ? static_cast<int>(to_int(a.get("tp"), "--tp")) : world;
  std::string cfg = "{\"tensor_parallel_size\": " + std::to_string(tp);
  if (a.has("threads"))
    cfg += ", \"num_threads\": " + std::to_string(to_int(a.get("threads"), "--threads"));
  if (a.has("backend")) cfg += ", \"backend\": \"" + a.get("backend") + "\"";
  if (!ws && !ompi && !std::getenv("SLURM_NTASKS"))
    cfg += ", \"rank\": 0, \"world_size\": 1, \"init_method\": \"file://" + single_store() + "\"";
  cfg += "}";
  oslo_context* ctx = nullptr;
  check(oslo_context_create(cfg.c_str(), &ctx), "context");
  check(oslo_context_rank(ctx, OSLO_GROUP_WORLD, &g_rank), "rank");
  return ctx;
}

oslo_model* load_model(oslo_context* ctx, const Args& a) {
  const std::string path = a.get("model");
  if (path.empty()) die("--model DIR is required (a Hugging Face folder or an oslo checkpoint)", 2);
  oslo_model_options o;
  check(oslo_model_options_init(&o, OSLO_MODEL_OPTIONS_VERSION), "options");
  o.dtype = dtype_of(a.get("dtype"));
  const auto t0 = std::chrono::steady_clock::now();
  if (g_rank == 0) std::fprintf(stderr, "oslo: loading %s ...\n", path.c_str());
  oslo_model* m = nullptr;
  check(oslo_model_load(ctx, path.c_str(), &o, &m), "load " + path);
  if (g_rank == 0)
    std::fprintf(stderr, "oslo: loaded in %.2f s\n",
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return m;
}

oslo_tokenizer* load_tokenizer(const Args& a, bool required) {
  const std::string path = a.get("tokenizer", a.get("model"));
  oslo_tokenizer* t = nullptr;
  if (oslo_tokenizer_load(path.c_str(), &t) != OSLO_OK) {
    if (required)
      check(OSLO_ERR_IO, std::string("tokenizer in ") + path + " (" + oslo_last_error() + ")");
    return nullptr;
  }
  return t;
}

std::vector<int64_t> encode(oslo_tokenizer* t, const std::string& text, bool special) {
  size_t n = 0;
  check(oslo_tokenizer_encode(t, text.data(), text.size(), special, nullptr, 0, &n), "encode");
  std::vector<int64_t> ids(n);
  check(oslo_tokenizer_encode(t, text.data(), text.size(), special, ids.data(), n, &n), "encode");
  return ids;
}

std::string decode(oslo_tokenizer* t, const std::vector<int64_t>& ids) {
  size_t n = 0;
  check(oslo_tokenizer_decode(t, ids.data(), ids.size(), 1, nullptr, 0, &n), "decode");
  std::string s(n + 1, '\0');
  check(oslo_tokenizer_decode(t, ids.data(), ids.size(), 1, s.data(), s.size(), &n), "decode");
  s.resize(n);
  return s;
}

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
    "                     [--threads N] [--backend NAME]\n"
    "Generates continuations of the prompts (batched, left-padded) with the KV cache:\n"
    "greedy by default, sampling with --sample, beam search with --num-beams N > 1.\n"
    "Text prompts are tokenized with the model folder's tokenizer (or --tokenizer);\n"
    "--ids prints token ids instead of text. Under oslo-run every rank computes its\n"
    "share of each layer; rank 0 prints.\n"
    "  example: oslo-run --nproc-per-node 2 oslo generate --model M --prompt 'Hello'\n";

int cmd_generate(int argc, char** argv) {
  Args a = parse(
      argc, argv, 2, {"sample", "ids", "help"},
      {"model", "prompt", "prompt-ids", "max-new-tokens", "temperature", "top-k", "top-p", "seed",
       "num-beams", "length-penalty", "dtype", "tokenizer", "tp", "threads", "backend"});
  if (a.has("help")) return std::printf("%s", kGenerateHelp), 0;
  if (!a.pos.empty()) die("unexpected argument \"" + a.pos[0] + "\" (see --help)", 2);
  oslo_context* ctx = context(a);
  oslo_model* m = load_model(ctx, a);
  oslo_tokenizer* tok = load_tokenizer(a, a.has("prompt") || !a.has("ids"));
  std::vector<std::vector<int64_t>> prompts;
  for (const auto& p : a.all("prompt")) prompts.push_back(encode(tok, p, true));
  for (const auto& p : a.all("prompt-ids")) prompts.push_back(parse_ids(p));
  if (prompts.empty()) die("give at least one --prompt or --prompt-ids", 2);
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
  if (o.max_new_tokens < 1 || o.max_new_tokens > (1 << 20))
    die("--max-new-tokens must be in [1, 2^20]", 2);
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

const char* kEmbedHelp =
    "usage: oslo embed --model DIR [--sentence TEXT]... [--file F] [--json] [--no-normalize]\n"
    "                  [--dtype f32|bf16|f16] [--tokenizer DIR] [--tp N] [--threads N]\n"
    "Sentence embeddings of an encoder model (mean pooling over the attention mask,\n"
    "then L2 normalisation, as sentence-transformers computes them). Sentences come\n"
    "from --sentence and from --file (one per line). Prints the cosine similarity\n"
    "table, or with --json the embeddings.\n";

int cmd_embed(int argc, char** argv) {
  Args a = parse(argc, argv, 2, {"json", "no-normalize", "help"},
                 {"model", "sentence", "file", "dtype", "tokenizer", "tp", "threads", "backend"});
  if (a.has("help")) return std::printf("%s", kEmbedHelp), 0;
  if (!a.pos.empty()) die("unexpected argument \"" + a.pos[0] + "\" (see --help)", 2);
  std::vector<std::string> sents = a.all("sentence");
  if (a.has("file")) {
    std::ifstream f(a.get("file"));
    if (!f) die("cannot open " + a.get("file"));
    for (std::string line; std::getline(f, line);)
      if (!line.empty()) sents.push_back(line);
  }
  if (sents.empty()) die("give at least one --sentence or a --file", 2);
  oslo_context* ctx = context(a);
  oslo_model* m = load_model(ctx, a);
  oslo_tokenizer* tok = load_tokenizer(a, true);
  std::vector<std::vector<int64_t>> ids;
  size_t S = 0;
  for (const auto& s : sents) {
    ids.push_back(encode(tok, s, true));
    S = std::max(S, ids.back().size());
  }
  const int64_t B = static_cast<int64_t>(sents.size());
  std::vector<int64_t> flat(static_cast<size_t>(B) * S, 0), mask(flat.size(), 0);
  for (int64_t b = 0; b < B; ++b)
    for (size_t i = 0; i < ids[static_cast<size_t>(b)].size(); ++i) {
      flat[static_cast<size_t>(b) * S + i] = ids[static_cast<size_t>(b)][i];
      mask[static_cast<size_t>(b) * S + i] = 1;
    }
  oslo_model_info info;
  check(oslo_model_get_info(m, &info, nullptr), "info");
  const int64_t H = info.hidden_size;
  std::vector<float> e(static_cast<size_t>(B * H));
  check(oslo_model_embed(m, flat.data(), mask.data(), B, static_cast<int64_t>(S),
                         !a.has("no-normalize"), e.data(), e.size()),
        "embed");
  if (g_rank == 0) {
    if (a.has("json")) {
      std::printf("[");
      for (int64_t b = 0; b < B; ++b) {
        std::printf("%s[", b ? ",\n " : "");
        for (int64_t i = 0; i < H; ++i)
          std::printf("%s%.8g", i ? ", " : "", e[static_cast<size_t>(b * H + i)]);
        std::printf("]");
      }
      std::printf("]\n");
    } else {
      for (int64_t b = 0; b < B; ++b)
        std::printf("[%lld] %s\n", static_cast<long long>(b),
                    sents[static_cast<size_t>(b)].c_str());
      std::printf("\ncosine similarity\n     ");
      for (int64_t j = 0; j < B; ++j) std::printf(" [%2lld]", static_cast<long long>(j));
      std::printf("\n");
      for (int64_t i = 0; i < B; ++i) {
        std::printf("[%2lld] ", static_cast<long long>(i));
        for (int64_t j = 0; j < B; ++j) {
          double d = 0, ni = 0, nj = 0;
          for (int64_t k = 0; k < H; ++k) {
            const double x = e[static_cast<size_t>(i * H + k)],
                         y = e[static_cast<size_t>(j * H + k)];
            d += x * y;
            ni += x * x;
            nj += y * y;
          }
          std::printf(" %.2f", d / std::sqrt(ni * nj));
        }
        std::printf("\n");
      }
    }
  }
  oslo_tokenizer_destroy(tok);
  oslo_model_destroy(m);
  oslo_context_destroy(ctx);
  return 0;
}

oslo::ProgressFn progress(const char* what) {
  auto last = std::make_shared<int>(-1);
  return [what, last](uint64_t done, uint64_t total) {
    const int pct =
        total ? static_cast<int>(100.0 * static_cast<double>(done) / static_cast<double>(total))
              : 100;
    if (pct / 10 != *last / 10 || done == total) {
      *last = pct;
      std::fprintf(stderr, "oslo: %s %3d%% (%.1f of %.1f MB)\n", what, pct, done / 1e6,
                   total / 1e6);
    }
  };
}

const char* kMergeHelp =
    "usage: oslo merge SRC DST [--max-shard-size BYTES] [--dtype f32|bf16|f16] [--overwrite]\n"
    "Writes the parallel checkpoint (or Hugging Face folder) SRC as one ordinary Hugging\n"
    "Face folder DST (model.safetensors, or shards + model.safetensors.index.json above\n"
    "--max-shard-size; config.json and tokenizer files) that transformers loads.\n"
    "Offline (one process), streams tensor by tensor, DST appears atomically.\n";

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
  }
  o.progress = progress("merge");
  oslo::merge(a.pos[0], a.pos[1], o);
  std::fprintf(stderr, "oslo: merged %s into %s\n", a.pos[0].c_str(), a.pos[1].c_str());
  return 0;
}

const char* kReshardHelp =
    "usage: oslo reshard SRC DST --tp N [--dtype f32|bf16|f16]\n"
    "Rewrites the parallel checkpoint or Hugging Face folder SRC as a parallel\n"
    "checkpoint DST for tensor-parallel size N, offline, reading only the slices each\n"
    "new rank needs.\n";

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
  }
  o.progress = progress("reshard");
  oslo::reshard(a.pos[0], a.pos[1], static_cast<int>(tp), oslo::model_planner(a.pos[0]), o);
  std::fprintf(stderr, "oslo: resharded %s to TP=%lld in %s\n", a.pos[0].c_str(),
               static_cast<long long>(tp), a.pos[1].c_str());
  return 0;
}

const char* kInspectHelp =
    "usage: oslo inspect PATH [--json]\n"
    "Describes a Hugging Face folder, an oslo parallel checkpoint or a .safetensors file:\n"
    "format, parallel layout, config summary, and every tensor's dtype, shape and slices.\n";

int cmd_inspect(int argc, char** argv) {
  Args a = parse(argc, argv, 2, {"json", "help"}, {});
  if (a.has("help")) return std::printf("%s", kInspectHelp), 0;
  if (a.pos.size() != 1) die("inspect needs one PATH (see --help)", 2);
  size_t n = 0;
  check(oslo_checkpoint_inspect(a.pos[0].c_str(), a.has("json"), nullptr, 0, &n), "inspect");
  std::string s(n + 1, '\0');
  check(oslo_checkpoint_inspect(a.pos[0].c_str(), a.has("json"), s.data(), s.size(), &n),
        "inspect");
  s.resize(n);
  std::fwrite(s.data(), 1, s.size(), stdout);
  if (!s.empty() && s.back() != '\n') std::printf("\n");
  return 0;
}

const char* kHelp =
    "usage: oslo COMMAND [ARGS]   (oslo COMMAND --help for each)\n"
    "  generate  generate text with a causal model (docs/MODELS.md lists them)\n"
    "  embed     sentence embeddings and their similarity table (encoders, e.g. MiniLM)\n"
    "  merge     parallel checkpoint -> one ordinary Hugging Face folder\n"
    "  reshard   parallel checkpoint or HF folder -> parallel checkpoint at another TP\n"
    "  inspect   tensors, dtypes, shapes and layout of any checkpoint or HF folder\n"
    "Run multi-rank commands under oslo-run, e.g.\n"
    "  oslo-run --nproc-per-node 2 oslo embed --model DIR --sentence 'a' --sentence 'b'\n";

}  // namespace

int main(int argc, char** argv) {
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
    if (cmd == "inspect") return cmd_inspect(argc, argv);
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
