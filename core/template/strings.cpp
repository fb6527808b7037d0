// Python str methods on UTF-8 strings.
#include "core/template/strings.hpp"

#include <utf8proc.h>

#include <algorithm>

#include "core/template/lexer.hpp"
#include "core/template/value.hpp"
#include "core/common/unicode.hpp"

namespace oslo {
namespace tmpl {
namespace pystr {

std::vector<uint32_t> decode(const std::string& s) {
  std::vector<uint32_t> cps;
  cps.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) cps.push_back(tok::next_cp(s, i));
  return cps;
}
std::string encode(const std::vector<uint32_t>& cps) {
  std::string s;
  for (uint32_t c : cps) tok::append_utf8(s, c);
  return s;
}
size_t length(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

std::string strip(const std::string& s, const std::string* chars, bool left, bool right) {
  const std::vector<uint32_t> cps = decode(s);
  std::vector<uint32_t> set;
  if (chars) set = decode(*chars);
  auto strippable = [&](uint32_t c) {
    return chars ? std::find(set.begin(), set.end(), c) != set.end() : is_py_space(c);
  };
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && strippable(cps[b])) ++b;
  if (right)
    while (e > b && strippable(cps[e - 1])) --e;
  return encode(std::vector<uint32_t>(cps.begin() + static_cast<long>(b),
                                      cps.begin() + static_cast<long>(e)));
}

namespace {
uint32_t to_upper(uint32_t c) {
  return static_cast<uint32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c)));
}
uint32_t to_lower(uint32_t c) {
  return static_cast<uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c)));
}
uint32_t to_title(uint32_t c) {
  return static_cast<uint32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(c)));
}
bool is_cased(uint32_t c) {
  return to_upper(c) != c || to_lower(c) != c || to_title(c) != c;
}
}  // namespace

std::string upper(const std::string& s) {
  std::vector<uint32_t> cps = decode(s);
  for (auto& c : cps) c = to_upper(c);
  return encode(cps);
}
std::string lower(const std::string& s) {
  std::vector<uint32_t> cps = decode(s);
  for (auto& c : cps) c = to_lower(c);
  return encode(cps);
}
std::string capitalize(const std::string& s) {
  std::vector<uint32_t> cps = decode(s);
  for (size_t i = 0; i < cps.size(); ++i) cps[i] = i == 0 ? to_title(cps[i]) : to_lower(cps[i]);
  return encode(cps);
}
std::string title(const std::string& s) {
  std::vector<uint32_t> cps = decode(s);
  bool prev_cased = false;
  for (auto& c : cps) {
    const bool cased = is_cased(c);
    c = prev_cased ? to_lower(c) : to_title(c);
    prev_cased = cased;
  }
  return encode(cps);
}
std::string jinja_title(const std::string& s) {
  // "".join(w[0].upper() + w[1:].lower() for w in re.split(r"([-\s\(\{\[\<]+)", s) if w)
  std::vector<uint32_t> cps = decode(s);
  auto sep = [](uint32_t c) {
    return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || is_py_space(c);
  };
  size_t i = 0;
  while (i < cps.size()) {
    const bool in_sep = sep(cps[i]);
    size_t j = i;
    while (j < cps.size() && sep(cps[j]) == in_sep) ++j;
    for (size_t k = i; k < j; ++k) cps[k] = k == i ? to_upper(cps[k]) : to_lower(cps[k]);
    i = j;
  }
  return encode(cps);
}

