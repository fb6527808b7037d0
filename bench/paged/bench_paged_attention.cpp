// bench_paged_attention: one serving step's attention over a paged KV cache,
// the backend's paged_attention entry against its composition (the blocks
// gathered per chunk, then attention(): what core/serve did before the
// entry), on the CPU backend, f32. Interleaved rounds; per scenario and
// path the best and median time of a call; the two outputs are compared
// (a fast wrong answer fails the run).
//
//   bench_paged_attention [--threads 1,2] [--rounds 7] [--min-seconds 0.2] [--kv f32|int8]
//
// --kv int8: the pools hold int8 codes with a scale per row, and the two
// paths are paged_attention_kv8's entry (the blocks read as stored) and its
// composition (the blocks the chunks read copied and dequantized into f32,
// then paged_attention's entry: what core/serve did before the entry).
//
// Scenarios (block size 16, block ids shuffled over a pool with room to
// spare, contexts drawn once with a fixed seed):
//   decode-gpt2   32 sequences decoding (n = 1) at contexts 128..1024,
//                 12 heads x 64 (GPT-2 small, one layer)
//   decode-gqa    32 sequences decoding, 32 query / 4 kv heads x 64
//                 (a LLaMA-shaped model with GQA 8)
//   mixed-gpt2    a 256-token prompt chunk from position 0 beside 31 decodes
//   prefill-gpt2  one 512-token prompt from position 0
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/backend/backend.hpp"

using namespace oslo;

