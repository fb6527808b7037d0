// The chat templates' cases of tests/bindings/cases.txt (chat_template_*)
// through the C ABI only: the C column the bindings repeat
// (python_chat_template_*, java_chat_template_*, go_chat_template_*).
// Linked into c_cases (c_cases.cpp dispatches). The records are
// tests/bindings/chat_template_reference.txt (transformers' renders; the
// format in make_chat_template_reference.py); each is checked with the call
// a C program makes: oslo_tokenizer_apply_chat_template when only
// add_generation_prompt is set, else oslo_chat_template_apply.
#include "c_cases.hpp"

#include <oslo.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace cases {
namespace {

using Record = std::map<std::string, std::string>;

std::string unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\') {
      out += s[i];
      continue;
    }
    check(i + 1 < s.size(), "a lone backslash ends '" + s + "'");
    switch (s[++i]) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case 's': out += ' '; break;
      case '\\': out += '\\'; break;
      default: throw Failure(std::string("unknown escape \\") + s[i]);
    }
  }
  return out;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  check(f.good(), "cannot read " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The records of one case (folder, options or errors).
std::vector<Record> records(const std::string& path, const std::string& which) {
  std::istringstream in(read_file(path));
  std::vector<Record> all;
  Record cur;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    if (line == "end") {
      if (cur["case"] == which) all.push_back(cur);
      cur.clear();
      continue;
    }
    const size_t sp = line.find(' ');
    cur[line.substr(0, sp)] = sp == std::string::npos ? "" : line.substr(sp + 1);
  }
  check(!all.empty(), "no records of case " + which + " in " + path);
  return all;
}

struct Result {
  oslo_status status = OSLO_OK;
  std::string text, error;
};

// Calls fn(out, capacity, length) twice, as the sizing rule intends.
template <typename F>
Result sized(F fn) {
  Result r;
  size_t n = 0;
  r.status = fn(nullptr, 0, &n);
  if (r.status != OSLO_OK) {
    r.error = oslo_last_error();
    return r;
  }
  std::vector<char> buf(n + 1, '\x7f');
  size_t n2 = 0;
  OK(fn(buf.data(), buf.size(), &n2));
  check(n2 == n && buf[n] == '\0', "the second call disagrees with the first");
  r.text.assign(buf.data(), n);
  return r;
}

struct Checker {
  std::string dir;  // tests/template
  std::map<std::string, Tokenizer> toks;

  oslo_tokenizer* tok(const std::string& folder) {
    if (folder == "-") return nullptr;
    auto it = toks.find(folder);
    if (it != toks.end()) return it->second.get();
    oslo_tokenizer* t = nullptr;
    OK(oslo_tokenizer_load((dir + "/folders/" + folder).c_str(), &t));
    return toks.emplace(folder, Tokenizer(t)).first->second.get();
  }

  // The record's template: "" for none (the tokenizer's).
  std::string tmpl(const std::string& spec) const {
    if (spec == "-") return "";
    const size_t sp = spec.find(' ');
    const std::string kind = spec.substr(0, sp), v = spec.substr(sp + 1);
    if (kind == "name") return v;
    if (kind == "text") return unescape(v);
    check(kind == "file", "template '" + spec + "'");
    return read_file(dir + "/fixtures/" + v);
  }

  Result run(Record& r) {
    oslo_tokenizer* t = tok(r["folder"]);
    if (r["kind"] == "has") {
      int has = -1;
      Result res;
      res.status = oslo_tokenizer_has_chat_template(t, &has);
      res.text = std::to_string(has);
      if (res.status != OSLO_OK) res.error = oslo_last_error();
      return res;
    }
    if (r["kind"] == "source") {
      const char* name = r["name"] == "-" ? nullptr : r["name"].c_str();
      return sized([&](char* out, size_t cap, size_t* len) {
        return oslo_tokenizer_get_chat_template(t, name, out, cap, len);
      });
    }
    const std::string messages = r["messages"], tp = tmpl(r["template"]);
    const std::string variables = r["variables"] == "{}" ? "" : r["variables"];
    const int agp = r["add_generation_prompt"] == "1", cont = r["continue_final_message"] == "1";
    if (t && tp.empty() && variables.empty() && !cont)
      return sized([&](char* out, size_t cap, size_t* len) {
        return oslo_tokenizer_apply_chat_template(t, messages.c_str(), agp, out, cap, len);
      });
    oslo_chat_template_options o;
    OK(oslo_chat_template_options_init(&o, OSLO_CHAT_TEMPLATE_OPTIONS_VERSION));
    o.add_generation_prompt = agp;
    o.continue_final_message = cont;
    o.chat_template = tp.empty() ? nullptr : tp.c_str();
    o.variables_json = variables.empty() ? nullptr : variables.c_str();
    return sized([&](char* out, size_t cap, size_t* len) {
      return oslo_chat_template_apply(t, messages.c_str(), &o, out, cap, len);
    });
  }

  void one(Record& r) {
    const std::string label = r["label"];
    const Result res = run(r);
    if (r.count("error")) {
      const std::string e = r["error"];
      const size_t sp = e.find(' ');
      const std::string status = "OSLO_ERR_" + e.substr(0, sp), sub = unescape(e.substr(sp + 1));
      const std::string got = oslo_status_string(res.status);
      check(
          got.rfind(status + ":", 0) == 0 && res.error.find(sub) != std::string::npos,
          label + ": want " + status + " with '" + sub + "', got " + got + " '" + res.error + "'");
      return;
    }
    check(res.status == OSLO_OK, label + ": " + res.error);
    const std::string want = r["kind"] == "has" ? r["expected"] : unescape(r["expected"]);
    check(res.text == want,
          label + "\n  want " + json(want).dump() + "\n  got  " + json(res.text).dump());
  }
};

}  // namespace

void chat_template_case(const std::string& which, const std::string& reference,
                        const std::string& template_dir) {
  Checker c{template_dir, {}};
  std::vector<Record> recs = records(reference, which);
  for (auto& r : recs) c.one(r);
  std::printf("%zu records of case %s checked\n", recs.size(), which.c_str());
}

}  // namespace cases
