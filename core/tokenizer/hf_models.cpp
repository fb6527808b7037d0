// tokenizer.json models: BPE (with byte fallback, ignore_merges), WordPiece and
// WordLevel (Unigram: hf_unigram.cpp).
#include "core/tokenizer/hf_pipeline.hpp"

#include <queue>

namespace oslo {
namespace tok {
namespace hf {
void parse_vocab(const Parser& P, const json& j, const std::string& where, Model& m) {
  const json& v = P.object(P.need(j, "vocab", where), where + ".vocab");
  m.vocab.reserve(v.size());
  m.vocab_r.reserve(v.size());
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (invalid_utf8_at(it.key()) != std::string::npos)
      P.bad(where + ".vocab", "a token is not valid UTF-8");
    int32_t id = P.id(it.value(), where + ".vocab[" + quote(it.key(), '"', 60) + "]");
    m.vocab[it.key()] = id;
    m.vocab_r[id] = it.key();
  }
}

struct BPE : Model {
  // (left id << 32 | right id) -> (rank, merged id)
  std::unordered_map<uint64_t, std::pair<uint32_t, int32_t>> merges;
  std::optional<std::string> prefix, suffix;
  bool fuse_unk = false, byte_fallback = false, ignore_merges = false;
  int32_t unk_id = -1;
  int32_t byte_ids[256];

  struct Symbol {
    int32_t c;
    int32_t prev, next;
    size_t len;
  };

  const std::pair<uint32_t, int32_t>* merge(int32_t a, int32_t b) const {
    auto it = merges.find(static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32 |
                          static_cast<uint32_t>(b));
    return it == merges.end() ? nullptr : &it->second;
  }

