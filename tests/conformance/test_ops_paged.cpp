// conf_ops, the paged attention (oslo_backend.h's paged_attention): the
// backend's entry where it offers one and the composition
// (core/backend/fused_paged.cpp, the reference), each against an f64
// attention written here over each sequence's keys laid out contiguously,
// and against each other. The pools are filled with large junk wherever no
// key of a sequence lies (unused blocks, the tails of last blocks), the
// block ids are a shuffled permutation, the tables carry out-of-range junk
// past the entries a chunk needs, and the query rows of no chunk must stay
// as they were: a read through a wrong id, slot or row shows. The int8
// pools of paged_attention_kv8 run the same cases: each slot's codes times
// its row scale are the keys the reference reads, junk codes with scales of
// 1e4 lie everywhere else.
#include <algorithm>
#include <numeric>

#include "ops_common.hpp"

using namespace oslo;

namespace conf {
namespace {

struct PagedChunk {
  int64_t start, n;
};

void paged_case(const std::shared_ptr<Backend>& be, oslo_dtype dt, int64_t Hq, int64_t Hkv,
                int64_t D, int64_t bs, const std::vector<PagedChunk>& cs, bool int8 = false) {
  const int64_t C = static_cast<int64_t>(cs.size()), g = Hq / Hkv;
  // Rows: the chunks in order, one unused row before each (left untouched).
  std::vector<int64_t> row(static_cast<size_t>(C)), nb(static_cast<size_t>(C));
  int64_t T = 0, need = 0, M = 1;
  for (int64_t c = 0; c < C; ++c) {
    row[c] = ++T;
    T += cs[c].n;
    nb[c] = (cs[c].start + cs[c].n + bs - 1) / bs;
    need += nb[c];
    M = std::max(M, nb[c] + 1);  // one junk entry past every chunk's blocks
  }
  ++T;
  std::vector<bool> used(static_cast<size_t>(T), false);
  for (int64_t c = 0; c < C; ++c)
    for (int64_t i = 0; i < cs[c].n; ++i) used[static_cast<size_t>(row[c] + i)] = true;
  const int64_t NB = need + 3, per = Hkv * bs * D;
  // Shuffled block ids, handed out to the chunks in turn.
  std::vector<int64_t> perm(static_cast<size_t>(NB));
  std::iota(perm.begin(), perm.end(), 0);
  for (int64_t i = NB - 1; i > 0; --i)
    std::swap(perm[i],
              perm[std::min<int64_t>(
                  i, static_cast<int64_t>((rnd() + 1.0) * 0.5 * static_cast<double>(i + 1)))]);
  std::vector<double> table(static_cast<size_t>(C * M));
  std::vector<int64_t> triples;
  int64_t next = 0;
  for (int64_t c = 0; c < C; ++c) {
    for (int64_t j = 0; j < M; ++j)
      table[c * M + j] = j < nb[c] ? static_cast<double>(perm[next++]) : NB + 1000.0 + j;
    triples.insert(triples.end(), {row[c], cs[c].start, cs[c].n});
  }
  // Each sequence's keys and values [Hkv, L, D], written into its blocks of
  // pools that hold junk (+-50) everywhere else.
  std::vector<double> kpool = random_in(static_cast<size_t>(NB * per), dt, 50.0);
  std::vector<double> vpool = random_in(static_cast<size_t>(NB * per), dt, 50.0);
  // int8: the pools' codes (junk +-127) and row scales (junk 1e4).
  auto code = [] { return std::round(127.0 * rnd()); };
  std::vector<double> kscale(static_cast<size_t>(NB * Hkv * bs), 1e4), vscale = kscale;
  if (int8)
    for (auto* pool : {&kpool, &vpool})
      for (double& x : *pool) x = code();
  std::vector<std::vector<double>> keys(static_cast<size_t>(C)), vals(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) {
    const int64_t L = cs[c].start + cs[c].n;
    keys[c] = random_in(static_cast<size_t>(Hkv * L * D), dt, 2.0);
    vals[c] = random_in(static_cast<size_t>(Hkv * L * D), dt);
    for (int64_t kh = 0; kh < Hkv; ++kh)
      for (int64_t t = 0; t < L; ++t) {
        const int64_t blk = static_cast<int64_t>(table[c * M + t / bs]);
        const size_t srow = static_cast<size_t>((blk * Hkv + kh) * bs + t % bs);
        // int8: the row's scale (an f32 value) and codes stand for its keys.
        const double sk = static_cast<float>(0.016 + 0.008 * rnd()),
                     sv = static_cast<float>(0.008 + 0.004 * rnd());
        if (int8) {
          kscale[srow] = sk;
          vscale[srow] = sv;
        }
        for (int64_t d = 0; d < D; ++d) {
          const size_t at = static_cast<size_t>(blk * per + (kh * bs + t % bs) * D + d);
          const size_t i = static_cast<size_t>((kh * L + t) * D + d);
          if (int8) {
            kpool[at] = code();
            vpool[at] = code();
            keys[c][i] = kpool[at] * sk;
            vals[c][i] = vpool[at] * sv;
          } else {
            kpool[at] = keys[c][i];
            vpool[at] = vals[c][i];
          }
        }
      }
  }
  // q inside wider rows [T, Hq * D + 8]; out [T, Hq, D] starts as 7.
  const int64_t qrow = Hq * D + 8;
  const std::vector<double> hq = random_in(static_cast<size_t>(T * qrow), dt, 2.0);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  std::vector<double> ref(static_cast<size_t>(T * Hq * D), 7.0);
  for (int64_t c = 0; c < C; ++c) {
    const int64_t L = cs[c].start + cs[c].n;
    for (int64_t i = 0; i < cs[c].n; ++i)
      for (int64_t h = 0; h < Hq; ++h) {
        const int64_t r = row[c] + i, p = cs[c].start + i, kh = h / g;
        std::vector<double> s(static_cast<size_t>(p + 1));
        double mx = -INFINITY, sum = 0;
        for (int64_t t = 0; t <= p; ++t) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d)
            dot += hq[r * qrow + h * D + d] * keys[c][(kh * L + t) * D + d];
          s[t] = static_cast<double>(scale) * dot;
          mx = std::max(mx, s[t]);
        }
        for (auto& e : s) sum += (e = std::exp(e - mx));
        for (int64_t d = 0; d < D; ++d) {
          double o = 0;
          for (int64_t t = 0; t <= p; ++t) o += s[t] / sum * vals[c][(kh * L + t) * D + d];
          ref[(r * Hq + h) * D + d] = o;
        }
      }
  }
  const oslo_dtype pdt = int8 ? OSLO_DTYPE_I8 : dt;
  Dev qb(be, dt, {T, qrow}), kb(be, pdt, {NB, Hkv, bs, D}), vb(be, pdt, {NB, Hkv, bs, D});
  Dev ks(be, OSLO_DTYPE_F32, {NB, Hkv, bs}), vs(be, OSLO_DTYPE_F32, {NB, Hkv, bs});
  Dev tb(be, OSLO_DTYPE_I64, {C, M});
  qb.upload(hq);
  kb.upload(kpool);
  vb.upload(vpool);
  ks.upload(kscale);
  vs.upload(vscale);
  tb.upload(table);
  const View q = strided_view(qb.p, dt, {T, Hq, D}, {qrow, D, 1});
  const double rel = dt == OSLO_DTYPE_F32 ? 1e-4 : 2 * tol(dt);
  std::vector<double> got[2];
  for (int fused = 0; fused < 2; ++fused) {
    Dev ob(be, dt, {T, Hq, D});
    ob.upload(std::vector<double>(static_cast<size_t>(T * Hq * D), 7.0));
    {
      FusedToggle f(*be, fused == 1);
      if (int8)
        be->paged_attention_kv8(ob.v, q, kb.v, ks.v, vb.v, vs.v, tb.v, triples.data(), C, scale);
      else
        be->paged_attention(ob.v, q, kb.v, vb.v, tb.v, triples.data(), C, scale);
    }
    // The chunks' rows against the reference; the other rows untouched.
    const std::vector<double> all = ob.download();
    std::vector<double> want;
    bool untouched = true;
    for (int64_t r = 0; r < T; ++r)
      for (int64_t x = 0; x < Hq * D; ++x) {
        const size_t i = static_cast<size_t>(r * Hq * D + x);
        if (used[static_cast<size_t>(r)]) {
          got[fused].push_back(all[i]);
          want.push_back(ref[i]);
        } else {
          untouched = untouched && all[i] == 7.0;
        }
      }
    double e = 0;
    const bool ok_ = close(got[fused], want, rel, &e);
    check(ok_, fmt("%s err %g", fused ? "fused" : "composed", e));
    check(untouched, fmt("%s: a row of no chunk was written", fused ? "fused" : "composed"));
  }
  double e = 0;
  const bool same = close(got[1], got[0], dt == OSLO_DTYPE_F32 ? 2e-5 : 2 * tol(dt), &e);
  check(same, fmt("fused vs composed %g", e));
}

}  // namespace

