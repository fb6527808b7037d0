// The `oslo` command: generate text, embed sentences, fine-tune (train),
// merge, reshard and inspect checkpoints. Multi-rank under oslo-run (the tensor-parallel size is
// the world size unless --tp says otherwise); only rank 0 prints. Models,
// tokenizers and checkpoints go through the public C ABI (include/oslo.h);
// merge and reshard call the checkpoint tier directly for progress reports.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

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

// Every rank reads and tokenizes the data itself and checks the options
// alike, so these errors happen on every rank and print on every rank.
[[noreturn]] void die_all(const std::string& msg, int code = 1) {
  const char* w = std::getenv("WORLD_SIZE");
  const char* r = std::getenv("RANK");
  std::string who;
  if (w && std::atoi(w) > 1) who = std::string("[rank ") + (r ? r : "?") + "] ";
  std::fprintf(stderr, "oslo: %s%s\n", who.c_str(), msg.c_str());
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

// The backend and its options from --backend, --device and
// --backend-options:
//   --device cpu       the CPU backend (the default);
//   --device cuda[:N]  the CUDA backend plugin ("cuda"), on device N (without
//                      N: each rank's local rank), i.e. backend options
//                      {"device": N}; with --backend torch, libtorch's CUDA
//                      device instead ({"device": "cuda", "device_index": N});
//   --backend-options  a JSON object handed to the backend as is (the keys
//                      --device sets must not disagree with it).
// Bad values exit with status 2 and a message naming the option.
struct BackendChoice {
  std::string backend;  // "" = the config's default (cpu)
  nlohmann::json options = nlohmann::json::object();
};

BackendChoice backend_choice(const Args& a) {
  BackendChoice c;
  c.backend = a.get("backend");
  if (a.has("backend-options")) {
    const std::string text = a.get("backend-options");
    try {
      c.options = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      die("--backend-options: not valid JSON (" + std::string(e.what()) + "): " + text, 2);
    }
    if (!c.options.is_object())
      die("--backend-options must be a JSON object, like '{\"device\": 1}', got " + text, 2);
  }
  if (!a.has("device")) return c;
  const std::string d = a.get("device");
  bool cuda = false;
  long index = -1;
  if (d == "cpu") {
  } else if (d == "cuda") {
    cuda = true;
  } else if (d.rfind("cuda:", 0) == 0 && d.size() > 5 && d.size() <= 9 &&
             d.find_first_not_of("0123456789", 5) == std::string::npos) {
    cuda = true;
    index = std::stol(d.substr(5));
  } else {
    die("--device must be cpu, cuda or cuda:N (N a device index), got \"" + d + "\"", 2);
  }
  const auto set = [&](const char* key, const nlohmann::json& v) {
    if (c.options.contains(key) && c.options[key] != v)
      die(std::string("--device ") + d + " sets backend option \"" + key + "\" to " + v.dump() +
              " but --backend-options has " + c.options[key].dump(),
          2);
    c.options[key] = v;
  };
  if (!cuda) {
    if (c.backend.empty()) c.backend = "cpu";
    if (c.backend == "torch")
      set("device", "cpu");
    else if (c.backend != "cpu")
      die("--device cpu and --backend " + c.backend + " disagree (leave one out)", 2);
    return c;
  }
  if (c.backend.empty()) c.backend = "cuda";
  if (c.backend == "cuda") {
    if (index >= 0) set("device", index);
  } else if (c.backend == "torch") {
    set("device", "cuda");
    if (index >= 0) set("device_index", index);
  } else {
    die("--device " + d + " needs the cuda backend (or --backend torch), not --backend " +
            c.backend,
        2);
  }
  return c;
}

// A context for this process: the world from the launcher's environment
// (oslo-run, torchrun, mpirun, srun) or a single rank.
// The world size the launcher announces (1 without one).
int launcher_world() {
  const char* ws = std::getenv("WORLD_SIZE");
  const char* ompi = std::getenv("OMPI_COMM_WORLD_SIZE");
  const char* slurm = std::getenv("SLURM_NTASKS");
  return ws ? std::atoi(ws) : ompi ? std::atoi(ompi) : slurm ? std::atoi(slurm) : 1;
}

// tp > 0 and dp > 0 (oslo train) set the tensor- and data-parallel sizes;
// otherwise --pp N (generate, embed) cuts the blocks into N pipeline stages
// and the tensor-parallel size is --tp or what is left of the world.
oslo_context* context(const Args& a, int tp = 0, int dp = 0) {
  const char* ws = std::getenv("WORLD_SIZE");
  const char* ompi = std::getenv("OMPI_COMM_WORLD_SIZE");
  const int world = ws ? std::atoi(ws) : ompi ? std::atoi(ompi) : 1;
  int pp = 1;
  if (a.has("pp")) {
    const int64_t v = to_int(a.get("pp"), "--pp");
    if (v < 1 || v > world || world % v != 0)
      die("--pp " + std::to_string(v) + " must divide the world size " + std::to_string(world) +
              " (the ranks of oslo-run)",
          2);
    pp = static_cast<int>(v);
  }
  if (tp <= 0) tp = a.has("tp") ? static_cast<int>(to_int(a.get("tp"), "--tp")) : world / pp;
  nlohmann::json cfg = nlohmann::json::object();
  cfg["tensor_parallel_size"] = tp;
  if (pp > 1) cfg["pipeline_parallel_size"] = pp;
  if (dp > 0) cfg["data_parallel_size"] = dp;
  if (a.has("threads")) cfg["num_threads"] = to_int(a.get("threads"), "--threads");
  const BackendChoice bc = backend_choice(a);
  if (!bc.backend.empty()) cfg["backend"] = bc.backend;
  if (!bc.options.empty()) cfg["backend_options"] = bc.options;
  // --communicator auto|backend|host: the config's "communicator" (host:
  // oslo's host transports, which let several ranks share one GPU).
  if (a.has("communicator")) {
    const std::string c = a.get("communicator");
    if (c != "auto" && c != "backend" && c != "host")
      die("--communicator must be auto, backend or host, got \"" + c + "\"", 2);
    cfg["communicator"] = c;
  }
  if (!ws && !ompi && !std::getenv("SLURM_NTASKS")) {
    cfg["rank"] = 0;
    cfg["world_size"] = 1;
    cfg["init_method"] = "file://" + single_store();
  }
  oslo_context* ctx = nullptr;
  check(oslo_context_create(cfg.dump().c_str(), &ctx), "context");
  check(oslo_context_rank(ctx, OSLO_GROUP_WORLD, &g_rank), "rank");
  return ctx;
}

oslo_model* load_model(oslo_context* ctx, const Args& a) {
  const std::string path = a.get("model");
  if (path.empty()) die("--model DIR is required (a Hugging Face folder or an oslo checkpoint)", 2);
  oslo_model_options o;
  check(oslo_model_options_init(&o, OSLO_MODEL_OPTIONS_VERSION), "options");
  o.dtype = dtype_of(a.get("dtype"));
  // --virtual-stages V: model chunks per pipeline rank (interleaved).
  if (a.has("virtual-stages")) {
    const int64_t v = to_int(a.get("virtual-stages"), "--virtual-stages");
    if (v < 1 || v > (1 << 20))
      die("--virtual-stages must be at least 1, got " + a.get("virtual-stages"), 2);
    o.pipeline_virtual_stages = static_cast<int32_t>(v);
  }
  // --pp-layers A,B,...: the blocks of each (virtual) pipeline stage.
  std::vector<int32_t> layers;
  if (a.has("pp-layers")) {
    const std::string list = a.get("pp-layers");
    size_t at = 0;
    for (;;) {
      const size_t comma = list.find(',', at);
      const std::string item = list.substr(at, comma == std::string::npos ? comma : comma - at);
      const int64_t v = to_int(item, "--pp-layers");
      if (v < 1 || v > (1 << 20)) die("--pp-layers: a count must be at least 1, got " + item, 2);
      layers.push_back(static_cast<int32_t>(v));
      if (comma == std::string::npos) break;
      at = comma + 1;
    }
    o.pipeline_layers = layers.data();
    o.pipeline_layers_count = static_cast<int32_t>(layers.size());
  }
  const auto t0 = std::chrono::steady_clock::now();
  if (g_rank == 0) std::fprintf(stderr, "oslo: loading %s ...\n", path.c_str());
  oslo_model* m = nullptr;
  // Every rank fails a load alike; each says why, so that the message is
  // there whichever rank the launcher sees exit first.
  if (const oslo_status st = oslo_model_load(ctx, path.c_str(), &o, &m); st != OSLO_OK)
    die_all("load " + path + ": " + oslo_status_string(st) + ": " + oslo_last_error());
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
    "                     [--pp N [--pp-layers A,B]] [--threads N] [--device cpu|cuda[:N]] "
    "[--backend NAME]\n"
    "                     [--backend-options JSON]\n"
    "Generates continuations of the prompts (batched, left-padded) with the KV cache:\n"
    "greedy by default, sampling with --sample, beam search with --num-beams N > 1.\n"
    "Text prompts are tokenized with the model folder's tokenizer (or --tokenizer);\n"
    "--ids prints token ids instead of text. Under oslo-run every rank computes its\n"
    "share of each layer; rank 0 prints. --pp N cuts the blocks into N pipeline\n"
    "stages (each rank loads only its stage's weights; --tp x --pp = the world).\n"
    "--device cuda[:N] runs on the CUDA backend (device N, else each rank's local\n"
    "rank); --backend-options passes a JSON object to the backend.\n"
    "  example: oslo-run --nproc-per-node 2 oslo generate --model M --prompt 'Hello'\n";

int cmd_generate(int argc, char** argv) {
  Args a = parse(argc, argv, 2, {"sample", "ids", "help"}, {"model",       "prompt",
                                                            "prompt-ids",  "max-new-tokens",
                                                            "temperature", "top-k",
                                                            "top-p",       "seed",
                                                            "num-beams",   "length-penalty",
                                                            "dtype",       "tokenizer",
                                                            "tp",          "pp",
                                                            "pp-layers",   "virtual-stages",
                                                            "threads",     "backend",
                                                            "device",      "backend-options"});
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
    "                  [--dtype f32|bf16|f16] [--tokenizer DIR] [--tp N] [--pp N]\n"
    "                  [--threads N] [--device cpu|cuda[:N]] [--backend NAME]\n"
    "                  [--backend-options JSON]\n"
    "Sentence embeddings of an encoder model (mean pooling over the attention mask,\n"
    "then L2 normalisation, as sentence-transformers computes them). Sentences come\n"
    "from --sentence and from --file (one per line). Prints the cosine similarity\n"
    "table, or with --json the embeddings.\n";

int cmd_embed(int argc, char** argv) {
  Args a = parse(argc, argv, 2, {"json", "no-normalize", "help"},
                 {"model", "sentence", "file", "dtype", "tokenizer", "tp", "pp", "pp-layers",
                  "threads", "backend", "device", "backend-options"});
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

// ---------------------------------------------------------------------------
// oslo train: fine-tune a causal model on a text corpus.
// ---------------------------------------------------------------------------

// The state a training checkpoint carries besides the model and optimizer:
// the data order's seed, the epochs completed and where in the current
// epoch's order the run stands: data_position counts rows (samples) of that
// order consumed by all data-parallel ranks together, so that it means the
// same global progress at any data-parallel size. Field for field
// oslo_train_state.
struct TrainState {
  uint64_t seed = 0;
  int64_t epoch = 0;
  int64_t data_position = 0;
};

// The training checkpoint (--save, --save-every): the model's weights (a
// parallel checkpoint oslo merge turns into a Hugging Face folder), the
// optimizer state, step, loss scaler and `state` (oslo_checkpoint_save).
// Collective over the world.
void save_checkpoint(oslo_model* model, oslo_optimizer* opt, const std::string& dir,
                     const TrainState& state) {
  (void)model;
  const oslo_train_state s = {state.seed, state.epoch, state.data_position};
  check(oslo_checkpoint_save(opt, dir.c_str(), &s), "save checkpoint " + dir);
}

// --resume DIR: restores weights, optimizer state, step, loss scaler and
// *state from a checkpoint save_checkpoint wrote (oslo_checkpoint_load).
// Collective over the world.
void load_checkpoint(oslo_optimizer* opt, const std::string& dir, TrainState* state) {
  oslo_train_state s = {0, 0, 0};
  check(oslo_checkpoint_load(opt, dir.c_str(), &s), "resume from " + dir);
  *state = TrainState{s.seed, s.epoch, s.data_position};
}

// What a resumed run must share with the run that saved a checkpoint for
// its data to continue exactly: the rows (data and --seq-len), the global
// micro-batch (data-parallel size x --batch-size rows) and --grad-accum.
// Rank 0 writes them to DIR/oslo_train.json after each save, with the save
// id of the manifest they belong to (oslo_checkpoint.json's "save_id": a
// file left by an earlier save, e.g. when a run stopped between the two
// writes, is recognized and ignored). Other files in a checkpoint folder
// are left alone by saves (core/checkpoint/FORMAT.md).
struct DataShape {
  int64_t rows = 0, seq_len = 0, global_batch = 0, grad_accum = 0;
  int64_t dp = 0, batch_size = 0;  // reported, not compared
};

const char* kTrainMeta = "oslo_train.json";

// The save id of DIR's manifest ("" if unreadable).
std::string manifest_save_id(const std::string& dir) {
  std::ifstream f(dir + "/oslo_checkpoint.json", std::ios::binary);
  if (!f) return "";
  try {
    const nlohmann::json j = nlohmann::json::parse(f);
    if (j.is_object() && j.contains("save_id") && j["save_id"].is_string())
      return j["save_id"].get<std::string>();
  } catch (const nlohmann::json::exception&) {
  }
  return "";
}

// Rank 0, after a save: DIR/oslo_train.json, atomically (temporary, rename).
void write_data_shape(const std::string& dir, const DataShape& d) {
  if (g_rank != 0) return;
  nlohmann::json j;
  j["save_id"] = manifest_save_id(dir);
  j["rows"] = d.rows;
  j["seq_len"] = d.seq_len;
  j["global_batch"] = d.global_batch;
  j["grad_accum"] = d.grad_accum;
  j["data_parallel_size"] = d.dp;
  j["batch_size"] = d.batch_size;
  const std::string path = dir + "/" + kTrainMeta, tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  const std::string text = j.dump(1) + "\n";
  const bool ok = f && std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (f && std::fclose(f) != 0) f = nullptr;
  if (!ok || !f || std::rename(tmp.c_str(), path.c_str()) != 0)
    die("cannot write " + path + ": " + std::strerror(errno));
}

// --resume DIR: the DataShape its oslo_train.json records, if it belongs to
// DIR's checkpoint (false: none; *stale when it is one of an earlier save).
// Every rank reads it; a malformed file is an error on every rank.
bool read_data_shape(const std::string& dir, DataShape* d, bool* stale) {
  const std::string path = dir + "/" + kTrainMeta;
  *stale = false;
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception&) {
    die_all("--resume " + dir + ": " + path +
            " is not valid JSON (delete it to resume without "
            "its checks)");
  }
  const auto num = [&](const char* k) {
    if (!j.is_object() || !j.contains(k) || !j[k].is_number_integer() || j[k].get<int64_t>() < 1)
      die_all("--resume " + dir + ": " + path + ": \"" + k + "\" is not a positive integer");
    return j[k].get<int64_t>();
  };
  if (!j.is_object() || !j.contains("save_id") || !j["save_id"].is_string())
    die_all("--resume " + dir + ": " + path + ": no \"save_id\" string");
  if (j["save_id"].get<std::string>() != manifest_save_id(dir)) {
    *stale = true;
    return false;
  }
  *d = DataShape{num("rows"),
                 num("seq_len"),
                 num("global_batch"),
                 num("grad_accum"),
                 num("data_parallel_size"),
                 num("batch_size")};
  return true;
}

// SplitMix64 (Steele, Lea, Flood 2014): the generator of the data order,
// written here so that the order is the same on every rank, platform and
// version.
uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The order of the packed rows in `epoch`: a Fisher-Yates shuffle of
// 0..rows-1 driven by SplitMix64 seeded from (seed, epoch); indices drawn
// without modulo bias (rejection).
std::vector<int64_t> epoch_order(int64_t rows, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) order[static_cast<size_t>(i)] = i;
  uint64_t s = seed;
  s = splitmix64(s) ^ static_cast<uint64_t>(epoch);
  for (int64_t i = rows - 1; i > 0; --i) {
    const uint64_t bound = static_cast<uint64_t>(i) + 1;
    const uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound
    uint64_t r;
    do r = splitmix64(s);
    while (r < threshold);
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(r % bound)]);
  }
  return order;
}

