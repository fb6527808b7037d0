// Benchmark 7 (issue 7): a GPT-2-small-shaped model (124M parameters),
// batch 1, through the public C API (include/oslo.h):
//   - prefill tokens/s (one forward of a 512-token prompt, the first token out),
//   - decode tokens/s (128 new tokens after a 32-token prompt, greedy, no EOS),
//   - the streaming read bandwidth of this process's threads, measured in the
//     same run, and from it the memory-bandwidth bound of one decode step
//     (weight bytes read per token / bandwidth),
//   - peak resident memory of this rank against its weights + KV cache +
//     activations.
// Runs at any TP under oslo-run (the tensor-parallel size is the world
// size); rank 0 prints one JSON line. bench/model/run.sh runs it with
// Hugging Face transformers as the reference in the same run.
//
//   bench_model MODEL [--threads N] [--dtype f32|bf16] [--reps R] [--backend NAME]
//               [--prefill-only | --decode-only] [--pp P] [--prefill-rows B]
//               [--weight-bytes BYTES]
//
// MODEL: a model folder or a llama.cpp .gguf file (oslo_model_load; a GGUF
// file's block-quantized weights stay so, as without --dtype for any
// source). The JSON line names the weight dtype (f32, bf16, q8_0, q4_0,
// q4_k, q6_k, ...) and holds the first 8 tokens of the measured 128-token
// decode ("first_tokens"), so runs of other engines on the same file and
// prompt can be compared token for token.
//
// --weight-bytes BYTES: the bytes of weights one decode step reads in the
// whole model (before the tensor-parallel split), for the bandwidth bound;
// without it they are estimated for a GPT-2-shaped model in f32 or bf16
// (12 H^2 per block plus the tied head). bench/model/run_quant.sh passes the
// bytes of a quantized GGUF file's matrices (bench/model/gguf_quant.py).
// The expected-memory figures (expected_mib, peak_over_expected) stay the
// GPT-2 f32/bf16 estimate: for other shapes or block dtypes read only the
// measured rss_* fields.
//
// --pp P: P pipeline stages (the world size divided by P is the tensor-
// parallel size); --prefill-rows B: the prefill is B prompts of 512 / B
// tokens (one generate call, batch B), which pipeline stages run in
// micro-batches (Model::set_pipeline_micro_tokens).
//
// With --backend other than cpu (e.g. cuda), or with --prefill-only, the
// host bandwidth probe and the bound derived from it are left out
// (bound_ms 0): the GPU's bound comes from bench/cuda/hf_cuda.py.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "oslo.h"

