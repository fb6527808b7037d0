// oslo train's --data (train.hpp): text (.txt, .jsonl "text"), token ids in
// JSON lines (.jsonl "input_ids"), flat token files (nanoGPT's .bin) and
// Megatron-LM indexed datasets (.bin + .idx). Every reader checks what it
// reads against the file's size before it allocates or indexes, so a
// truncated or lying file is a named error, never an out-of-bounds read.
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "tools/oslo/train.hpp"

namespace oslo_cli {

int64_t TrainData::rows(int64_t seq_len) const {
  const auto n = static_cast<int64_t>(tokens.size());
  return n < seq_len ? 0 : (n - seq_len) / stride + 1;
}

void TrainData::copy_row(int64_t r, int64_t seq_len, int64_t* out) const {
  const int32_t* p = tokens.data() + r * stride;
  for (int64_t i = 0; i < seq_len; ++i) out[i] = p[i];
}

namespace {

constexpr int64_t kMaxId = INT32_MAX;  // ids are stored as int32

bool ends_with(const std::string& s, const char* ext) {
  const size_t n = std::strlen(ext);
  return s.size() > n && s.compare(s.size() - n, n, ext) == 0;
}

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// An open file and its size; die_all()s naming it when it cannot be opened.
struct File {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f{nullptr, std::fclose};
  std::string path;
  uint64_t size = 0;

  explicit File(const std::string& p) : path(p) {
    f.reset(std::fopen(p.c_str(), "rb"));
    if (!f) die_all("--data " + p + ": cannot open: " + std::strerror(errno));
    struct stat st;
    if (::fstat(fileno(f.get()), &st) != 0 || !S_ISREG(st.st_mode))
      die_all("--data " + p + ": not a regular file");
    size = static_cast<uint64_t>(st.st_size);
  }
  // Reads exactly n bytes (the size said they are there; fewer means the
  // file changed under us).
  void read(void* out, size_t n) {
    if (n && std::fread(out, 1, n, f.get()) != n)
      die_all("--data " + path + ": read error or the file shrank while being read");
  }
};

// Little-endian integers of `width` bytes (signed when `is_signed`).
int64_t load_le(const unsigned char* p, int width, bool is_signed) {
  uint64_t v = 0;
  for (int i = width - 1; i >= 0; --i) v = v << 8 | p[i];
  if (is_signed && width < 8 && (v >> (8 * width - 1)) & 1) v |= ~uint64_t(0) << (8 * width);
  return static_cast<int64_t>(v);
}

// Appends `bytes` of little-endian token ids of `width` bytes to `out`;
// ids outside [0, 2^31) are errors naming where(index).
void append_ids(File& file, uint64_t bytes, int width, bool is_signed, std::vector<int32_t>* out,
                const std::function<std::string(int64_t)>& where) {
  std::vector<unsigned char> buf(size_t(1) << 20);
  uint64_t left = bytes;
  while (left > 0) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(left, buf.size()));
    file.read(buf.data(), n);
    for (size_t i = 0; i < n; i += static_cast<size_t>(width)) {
      const int64_t v = load_le(buf.data() + i, width, is_signed);
      if (v < 0 || v > kMaxId)
        die_all(where(static_cast<int64_t>(out->size())) + ": " + std::to_string(v) +
                " is not a token id (ids are 0 to 2^31 - 1)");
      out->push_back(static_cast<int32_t>(v));
    }
    left -= n;
  }
}

// The first index i with starts[i] > x, minus one: the segment holding x.
size_t segment_of(const std::vector<int64_t>& starts, int64_t x) {
  return static_cast<size_t>(std::upper_bound(starts.begin(), starts.end(), x) - starts.begin()) -
         1;
}