// The token stream of --data: .txt is one document (the whole file), .jsonl
// one document per line (its "text" string; blank lines skipped). Each
// document is tokenized with the tokenizer's special tokens (as
// transformers' run_clm does) and followed by EOS. Sets *docs.
std::vector<int64_t> read_corpus(oslo_tokenizer* tok, const std::string& path, int64_t* docs) {
  const auto ends = [&](const char* ext) {
    const size_t n = std::strlen(ext);
    return path.size() > n && path.compare(path.size() - n, n, ext) == 0;
  };
  const bool jsonl = ends(".jsonl");
  if (!jsonl && !ends(".txt"))
    die_all(
        "--data " + path + ": must be a .txt (one document) or .jsonl (a \"text\" per line) file",
        2);
  std::ifstream f(path, std::ios::binary);
  if (!f) die_all("--data " + path + ": cannot open: " + std::strerror(errno));
  int64_t eos = -1;
  check(oslo_tokenizer_special_id(tok, OSLO_SPECIAL_TOKEN_EOS, &eos), "tokenizer");
  if (eos < 0) die_all("the tokenizer names no EOS token (documents are joined with it)");
  std::vector<int64_t> out;
  *docs = 0;
  const auto add = [&](const std::string& text, const std::string& where) {
    size_t n = 0;
    if (oslo_tokenizer_encode(tok, text.data(), text.size(), 1, nullptr, 0, &n) != OSLO_OK)
      die_all(where + ": cannot tokenize: " + oslo_last_error());
    const size_t at = out.size();
    out.resize(at + n);
    check(oslo_tokenizer_encode(tok, text.data(), text.size(), 1, out.data() + at, n, &n),
          "encode");
    out.push_back(eos);
    ++*docs;
  };
  if (!jsonl) {
    std::stringstream ss;
    ss << f.rdbuf();
    if (f.bad()) die_all("--data " + path + ": read error");
    const std::string text = ss.str();
    if (!text.empty()) add(text, path);
    return out;
  }
  std::string line;
  for (int64_t no = 1; std::getline(f, line); ++no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(no);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception&) {
      die_all(where + ": not valid JSON (each line of a .jsonl file is one JSON object)");
    }
    if (!j.is_object() || !j.contains("text") || !j["text"].is_string())
      die_all(where +
              ": no \"text\" string (each line must be an object like {\"text\": \"...\"})");
    const std::string text = j["text"].get<std::string>();
    if (!text.empty()) add(text, where);
  }
  if (f.bad()) die_all("--data " + path + ": read error");
  return out;
}

