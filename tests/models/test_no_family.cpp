// Fails if code outside the architecture registry names a model family.
//
// Usage: no_family_test SOURCE_DIR
//
// Scans the C/C++ sources (.c .cc .cpp .h .hpp) under SOURCE_DIR/core,
// SOURCE_DIR/include and SOURCE_DIR/tools, except core/model/arch/ (the
// registry: one file per family), core/tokenizer/ (tokenizers follow the
// tokenizer files' own model types, not the model registry) and
// core/checkpoint/gguf_source.cpp (the GGUF format keys its metadata by the
// file's own architecture names, general.architecture and "<arch>.*": a
// translation of the file format into config.json, which the registry then
// reads like any other). Comments are
// skipped; everything else (identifiers, string literals) is searched,
// case-insensitively, for family names and model_type strings. Every hit is
// printed as file:line: name; the exit status is 1 if there is any.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

const char* const kNames[] = {"llama", "gpt2",    "gpt-2", "gpt_neox", "gptneox", "neox",  "bert",
                              "qwen",  "mistral", "phi3",  "phi-3",    "gemma",   "pythia"};

// The text with comments replaced by spaces (newlines kept, so line numbers
// hold). String and character literals are kept.
std::string strip_comments(const std::string& s) {
  std::string out = s;
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    if (s.compare(i, 2, "//") == 0) {
      while (i < n && s[i] != '\n') out[i++] = ' ';
    } else if (s.compare(i, 2, "/*") == 0) {
      out[i] = out[i + 1] = ' ';
      i += 2;
      while (i < n && s.compare(i, 2, "*/") != 0) {
        if (s[i] != '\n') out[i] = ' ';
        ++i;
      }
      if (i < n) out[i] = out[i + 1] = ' ', i += 2;
    } else if (s[i] == 'R' && i + 1 < n && s[i + 1] == '"' &&
               (i == 0 ||
                !(std::isalnum(static_cast<unsigned char>(s[i - 1])) || s[i - 1] == '_'))) {
      // Raw string R"delim( ... )delim".
      const size_t open = s.find('(', i + 2);
      if (open == std::string::npos) break;
      const std::string close = ")" + s.substr(i + 2, open - i - 2) + "\"";
      const size_t end = s.find(close, open + 1);
      i = end == std::string::npos ? n : end + close.size();
    } else if (s[i] == '"' ||
               (s[i] == '\'' && (i == 0 || !std::isxdigit(static_cast<unsigned char>(s[i - 1]))))) {
      const char q = s[i++];
      while (i < n && s[i] != q && s[i] != '\n') i += s[i] == '\\' ? 2 : 1;
      ++i;
    } else {
      ++i;
    }
  }
  return out;
}

struct Hit {
  std::string where;
  std::string name;
};

void scan(const std::string& label, const std::string& text, std::vector<Hit>* hits) {
  std::string code = strip_comments(text);
  std::transform(code.begin(), code.end(), code.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const char* name : kNames) {
    for (size_t at = code.find(name); at != std::string::npos; at = code.find(name, at + 1)) {
      const long line = 1 + std::count(code.begin(), code.begin() + static_cast<long>(at), '\n');
      hits->push_back({label + ":" + std::to_string(line), name});
    }
  }
}

bool skipped(const fs::path& rel) {
  const std::string r = rel.generic_string();
  return r.rfind("core/model/arch/", 0) == 0 || r.rfind("core/tokenizer/", 0) == 0 ||
         r == "core/checkpoint/gguf_source.cpp";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s SOURCE_DIR\n", argv[0]);
    return 2;
  }
  // The scanner itself: a name in code counts, in a comment it does not.
  {
    std::vector<Hit> h;
    scan("self", "int a = 1; // llama\n/* Gemma\n */ const char* t = \"qwen2\"; // \"bert\"\n", &h);
    scan("self", "bool f(Family x) { return x == Family::GPT2; }\n", &h);
    if (h.size() != 2 || h[0].where != "self:3" || h[0].name != std::string("qwen") ||
        h[1].name != std::string("gpt2")) {
      std::fprintf(stderr, "FAIL: the scanner's self-test (%zu hits)\n", h.size());
      return 1;
    }
  }
  const fs::path root = argv[1];
  std::vector<Hit> hits;
  size_t files = 0;
  bool saw_model = false;
  for (const char* top : {"core", "include", "tools"}) {
    if (!fs::is_directory(root / top)) {
      std::fprintf(stderr, "FAIL: %s is not a directory\n", (root / top).c_str());
      return 1;
    }
    for (const auto& e : fs::recursive_directory_iterator(root / top)) {
      if (!e.is_regular_file()) continue;
      const std::string ext = e.path().extension().string();
      if (ext != ".c" && ext != ".cc" && ext != ".cpp" && ext != ".h" && ext != ".hpp") continue;
      const fs::path rel = fs::relative(e.path(), root);
      if (skipped(rel)) continue;
      std::ifstream f(e.path(), std::ios::binary);
      std::ostringstream ss;
      ss << f.rdbuf();
      scan(rel.generic_string(), ss.str(), &hits);
      ++files;
      saw_model = saw_model || rel.generic_string() == "core/model/model.cpp";
    }
  }
  if (!saw_model) {
    std::fprintf(stderr, "FAIL: core/model/model.cpp not found under %s\n", argv[1]);
    return 1;
  }
  for (const Hit& h : hits)
    std::printf("%s: names a family (\"%s\")\n", h.where.c_str(), h.name.c_str());
  std::printf("%zu files scanned, %zu hits\n", files, hits.size());
  if (!hits.empty()) {
    std::printf("FAIL: only core/model/arch/ may name model families (docs/MODELS.md)\n");
    return 1;
  }
  std::printf("PASS\n");
  return 0;
}