namespace {

int g_rank = 0;

void check(oslo_status st, const char* what) {
  if (st != OSLO_OK) {
    std::fprintf(stderr, "[rank %d] %s: %s: %s\n", g_rank, what, oslo_status_string(st),
                 oslo_last_error());
    std::exit(1);
  }
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Seconds of one generate call: `rows` prompts of `prompt` ids each, `n`
// new tokens per row (greedy, no EOS). The prompt ids are
// (i * 7919 + 13 + r * 131) % vocab (row r), as llama_cpp_reference.py's.
// The KV cache's storage (--kv-dtype int8: OSLO_DTYPE_I8).
oslo_dtype g_kv_dtype = OSLO_DTYPE_F32;

// `tokens`, when given, receives the generated ids.
double generate(oslo_model* m, int64_t prompt, int64_t n, int64_t vocab, int64_t rows = 1,
                std::vector<int64_t>* tokens = nullptr) {
  std::vector<int64_t> ids(static_cast<size_t>(prompt * rows)), lens(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    lens[static_cast<size_t>(r)] = prompt;
    for (int64_t i = 0; i < prompt; ++i)
      ids[static_cast<size_t>(r * prompt + i)] = (i * 7919 + 13 + r * 131) % vocab;
  }
  oslo_generate_options o;
  check(oslo_generate_options_init(&o, OSLO_GENERATE_OPTIONS_VERSION), "options");
  o.max_new_tokens = n;
  o.kv_cache_dtype = g_kv_dtype;
  const int64_t none = 0;
  o.eos_token_ids = &none;  // no EOS: always n tokens
  o.num_eos_token_ids = 0;
  std::vector<int64_t> out(static_cast<size_t>(n * rows)), len(static_cast<size_t>(rows));
  const double t0 = now();
  check(oslo_model_generate(m, ids.data(), lens.data(), rows, &o, out.data(), len.data(), nullptr),
        "generate");
  const double t = now() - t0;
  if (tokens) *tokens = out;
  for (int64_t l : len)
    if (l != n) {
      std::fprintf(stderr, "generated %lld tokens, expected %lld\n", static_cast<long long>(l),
                   static_cast<long long>(n));
      std::exit(1);
    }
  return t;
}

// GB/s of reading a 1 GiB buffer with `threads` threads (OpenMP-free: plain
// threads via the context would be more code; the loop is split by hand).
double stream_bandwidth(int threads) {
  const size_t n = (size_t{1} << 30) / sizeof(uint64_t);
  std::vector<uint64_t> buf(n, 1);
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<uint64_t> sums(static_cast<size_t>(threads));
    const double t0 = now();
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int t = 0; t < threads; ++t) {
      const size_t b = n / threads * t, e = t + 1 == threads ? n : n / threads * (t + 1);
      uint64_t s = 0;
      for (size_t i = b; i < e; ++i) s += buf[i];  // vectorised integer reduction
      sums[static_cast<size_t>(t)] = s;
    }
    const double dt = now() - t0;
    uint64_t s = 0;
    for (uint64_t v : sums) s += v;
    if (s != n) std::fprintf(stderr, "bandwidth: bad sum\n");
    best = std::max(best, static_cast<double>(n * sizeof(uint64_t)) / dt / 1e9);
  }
  return best;
}

long peak_rss_kib() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

