// The `oslo` command's shared parts (cli.hpp): errors, option parsing,
// numbers, the context, model and tokenizer.
#include "tools/oslo/cli.hpp"

#include "core/common/dtype.hpp"

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "core/context/config.hpp"

namespace oslo_cli {

int g_rank = 0;

void die(const std::string& msg, int code) {
  if (g_rank == 0) std::fprintf(stderr, "oslo: %s\n", msg.c_str());
  throw Fail{code};
}

void die_all(const std::string& msg, int code) {
  const char* w = std::getenv("WORLD_SIZE");
  const char* r = std::getenv("RANK");
  std::string who;
  if (w && std::atoi(w) > 1) who = std::string("[rank ") + (r ? r : "?") + "] ";
  std::fprintf(stderr, "oslo: %s%s\n", who.c_str(), msg.c_str());
  throw Fail{code};
}

void check(oslo_status st, const std::string& what) {
  if (st == OSLO_OK) return;
  const std::string msg = what + ": " + oslo_status_string(st) + ": " + oslo_last_error();
  // A peer that stopped or died: the ranks left say so (rank 0 may be the
  // one that is gone).
  if (st == OSLO_ERR_TIMEOUT || st == OSLO_ERR_COMM) die_all(msg);
  die(msg);
}

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
  oslo_dtype q;
  if (oslo::dtype_parse(s.c_str(), &q) && oslo::dtype_is_block(q)) return q;
  die("--dtype must be f32, bf16, f16 or a quantized format (q8_0, q4_0, q4_k, q6_k), got \"" + s +
          "\"",
      2);
}

oslo_dtype kv_dtype_of(const std::string& s) {
  if (s.empty() || s == "f32" || s == "float32") return OSLO_DTYPE_F32;
  if (s == "int8" || s == "i8") return OSLO_DTYPE_I8;
  die("--kv-dtype must be f32 or int8, got \"" + s + "\"", 2);
}

std::vector<std::string> model_options(std::vector<std::string> own) {
  for (const char* k :
       {"model", "tokenizer", "dtype", "tp", "pp", "pp-layers", "virtual-stages", "threads",
        "backend", "device", "backend-options", "communicator", "timeout"})
    own.push_back(k);
  return own;
}

namespace {

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

}  // namespace

int launcher_world() {
  const char* ws = std::getenv("WORLD_SIZE");
  const char* ompi = std::getenv("OMPI_COMM_WORLD_SIZE");
  const char* slurm = std::getenv("SLURM_NTASKS");
  return ws ? std::atoi(ws) : ompi ? std::atoi(ompi) : slurm ? std::atoi(slurm) : 1;
}

double timeout_seconds(const Args& a) {
  std::string text, what;
  if (a.has("timeout")) {
    text = a.get("timeout");
    what = "--timeout";
  } else if (const char* env = std::getenv("OSLO_TIMEOUT"); env && *env) {
    text = env;
    what = "OSLO_TIMEOUT";
  } else {
    return -1;
  }
  const double t = to_num(text, what);
  if (!(t > 0) || t > oslo::kMaxTimeoutSeconds)
    die_all(what + " must be a number of seconds in (0, 1e7], got \"" + text + "\"", 2);
  return t;
}

oslo_context* context(const Args& a, int tp, int dp) {
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
  if (const double t = timeout_seconds(a); t > 0) cfg["timeout_seconds"] = t;
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

}  // namespace oslo_cli