// FNV-1a over token ids: the fingerprint of a step's data in the log.
uint64_t fnv1a(uint64_t h, const std::vector<int64_t>& ids) {
  for (int64_t v : ids)
    for (int i = 0; i < 8; ++i) {
      h ^= (static_cast<uint64_t>(v) >> (8 * i)) & 0xff;
      h *= 0x100000001b3ull;
    }
  return h;
}

std::string clock_text(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const long t = std::lround(s);
  char buf[32];
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  else
    std::snprintf(buf, sizeof buf, "%ld:%02ld", t / 60, t % 60);
  return buf;
}

// Rank 0's progress report on stderr: a bar redrawn in place on a terminal,
// otherwise plain lines (the first step, about every 2% of the run, the last).
struct Progress {
  bool on = false, tty = false, drawn = false;
  int64_t total = 0;
  // bubble >= 0: the pipeline's measured bubble, shown too.
  void step(int64_t done, double loss, double tok_s, double elapsed, double bubble = -1) {
    if (!on) return;
    const double eta =
        done > 0 ? elapsed / static_cast<double>(done) * static_cast<double>(total - done) : NAN;
    char bub[32] = "";
    if (bubble >= 0) std::snprintf(bub, sizeof bub, " bubble %.1f%%", 100 * bubble);
    if (tty) {
      const int width = 24;
      const int fill = static_cast<int>(width * done / std::max<int64_t>(total, 1));
      std::fprintf(stderr, "\r\033[K%*lld/%lld [%s%s] loss %.4f | %.0f tok/s%s | ETA %s",
                   static_cast<int>(std::to_string(total).size()), static_cast<long long>(done),
                   static_cast<long long>(total),
                   std::string(static_cast<size_t>(fill), '#').c_str(),
                   std::string(static_cast<size_t>(width - fill), '.').c_str(), loss, tok_s, bub,
                   clock_text(eta).c_str());
      drawn = true;
      return;
    }
    const int64_t every = std::max<int64_t>(1, total / 50);
    if (done == 1 || done % every == 0 || done == total)
      std::fprintf(stderr, "oslo: step %lld/%lld loss %.4f %.0f tok/s%s elapsed %s ETA %s\n",
                   static_cast<long long>(done), static_cast<long long>(total), loss, tok_s, bub,
                   clock_text(elapsed).c_str(), clock_text(eta).c_str());
  }
  // A message between bar updates.
  void say(const std::string& s) {
    if (!on) return;
    if (drawn) std::fprintf(stderr, "\r\033[K");
    std::fprintf(stderr, "oslo: %s\n", s.c_str());
    drawn = false;  // the next step draws the bar on a line of its own
  }
  void end() {
    if (on && drawn) std::fprintf(stderr, "\n");
    drawn = false;
  }
};

