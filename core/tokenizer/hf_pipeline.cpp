// Splitting text pieces, patterns, the GPT-2 byte table and shared parsers of
// the tokenizer.json pipeline.
#include "core/tokenizer/hf_pipeline.hpp"

namespace oslo {
namespace tok {
namespace hf {
// NormalizedString::split: `matches` are sorted, non-overlapping byte ranges.
void split_by(const Piece& p, const std::vector<std::pair<size_t, size_t>>& matches,
              Behavior behavior, bool invert, Pieces& out) {
  const std::string& s = p.text;
  // (range, is_match) covering s, as Pattern::find_matches returns it.
  struct Part {
    size_t a, b;
    bool m;
  };
  std::vector<Part> parts;
  if (s.empty()) {
    parts.push_back({0, 0, false});
  } else {
    size_t prev = 0;
    for (auto& [a, b] : matches) {
      if (prev != a) parts.push_back({prev, a, false});
      parts.push_back({a, b, true});
      prev = b;
    }
    if (prev != s.size()) parts.push_back({prev, s.size(), false});
  }
  if (invert)
    for (auto& q : parts) q.m = !q.m;
  // (range, remove)
  std::vector<Part> res;
  switch (behavior) {
    case Behavior::kIsolated:
      for (auto& q : parts) res.push_back({q.a, q.b, false});
      break;
    case Behavior::kRemoved: res = parts; break;
    case Behavior::kContiguous: {
      bool prev_match = false;
      for (auto& q : parts) {
        if (q.m == prev_match && !res.empty())
          res.back().b = q.b;
        else
          res.push_back({q.a, q.b, false});
        prev_match = q.m;
      }
      break;
    }
    case Behavior::kMergedWithPrevious: {
      bool prev_match = false;
      for (auto& q : parts) {
        if (q.m && !prev_match && !res.empty())
          res.back().b = q.b;
        else
          res.push_back({q.a, q.b, false});
        prev_match = q.m;
      }
      break;
    }
    case Behavior::kMergedWithNext: {
      bool prev_match = false;
      for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
        if (it->m && !prev_match && !res.empty())
          res.back().a = it->a;
        else
          res.push_back({it->a, it->b, false});
        prev_match = it->m;
      }
      std::reverse(res.begin(), res.end());
      break;
    }
  }
  for (auto& q : res) {
    if (q.m || q.b <= q.a) continue;  // removed, or empty (dropped by PreTokenizedString)
    out.push_back(Piece{s.substr(q.a, q.b - q.a), -1, p.first && q.a == 0});
  }
}

std::vector<std::pair<size_t, size_t>> literal_matches(const std::string& s,
                                                       const std::string& lit) {
  std::vector<std::pair<size_t, size_t>> m;
  if (lit.empty()) return m;
  for (size_t pos = s.find(lit); pos != std::string::npos; pos = s.find(lit, pos + lit.size()))
    m.emplace_back(pos, pos + lit.size());
  return m;
}

Pattern parse_pattern(const Parser& P, const json& j, const std::string& where) {
  P.object(j, where);
  Pattern p;
  if (const json* s = P.get(j, "String")) {
    p.literal = P.string(*s, where + ".String");
  } else if (const json* r = P.get(j, "Regex")) {
    p.regex = std::make_unique<Regex>(P.string(*r, where + ".Regex"), P.name() + ": " + where);
  } else {
    P.bad(where, "expected {\"String\": ...} or {\"Regex\": ...}");
  }
  return p;
}

std::string replace_pattern(const std::string& s, const Pattern& pat, const std::string& content) {
  auto m = pat.find(s);
  if (m.empty()) return s;
  std::string out;
  size_t prev = 0;
  for (auto& [a, b] : m) {
    out.append(s, prev, a - prev);
    out += content;
    prev = b;
  }
  out.append(s, prev, std::string::npos);
  return out;
}

const ByteTable& byte_table() {
  static const ByteTable t;
  return t;
}

bool known_unsupported(const std::string& type) {
  static const char* kNames[] = {"UnicodeScripts", "FixedLength", "CTC", "Punctuation_"};
  for (const char* n : kNames)
    if (type == n) return true;
  return false;
}

Prepend parse_prepend(const Parser& P, const json& j, const std::string& where) {
  Prepend scheme = Prepend::kAlways;
  if (const json* s = P.get(j, "prepend_scheme")) {
    std::string v = P.string(*s, where + ".prepend_scheme");
    if (v == "always")
      scheme = Prepend::kAlways;
    else if (v == "first")
      scheme = Prepend::kFirst;
    else if (v == "never")
      scheme = Prepend::kNever;
    else
      P.bad(where + ".prepend_scheme", "unknown prepend scheme ", quote(v));
  }
  if (P.get(j, "add_prefix_space") && !P.boolean(j, "add_prefix_space", where, true))
    scheme = Prepend::kNever;
  return scheme;
}

}  // namespace hf
}  // namespace tok
}  // namespace oslo
