// The lexer: Jinja2 3.x's tokenizer rules (lexer.py) for the default
// delimiters, trim_blocks and lstrip_blocks on.
#include "core/template/lexer.hpp"

#include <cctype>
#include <cstring>

#include "core/template/value.hpp"
#include "core/common/unicode.hpp"

namespace oslo {
namespace tmpl {

bool is_py_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

std::string normalize_source(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\r') {
      out += '\n';
      if (i + 1 < s.size() && s[i + 1] == '\n') ++i;
    } else {
      out += s[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();  // keep_trailing_newline=False
  return out;
}

namespace {

[[noreturn]] void syntax_error(uint32_t pos, std::string msg) {
  throw RenderError{OSLO_ERR_FORMAT, std::move(msg), pos};
}

// Length of the Python whitespace at s[i] (0 if none).
size_t space_len(const std::string& s, size_t i) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return is_py_space(c) ? 1 : 0;
  size_t j = i;
  return is_py_space(tok::next_cp(s, j)) ? j - i : 0;
}
size_t skip_space(const std::string& s, size_t i) {
  while (i < s.size()) {
    const size_t n = space_len(s, i);
    if (!n) break;
    i += n;
  }
  return i;
}
// Python's str.rstrip() of s[begin, end): the new end.
size_t rstrip_end(const std::string& s, size_t begin, size_t end) {
  size_t cut = begin;
  for (size_t i = begin; i < end;) {
    const size_t n = space_len(s, i);
    if (n) {
      i += n;
    } else {
      i += 1;
      while (i < end && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) ++i;
      cut = i;
    }
  }
  return cut;
}
bool all_space(const std::string& s, size_t begin, size_t end) {
  for (size_t i = begin; i < end;) {
    const size_t n = space_len(s, i);
    if (!n) return false;
    i += n;
  }
  return true;
}

class Lexer {
 public:
  explicit Lexer(const std::string& s) : s_(s) {}

  std::vector<Token> run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < s_.size()) {
      const size_t tag = find_tag(pos);
      if (tag == std::string::npos) {
        emit_text(pos, s_.size());
        break;
      }
      const char kind = s_[tag + 1];  // '{', '%' or '#'
      const char sign = tag + 2 < s_.size() ? s_[tag + 2] : '\0';
      size_t text_end = tag;
      if (sign == '-') {
        text_end = rstrip_end(s_, pos, tag);
      } else if (sign != '+' && kind != '{') {  // lstrip_blocks: blocks and comments
        size_t l = pos;
        for (size_t i = pos; i < tag; ++i)
          if (s_[i] == '\n') l = i + 1;
        if ((l > pos || line_starting) && l < tag && all_space(s_, l, tag)) text_end = l;
      }
      emit_text(pos, text_end);
      const size_t inner = tag + 2 + (sign == '-' || sign == '+' ? 1 : 0);
      if (kind == '#') {
        pos = comment(tag, inner);
      } else if (kind == '%' && raw_begin(inner, &pos)) {
        pos = raw(tag, pos);
      } else {
        pos = tag_tokens(kind == '{', tag, inner);
      }
      line_starting = pos > 0 && s_[pos - 1] == '\n';
    }
    out_.push_back({Token::kEof, static_cast<uint32_t>(s_.size()), {}});
    return std::move(out_);
  }

 private:
  const std::string& s_;
  std::vector<Token> out_;

