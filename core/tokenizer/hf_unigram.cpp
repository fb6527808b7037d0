// tokenizer.json's Unigram model (SentencePiece unigram language model, as
// XLM-R, T5, mBART, ALBERT ... ship it): the Viterbi segmentation of Hugging
// Face tokenizers' Unigram::encode_optimized, its treatment of characters
// the vocab lacks (one unk node per character, scored min_score - 10, runs
// of them fused) and its byte fallback.
#include <cmath>
#include <cstdio>

#include "core/tokenizer/hf_pipeline.hpp"

namespace oslo {
namespace tok {
namespace hf {
namespace {

constexpr double kUnkPenalty = 10.0;

struct Unigram : Model {
  std::vector<double> scores;  // by id
  size_t n = 0;                // entries in the vocab list (ids 0..n-1)
  int32_t unk_id = -1;         // -1: none
  bool byte_fallback = false;
  double min_score = 0;
  int32_t byte_ids[256];
  TokenTrie trie;  // token -> the id `vocab` maps it to (the empty token: never)

  size_t size() const override { return n; }

  [[noreturn]] void missing_unk(std::string_view piece) const {
    fail(OSLO_ERR_INVALID_ARGUMENT, "encode: ", quote(std::string(piece), '\'', 40),
         " has no token in the Unigram vocab and the model has no unk_id");
  }

  void tokenize(const std::string& s, std::vector<int64_t>& out) const override {
    if (s.empty()) return;
    // best[e]: the best path over s[0, e): its score, where its last token starts, its id.
    struct Best {
      double score = 0;
      size_t start = 0;
      int32_t id = -1;
      bool set = false;
    };
    std::vector<Best> best(s.size() + 1);
    const double unk_score = min_score - kUnkPenalty;
    for (size_t at = 0; at < s.size();) {
      const double here = best[at].score;
      size_t next = at;
      next_cp(s, next);
      const size_t char_len = next - at;
      bool single = false;
      trie.prefixes(std::string_view(s).substr(at), [&](size_t len, int32_t id) {
        Best& t = best[at + len];
        const double cand = scores[static_cast<size_t>(id)] + here;
        if (!t.set || cand > t.score) t = {cand, at, id, true};
        if (len == char_len) single = true;
      });
      if (!single) {
        Best& t = best[next];
        const double cand = unk_score + here;
        if (!t.set || cand > t.score) {
          if (unk_id < 0) missing_unk(std::string_view(s).substr(at, char_len));
          t = {cand, at, unk_id, true};
        }
      }
      at = next;
    }
    // Back from the end; a run of unk nodes is one piece (fuse_unk).
    std::vector<std::pair<size_t, size_t>> ranges;  // byte ranges, last first
    size_t unk_end = 0;
    bool in_unk = false;
    for (size_t end = s.size(); end > 0;) {
      const Best& b = best[end];
      if (unk_id >= 0 && b.id == unk_id) {
        if (!in_unk) unk_end = end;
        in_unk = true;
      } else {
        if (in_unk) ranges.emplace_back(end, unk_end);
        in_unk = false;
        ranges.emplace_back(b.start, end);
      }
      end = b.start;
    }
    if (in_unk) ranges.emplace_back(0, unk_end);
    // Each piece's id: the vocab's (a fused run may spell a token), else its
    // bytes' <0xNN> tokens, else unk.
    for (auto it = ranges.rbegin(); it != ranges.rend(); ++it) {
      const std::string piece = s.substr(it->first, it->second - it->first);
      auto v = vocab.find(piece);
      if (v != vocab.end()) {
        out.push_back(v->second);
        continue;
      }
      if (byte_fallback) {
        bool all = true;
        for (unsigned char c : piece) all = all && byte_ids[c] >= 0;
        if (all) {
          for (unsigned char c : piece) out.push_back(byte_ids[c]);
          continue;
        }
      }
      if (unk_id < 0) missing_unk(piece);
      out.push_back(unk_id);
    }
  }
};
}  // namespace

std::unique_ptr<Model> parse_unigram(const Parser& P, const json& j, const std::string& where) {
  auto m = std::make_unique<Unigram>();
  const json& v = P.array(P.need(j, "vocab", where), where + ".vocab");
  m->n = v.size();
  if (m->n >= static_cast<size_t>(INT32_MAX)) P.bad(where + ".vocab", "too many tokens");
  m->scores.resize(m->n);
  m->vocab.reserve(m->n);
  m->vocab_r.reserve(m->n);
  m->min_score = INFINITY;
  for (size_t i = 0; i < m->n; ++i) {
    const std::string w = where + ".vocab[" + std::to_string(i) + "]";
    const json& e = v[i];
    if (!e.is_array() || e.size() != 2 || !e[1].is_number())
      P.bad(w, "expected [token, score], found ", clip(e.dump(), 60));
    const std::string tok = P.string(e[0], w + "[0]");
    const double score = e[1].get<double>();
    if (!std::isfinite(score)) P.bad(w + "[1]", "the score is not a finite number");
    const auto id = static_cast<int32_t>(i);
    m->scores[i] = score;
    m->vocab[tok] = id;  // a token listed twice: the later id, as Hugging Face's map has it
    m->vocab_r[id] = tok;
    if (score < m->min_score) m->min_score = score;
  }
  for (auto& [tok, id] : m->vocab) m->trie.add(tok, id);  // skips the empty token
  if (const json* u = P.get(j, "unk_id")) {
    const std::string w = where + ".unk_id";
    if (m->n == 0) P.bad(w, "an unk_id with an empty vocab");
    int32_t id = P.id(*u, w);
    if (static_cast<size_t>(id) >= m->n)
      P.bad(w, "unk_id ", id, " is not in the ", m->n, "-token vocab");
    m->unk_id = id;
    m->unk_token = m->vocab_r[id];
  }
  m->byte_fallback = P.boolean(j, "byte_fallback", where, false);
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    snprintf(buf, sizeof buf, "<0x%02X>", b);
    auto it = m->vocab.find(buf);
    m->byte_ids[b] = it == m->vocab.end() ? -1 : it->second;
  }
  return m;
}

}  // namespace hf
}  // namespace tok
}  // namespace oslo
