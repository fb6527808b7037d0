// The template engine (white box: core/template) against transformers' own
// Jinja2 environment: the "expressions" table of reference.json (small
// templates: operators, literals, filters, tests, statements, whitespace
// control, errors), then hostile templates that must end in a named error
// within the limits, never a crash or a hang, and a deterministic fuzz.
// Usage: test_template_expr path/to/reference.json
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>

#include "core/common/error.hpp"
#include "core/template/template.hpp"

using oslo::tmpl::Limits;
using oslo::tmpl::Template;
using oslo::tmpl::Value;

namespace {
int g_failed = 0, g_passed = 0;

void check(bool ok, const std::string& what) {
  if (ok) {
    ++g_passed;
  } else {
    ++g_failed;
    std::cerr << "FAIL: " << what << "\n";
  }
}

struct Result {
  bool ok = false;
  std::string out;
  oslo_status status = OSLO_OK;
  std::string error;
};

Result render(const std::string& src, const nlohmann::ordered_json& vars,
              const Limits& limits = Limits()) {
  Result r;
  try {
    std::vector<std::pair<std::string, Value>> v;
    for (auto it = vars.begin(); it != vars.end(); ++it)
      v.emplace_back(it.key(), oslo::tmpl::from_json(*it));
    Template t(src);
    r.out = t.render(v, limits);
    r.ok = true;
  } catch (const oslo::Error& e) {
    r.status = e.status();
    r.error = e.what();
  }
  return r;
}

void reference_table(const nlohmann::ordered_json& ref) {
  size_t n = 0;
  for (const auto& c : ref["expressions"]) {
    const std::string src = c["template"].get<std::string>();
    const Result r = render(src, c["variables"]);
    const std::string name = "expression " + std::to_string(n++) + " " + src.substr(0, 80);
    if (c.contains("expected")) {
      check(r.ok && r.out == c["expected"].get<std::string>(),
            name + "\n  want " + c["expected"].dump() + "\n  got  " +
                (r.ok ? nlohmann::json(r.out).dump() : r.error));
    } else if (c.value("syntax", false)) {
      check(!r.ok && r.status == OSLO_ERR_FORMAT && r.error.rfind("line ", 0) == 0,
            name + ": want OSLO_ERR_FORMAT with a position, got " + (r.ok ? r.out : r.error));
    } else {
      check(!r.ok && r.status == OSLO_ERR_INVALID_ARGUMENT && r.error.rfind("line ", 0) == 0,
            name + ": want OSLO_ERR_INVALID_ARGUMENT (jinja2: " + c["error"].get<std::string>() +
                "), got " + (r.ok ? r.out : r.error));
      // transformers' raise_exception message comes through.
      if (c["error"] == "TemplateError")
        check(r.error.find(c["message"].get<std::string>()) != std::string::npos,
              name + ": the raise_exception message: " + r.error);
    }
  }
  std::cout << n << " reference expressions checked\n";
}

void expect_error(const std::string& what, const std::string& src, oslo_status status,
                  const std::string& needle, const Limits& limits = Limits()) {
  const auto t0 = std::chrono::steady_clock::now();
  const Result r = render(src, nlohmann::ordered_json::object(), limits);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  check(!r.ok && r.status == status && r.error.find(needle) != std::string::npos,
        what + ": want status " + std::to_string(status) + " with '" + needle + "', got " +
            (r.ok ? "output" : std::to_string(r.status) + " " + r.error));
  check(s < 120, what + ": took " + std::to_string(s) + " s (a hang?)");
}

void hostile() {
  const oslo_status kInv = OSLO_ERR_INVALID_ARGUMENT, kFmt = OSLO_ERR_FORMAT;
  expect_error("nested huge loops",
               "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
               kInv, "loop iterations");
  expect_error("range beyond the sandbox's", "{{ range(10000000) | length }}", kInv,
               "range too big");
  expect_error("doubling string",
               "{% set ns = namespace(s='xx') %}{% for i in range(100) %}"
               "{% set ns.s = ns.s + ns.s %}{% endfor %}",
               kInv, "bytes");
  expect_error("string repetition", "{{ 'x' * 1000000000 }}", kInv, "repetition");
  expect_error("list repetition", "{{ [1] * 1000000000 }}", kInv, "repetition");
  expect_error("unbounded macro recursion",
               "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", kInv, "nests deeper");
  expect_error("deep parentheses",
               "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}", kFmt,
               "nested deeper");
  std::string ifs;
  for (int i = 0; i < 3000; ++i) ifs += "{% if true %}";
  expect_error("deep blocks", ifs, kFmt, "nested deeper");
  expect_error("deep unary", "{{ " + std::string(3000, '-') + "1 }}", kFmt, "nested deeper");
  expect_error("deep list value",
               "{% set ns = namespace(l=[]) %}{% for i in range(100) %}"
               "{% set ns.l = [ns.l] %}{% endfor %}",
               kInv, "nested deeper");
  expect_error("namespace cycle", "{% set ns = namespace() %}{% set ns.me = ns %}",
               OSLO_ERR_NOT_SUPPORTED, "namespace inside a namespace");
  expect_error("quadratic copies",
               "{% set ns = namespace(s='x' * 1000000) %}"
               "{% for i in range(100000) %}{% set ns.t = ns.s ~ 'y' %}{% endfor %}",
               kInv, "bytes of strings");
  expect_error("integer overflow", "{{ 9223372036854775807 + 1 }}", kInv, "overflow");
  expect_error("big literal", "{{ 99999999999999999999 }}", kFmt, "out of range");
  expect_error("unterminated variable", "abc {{ x", kFmt, "expected '}}'");
  expect_error("unterminated block", "{% if x %}abc", kFmt, "unexpected end of template");
  expect_error("unterminated comment", "{# abc", kFmt, "comment");
  expect_error("unterminated string", "{{ 'abc }}", kFmt, "unterminated string");
  expect_error("unterminated raw", "{% raw %}abc", kFmt, "raw");
  expect_error("not UTF-8", "abc \xff\xfe", kFmt, "UTF-8");
  expect_error("raise_exception", "line one\n  {{ raise_exception('Roles must alternate') }}", kInv,
               "line 2, column 21: raise_exception: Roles must alternate");
  expect_error("position of a runtime error", "ok\nok {{ 1 }}\n{{ x.y }}", kInv,
               "line 3, column 5: 'x' is undefined");
  expect_error("position of a parse error", "a\n\n  {% for %}", kFmt, "line 3, column 10");
  // Small limits: each one trips.
  Limits small;
  small.max_steps = 1000;
  expect_error("step limit", "{% for i in range(10000) %}{{ i }}{% endfor %}", kInv,
               "evaluation steps", small);
  small = Limits();
  small.max_output_bytes = 100;
  expect_error("output limit", "{% for i in range(1000) %}xx{% endfor %}", kInv, "output", small);
  small = Limits();
  small.max_depth = 20;
  expect_error("depth limit", "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", kInv,
               "deeper than 20", small);
  small = Limits();
  small.max_loop_iterations = 10;
  expect_error("iteration limit", "{% for i in range(11) %}{% endfor %}", kInv, "loop iterations",
               small);
  small = Limits();
  small.max_work_bytes = 1000;
  expect_error("work limit",
               "{% for i in range(100) %}{% set s = 'abcdefghijklmnop' ~ i %}{% endfor %}", kInv,
               "bytes of strings", small);
  // A template too large to parse at all.
  expect_error("source too large", std::string(Template::kMaxSourceBytes + 1, 'x'), kFmt,
               "at most");
  // Under the limits nothing trips (the same template with room to spare).
  const Result ok = render("{% for i in range(10) %}{{ i }}{% endfor %}", {});
  check(ok.ok && ok.out == "0123456789", "a small loop renders");
}
// Deterministic fuzzing: the reference's templates and the family
// templates, bytes inserted, deleted and copied at random; each render ends
// in OSLO_OK or a named error (never OSLO_ERR_INTERNAL, a crash or a hang;
// tools/test.sh runs this under ASan + UBSan).
void fuzz(const nlohmann::ordered_json& ref, const std::string& fixtures) {
  std::vector<std::string> sources;
  for (const auto& c : ref["expressions"]) sources.push_back(c["template"].get<std::string>());
  for (const char* f : {"llama31", "qwen25", "qwen3", "mistral_v3", "gemma3", "zephyr"}) {
    std::ifstream in(fixtures + "/" + f + ".jinja");
    std::stringstream ss;
    ss << in.rdbuf();
    sources.push_back(ss.str());
  }
  const nlohmann::ordered_json vars = nlohmann::ordered_json::parse(
      R"({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
          {"role": "assistant", "content": "a"}], "add_generation_prompt": true,
          "bos_token": "<s>", "eos_token": "</s>", "tools": null, "x": [1, {"a": "b"}]})");
  const std::string alphabet = "{}%#-+()[]'\"|.~ \n\\abcxyz0123456789=<>!,:*/";
  std::mt19937 rng(20261129);
  int counts[3] = {0, 0, 0};
  for (int i = 0; i < 5000; ++i) {
    std::string s = sources[rng() % sources.size()];
    const int edits = 1 + static_cast<int>(rng() % 6);
    for (int e = 0; e < edits; ++e) {
      const size_t p = s.empty() ? 0 : rng() % (s.size() + 1);
      const unsigned op = rng() % 10;
      if (op < 4) {
        s.insert(p, 1, alphabet[rng() % alphabet.size()]);
      } else if (op < 8) {
        if (!s.empty()) s.erase(std::min(p, s.size() - 1), 1);
      } else if (!s.empty()) {
        const size_t q = rng() % s.size();
        s.insert(p, s.substr(q, 1 + rng() % 20));
      }
    }
    const Result r = render(s, vars);
    const bool named = r.ok || r.status == OSLO_ERR_FORMAT ||
                       r.status == OSLO_ERR_INVALID_ARGUMENT || r.status == OSLO_ERR_NOT_SUPPORTED;
    if (!named)
      check(false, "fuzz case " + std::to_string(i) + ": status " + std::to_string(r.status) + " " +
                       r.error);
    ++counts[r.ok ? 0 : r.status == OSLO_ERR_FORMAT ? 1 : 2];
  }
  check(counts[0] > 100 && counts[1] > 100 && counts[2] > 10, "the fuzz cases are varied");
  std::cout << "fuzz: " << counts[0] << " rendered, " << counts[1] << " refused when parsing, "
            << counts[2] << " failed when rendering\n";
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: " << argv[0] << " reference.json\n";
    return 2;
  }
  std::ifstream f(argv[1]);
  std::stringstream ss;
  ss << f.rdbuf();
  const nlohmann::ordered_json ref = nlohmann::ordered_json::parse(ss.str());
  reference_table(ref);
  hostile();
  const std::string path = argv[1];
  fuzz(ref, path.substr(0, path.find_last_of('/') + 1) + "fixtures");
  std::cout << g_passed << " passed, " << g_failed << " failed\n";
  return g_failed ? 1 : 0;
}