  size_t find_tag(size_t from) const {
    for (size_t i = s_.find('{', from); i != std::string::npos; i = s_.find('{', i + 1)) {
      if (i + 1 < s_.size() && (s_[i + 1] == '{' || s_[i + 1] == '%' || s_[i + 1] == '#')) return i;
    }
    return std::string::npos;
  }
  void emit_text(size_t begin, size_t end) {
    if (end > begin)
      out_.push_back({Token::kText, static_cast<uint32_t>(begin), s_.substr(begin, end - begin)});
  }
  // After a block or comment end: "-" eats all whitespace, "+" nothing,
  // else trim_blocks eats one newline.
  size_t after_end(size_t end, char sign) const {
    if (sign == '-') return skip_space(s_, end);
    if (sign != '+' && end < s_.size() && s_[end] == '\n') return end + 1;
    return end;
  }
  size_t comment(size_t tag, size_t inner) {
    const size_t close = s_.find("#}", inner);
    if (close == std::string::npos)
      syntax_error(static_cast<uint32_t>(tag), "missing end of comment tag");
    const char sign = close > inner ? s_[close - 1] : '\0';
    return after_end(close + 2, sign);
  }
  // {% raw %} (after "{%" and its sign, at `inner`): sets *end past it.
  bool raw_begin(size_t inner, size_t* end) const {
    size_t i = skip_space(s_, inner);
    if (s_.compare(i, 3, "raw") != 0) return false;
    i = skip_space(s_, i + 3);
    if (s_.compare(i, 3, "-%}") == 0) {
      *end = skip_space(s_, i + 3);
      return true;
    }
    if (s_.compare(i, 2, "%}") == 0) {
      *end = i + 2;
      return true;
    }
    return false;
  }
  size_t raw(size_t tag, size_t body) {
    for (size_t t = s_.find("{%", body); t != std::string::npos; t = s_.find("{%", t + 1)) {
      const char sign = t + 2 < s_.size() ? s_[t + 2] : '\0';
      size_t i = skip_space(s_, t + 2 + (sign == '-' || sign == '+' ? 1 : 0));
      if (s_.compare(i, 6, "endraw") != 0) continue;
      i = skip_space(s_, i + 6);
      char end_sign = '\0';
      if (s_.compare(i, 3, "-%}") == 0 || s_.compare(i, 3, "+%}") == 0) {
        end_sign = s_[i];
        i += 1;
      }
      if (s_.compare(i, 2, "%}") != 0) continue;
      size_t text_end = t;
      if (sign == '-') {
        text_end = rstrip_end(s_, body, t);
      } else if (sign != '+') {
        size_t l = body;
        for (size_t k = body; k < t; ++k)
          if (s_[k] == '\n') l = k + 1;
        if ((l > body || (body > 0 && s_[body - 1] == '\n')) && l < t && all_space(s_, l, t))
          text_end = l;
      }
      emit_text(body, text_end);
      return after_end(i + 2, end_sign);
    }
    syntax_error(static_cast<uint32_t>(tag), "missing end of raw directive");
  }

  size_t tag_tokens(bool var, size_t tag, size_t i) {
    out_.push_back({var ? Token::kVarBegin : Token::kBlockBegin, static_cast<uint32_t>(tag), {}});
    std::vector<char> balance;
    const Token::Kind end_kind = var ? Token::kVarEnd : Token::kBlockEnd;
    const char* close = var ? "}}" : "%}";
    for (;;) {
      i = skip_space(s_, i);
      if (i >= s_.size())
        syntax_error(static_cast<uint32_t>(tag), var ? "unexpected end of template, expected '}}'"
                                                     : "unexpected end of template, expected '%}'");
      const uint32_t at = static_cast<uint32_t>(i);
      if (balance.empty()) {
        if (s_.compare(i, 2, close) == 0) {
          out_.push_back({end_kind, at, {}});
          return var ? i + 2 : after_end(i + 2, '\0');
        }
        if ((s_[i] == '-' || (!var && s_[i] == '+')) && s_.compare(i + 1, 2, close) == 0) {
          out_.push_back({end_kind, at, {}});
          return s_[i] == '-' ? skip_space(s_, i + 3) : i + 3;
        }
      }
      const char c = s_[i];
      if (c >= '0' && c <= '9') {
        i = number(i);
      } else if (c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
        size_t j = i;
        while (j < s_.size() && (s_[j] == '_' || std::isalnum(static_cast<unsigned char>(s_[j]))))
          ++j;
        out_.push_back({Token::kName, at, s_.substr(i, j - i)});
        i = j;
      } else if (c == '\'' || c == '"') {
        i = string(i);
      } else {
        static const char* kOps2[] = {"//", "**", "==", "!=", ">=", "<="};
        std::string op;
        for (const char* o : kOps2)
          if (s_.compare(i, 2, o) == 0) op = o;
        if (op.empty()) {
          if (!std::strchr("+-/*%~[](){}><=.:|,;", c))
            syntax_error(
                at, std::string("unexpected character ") + repr(Value::string(s_.substr(i, 1))));
          op = std::string(1, c);
        }
        if (op == "(" || op == "[" || op == "{") {
          balance.push_back(op == "(" ? ')' : op == "[" ? ']' : '}');
        } else if (op == ")" || op == "]" || op == "}") {
          if (balance.empty()) syntax_error(at, "unexpected '" + op + "'");
          if (balance.back() != op[0])
            syntax_error(at, "unexpected '" + op + "', expected '" + balance.back() + "'");
          balance.pop_back();
        }
        out_.push_back({Token::kOp, at, op});
        i += op.size();
      }
    }
  }