// .txt (one document) and .jsonl (a JSON object per line: all "text" or all
// "input_ids"). Text documents are tokenized with the tokenizer's special
// tokens (as transformers' run_clm does) and each followed by EOS; ids are
// taken as they are.
TrainData read_text_or_jsonl(const Args& a, const std::string& path, bool jsonl) {
  std::ifstream f(path, std::ios::binary);
  if (!f) die_all("--data " + path + ": cannot open: " + std::strerror(errno));
  TrainData d;
  std::shared_ptr<oslo_tokenizer> tok;
  int64_t eos = -1, docs = 0;
  std::vector<int64_t> starts, lines;  // the first token of each document and its line
  std::vector<int64_t> ids;
  const auto add_text = [&](const std::string& text, const std::string& where) {
    if (!tok) {
      tok.reset(load_tokenizer(a, true), oslo_tokenizer_destroy);
      check(oslo_tokenizer_special_id(tok.get(), OSLO_SPECIAL_TOKEN_EOS, &eos), "tokenizer");
      if (eos < 0) die_all("the tokenizer names no EOS token (documents are joined with it)");
    }
    size_t n = 0;
    if (oslo_tokenizer_encode(tok.get(), text.data(), text.size(), 1, nullptr, 0, &n) != OSLO_OK)
      die_all(where + ": cannot tokenize: " + oslo_last_error());
    ids.resize(n);
    check(oslo_tokenizer_encode(tok.get(), text.data(), text.size(), 1, ids.data(), n, &n),
          "encode");
    ids.push_back(eos);
    for (int64_t v : ids) {
      if (v < 0 || v > kMaxId)
        die_all(where + ": the tokenizer gave id " + std::to_string(v) + ", not a token id");
      d.tokens.push_back(static_cast<int32_t>(v));
    }
    ++docs;
  };
  if (!jsonl) {
    std::stringstream ss;
    ss << f.rdbuf();
    if (f.bad()) die_all("--data " + path + ": read error");
    const std::string text = ss.str();
    if (!text.empty()) add_text(text, path);
    d.what = std::to_string(docs) + " document" + (docs == 1 ? "" : "s");
    d.where = [path](int64_t i) { return path + ": token " + std::to_string(i); };
    return d;
  }
  int mode = 0;  // 1: "text" lines, 2: "input_ids" lines (set by the first object)
  std::string line;
  for (int64_t no = 1; std::getline(f, line); ++no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(no);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception&) {
      die_all(where + ": not valid JSON (each line of a .jsonl file is one JSON object)");
    }
    if (mode == 0) mode = j.is_object() && j.contains("input_ids") ? 2 : 1;
    starts.push_back(static_cast<int64_t>(d.tokens.size()));
    lines.push_back(no);
    if (mode == 1) {
      if (!j.is_object() || !j.contains("text") || !j["text"].is_string())
        die_all(where +
                ": no \"text\" string (each line must be an object like {\"text\": \"...\"})");
      const std::string text = j["text"].get<std::string>();
      if (!text.empty()) add_text(text, where);
      continue;
    }
    if (!j.is_object() || !j.contains("input_ids") || !j["input_ids"].is_array())
      die_all(where +
              ": no \"input_ids\" array (the file's first line has one, so every line must: "
              "{\"input_ids\": [1, 2, 3]})");
    const auto& arr = j["input_ids"];
    for (size_t k = 0; k < arr.size(); ++k) {
      const auto& v = arr[k];
      const std::string at = where + ": input_ids[" + std::to_string(k) + "]";
      if (v.is_number_unsigned()) {
        const uint64_t u = v.get<uint64_t>();
        if (u > static_cast<uint64_t>(kMaxId))
          die_all(at + " = " + std::to_string(u) + " is not a token id (ids are 0 to 2^31 - 1)");
        d.tokens.push_back(static_cast<int32_t>(u));
      } else if (v.is_number_integer()) {
        die_all(at + " = " + std::to_string(v.get<int64_t>()) +
                " is not a token id (ids are 0 to 2^31 - 1)");
      } else {
        die_all(at + " is " + v.dump() + ", not an integer token id");
      }
    }
    if (!arr.empty()) ++docs;
  }
  if (f.bad()) die_all("--data " + path + ": read error");
  d.what = std::to_string(docs) + (mode == 2 ? " lines of token ids" : " document") +
           (mode != 2 && docs != 1 ? "s" : "");
  d.where = [path, starts, lines, mode](int64_t i) {
    if (starts.empty()) return path;
    const size_t s = segment_of(starts, i);
    return path + ":" + std::to_string(lines[s]) + (mode == 2 ? ": input_ids[" : ": token ") +
           std::to_string(i - starts[s]) + (mode == 2 ? "]" : " of the tokenized text");
  };
  return d;
}

// nanoGPT's flat token file: little-endian uint16 or uint32 ids, nothing else.
TrainData read_flat(const std::string& path, const std::string& dtype) {
  const int width = dtype == "uint32" ? 4 : 2;
  File file(path);
  if (file.size % static_cast<uint64_t>(width) != 0)
    die_all("--data " + path + ": " + std::to_string(file.size) +
            " bytes is not a whole number of " + dtype + " tokens (" + std::to_string(width) +
            " bytes each): the file is truncated or not " + dtype + " (--data-dtype)");
  TrainData d;
  d.where = [path, width](int64_t i) {
    return path + ": token " + std::to_string(i) + " (byte " + std::to_string(i * width) + ")";
  };
  d.tokens.reserve(static_cast<size_t>(file.size / static_cast<uint64_t>(width)));
  append_ids(file, file.size, width, false, &d.tokens, d.where);
  d.what = "a flat " + dtype + " token file";
  return d;
}