void make_dirs(const std::string& dir) {
  for (size_t i = 1; i <= dir.size(); ++i)
    if (i == dir.size() || dir[i] == '/') {
      const std::string p = dir.substr(0, i);
      if (::mkdir(p.c_str(), 0777) != 0 && errno != EEXIST)
        die_all("cannot create " + p + ": " + std::strerror(errno));
    }
}

const char* kTrainHelp =
    "usage: oslo train --model DIR --data FILE.txt|FILE.jsonl --seq-len N --batch-size B\n"
    "                  --steps S [--lr X] [--schedule constant|constant_with_warmup|linear|\n"
    "                  cosine] [--warmup W] [--optimizer adamw|sgd] [--weight-decay X]\n"
    "                  [--momentum X] [--max-grad-norm X] [--grad-accum K] [--seed N]\n"
    "                  [--dtype f32|bf16|f16] [--activation-checkpointing]\n"
    "                  [--save DIR [--save-every K]] [--resume DIR] [--log FILE]\n"
    "                  [--tokenizer DIR] [--tp N] [--dp N] [--zero 0|1|2|3] [--bucket-mb M]\n"
    "                  [--pp N [--micro-batches M] [--virtual-stages V] [--pp-layers A,B]\n"
    "                  [--pipeline-head-split F|auto]]\n"
    "                  [--threads N] [--device cpu|cuda[:N]] [--backend NAME]\n"
    "                  [--backend-options JSON] [--communicator auto|backend|host]\n"
    "Fine-tunes a causal language model (causal-LM loss, labels = inputs) as Hugging\n"
    "Face's run_clm.py with Trainer does, split over the ranks of oslo-run:\n"
    "  ranks    --tp N tensor-parallel x --dp N data-parallel ranks = the world size\n"
    "           (without --tp: world / --dp; without --dp: world / --tp; neither:\n"
    "           all ranks tensor-parallel). Each data-parallel rank trains on its own\n"
    "           rows; gradients are averaged over them (PyTorch DDP) in buckets of\n"
    "           --bucket-mb MiB (default 25). --zero 1 partitions the optimizer\n"
    "           state over the data-parallel ranks, --zero 2 the gradients too,\n"
    "           --zero 3 the parameters too (DeepSpeed ZeRO; default 0: none).\n"
    "           --pp N splits the blocks over N pipeline stages (tp x pp x dp = the\n"
    "           world size; the first stage embeds, the last norms and projects):\n"
    "           each --batch-size batch runs as --micro-batches M micro-batches (M\n"
    "           divides --batch-size; default: one row each) through the stages in\n"
    "           1F1B order, and the progress shows the measured bubble (the stages'\n"
    "           idle share of the step; (pp - 1) / (M + pp - 1) in theory).\n"
    "           --virtual-stages V gives each rank V model chunks (Megatron's\n"
    "           interleaved 1F1B: the stream goes round the ranks V times, the\n"
    "           bubble shrinks about V-fold; M must be a multiple of --pp).\n"
    "           --pipeline-head-split F|auto (tied embeddings):\n"
    "           the first stage also runs the head and loss of that share of each\n"
    "           micro-batch's tokens (auto: the share that equalises the first and\n"
    "           last stage's products), so the stages can be equal although the\n"
    "           head is worth several blocks.\n"
    "           --pp-layers A,B,... gives each stage's blocks (default: as even as\n"
    "           possible; the last stage's head costs about vocab / (12 hidden)\n"
    "           blocks, so fewer blocks there balance the stages). --zero 0 or 1\n"
    "           with --pp.\n"
    "  data     .txt: the whole file is one document; .jsonl: one JSON object with a\n"
    "           \"text\" string per line, one document each. Documents are tokenized\n"
    "           with the model folder's tokenizer (or --tokenizer), each followed by\n"
    "           EOS, concatenated and cut into rows of --seq-len tokens (the remainder\n"
    "           is dropped). Every rank reads and tokenizes the file itself.\n"
    "  order    each epoch shuffles the rows with a generator seeded by --seed\n"
    "           (default 0) and the epoch: the same order on every rank and run.\n"
    "           --batch-size is per data-parallel rank: a global micro-batch is the\n"
    "           next dp x --batch-size rows of the order, data rank r taking its\n"
    "           positions r, r+dp, r+2dp, ... (PyTorch's DistributedSampler; the\n"
    "           rows left over at the end of an epoch are skipped), so --dp 2\n"
    "           --batch-size 4 trains on the rows of --dp 1 --batch-size 8. An\n"
    "           optimizer step takes --grad-accum K micro-batches (default 1);\n"
    "           epochs wrap until --steps steps are done.\n"
    "  update   AdamW (default) or SGD, --lr (default 5e-5), --weight-decay\n"
    "           (default 0; not on biases and norm weights), --momentum (SGD),\n"
    "           --max-grad-norm (default 1.0; 0 = no clipping), --schedule (default\n"
    "           linear: decay to 0 at --steps) after --warmup W steps of linear warmup\n"
    "           (default 0). f16 weights get dynamic loss scaling.\n"
    "  device   --device cuda trains on the GPU (the losses of --device cpu; see\n"
    "           docs/MODELS.md). --communicator host connects the ranks through\n"
    "           oslo's host transports, staged through host memory, so several\n"
    "           ranks can share one GPU (NCCL, the default for cuda, wants one GPU\n"
    "           a rank); backend: the backend's own, even for one rank.\n"
    "  output   a progress bar on rank 0 (plain lines when stderr is not a terminal),\n"
    "           a JSON line per step in --log FILE (default DIR/train_log.jsonl with\n"
    "           --save, else none): step, loss, lr, grad_norm, tokens_per_s,\n"
    "           elapsed_s, epoch, tokens, data_hash (losses, tokens and hashes\n"
    "           cover all data-parallel ranks). --save DIR writes a checkpoint\n"
    "           at the end (and every --save-every K steps) that oslo merge turns into\n"
    "           a Hugging Face folder and oslo generate loads.\n"
    "  resume   --resume DIR continues from a checkpoint of --save: the same --data,\n"
    "           --seq-len, --grad-accum and global batch (dp x --batch-size); the\n"
    "           tensor- and data-parallel sizes and --zero may change.\n"
    "Steps count optimizer steps. Errors (a missing or malformed data file, too few\n"
    "tokens for one batch, bad numbers) name their cause and print on every rank.\n"
    "  example: oslo-run --nproc-per-node 2 oslo train --model M --data corpus.txt \\\n"
    "             --seq-len 64 --batch-size 8 --steps 100 --lr 1e-3 --save ckpt\n";