std::vector<std::string> split(const std::string& s, const std::string* sep, int64_t maxsplit,
                               bool from_right) {
  std::vector<std::string> parts;
  if (sep) {
    if (sep->empty()) type_error("empty separator");
    if (!from_right) {
      size_t pos = 0;
      while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
        const size_t f = s.find(*sep, pos);
        if (f == std::string::npos) break;
        parts.push_back(s.substr(pos, f - pos));
        pos = f + sep->size();
      }
      parts.push_back(s.substr(pos));
    } else {
      size_t end = s.size();
      std::vector<std::string> rev;
      while (maxsplit < 0 || static_cast<int64_t>(rev.size()) < maxsplit) {
        if (end < sep->size()) break;
        const size_t f = s.rfind(*sep, end - sep->size());
        if (f == std::string::npos) break;
        rev.push_back(s.substr(f + sep->size(), end - f - sep->size()));
        end = f;
      }
      rev.push_back(s.substr(0, end));
      parts.assign(rev.rbegin(), rev.rend());
    }
    return parts;
  }
  // Runs of whitespace; leading / trailing whitespace gives no empty parts.
  const std::vector<uint32_t> cps = decode(s);
  std::vector<std::pair<size_t, size_t>> words;
  size_t i = 0;
  while (i < cps.size()) {
    while (i < cps.size() && is_py_space(cps[i])) ++i;
    if (i >= cps.size()) break;
    size_t j = i;
    while (j < cps.size() && !is_py_space(cps[j])) ++j;
    words.emplace_back(i, j);
    i = j;
  }
  auto piece = [&](size_t b, size_t e) {
    return encode(std::vector<uint32_t>(cps.begin() + static_cast<long>(b),
                                        cps.begin() + static_cast<long>(e)));
  };
  const size_t n = words.size();
  if (maxsplit < 0 || static_cast<size_t>(maxsplit) + 1 >= n) {
    for (auto& w : words) parts.push_back(piece(w.first, w.second));
    return parts;
  }
  const size_t m = static_cast<size_t>(maxsplit);
  if (!from_right) {
    for (size_t k = 0; k < m; ++k) parts.push_back(piece(words[k].first, words[k].second));
    size_t e = cps.size();
    while (e > words[m].first && is_py_space(cps[e - 1])) --e;
    parts.push_back(piece(words[m].first, e));
  } else {
    size_t b = 0;
    while (b < cps.size() && is_py_space(cps[b])) ++b;
    parts.push_back(piece(b, words[n - m - 1].second));
    for (size_t k = n - m; k < n; ++k) parts.push_back(piece(words[k].first, words[k].second));
  }
  return parts;
}

std::vector<std::string> splitlines(const std::string& s) {
  const std::vector<uint32_t> cps = decode(s);
  std::vector<std::string> lines;
  std::vector<uint32_t> cur;
  for (size_t i = 0; i < cps.size(); ++i) {
    const uint32_t c = cps[i];
    if (c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || c == 0x1c || c == 0x1d || c == 0x1e ||
        c == 0x85 || c == 0x2028 || c == 0x2029) {
      lines.push_back(encode(cur));
      cur.clear();
      if (c == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ++i;
    } else {
      cur.push_back(c);
    }
  }
  if (!cur.empty()) lines.push_back(encode(cur));
  return lines;
}

std::string replace(const std::string& s, const std::string& old, const std::string& repl,
                    int64_t count) {
  std::string out;
  int64_t done = 0;
  if (old.empty()) {  // Python inserts repl around every character
    size_t i = 0;
    while (i <= s.size()) {
      if (count < 0 || done < count) {
        out += repl;
        ++done;
      }
      if (i == s.size()) break;
      const size_t start = i;
      tok::next_cp(s, i);
      out.append(s, start, i - start);
    }
    return out;
  }
  size_t pos = 0;
  while (count < 0 || done < count) {
    const size_t f = s.find(old, pos);
    if (f == std::string::npos) break;
    out.append(s, pos, f - pos);
    out += repl;
    pos = f + old.size();
    ++done;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

int64_t find(const std::string& s, const std::string& sub, bool last) {
  const size_t f = last ? s.rfind(sub) : s.find(sub);
  if (f == std::string::npos) return -1;
  return static_cast<int64_t>(length(s.substr(0, f)));
}
int64_t count(const std::string& s, const std::string& sub) {
  if (sub.empty()) return static_cast<int64_t>(length(s)) + 1;
  int64_t n = 0;
  for (size_t f = s.find(sub); f != std::string::npos; f = s.find(sub, f + sub.size())) ++n;
  return n;
}
bool is_lower(const std::string& s) {
  bool cased = false;
  for (uint32_t c : decode(s)) {
    if (to_upper(c) != c && to_lower(c) == c)
      cased = true;
    else if (to_lower(c) != c)
      return false;
  }
  return cased;
}
bool is_upper(const std::string& s) {
  bool cased = false;
  for (uint32_t c : decode(s)) {
    if (to_lower(c) != c && to_upper(c) == c)
      cased = true;
    else if (to_upper(c) != c)
      return false;
  }
  return cased;
}

}  // namespace pystr
}  // namespace tmpl
}  // namespace oslo