// Megatron-LM's indexed dataset (megatron/core/datasets/indexed_dataset.py):
// PREFIX.idx is the magic "MMIDIDX\0\0", the version (uint64, 1), the
// token dtype code (uint8), the sequence count n and the document count d
// (uint64 each), then n int32 sequence lengths (tokens), n int64 sequence
// pointers (byte offsets into PREFIX.bin) and d int64 document indices (the
// sequence index where each document ends, after a leading 0), all
// little-endian. PREFIX.bin holds the sequences' tokens, back to back as
// Megatron's writer puts them.
TrainData read_megatron(const std::string& prefix, const std::string& dtype_arg) {
  const std::string ipath = prefix + ".idx", bpath = prefix + ".bin";
  File idx(ipath);
  const auto bad = [&](const std::string& why) { die_all("--data " + ipath + ": " + why); };
  const uint64_t header = 9 + 8 + 1 + 8 + 8;
  if (idx.size < header)
    bad("truncated: " + std::to_string(idx.size) + " bytes, under the " + std::to_string(header) +
        "-byte header of a Megatron-LM index");
  unsigned char h[34];
  idx.read(h, sizeof h);
  if (std::memcmp(h, "MMIDIDX\0\0", 9) != 0)
    bad("not a Megatron-LM index (its first bytes are not the magic \"MMIDIDX\\x00\\x00\")");
  const auto u64 = [&](int at) { return static_cast<uint64_t>(load_le(h + at, 8, false)); };
  if (u64(9) != 1) bad("index version " + std::to_string(u64(9)) + ", only version 1 is known");
  const int code = h[17];
  struct Kind {
    const char* name;
    int width;
    bool is_signed;
  };
  static const Kind kinds[] = {{"?", 0, false},       {"uint8", 1, false},   {"int8", 1, true},
                               {"int16", 2, true},    {"int32", 4, true},    {"int64", 8, true},
                               {"float64", 0, false}, {"float32", 0, false}, {"uint16", 2, false}};
  if (code < 1 || code > 8) bad("unknown token dtype code " + std::to_string(code));
  const Kind kind = kinds[code];
  if (kind.width == 0) bad(std::string("its tokens are ") + kind.name + ", not integer token ids");
  if (!dtype_arg.empty() && dtype_arg != kind.name)
    die_all("--data-dtype " + dtype_arg + " but " + ipath + " says its tokens are " + kind.name +
                " (leave --data-dtype out for a Megatron-LM dataset)",
            2);
  const uint64_t n = u64(18), docs = u64(26);
  // The arrays' size, without overflow: the counts are bounded by the file.
  const uint64_t body = idx.size - header;
  if (n > body / 12 || docs > (body - n * 12) / 8 || header + n * 12 + docs * 8 != idx.size)
    bad("its header says " + std::to_string(n) + " sequences and " + std::to_string(docs) +
        " document indices, which do not fit its " + std::to_string(idx.size) +
        " bytes (a truncated or corrupt index)");
  std::vector<unsigned char> arrays(static_cast<size_t>(body));
  idx.read(arrays.data(), arrays.size());
  File bin(bpath);
  const auto w = static_cast<uint64_t>(kind.width);
  std::vector<int64_t> starts(static_cast<size_t>(n));  // first token of each sequence
  uint64_t at = 0;                                      // bytes of the sequences so far
  for (uint64_t s = 0; s < n; ++s) {
    const int64_t len = load_le(arrays.data() + 4 * s, 4, true);
    const auto ptr = static_cast<uint64_t>(load_le(arrays.data() + 4 * n + 8 * s, 8, false));
    if (len < 0) bad("sequence " + std::to_string(s) + " has length " + std::to_string(len));
    if (ptr != at)
      bad("sequence " + std::to_string(s) + " starts at byte " + std::to_string(ptr) +
          " of the .bin, not at byte " + std::to_string(at) +
          (s ? " where the one before ends" : "") + " (Megatron-LM writes them back to back)");
    if (static_cast<uint64_t>(len) > (bin.size - at) / w)
      die_all("--data " + bpath + ": truncated: " + std::to_string(bin.size) + " bytes, but " +
              ipath + "'s sequence " + std::to_string(s) + " ends at byte " +
              std::to_string(at + static_cast<uint64_t>(len) * w));
    starts[s] = static_cast<int64_t>(at / w);
    at += static_cast<uint64_t>(len) * w;
  }
  if (at != bin.size)
    die_all("--data " + bpath + ": " + std::to_string(bin.size) + " bytes, but " + ipath +
            "'s sequences cover " + std::to_string(at) +
            " (the .bin and .idx do not belong together)");
  std::vector<int64_t> doc_end(static_cast<size_t>(docs));
  for (uint64_t k = 0; k < docs; ++k) {
    const int64_t v = load_le(arrays.data() + 12 * n + 8 * k, 8, true);
    const int64_t prev = k ? doc_end[k - 1] : 0;
    if ((k == 0 && v != 0) || v < prev || v > static_cast<int64_t>(n))
      bad("document index " + std::to_string(k) + " is " + std::to_string(v) +
          " (they rise from 0 to the " + std::to_string(n) + " sequences)");
    doc_end[k] = v;
  }
  if (docs == 0 || doc_end.back() != static_cast<int64_t>(n))
    bad("its document indices do not end at the sequence count " + std::to_string(n));
  TrainData d;
  d.where = [bpath, starts, doc_end, w](int64_t i) {
    const size_t s = segment_of(starts, i);
    const auto doc = std::upper_bound(doc_end.begin(), doc_end.end(), static_cast<int64_t>(s)) -
                     doc_end.begin() - 1;
    return bpath + ": sequence " + std::to_string(s) + " (document " + std::to_string(doc) +
           "), token " + std::to_string(i - starts[s]) + " (byte " +
           std::to_string(static_cast<uint64_t>(i) * w) + ")";
  };
  d.tokens.reserve(static_cast<size_t>(bin.size / w));
  append_ids(bin, bin.size, kind.width, kind.is_signed, &d.tokens, d.where);
  d.what = std::to_string(docs - 1) + " document" + (docs == 2 ? "" : "s") + " in " +
           std::to_string(n) + " sequence" + (n == 1 ? "" : "s") + " of a Megatron-LM " +
           kind.name + " dataset";
  return d;
}

}  // namespace