int cmd_train(int argc, char** argv) {
  Args a = parse(argc, argv, 2, {"activation-checkpointing", "help"},
                 {"model",
                  "data",
                  "seq-len",
                  "batch-size",
                  "steps",
                  "lr",
                  "schedule",
                  "warmup",
                  "optimizer",
                  "weight-decay",
                  "momentum",
                  "max-grad-norm",
                  "grad-accum",
                  "seed",
                  "dtype",
                  "save",
                  "save-every",
                  "resume",
                  "log",
                  "tokenizer",
                  "tp",
                  "dp",
                  "zero",
                  "bucket-mb",
                  "threads",
                  "backend",
                  "device",
                  "backend-options",
                  "communicator",
                  "pp",
                  "micro-batches",
                  "pp-layers",
                  "virtual-stages",
                  "pipeline-head-split"});
  if (a.has("help")) return std::printf("%s", kTrainHelp), 0;
  if (!a.pos.empty()) die_all("unexpected argument \"" + a.pos[0] + "\" (see --help)", 2);
  for (const char* req : {"model", "data", "seq-len", "batch-size", "steps"})
    if (!a.has(req)) die_all(std::string("--") + req + " is required (see --help)", 2);
  // Numbers: integers in range, finite reals.
  const auto int_in = [&](const char* k, int64_t lo, int64_t hi, int64_t def) {
    if (!a.has(k)) return def;
    const int64_t v = to_int(a.get(k), std::string("--") + k);
    if (v < lo || v > hi)
      die_all(std::string("--") + k + " must be in [" + std::to_string(lo) + ", " +
                  std::to_string(hi) + "], got " + a.get(k),
              2);
    return v;
  };
  const auto real_at_least = [&](const char* k, double lo, double def, bool above) {
    if (!a.has(k)) return def;
    const double v = to_num(a.get(k), std::string("--") + k);
    if (above ? !(v > lo) : !(v >= lo))
      die_all(std::string("--") + k + " must be " + (above ? "> " : ">= ") +
                  (lo == 0 ? "0" : std::to_string(lo)) + ", got " + a.get(k),
              2);
    return v;
  };
  const int64_t kMax = int64_t(1) << 40;
  const int64_t S = int_in("seq-len", 2, 1 << 20, 0);
  const int64_t B = int_in("batch-size", 1, 1 << 20, 0);
  const int64_t steps = int_in("steps", 1, kMax, 0);
  const int64_t K = int_in("grad-accum", 1, 1 << 20, 1);
  const int64_t warmup = int_in("warmup", 0, kMax, 0);
  const int64_t save_every = int_in("save-every", 1, kMax, 0);
  const int64_t seed_arg = int_in("seed", 0, INT64_MAX, 0);
  if (a.has("save-every") && !a.has("save")) die_all("--save-every needs --save DIR", 2);
  // The ranks: tensor-parallel x pipeline x data-parallel = the world
  // (checked on every rank before anything is loaded).
  const int all_ranks = launcher_world();
  const int64_t pp = int_in("pp", 1, 1 << 20, 1);
  if (all_ranks % pp != 0)
    die_all("--pp " + std::to_string(pp) + " does not divide the world size " +
                std::to_string(all_ranks) +
                " (the ranks of oslo-run: --tp x --pp x --dp must equal it)",
            2);
  const int world = static_cast<int>(all_ranks / pp);  // ranks per stage
  int64_t tp = int_in("tp", 1, 1 << 20, 0), dp = int_in("dp", 1, 1 << 20, 0);
  const auto must_divide = [&](const char* k, int64_t v) {
    if (world % v != 0)
      die_all(std::string("--") + k + " " + std::to_string(v) +
                  (pp == 1 ? " does not divide the world size " + std::to_string(world) +
                                 " (the ranks of oslo-run: --tp x --dp must equal it)"
                           : " does not divide the " + std::to_string(world) +
                                 " ranks of a stage (world size " + std::to_string(all_ranks) +
                                 " / --pp " + std::to_string(pp) + ")"),
              2);
    return world / v;
  };
  if (!a.has("tp") && !a.has("dp"))
    tp = world, dp = 1;
  else if (!a.has("dp"))
    dp = must_divide("tp", tp);
  else if (!a.has("tp"))
    tp = must_divide("dp", dp);
  else if (tp * dp != world)
    die_all("--tp " + std::to_string(tp) + (pp > 1 ? " x --pp " + std::to_string(pp) : "") +
                " x --dp " + std::to_string(dp) + " = " + std::to_string(tp * pp * dp) +
                " ranks, but the world size is " + std::to_string(all_ranks) +
                " (run under oslo-run --nproc-per-node " + std::to_string(tp * pp * dp) + ")",
            2);
  const int64_t M = int_in("micro-batches", 1, 1 << 20, pp > 1 ? B : 1);
  if (B % M != 0)
    die_all("--micro-batches " + std::to_string(M) + " does not divide --batch-size " +
                std::to_string(B),
            2);

  int64_t zero = 0;
  if (a.has("zero")) {
    zero = to_int(a.get("zero"), "--zero");
    if (zero < 0 || zero > 3) die_all("--zero must be 0, 1, 2 or 3, got " + a.get("zero"), 2);
  }
  const double bucket_mb = real_at_least("bucket-mb", 0, 25.0, true);
  if (bucket_mb > 1 << 20)
    die_all("--bucket-mb must be at most 1048576 (1 TiB), got " + a.get("bucket-mb"), 2);
  const int64_t bucket_bytes = std::llround(bucket_mb * (1 << 20));
  if (bucket_bytes < 4) die_all("--bucket-mb " + a.get("bucket-mb") + " is under 4 bytes", 2);
  const int64_t G = dp * B;  // rows per global micro-batch

  oslo_optimizer_options oo;
  check(oslo_optimizer_options_init(&oo, OSLO_OPTIMIZER_OPTIONS_VERSION), "options");
  const std::string kind = a.get("optimizer", "adamw");
  if (kind == "adamw")
    oo.kind = OSLO_OPTIMIZER_ADAMW;
  else if (kind == "sgd")
    oo.kind = OSLO_OPTIMIZER_SGD;
  else
    die_all("--optimizer must be adamw or sgd, got \"" + kind + "\"", 2);
  if (a.has("momentum") && kind != "sgd") die_all("--momentum is for --optimizer sgd", 2);
  const std::string sched = a.get("schedule", "linear");
  if (sched == "constant")
    oo.schedule = OSLO_LR_CONSTANT;
  else if (sched == "constant_with_warmup")
    oo.schedule = OSLO_LR_CONSTANT_WITH_WARMUP;
  else if (sched == "linear")
    oo.schedule = OSLO_LR_LINEAR;
  else if (sched == "cosine")
    oo.schedule = OSLO_LR_COSINE;
  else
    die_all("--schedule must be constant, constant_with_warmup, linear or cosine, got \"" + sched +
                "\"",
            2);
  oo.lr = real_at_least("lr", 0, 5e-5, true);
  oo.weight_decay = real_at_least("weight-decay", 0, 0.0, false);
  oo.momentum = real_at_least("momentum", 0, 0.0, false);
  oo.max_grad_norm = real_at_least("max-grad-norm", 0, 1.0, false);
  oo.warmup_steps = warmup;
  oo.total_steps = steps;
  oo.grad_accum_steps = K;
  oo.zero_stage = static_cast<int>(zero);
  oo.bucket_bytes = bucket_bytes;
  oo.micro_batches = M;
  if (a.has("pipeline-head-split")) {
    const std::string hs = a.get("pipeline-head-split");
    if (hs == "auto") {
      oo.pipeline_head_split = -1;
    } else {
      oo.pipeline_head_split = to_num(hs, "--pipeline-head-split");
      if (!(oo.pipeline_head_split > 0 && oo.pipeline_head_split <= 1))
        die_all("--pipeline-head-split must be auto or a fraction in (0, 1], got " + hs, 2);
    }
    if (pp < 2) die_all("--pipeline-head-split needs --pp 2 or more", 2);
  }
  const std::string save_dir = a.get("save");
  const std::string log_path = a.has("log")       ? a.get("log")
                               : save_dir.empty() ? ""
                                                  : save_dir + "/train_log.jsonl";

  // The data: the same tokens on every rank. Handles are owned by guards
  // so that an error (a thrown Fail) frees them too.
  auto own = [](auto* p, auto destroy) {
    return std::unique_ptr<std::remove_pointer_t<decltype(p)>, decltype(destroy)>(p, destroy);
  };
  int64_t docs = 0;
  std::vector<int64_t> tokens;
  {
    auto tok = own(load_tokenizer(a, true), oslo_tokenizer_destroy);
    tokens = read_corpus(tok.get(), a.get("data"), &docs);
  }
  const int64_t rows = static_cast<int64_t>(tokens.size()) / S;
  if (rows < G)
    die_all("--data " + a.get("data") +
            ": too little data for one batch: " + std::to_string(tokens.size()) + " tokens (" +
            std::to_string(docs) + " documents) make " + std::to_string(rows) +
            " rows of --seq-len " + std::to_string(S) + ", and --batch-size " + std::to_string(B) +
            (dp > 1 ? " on " + std::to_string(dp) + " data-parallel ranks" : "") + " needs " +
            std::to_string(G) + " rows (" + std::to_string(G * S) + " tokens)");
  // Global micro-batches per epoch (DistributedSampler with drop_last:
  // rows / dp per rank, then whole micro-batches of B of them).
  const int64_t per_epoch = rows / G;

  auto ctx_guard =
      own(context(a, static_cast<int>(tp), static_cast<int>(dp)), oslo_context_destroy);
  oslo_context* ctx = ctx_guard.get();
  auto m_guard = own(load_model(ctx, a), oslo_model_destroy);
  oslo_model* m = m_guard.get();
  oslo_model_info info;
  check(oslo_model_get_info(m, &info, nullptr), "info");
  if (!info.is_causal) die_all("--model " + a.get("model") + " is not a causal language model", 2);
  if (S > info.max_positions)
    die_all("--seq-len " + std::to_string(S) + " exceeds the model's " +
                std::to_string(info.max_positions) + " positions",
            2);
  if (a.has("activation-checkpointing"))
    check(oslo_model_set_activation_checkpointing(m, 1), "activation checkpointing");
  oslo_optimizer* raw_opt = nullptr;
  // Every rank refuses the options alike: each says why (the launcher may
  // stop rank 0 before it prints when another rank exits first).
  if (const oslo_status st = oslo_optimizer_create(m, &oo, &raw_opt); st != OSLO_OK)
    die_all(std::string("optimizer: ") + oslo_status_string(st) + ": " + oslo_last_error());
  auto opt_guard = own(raw_opt, oslo_optimizer_destroy);
  oslo_optimizer* opt = opt_guard.get();

  TrainState state;
  state.seed = static_cast<uint64_t>(seed_arg);
  int data_rank = 0;
  check(oslo_context_rank(ctx, OSLO_GROUP_DATA, &data_rank), "rank");
  const DataShape shape{rows, S, G, K, dp, B};
  int64_t start = 0;  // optimizer steps already taken
  if (a.has("resume")) {
    const std::string dir = a.get("resume");
    // The data must continue where it stopped: the same rows, global
    // micro-batch and accumulation (oslo_train.json); the position is then
    // whole global micro-batches into the epoch at any data-parallel size.
    DataShape saved;
    bool stale = false;
    if (read_data_shape(dir, &saved, &stale)) {
      std::string diff;
      const auto cmp = [&](const char* what, int64_t was, int64_t now) {
        if (was != now)
          diff += std::string(diff.empty() ? "" : "; ") + what + " " + std::to_string(was) +
                  " then, " + std::to_string(now) + " now";
      };
      cmp("rows (--data, --seq-len)", saved.rows, rows);
      cmp("--seq-len", saved.seq_len, S);
      cmp("global batch (dp x --batch-size)", saved.global_batch, G);
      cmp("--grad-accum", saved.grad_accum, K);
      if (!diff.empty())
        die_all("--resume " + dir + ": saved by a run whose data does not continue here: " + diff +
                    ". Resume with the same --data, --seq-len, --grad-accum and global batch (it "
                    "was dp " +
                    std::to_string(saved.dp) + " x --batch-size " +
                    std::to_string(saved.batch_size) + " = " + std::to_string(saved.global_batch) +
                    " rows; any --dp and --batch-size with that product continue it exactly)",
                2);
    } else if (stale && g_rank == 0) {
      std::fprintf(stderr, "oslo: %s/%s belongs to an earlier save: not checked\n", dir.c_str(),
                   kTrainMeta);
    }
    load_checkpoint(opt, dir, &state);
    const int64_t mb = state.data_position / G;
    const int64_t done = state.epoch * per_epoch + mb;
    if (state.epoch < 0 || state.data_position < 0 || state.data_position % G != 0 ||
        mb >= per_epoch || done % K != 0)
      die_all("--resume " + dir + ": its data position (epoch " + std::to_string(state.epoch) +
              ", row " + std::to_string(state.data_position) + ") does not fit this data (" +
              std::to_string(per_epoch) + " global micro-batches of " + std::to_string(G) +
              " rows per epoch, --grad-accum " + std::to_string(K) +
              "): resume with the same --data, --seq-len, --grad-accum and global batch (dp x "
              "--batch-size)");
    if (a.has("seed") && state.seed != static_cast<uint64_t>(seed_arg) && g_rank == 0)
      std::fprintf(stderr, "oslo: --seed %lld ignored: resuming the data order of seed %llu\n",
                   static_cast<long long>(seed_arg), static_cast<unsigned long long>(state.seed));
    start = done / K;
  }
  if (g_rank == 0)
    std::fprintf(
        stderr,
        "oslo: %lld tokens (%lld document%s) in %lld rows of %lld; %lld micro-batches "
        "of %lld rows per epoch; %lld steps of %lld tokens on %d rank%s%s%s\n",
        static_cast<long long>(tokens.size()), static_cast<long long>(docs), docs == 1 ? "" : "s",
        static_cast<long long>(rows), static_cast<long long>(S), static_cast<long long>(per_epoch),
        static_cast<long long>(G), static_cast<long long>(steps), static_cast<long long>(G * S * K),
        all_ranks, all_ranks > 1 ? "s" : "",
        dp > 1 || pp > 1
            ? (" (tp " + std::to_string(tp) + (pp > 1 ? " x pp " + std::to_string(pp) : "") +
               " x dp " + std::to_string(dp) + ", --batch-size " + std::to_string(B) +
               " per data rank" + (pp > 1 ? " in " + std::to_string(M) + " micro-batches" : "") +
               ", ZeRO " + std::to_string(zero) + ")")
                  .c_str()
            : "",
        start ? (" (resuming after step " + std::to_string(start) + ")").c_str() : "");

  std::FILE* log = nullptr;
  if (g_rank == 0 && !log_path.empty()) {
    const size_t slash = log_path.rfind('/');
    if (slash != std::string::npos && slash > 0) make_dirs(log_path.substr(0, slash));
    log = std::fopen(log_path.c_str(), start > 0 ? "a" : "w");
    if (!log) die("--log " + log_path + ": cannot open: " + std::strerror(errno));
  }
  Progress bar;
  bar.on = g_rank == 0;
  bar.tty = isatty(2) != 0;
  bar.total = steps;

  std::vector<int64_t> batch(static_cast<size_t>(B * S));
  // The global micro-batch in order (rank 0's log hashes it: every data
  // rank holds all the tokens, so the hash is that of --dp 1).
  std::vector<int64_t> global(log ? static_cast<size_t>(G * S) : 0);
  std::vector<int64_t> order;
  int64_t order_epoch = -1;
  double first_loss = NAN, last_loss = NAN;
  int64_t trained_tokens = 0;
  const auto t0 = std::chrono::steady_clock::now();
  const auto since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  for (int64_t step = start; step < steps; ++step) {
    const auto ts = std::chrono::steady_clock::now();
    uint64_t hash = 0xcbf29ce484222325ull;
    oslo_train_step_result r{};
    int64_t epoch = 0;
    for (int64_t k = 0; k < K; ++k) {
      const int64_t g = step * K + k;  // micro-batches since the start
      epoch = g / per_epoch;
      const int64_t pos = g % per_epoch;
      if (epoch != order_epoch) {
        order = epoch_order(rows, state.seed, epoch);
        order_epoch = epoch;
      }
      // DistributedSampler: data rank r takes positions r, r + dp, ... of
      // the epoch's order; its micro-batch k the k-th B of them, all inside
      // the global micro-batch k (positions k G .. k G + G - 1).
      const auto row_at = [&](int64_t p) { return order[static_cast<size_t>(pos * G + p)]; };
      for (int64_t b = 0; b < B; ++b) {
        const int64_t row = row_at(data_rank + dp * b);
        std::copy(tokens.begin() + row * S, tokens.begin() + (row + 1) * S, batch.begin() + b * S);
      }
      if (log) {
        for (int64_t p = 0; p < G; ++p) {
          const int64_t row = row_at(p);
          std::copy(tokens.begin() + row * S, tokens.begin() + (row + 1) * S,
                    global.begin() + p * S);
        }
        hash = fnv1a(hash, global);
      }
      check(oslo_model_train_step(m, opt, batch.data(), nullptr, nullptr, B, S, &r),
            "train step " + std::to_string(step + 1));
    }
    if (!r.stepped) die("internal: no optimizer step after --grad-accum micro-batches");
    double bubble = 0;
    if (pp > 1) check(oslo_optimizer_pipeline_stats(opt, nullptr, nullptr, &bubble), "pipeline");
    const double dt = since(ts), elapsed = since(t0);
    trained_tokens += G * S * K;
    if (std::isnan(first_loss)) first_loss = r.mean_loss;
    last_loss = r.mean_loss;
    if (log) {
      nlohmann::json j;
      j["step"] = step + 1;
      j["loss"] = r.mean_loss;
      j["lr"] = r.lr;
      j["grad_norm"] = r.grad_norm;  // NaN (no clipping, no scaling): null
      j["tokens_per_s"] = static_cast<double>(G * S * K) / dt;  // all data ranks
      j["elapsed_s"] = elapsed;
      j["epoch"] = epoch;
      j["tokens"] = (step + 1) * G * S * K;
      j["data_hash"] = [&] {
        char buf[17];
        std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(hash));
        return std::string(buf);
      }();
      if (pp > 1) j["bubble"] = bubble;  // the last micro-batch window's
      if (r.skipped) j["skipped"] = true;
      if (r.loss_scale != 1.0) j["loss_scale"] = r.loss_scale;
      std::fprintf(log, "%s\n", j.dump().c_str());
      std::fflush(log);
    }
    bar.step(step + 1, r.mean_loss, static_cast<double>(trained_tokens) / elapsed, elapsed,
             pp > 1 ? bubble : -1);
    if (r.skipped) bar.say("step " + std::to_string(step + 1) + ": skipped (non-finite gradients)");
    const bool last = step + 1 == steps;
    if (!save_dir.empty() && (last || (save_every > 0 && (step + 1) % save_every == 0))) {
      const int64_t g = (step + 1) * K;
      state.epoch = g / per_epoch;
      state.data_position = g % per_epoch * G;  // rows of all data ranks
      const auto tsave = std::chrono::steady_clock::now();
      save_checkpoint(m, opt, save_dir, state);
      write_data_shape(save_dir, shape);
      bar.say("step " + std::to_string(step + 1) + ": saved " + save_dir + " (" +
              std::to_string(since(tsave)).substr(0, 4) + " s)");
    }
  }
  bar.end();
  const double total_s = since(t0);
  if (g_rank == 0) {
    if (start >= steps)
      std::fprintf(stderr, "oslo: nothing to do: the checkpoint is at step %lld of --steps %lld\n",
                   static_cast<long long>(start), static_cast<long long>(steps));
    else
      std::fprintf(stderr,
                   "oslo: trained %lld steps in %.2f s (%.0f tokens/s): loss %.4f -> %.4f\n",
                   static_cast<long long>(steps - start), total_s,
                   static_cast<double>(trained_tokens) / total_s, first_loss, last_loss);
  }
  if (log) std::fclose(log);
  return 0;  // the guards destroy optimizer, model and context in that order
}

const char* kHelp =
    "usage: oslo COMMAND [ARGS]   (oslo COMMAND --help for each)\n"
    "  generate  generate text with a causal model (docs/MODELS.md lists them)\n"
    "  embed     sentence embeddings and their similarity table (encoders, e.g. MiniLM)\n"
    "  merge     parallel checkpoint -> one ordinary Hugging Face folder\n"
    "  reshard   parallel checkpoint or HF folder -> parallel checkpoint at another TP\n"
    "  inspect   tensors, dtypes, shapes and layout of any checkpoint or HF folder\n"
    "  train     fine-tune a causal model on a .txt or .jsonl corpus; checkpoints\n"
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
    if (cmd == "train") return cmd_train(argc, argv);
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