long current_rss_kib() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  long pages = 0, rss = 0;
  if (f) {
    if (std::fscanf(f, "%ld %ld", &pages, &rss) != 2) rss = 0;
    std::fclose(f);
  }
  return rss * (sysconf(_SC_PAGESIZE) / 1024);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s MODEL [--threads N] [--dtype f32|bf16] [--reps R] [--backend NAME] "
                 "[--prefill-only | --decode-only] [--pp P] [--prefill-rows B] "
                 "[--weight-bytes BYTES] [--kv-dtype f32|int8]\n",
                 argv[0]);
    return 2;
  }
  int threads = 1, reps = 3, dtype = -1, pp = 1, prefill_rows = 1;
  double weight_bytes = 0;  // --weight-bytes: 0 = the GPT-2 f32/bf16 estimate
  std::string backend = "cpu";
  bool prefill_only = false, decode_only = false;
  for (int i = 2; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--prefill-only") || !std::strcmp(argv[i], "--decode-only")) {
      (argv[i][2] == 'p' ? prefill_only : decode_only) = true;
      continue;
    }
    if (i + 1 >= argc) break;
    const char* v = argv[++i];  // every other option takes a value
    if (!std::strcmp(argv[i - 1], "--threads")) threads = std::atoi(v);
    if (!std::strcmp(argv[i - 1], "--pp")) pp = std::atoi(v);
    if (!std::strcmp(argv[i - 1], "--prefill-rows")) prefill_rows = std::atoi(v);
    if (!std::strcmp(argv[i - 1], "--reps")) reps = std::atoi(v);
    if (!std::strcmp(argv[i - 1], "--backend")) backend = v;
    if (!std::strcmp(argv[i - 1], "--weight-bytes")) weight_bytes = std::atof(v);
    if (!std::strcmp(argv[i - 1], "--kv-dtype")) {
      if (std::strcmp(v, "f32") && std::strcmp(v, "int8")) {
        std::fprintf(stderr, "--kv-dtype: f32 or int8, not %s\n", v);
        return 2;
      }
      g_kv_dtype = !std::strcmp(v, "int8") ? OSLO_DTYPE_I8 : OSLO_DTYPE_F32;
    }
    if (!std::strcmp(argv[i - 1], "--dtype"))
      dtype = !std::strcmp(v, "bf16") ? OSLO_DTYPE_BF16 : OSLO_DTYPE_F32;
  }
  const char* ws = std::getenv("WORLD_SIZE");
  const int world = ws ? std::atoi(ws) : 1;
  if (backend.size() > 32 || backend.find('"') != std::string::npos) {
    std::fprintf(stderr, "bad backend name\n");
    return 2;
  }
  char cfg[320];
  std::snprintf(
      cfg, sizeof cfg,
      "{\"tensor_parallel_size\": %d, \"pipeline_parallel_size\": %d, \"num_threads\": %d, "
      "\"timeout_seconds\": 600, \"backend\": \"%s\"%s}",
      world / std::max(1, pp), pp, threads, backend.c_str(),
      ws ? ""
         : ", \"rank\": 0, \"world_size\": 1, \"init_method\": \"file:///tmp/oslo-bench-model\"");
  const long rss0 = current_rss_kib();
  oslo_context* ctx = nullptr;
  check(oslo_context_create(cfg, &ctx), "context");
  check(oslo_context_rank(ctx, OSLO_GROUP_WORLD, &g_rank), "rank");
  if (!ws) std::remove("/tmp/oslo-bench-model");
  const long rss_ctx = current_rss_kib();
  oslo_model_options mo;
  check(oslo_model_options_init(&mo, OSLO_MODEL_OPTIONS_VERSION), "options");
  mo.dtype = dtype;
  oslo_model* m = nullptr;
  double t0 = now();
  check(oslo_model_load(ctx, argv[1], &mo, &m), "load");
  const double load_s = now() - t0;
  const long rss_loaded = current_rss_kib();
  oslo_model_info info;
  check(oslo_model_get_info(m, &info, nullptr), "info");

  double prefill = 1e30, decode = 1e30;
  std::vector<int64_t> tokens;
  // Warm-up: one call of each measured kind (as the reference scripts do),
  // so one-time work (oneDNN kernels made for a new shape) is not timed.
  if (!decode_only) generate(m, 512 / prefill_rows, 1, info.vocab_size, prefill_rows);
  if (!prefill_only) generate(m, 32, 2, info.vocab_size);
  for (int r = 0; r < reps; ++r) {
    // --prefill-only / --decode-only: a profile of one of the two alone.
    if (!decode_only)
      prefill =
          std::min(prefill, generate(m, 512 / prefill_rows, 1, info.vocab_size, prefill_rows));
    if (prefill_only) continue;
    const double a = generate(m, 32, 1, info.vocab_size);
    const double b = generate(m, 32, 129, info.vocab_size, 1, &tokens);
    decode = std::min(decode, (b - a) / 128.0);
  }
  // Bytes of weights read per decode step by this rank: every matrix once
  // (the tied head reads the embedding table), in the weight dtype.
  const long peak = peak_rss_kib();  // before the bandwidth probe's 1 GiB
  const double bw = backend == "cpu" && !prefill_only ? stream_bandwidth(threads) : 0.0;
  const double wbytes = static_cast<double>(info.dtype == OSLO_DTYPE_F32 ? 4 : 2);
  const double H = static_cast<double>(info.hidden_size), L = static_cast<double>(info.num_layers);
  const double V = static_cast<double>(info.vocab_size);
  const double per_layer = 12.0 * H * H;  // qkv 3H^2, out H^2, MLP 8H^2 (GPT-2: intermediate 4H)
  const double weights_read =
      (weight_bytes > 0 ? weight_bytes : (L * per_layer + V * H) * wbytes) / world;
  const double bound = bw > 0 ? weights_read / (bw * 1e9) : 0.0;
  // The KV cache a timed decode step reads besides the weights: every
  // layer's keys and values of its kv heads at the step's length, averaged
  // over the 128 timed steps (lengths 34 .. 161), f32 or int8 + an f32
  // scale per row of head_dim.
  const double hd = H / static_cast<double>(info.num_heads);
  const double row_bytes = g_kv_dtype == OSLO_DTYPE_I8 ? hd + 4 : 4 * hd;
  const double kv_read =
      L * 2 * static_cast<double>(info.num_kv_heads) * row_bytes * (34.0 + 161.0) / 2.0 / world;
  const double bound_kv = bw > 0 ? (weights_read + kv_read) / (bw * 1e9) : 0.0;
  // Expected resident bytes: this rank's weights (all tensors), the KV cache
  // of the longest run (prompt 512 + 1 token, f32) and activations.
  const double all_weights = (L * per_layer + V * H) * wbytes / world +
                             1024.0 * H * 4 /*wpe, f32*/ + L * 13 * H * 4 /*norms, biases*/;
  const double kv = L * 2 * 513 * H / world * 4;
  // Prefill activations: ~17 [S, H]-sized f32 buffers (residual, norms, q/k/v,
  // attention out, MLP 4H twice) and the attention scores twice
  // [heads, S, S]; logits only for the last row.
  const double heads = static_cast<double>(info.num_heads) / world;
  const double act = 513 * 17 * H / world * 4 + 2 * heads * 513 * 513 * 4 + V * 4 * 2;
  const char* dtype_name = "f32";
  switch (info.dtype) {
    case OSLO_DTYPE_BF16: dtype_name = "bf16"; break;
    case OSLO_DTYPE_F16: dtype_name = "f16"; break;
    case OSLO_DTYPE_Q8_0: dtype_name = "q8_0"; break;
    case OSLO_DTYPE_Q4_0: dtype_name = "q4_0"; break;
    case OSLO_DTYPE_Q4_K: dtype_name = "q4_k"; break;
    case OSLO_DTYPE_Q6_K: dtype_name = "q6_k"; break;
    case OSLO_DTYPE_Q4_G128: dtype_name = "q4_g128"; break;
    default: break;
  }
  std::string first = "[";
  for (size_t i = 0; i < tokens.size() && i < 8; ++i)
    first += (i ? ", " : "") + std::to_string(tokens[i]);
  first += "]";
  if (g_rank == 0)
    std::printf(
        "{\"backend\": \"%s\", \"tp\": %d, \"pp\": %d, \"threads\": %d, \"dtype\": \"%s\", "
        "\"load_s\": %.3f, \"prefill_rows\": %d, \"prefill_tok_s\": %.1f, "
        "\"decode_tok_s\": %.2f, \"decode_ms\": %.3f, \"stream_gb_s\": %.2f, "
        "\"bound_ms\": %.3f, \"decode_over_bound\": %.3f, \"kv_dtype\": \"%s\", "
        "\"kv_bytes_step\": %.0f, \"decode_over_bound_with_kv\": %.3f, \"rss_baseline_mib\": %.1f, "
        "\"rss_context_mib\": %.1f, \"rss_loaded_mib\": %.1f, \"peak_rss_mib\": %.1f, "
        "\"expected_mib\": %.1f, \"peak_over_expected\": %.3f, \"weight_bytes\": %.0f, "
        "\"first_tokens\": %s}\n",
        backend.c_str(), world / std::max(1, pp), pp, threads, dtype_name, load_s, prefill_rows,
        static_cast<double>(512 / prefill_rows * prefill_rows) / prefill, 1.0 / decode,
        decode * 1e3, bw, bound * 1e3, bound > 0 ? decode / bound : 0.0,
        g_kv_dtype == OSLO_DTYPE_I8 ? "int8" : "f32", kv_read * world,
        bound_kv > 0 ? decode / bound_kv : 0.0, rss0 / 1024.0, rss_ctx / 1024.0,
        rss_loaded / 1024.0, peak / 1024.0, (all_weights + kv + act) / 1048576.0 + rss_ctx / 1024.0,
        peak / 1024.0 / ((all_weights + kv + act) / 1048576.0 + rss_ctx / 1024.0),
        weights_read * world, first.c_str());
  oslo_model_destroy(m);
  oslo_context_destroy(ctx);
  return 0;
}