TrainData read_train_data(const Args& a, int64_t seq_len) {
  const std::string path = a.get("data");
  const std::string dtype = a.get("data-dtype");
  if (a.has("data-dtype") && dtype != "uint16" && dtype != "uint32")
    die_all("--data-dtype must be uint16 or uint32, got \"" + dtype + "\"", 2);
  const bool txt = ends_with(path, ".txt"), jsonl = ends_with(path, ".jsonl");
  const bool bin = ends_with(path, ".bin"), idx = ends_with(path, ".idx");
  std::string prefix;
  if (bin || idx) {
    prefix = path.substr(0, path.size() - 4);
    if (bin && !exists(prefix + ".idx")) prefix.clear();  // a flat token file
  } else if (!txt && !jsonl && exists(path + ".bin") && exists(path + ".idx")) {
    prefix = path;
  }
  if (!txt && !jsonl && !bin && prefix.empty())
    die_all("--data " + path +
                ": must be a .txt (one document) or .jsonl (a \"text\" or \"input_ids\" per "
                "line) file, a .bin token file or a Megatron-LM dataset (PREFIX.bin + PREFIX.idx)",
            2);
  if (a.has("data-dtype") && (txt || jsonl))
    die_all("--data-dtype is for .bin token files, not " + path, 2);
  TrainData d;
  if (txt || jsonl) {
    d = read_text_or_jsonl(a, path, jsonl);
    d.stride = seq_len;
  } else {
    d = prefix.empty() ? read_flat(path, dtype.empty() ? "uint16" : dtype)
                       : read_megatron(prefix, dtype);
    d.stride = seq_len - 1;
  }
  return d;
}

void check_vocabulary(const TrainData& d, int64_t vocab_size) {
  for (size_t i = 0; i < d.tokens.size(); ++i)
    if (d.tokens[i] >= vocab_size)
      die_all(d.where(static_cast<int64_t>(i)) + ": token id " + std::to_string(d.tokens[i]) +
              " is outside the model's vocabulary (" + std::to_string(vocab_size) + " ids, 0 to " +
              std::to_string(vocab_size - 1) + ")");
}

}  // namespace oslo_cli
