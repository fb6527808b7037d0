// oslo serve: an OpenAI-compatible HTTP server over the serving engine.
// World rank 0 serves HTTP (serve_http.cpp) and decides every engine step;
// the other ranks of oslo-run compute their share and follow.
#include <signal.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "tools/oslo/cli.hpp"
#include "tools/oslo/serve_http.hpp"

namespace oslo_cli {

namespace {

const char* kServeHelp =
    "usage: oslo serve --model DIR [--host ADDR] [--port N] [--served-model-name NAME]\n"
    "                  [--chat-template FILE] [--api-key KEY] [--kv-memory MIB | --kv-blocks N]\n"
    "                  [--block-size N] [--kv-dtype f32|int8] [--max-seqs N] [--max-step-tokens N]\n"
    "                  [--no-prefix-caching] [--http-threads N] [--max-body MIB]\n"
    "                  [--http-timeout SECONDS] [--quiet]\n"
    "                  [--dtype f32|bf16|f16] [--tokenizer DIR] [--tp N] [--pp N]\n"
    "                  [--threads N] [--device cpu|cuda[:N]] [--backend NAME]\n"
    "                  [--backend-options JSON] [--communicator auto|backend|host]\n"
    "                  [--timeout SECONDS]\n"
    "Serves a causal model over HTTP with OpenAI's API: POST /v1/completions and\n"
    "/v1/chat/completions (the tokenizer's chat template, or --chat-template FILE;\n"
    "\"stream\": true for server-sent events), GET /v1/models, /health and /metrics\n"
    "(Prometheus). Requests run together in the serving engine: continuous\n"
    "batching over a paged KV cache (--kv-memory MiB per rank, default 1024, or\n"
    "--kv-blocks N of --block-size tokens; --kv-dtype int8 stores it as int8 with a\n"
    "scale per token and head, 3-4x the tokens in the same memory), shared prompt prefixes\n"
    "(--no-prefix-caching turns that off). --port 0 picks a free port; the\n"
    "address is printed on stdout (\"oslo serve: listening on http://...\").\n"
    "--api-key KEY (or $OSLO_API_KEY) requires \"Authorization: Bearer KEY\" on\n"
    "/v1/. Under oslo-run every rank computes its share; rank 0 serves. SIGINT\n"
    "or SIGTERM (to rank 0, or to oslo-run) ends it: requests in flight end with\n"
    "finish_reason \"abort\". A failing rank fails the requests in flight and\n"
    "stops the server (exit status 1). docs/SERVING.md has the details.\n"
    "  example: oslo-run --nproc-per-node 2 oslo serve --model M --port 8000\n";

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) die("--chat-template: cannot read " + path, 2);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// The last folder name of `path` (trailing slashes ignored).
std::string base_name(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

int cmd_serve(int argc, char** argv) {
  Args a = parse(argc, argv, 2, {"no-prefix-caching", "quiet", "help"},
                 model_options({"host", "port", "served-model-name", "chat-template", "api-key",
                                "kv-memory", "kv-blocks", "block-size", "kv-dtype", "max-seqs",
                                "max-step-tokens", "http-threads", "max-body", "http-timeout"}));
  if (a.has("help")) return std::printf("%s", kServeHelp), 0;
  if (!a.pos.empty()) die("unexpected argument \"" + a.pos[0] + "\" (see --help)", 2);
  // Signals: SIGPIPE never kills (a client gone mid-write is an error on
  // that write); SIGINT and SIGTERM are blocked in every thread (rank 0's
  // server waits for them itself); the other ranks keep them blocked too:
  // they end when rank 0 shuts the engine down, or fail when it dies.
  signal(SIGPIPE, SIG_IGN);
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  serve::HttpConfig http;
  http.host = a.get("host", "127.0.0.1");
  const int64_t port = a.has("port") ? to_int(a.get("port"), "--port") : 8000;
  if (port < 0 || port > 65535) die_all("--port must be in [0, 65535]", 2);
  http.port = static_cast<int>(port);
  if (a.has("http-threads")) {
    const int64_t t = to_int(a.get("http-threads"), "--http-threads");
    if (t < 1 || t > 4096) die_all("--http-threads must be in [1, 4096]", 2);
    http.threads = static_cast<int>(t);
  }
  if (a.has("max-body")) {
    const int64_t m = to_int(a.get("max-body"), "--max-body");
    if (m < 1 || m > 4096) die_all("--max-body must be in [1, 4096] MiB", 2);
    http.max_body = static_cast<size_t>(m) << 20;
  }
  if (a.has("http-timeout")) {
    const int64_t t = to_int(a.get("http-timeout"), "--http-timeout");
    if (t < 1 || t > 86400) die_all("--http-timeout must be in [1, 86400] seconds", 2);
    http.timeout_s = static_cast<int>(t);
  }
  const char* env_key = std::getenv("OSLO_API_KEY");
  http.api_key = a.get("api-key", env_key ? env_key : "");
  http.log_requests = !a.has("quiet");

  oslo_engine_options eo;
  check(oslo_engine_options_init(&eo, OSLO_ENGINE_OPTIONS_VERSION), "options");
  if (a.has("kv-memory") && a.has("kv-blocks")) die_all("give --kv-memory or --kv-blocks", 2);
  if (a.has("kv-memory")) {
    const int64_t m = to_int(a.get("kv-memory"), "--kv-memory");
    if (m < 1 || m > (int64_t(1) << 24)) die_all("--kv-memory must be in [1, 2^24] MiB", 2);
    eo.kv_memory_bytes = m << 20;
  }
  if (a.has("kv-blocks")) eo.num_blocks = to_int(a.get("kv-blocks"), "--kv-blocks");
  if (a.has("block-size")) eo.block_size = to_int(a.get("block-size"), "--block-size");
  eo.kv_dtype = kv_dtype_of(a.get("kv-dtype", ""));
  if (a.has("max-seqs")) eo.max_seqs = to_int(a.get("max-seqs"), "--max-seqs");
  if (a.has("max-step-tokens"))
    eo.max_step_tokens = to_int(a.get("max-step-tokens"), "--max-step-tokens");
  eo.prefix_caching = a.has("no-prefix-caching") ? 0 : 1;
  std::string chat_template;
  if (a.has("chat-template")) chat_template = read_file(a.get("chat-template"));

  oslo_context* ctx = context(a);
  oslo_model* m = load_model(ctx, a);
  oslo_tokenizer* tok = load_tokenizer(a, true);
  eo.tokenizer = tok;
  oslo_model_info info{};
  check(oslo_model_get_info(m, &info, nullptr), "model info");
  if (!info.is_causal) die_all("--model: an encoder model cannot generate (serve a causal one)", 2);
  oslo_engine* engine = nullptr;
  check(oslo_engine_create(m, &eo, &engine), "engine");

  int rc = 0;
  if (g_rank == 0) {
    serve::Served s;
    s.model_name = a.get("served-model-name", base_name(a.get("model")));
    if (s.model_name.empty()) die("--served-model-name must not be empty", 2);
    s.tokenizer = tok;
    s.chat_template = chat_template;
    int has = 0;
    check(oslo_tokenizer_has_chat_template(tok, &has), "tokenizer");
    s.has_chat_template = has || !chat_template.empty();
    s.max_positions = info.max_positions;
    s.vocab_size = info.vocab_size;
    rc = serve::run_http(engine, s, http);
  } else {
    const oslo_status st = oslo_engine_run(engine);
    if (st != OSLO_OK) {
      std::fprintf(stderr, "[rank %d] oslo serve: the engine failed: %s: %s\n", g_rank,
                   oslo_status_string(st), oslo_last_error());
      rc = 1;
    }
  }
  oslo_engine_destroy(engine);
  oslo_tokenizer_destroy(tok);
  oslo_model_destroy(m);
  oslo_context_destroy(ctx);
  return rc;
}

}  // namespace oslo_cli