void test_paged_attention(const std::shared_ptr<Backend>& be) {
  std::printf("  fused op %d on %s: %s\n", static_cast<int>(OSLO_BK_OP_PAGED_ATTENTION), be->name(),
              be->uses_fused(OSLO_BK_OP_PAGED_ATTENTION, OSLO_DTYPE_F32) ? "the backend's entry"
                                                                         : "composed");
  struct P {
    int64_t Hq, Hkv, D, bs;
    std::vector<PagedChunk> chunks;
  };
  const P cases[] = {
      // A step of a serving engine: a prefill from 0 (37 queries, 3 blocks,
      // the last partial), decodes at a block's start, middle and end, a
      // continuation from mid-block (7 queries), a long one crossing blocks
      // from mid-block (20 queries: the tiled path), an empty chunk. GQA 2.
      {4, 2, 16, 16, {{0, 37}, {16, 1}, {5, 1}, {31, 1}, {21, 7}, {70, 20}, {3, 0}}},
      // Block size 1: every key in its own block.
      {2, 1, 8, 1, {{0, 5}, {3, 1}, {7, 2}, {0, 17}}},
      // Block size 5, dividing no length; GQA 3; D not a multiple of 8.
      {6, 2, 24, 5, {{0, 23}, {12, 1}, {9, 4}, {130, 1}, {2, 16}}},
      // One decode over 19 blocks (the CPU splits its keys: split-K).
      {2, 1, 32, 16, {{300, 1}}},
      // A prefill of two tiles of queries (70), MHA, and a decode beside it.
      {4, 4, 16, 16, {{0, 70}, {100, 1}}},
  };
  std::printf("  fused op %d on %s: %s\n", static_cast<int>(OSLO_BK_OP_PAGED_ATTENTION_KV8),
              be->name(),
              be->uses_fused(OSLO_BK_OP_PAGED_ATTENTION_KV8, OSLO_DTYPE_F32) ? "the backend's entry"
                                                                             : "composed");
  for (int int8 = 0; int8 < 2; ++int8)
    for (oslo_dtype dt : kFloats)
      for (const P& c : cases) {
        std::string cs;
        for (const PagedChunk& ch : c.chunks)
          cs += fmt(" %lld+%lld", (long long)ch.start, (long long)ch.n);
        g_case = fmt("paged_attention%s %s Hq%lld Hkv%lld D%lld bs%lld chunks%s",
                     int8 ? "_kv8" : "", dtype_name(dt), (long long)c.Hq, (long long)c.Hkv,
                     (long long)c.D, (long long)c.bs, cs.c_str());
        paged_case(be, dt, c.Hq, c.Hkv, c.D, c.bs, c.chunks, int8 == 1);
      }

  g_case = "paged_attention errors";
  {
    // 4 blocks of 4 slots; 2 chunks over 6 rows.
    Dev q(be, OSLO_DTYPE_F32, {6, 2, 8}), o(be, OSLO_DTYPE_F32, {6, 2, 8});
    Dev kp(be, OSLO_DTYPE_F32, {4, 1, 4, 8}), vp(be, OSLO_DTYPE_F32, {4, 1, 4, 8});
    Dev kp16(be, OSLO_DTYPE_BF16, {4, 1, 4, 8}), kp3(be, OSLO_DTYPE_F32, {4, 3, 4, 8});
    Dev good(be, OSLO_DTYPE_I64, {2, 2}), bad(be, OSLO_DTYPE_I64, {2, 2}),
        negative(be, OSLO_DTYPE_I64, {2, 2}), narrow(be, OSLO_DTYPE_I64, {2, 1}),
        t32(be, OSLO_DTYPE_I32, {2, 2});
    for (Dev* f : {&q, &kp, &vp})
      f->upload(random_in(static_cast<size_t>(f->v.numel()), OSLO_DTYPE_F32));
    good.upload({0, 1, 2, 3});
    bad.upload({0, 1, 2, 4});  // chunk 1's second block: 4 of 4 blocks
    negative.upload({0, -1, 2, 3});
    narrow.upload({0, 2});
    t32.upload({0, 1, 2, 3});
    const std::vector<int64_t> ok = {0, 2, 3, 3, 5, 3};  // rows 0..2 at 2.., rows 3..5 at 5..
    const std::vector<int64_t> overlap = {0, 2, 3, 2, 5, 3};
    const std::vector<int64_t> too_far = {0, 2, 3, 4, 5, 3};
    // int8 pools and their scales.
    Dev k8(be, OSLO_DTYPE_I8, {4, 1, 4, 8}), v8(be, OSLO_DTYPE_I8, {4, 1, 4, 8});
    Dev s(be, OSLO_DTYPE_F32, {4, 1, 4}), s3(be, OSLO_DTYPE_F32, {4, 1, 3}),
        si(be, OSLO_DTYPE_I32, {4, 1, 4});
    k8.upload(std::vector<double>(128, 3.0));
    v8.upload(std::vector<double>(128, -5.0));
    s.upload(std::vector<double>(16, 0.25));
    for (bool fused : {true, false}) {
      FusedToggle f(*be, fused);
      auto run = [&](const Dev& k, const Dev& t, const std::vector<int64_t>& ch) {
        be->paged_attention(o.v, q.v, k.v, vp.v, t.v, ch.data(), 2, 0.5f);
      };
      run(kp, good, ok);  // accepted
      auto refused = [&](const char* what, oslo_status want, auto fn) {
        expect_refused(fused, what, want, fn);
      };
      refused("block id 4 of 4 blocks", OSLO_ERR_INVALID_ARGUMENT, [&] { run(kp, bad, ok); });
      refused("block id -1", OSLO_ERR_INVALID_ARGUMENT, [&] { run(kp, negative, ok); });
      refused("a chunk past its table", OSLO_ERR_SHAPE, [&] { run(kp, narrow, ok); });
      refused("overlapping chunks", OSLO_ERR_INVALID_ARGUMENT, [&] { run(kp, good, overlap); });
      refused("a chunk past the query rows", OSLO_ERR_INVALID_ARGUMENT,
              [&] { run(kp, good, too_far); });
      refused("an i32 block table", OSLO_ERR_DTYPE, [&] { run(kp, t32, ok); });
      refused("bf16 keys with f32 queries", OSLO_ERR_DTYPE,
              [&] { be->paged_attention(o.v, q.v, kp16.v, kp16.v, good.v, ok.data(), 2, 0.5f); });
      refused("2 query heads over 3 kv heads", OSLO_ERR_SHAPE,
              [&] { be->paged_attention(o.v, q.v, kp3.v, kp3.v, good.v, ok.data(), 2, 0.5f); });
      auto run8 = [&](const Dev& k, const Dev& ksc, const Dev& t) {
        be->paged_attention_kv8(o.v, q.v, k.v, ksc.v, v8.v, s.v, t.v, ok.data(), 2, 0.5f);
      };
      run8(k8, s, good);  // accepted
      refused("kv8: f32 pools", OSLO_ERR_DTYPE, [&] { run8(kp, s, good); });
      refused("kv8: scales [4, 1, 3] for blocks of 4", OSLO_ERR_SHAPE, [&] { run8(k8, s3, good); });
      refused("kv8: i32 scales", OSLO_ERR_DTYPE, [&] { run8(k8, si, good); });
      refused("kv8: block id 4 of 4 blocks", OSLO_ERR_INVALID_ARGUMENT, [&] { run8(k8, s, bad); });
      refused("kv8: block id -1", OSLO_ERR_INVALID_ARGUMENT, [&] { run8(k8, s, negative); });
    }
  }
}

}  // namespace conf