  size_t digits(size_t i, bool hex = false) const {
    while (i < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[i])) ||
                             (hex && std::isxdigit(static_cast<unsigned char>(s_[i]))) ||
                             (s_[i] == '_' && i + 1 < s_.size() &&
                              std::isxdigit(static_cast<unsigned char>(s_[i + 1])))))
      ++i;
    return i;
  }
  size_t number(size_t i) {
    const uint32_t at = static_cast<uint32_t>(i);
    const bool after_dot =
        !out_.empty() && out_.back().kind == Token::kOp && out_.back().text == ".";
    auto clean = [](std::string t) {
      std::string r;
      for (char ch : t)
        if (ch != '_') r += ch;
      return r;
    };
    if (s_[i] == '0' && i + 1 < s_.size() && std::strchr("bBoOxX", s_[i + 1])) {
      const size_t j = digits(i + 2, true);
      out_.push_back({Token::kInt, at, clean(s_.substr(i, j - i))});
      return j;
    }
    size_t j = digits(i);
    bool is_float = false;
    if (!after_dot) {
      size_t k = j;
      if (k + 1 < s_.size() && s_[k] == '.' &&
          std::isdigit(static_cast<unsigned char>(s_[k + 1]))) {
        k = digits(k + 1);
        is_float = true;
      }
      if (k < s_.size() && (s_[k] == 'e' || s_[k] == 'E')) {
        size_t e = k + 1;
        if (e < s_.size() && (s_[e] == '+' || s_[e] == '-')) ++e;
        if (e < s_.size() && std::isdigit(static_cast<unsigned char>(s_[e]))) {
          k = digits(e);
          is_float = true;
        }
      }
      if (is_float) j = k;
    }
    out_.push_back({is_float ? Token::kFloat : Token::kInt, at, clean(s_.substr(i, j - i))});
    return j;
  }

  static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  // A string literal with Python's escapes (unicode-escape).
  size_t string(size_t i) {
    const uint32_t at = static_cast<uint32_t>(i);
    const char q = s_[i];
    std::string v;
    size_t j = i + 1;
    for (;;) {
      if (j >= s_.size()) syntax_error(at, "unterminated string literal");
      const char c = s_[j];
      if (c == q) break;
      if (c != '\\') {
        v += c;
        ++j;
        continue;
      }
      if (j + 1 >= s_.size()) syntax_error(at, "unterminated string literal");
      const char e = s_[j + 1];
      j += 2;
      switch (e) {
        case '\n': break;
        case '\\': v += '\\'; break;
        case '\'': v += '\''; break;
        case '"': v += '"'; break;
        case 'a': v += '\a'; break;
        case 'b': v += '\b'; break;
        case 'f': v += '\f'; break;
        case 'n': v += '\n'; break;
        case 'r': v += '\r'; break;
        case 't': v += '\t'; break;
        case 'v': v += '\v'; break;
        case 'x':
        case 'u':
        case 'U': {
          const int n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          uint32_t cp = 0;
          for (int k = 0; k < n; ++k, ++j) {
            const int h = j < s_.size() ? hexval(s_[j]) : -1;
            if (h < 0)
              syntax_error(at, std::string("truncated \\") + e + " escape in a string literal");
            cp = cp * 16 + static_cast<uint32_t>(h);
          }
          if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            syntax_error(at, "invalid code point in a \\" + std::string(1, e) + " escape");
          tok::append_utf8(v, cp);
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            uint32_t cp = static_cast<uint32_t>(e - '0');
            for (int k = 0; k < 2 && j < s_.size() && s_[j] >= '0' && s_[j] <= '7'; ++k, ++j)
              cp = cp * 8 + static_cast<uint32_t>(s_[j] - '0');
            tok::append_utf8(v, cp);
          } else if (e == 'N') {
            syntax_error(at, "\\N{...} escapes are not supported");
          } else {  // unknown escapes stay as written
            v += '\\';
            v += e;
          }
      }
    }
    out_.push_back({Token::kString, at, std::move(v)});
    return j + 1;
  }
};

}  // namespace

std::vector<Token> lex(const std::string& source) {
  return Lexer(source).run();
}

}  // namespace tmpl
}  // namespace oslo