namespace {

struct Scenario {
  const char* name;
  int64_t Hq, Hkv, D;
  std::vector<std::pair<int64_t, int64_t>> chunks;  // (start, n)
};

struct Buf {
  std::shared_ptr<Backend> be;
  void* p;
  size_t bytes;
  Buf(std::shared_ptr<Backend> b, size_t n) : be(std::move(b)), bytes(n) { p = be->allocate(n); }
  ~Buf() { be->deallocate(p, bytes); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
};

View view_of(void* p, oslo_dtype dt, std::vector<int64_t> shape) {
  return make_view(p, dt, shape);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::vector<int> parse_list(const char* s) {
  std::vector<int> r;
  for (const char* p = s; *p;) {
    r.push_back(std::atoi(p));
    while (*p && *p != ',') ++p;
    if (*p == ',') ++p;
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> threads = {1, 2};
  int rounds = 7;
  double min_seconds = 0.2;
  bool int8 = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc)
      threads = parse_list(argv[++i]);
    else if (a == "--rounds" && i + 1 < argc)
      rounds = std::max(1, std::atoi(argv[++i]));
    else if (a == "--min-seconds" && i + 1 < argc)
      min_seconds = std::atof(argv[++i]);
    else if (a == "--kv" && i + 1 < argc &&
             (std::string(argv[i + 1]) == "int8" || std::string(argv[i + 1]) == "f32"))
      int8 = std::string(argv[++i]) == "int8";
    else {
      std::fprintf(stderr,
                   "usage: %s [--threads 1,2] [--rounds 7] [--min-seconds 0.2] [--kv f32|int8]\n",
                   argv[0]);
      return 2;
    }
  }
  std::mt19937_64 rng(33);
  auto decodes = [&](int count) {
    std::vector<std::pair<int64_t, int64_t>> c;
    for (int i = 0; i < count; ++i) c.push_back({128 + static_cast<int64_t>(rng() % 897), 1});
    return c;
  };
  std::vector<Scenario> scenarios = {
      {"decode-gpt2", 12, 12, 64, decodes(32)},
      {"decode-gqa", 32, 4, 64, decodes(32)},
      {"mixed-gpt2", 12, 12, 64, {}},
      {"prefill-gpt2", 12, 12, 64, {{0, 512}}},
  };
  scenarios[2].chunks = decodes(31);
  scenarios[2].chunks.insert(scenarios[2].chunks.begin(), {0, 256});
  const int64_t bs = 16;
  int status = 0;
  std::printf("kv %s\n", int8 ? "int8" : "f32");
  std::printf("%-13s %7s %5s %12s %12s %12s %12s %8s %8s\n", "scenario", "threads", "calls",
              "entry best", "entry med", "compose best", "compose med", "best x", "median x");
  for (int nt : threads) {
    BackendOptions o;
    o.num_threads = nt;
    std::shared_ptr<Backend> be = create_backend("cpu", o);
    for (const Scenario& sc : scenarios) {
      const int64_t C = static_cast<int64_t>(sc.chunks.size());
      int64_t T = 0, need = 0, M = 1;
      std::vector<int64_t> triples;
      for (const auto& ch : sc.chunks) {
        triples.insert(triples.end(), {T, ch.first, ch.second});
        T += ch.second;
        const int64_t nb = (ch.first + ch.second + bs - 1) / bs;
        need += nb;
        M = std::max(M, nb);
      }
      const int64_t NB = need + need / 4 + 1, per = sc.Hkv * bs * sc.D;
      std::vector<int64_t> perm(static_cast<size_t>(NB));
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      std::vector<int64_t> table(static_cast<size_t>(C * M), 0);
      int64_t next = 0;
      for (int64_t c = 0; c < C; ++c) {
        const int64_t nb = (triples[3 * c + 1] + triples[3 * c + 2] + bs - 1) / bs;
        for (int64_t j = 0; j < nb; ++j) table[c * M + j] = perm[next++];
      }
      std::uniform_real_distribution<float> u(-1.f, 1.f);
      auto fill = [&](Buf& b, size_t n) {
        std::vector<float> h(n);
        for (auto& x : h) x = u(rng);
        be->copy(b.p, h.data(), n * 4, CopyKind::HostToDevice);
      };
      const size_t qn = static_cast<size_t>(T * sc.Hq * sc.D), pn = static_cast<size_t>(NB * per);
      const size_t esz = int8 ? 1 : 4, sn = static_cast<size_t>(NB * sc.Hkv * bs);
      Buf q(be, qn * 4), kp(be, pn * esz), vp(be, pn * esz), tb(be, table.size() * 8);
      Buf ks(be, sn * 4), vs(be, sn * 4);
      Buf out[2] = {Buf(be, qn * 4), Buf(be, qn * 4)};
      fill(q, qn);
      if (int8) {
        std::vector<int8_t> codes(pn);
        for (Buf* b : {&kp, &vp}) {
          for (auto& x : codes) x = static_cast<int8_t>(std::lround(127.f * u(rng)));
          be->copy(b->p, codes.data(), pn, CopyKind::HostToDevice);
        }
        std::vector<float> sh(sn);
        for (Buf* b : {&ks, &vs}) {
          for (auto& x : sh) x = (1.5f + u(rng)) / 127.f;
          be->copy(b->p, sh.data(), sn * 4, CopyKind::HostToDevice);
        }
      } else {
        fill(kp, pn);
        fill(vp, pn);
      }
      be->copy(tb.p, table.data(), table.size() * 8, CopyKind::HostToDevice);
      const View qv = view_of(q.p, OSLO_DTYPE_F32, {T, sc.Hq, sc.D});
      const oslo_dtype pdt = int8 ? OSLO_DTYPE_I8 : OSLO_DTYPE_F32;
      const View kv = view_of(kp.p, pdt, {NB, sc.Hkv, bs, sc.D});
      const View vv = view_of(vp.p, pdt, {NB, sc.Hkv, bs, sc.D});
      const View ksv = view_of(ks.p, OSLO_DTYPE_F32, {NB, sc.Hkv, bs});
      const View vsv = view_of(vs.p, OSLO_DTYPE_F32, {NB, sc.Hkv, bs});
      const View tv = view_of(tb.p, OSLO_DTYPE_I64, {C, M});
      const float scale = 1.0f / std::sqrt(static_cast<float>(sc.D));
      auto call = [&](int path) {
        be->set_fused_enabled(path == 0);
        const View ov = view_of(out[path].p, OSLO_DTYPE_F32, {T, sc.Hq, sc.D});
        if (int8 && path == 1) {  // the staging, then paged_attention's own entry
          be->set_fused_enabled(true);
          be->compose_paged_attention_kv8(ov, qv, kv, ksv, vv, vsv, tv, triples.data(), C, scale);
        } else if (int8) {
          be->paged_attention_kv8(ov, qv, kv, ksv, vv, vsv, tv, triples.data(), C, scale);
        } else
          be->paged_attention(ov, qv, kv, vv, tv, triples.data(), C, scale);
        be->synchronize();
      };
      // Calls per sample: enough for min_seconds on the slower path.
      int calls = 1;
      for (int path = 0; path < 2; ++path) {
        call(path);  // warm-up
        const auto t0 = std::chrono::steady_clock::now();
        call(path);
        const double s = std::max(seconds_since(t0), 1e-6);
        calls = std::max(calls, static_cast<int>(std::ceil(min_seconds / s)));
      }
      std::vector<double> t[2];
      for (int r = 0; r < rounds; ++r)
        for (int k = 0; k < 2; ++k) {
          const int path = (r + k) % 2;  // alternate which path goes first
          const auto t0 = std::chrono::steady_clock::now();
          for (int i = 0; i < calls; ++i) call(path);
          t[path].push_back(seconds_since(t0) / calls);
        }
      be->set_fused_enabled(true);
      // The two outputs must agree.
      std::vector<float> h[2] = {std::vector<float>(qn), std::vector<float>(qn)};
      for (int path = 0; path < 2; ++path)
        be->copy(h[path].data(), out[path].p, qn * 4, CopyKind::DeviceToHost);
      double err = 0, mx = 0;
      for (size_t i = 0; i < qn; ++i) {
        err = std::max(err, static_cast<double>(std::fabs(h[0][i] - h[1][i])));
        mx = std::max(mx, static_cast<double>(std::fabs(h[1][i])));
      }
      if (!(err <= 1e-4 * std::max(mx, 1e-3))) {
        std::fprintf(stderr, "%s: entry and composition differ by %g (max %g)\n", sc.name, err, mx);
        status = 1;
      }
      const double eb = *std::min_element(t[0].begin(), t[0].end()) * 1e6, em = median(t[0]) * 1e6;
      const double cb = *std::min_element(t[1].begin(), t[1].end()) * 1e6, cm = median(t[1]) * 1e6;
      std::printf("%-13s %7d %5d %9.1f us %9.1f us %9.1f us %9.1f us %7.2fx %7.2fx\n", sc.name, nt,
                  calls, eb, em, cb, cm, cb / eb, cm / em);
      std::fflush(stdout);
    }
  }
  return status;
}