  void tokenize(const std::string& w, std::vector<int64_t>& out) const override {
    if (w.empty()) return;
    if (ignore_merges) {
      auto it = vocab.find(w);
      if (it != vocab.end()) {
        out.push_back(it->second);
        return;
      }
    }
    // merge_word: initial symbols.
    std::vector<Symbol> sym;
    sym.reserve(w.size());
    auto add = [&sym](int32_t c, size_t len) {
      int32_t n = static_cast<int32_t>(sym.size());
      sym.push_back({c, n - 1, n + 1, len});
    };
    int32_t unk = -1;
    size_t unk_len = 0;
    std::string s;
    for (size_t i = 0; i < w.size();) {
      const size_t start = i;
      next_cp(w, i);
      const bool is_first = start == 0, is_last = i >= w.size();
      const size_t byte_len = i - start;
      s.assign(w, start, byte_len);
      if (!is_first && prefix) s.insert(0, *prefix);
      if (is_last && suffix) s += *suffix;
      auto it = vocab.find(s);
      if (it != vocab.end()) {
        if (unk >= 0) {
          add(unk, unk_len);
          unk = -1;
        }
        add(it->second, byte_len);
        continue;
      }
      if (byte_fallback) {
        bool all = true;
        for (unsigned char b : s) all = all && byte_ids[b] >= 0;
        if (all) {
          for (unsigned char b : s) add(byte_ids[b], 1);
          continue;
        }
      }
      if (unk_token) {
        if (unk >= 0 && fuse_unk) {
          unk_len += byte_len;
        } else {
          if (unk >= 0) add(unk, unk_len);
          unk = unk_id;
          unk_len = byte_len;
        }
      }
    }
    if (unk >= 0) add(unk, unk_len);
    if (sym.empty()) return;
    sym.back().next = -1;

    // merge_all: lowest rank first, then leftmost.
    struct M {
      size_t pos;
      uint32_t rank;
      int32_t new_id;
      bool operator<(const M& o) const {  // priority_queue pops the largest
        return rank != o.rank ? rank > o.rank : pos > o.pos;
      }
    };
    std::priority_queue<M> q;
    for (size_t i = 0; i + 1 < sym.size(); ++i)
      if (auto m = merge(sym[i].c, sym[i + 1].c)) q.push({i, m->first, m->second});
    while (!q.empty()) {
      M top = q.top();
      q.pop();
      Symbol& cur = sym[top.pos];
      if (cur.len == 0 || cur.next == -1) continue;
      const size_t next_pos = static_cast<size_t>(cur.next);
      const Symbol right = sym[next_pos];
      auto m = merge(cur.c, right.c);
      if (!m || m->second != top.new_id) continue;
      cur.c = top.new_id;
      cur.len += right.len;
      cur.next = right.next;
      sym[next_pos].len = 0;
      if (right.next >= 0 && static_cast<size_t>(right.next) < sym.size())
        sym[right.next].prev = static_cast<int32_t>(top.pos);
      if (cur.prev >= 0) {
        if (auto pm = merge(sym[cur.prev].c, cur.c))
          q.push({static_cast<size_t>(cur.prev), pm->first, pm->second});
      }
      if (cur.next >= 0 && static_cast<size_t>(cur.next) < sym.size()) {
        if (auto nm = merge(cur.c, sym[cur.next].c)) q.push({top.pos, nm->first, nm->second});
      }
    }
    for (auto& x : sym)
      if (x.len) out.push_back(x.c);
  }
};

std::unique_ptr<Model> parse_bpe(const Parser& P, const json& j, const std::string& where) {
  auto m = std::make_unique<BPE>();
  parse_vocab(P, j, where, *m);
  if (const json* d = P.get(j, "dropout")) {
    if (!d->is_number()) P.bad(where + ".dropout", "expected a number or null");
    if (d->get<double>() != 0.0) P.unsupported(where + ".dropout", "BPE dropout");
  }
  m->unk_token = P.opt_string(j, "unk_token", where);
  m->prefix = P.opt_string(j, "continuing_subword_prefix", where);
  m->suffix = P.opt_string(j, "end_of_word_suffix", where);
  if (m->prefix && m->prefix->empty()) m->prefix.reset();
  if (m->suffix && m->suffix->empty()) m->suffix.reset();
  m->fuse_unk = P.boolean(j, "fuse_unk", where, false);
  m->byte_fallback = P.boolean(j, "byte_fallback", where, false);
  m->ignore_merges = P.boolean(j, "ignore_merges", where, false);
  if (m->unk_token) {
    auto it = m->vocab.find(*m->unk_token);
    if (it == m->vocab.end())
      P.bad(where + ".unk_token", "unk token ", quote(*m->unk_token), " is not in the vocab");
    m->unk_id = it->second;
  }
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    snprintf(buf, sizeof buf, "<0x%02X>", b);
    auto it = m->vocab.find(buf);
    m->byte_ids[b] = it == m->vocab.end() ? -1 : it->second;
  }
  const json* merges = P.get(j, "merges");
  if (!merges) return m;
  P.array(*merges, where + ".merges");
  m->merges.reserve(merges->size());
  const std::string& pre = m->prefix ? *m->prefix : std::string();
  for (size_t i = 0; i < merges->size(); ++i) {
    const std::string w = where + ".merges[" + std::to_string(i) + "]";
    const json& e = (*merges)[i];
    std::string a, b;
    if (e.is_string()) {
      std::string s = P.string(e, w);
      size_t sp = s.find(' ');
      if (sp == std::string::npos) P.bad(w, "merge ", quote(s), " is not two tokens");
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (e.is_array() && e.size() == 2) {
      a = P.string(e[0], w + "[0]");
      b = P.string(e[1], w + "[1]");
    } else {
      P.bad(w, "expected \"a b\" or [\"a\", \"b\"]");
    }
    auto ia = m->vocab.find(a), ib = m->vocab.find(b);
    if (ia == m->vocab.end()) P.bad(w, "merge token ", quote(a), " is not in the vocab");
    if (ib == m->vocab.end()) P.bad(w, "merge token ", quote(b), " is not in the vocab");
    std::string bb = b;
    if (!pre.empty()) {
      if (bb.compare(0, pre.size(), pre) != 0)
        P.bad(w, "merge token ", quote(b), " lacks the continuing_subword_prefix");
      bb = bb.substr(pre.size());
    }
    auto in = m->vocab.find(a + bb);
    if (in == m->vocab.end()) P.bad(w, "merged token ", quote(a + bb), " is not in the vocab");
    m->merges[static_cast<uint64_t>(static_cast<uint32_t>(ia->second)) << 32 |
              static_cast<uint32_t>(ib->second)] = {static_cast<uint32_t>(i), in->second};
  }
  return m;
}

struct WordPiece : Model {
  std::string prefix = "##";
  uint64_t max_chars = 100;
  size_t max_len = 0;  // bytes of the longest token
  int32_t unk_id = -1;
  void tokenize(const std::string& w, std::vector<int64_t>& out) const override {
    size_t nchars = 0;
    for (size_t i = 0; i < w.size(); next_cp(w, i)) ++nchars;
    if (nchars > max_chars) {
      out.push_back(unk_id);
      return;
    }
    const size_t mark = out.size();
    size_t start = 0;
    std::string sub;
    while (start < w.size()) {
      // No token is longer than max_len bytes: start the search there (the
      // result is the same; the cost no longer grows with the word).
      size_t end = w.size() - start > max_len ? start + max_len : w.size();
      while (end > start && end < w.size() && (static_cast<unsigned char>(w[end]) & 0xC0) == 0x80)
        --end;
      int32_t found = -1;
      while (start < end) {
        sub.clear();
        if (start > 0) sub = prefix;
        sub.append(w, start, end - start);
        auto it = vocab.find(sub);
        if (it != vocab.end()) {
          found = it->second;
          break;
        }
        // Back off one character.
        do {
          --end;
        } while (end > start && (static_cast<unsigned char>(w[end]) & 0xC0) == 0x80);
      }
      if (found < 0) {
        out.resize(mark);
        out.push_back(unk_id);
        return;
      }
      out.push_back(found);
      start = end;
    }
  }
};

std::unique_ptr<Model> parse_wordpiece(const Parser& P, const json& j, const std::string& where) {
  auto m = std::make_unique<WordPiece>();
  parse_vocab(P, j, where, *m);
  m->unk_token = P.opt_string(j, "unk_token", where);
  if (!m->unk_token) m->unk_token = "[UNK]";
  auto it = m->vocab.find(*m->unk_token);
  if (it == m->vocab.end())
    P.bad(where + ".unk_token", "unk token ", quote(*m->unk_token), " is not in the vocab");
  m->unk_id = it->second;
  if (auto p = P.opt_string(j, "continuing_subword_prefix", where)) m->prefix = *p;
  m->max_chars = P.count(j, "max_input_chars_per_word", where, 100);
  for (auto& kv : m->vocab) m->max_len = std::max(m->max_len, kv.first.size());
  return m;
}

struct WordLevel : Model {
  void tokenize(const std::string& w, std::vector<int64_t>& out) const override {
    auto it = vocab.find(w);
    if (it == vocab.end()) it = vocab.find(*unk_token);
    if (it == vocab.end())
      fail(OSLO_ERR_INVALID_ARGUMENT, "encode: the word ", quote(w, '\'', 40),
           " is not in the WordLevel vocab, nor is its unk_token ", quote(*unk_token));
    out.push_back(it->second);
  }
};

std::unique_ptr<Model> parse_wordlevel(const Parser& P, const json& j, const std::string& where) {
  auto m = std::make_unique<WordLevel>();
  parse_vocab(P, j, where, *m);
  // As Hugging Face: an unk_token missing from the vocab is an error only
  // when a word needs it.
  m->unk_token = P.opt_string(j, "unk_token", where);
  if (!m->unk_token) m->unk_token = "<unk>";
  return m;
}

}  // namespace hf
}  // namespace tok
}  // namespace oslo
