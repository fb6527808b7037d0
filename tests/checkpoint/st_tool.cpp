// Command-line access to oslo's safetensors code for the Python
// compatibility test:
//   st_tool check FILE...   one line per file: "OK" or "FORMAT <message>" /
//                           "IO <message>"; exit status 0
//   st_tool dump FILE       JSON: metadata and every tensor (dtype, shape,
//                           data_offsets, data as hex) read with the Reader
//   st_tool copy IN OUT     reads every tensor of IN and writes OUT with
//                           oslo's writer (same tensors and metadata)
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/checkpoint/safetensors.hpp"
#include "core/common/error.hpp"

namespace st = oslo::safetensors;

namespace {

std::string hex(const std::string& s) {
  static const char* k = "0123456789abcdef";
  std::string out;
  out.reserve(s.size() * 2);
  for (unsigned char c : s) {
    out.push_back(k[c >> 4]);
    out.push_back(k[c & 15]);
  }
  return out;
}

std::string read_all(const st::Reader& r, const st::TensorInfo& t) {
  std::string data(t.nbytes(), '\0');
  if (!data.empty()) r.read(t, 0, data.size(), &data[0]);
  return data;
}

int run(int argc, char** argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "check" && argc >= 3) {
    for (int i = 2; i < argc; ++i) {
      try {
        st::Reader r(argv[i]);
        std::printf("OK\n");
      } catch (const oslo::Error& e) {
        std::string msg = e.what();
        for (char& c : msg)
          if (c == '\n') c = ' ';
        std::printf("%s %s\n", e.status() == OSLO_ERR_FORMAT ? "FORMAT" : "IO", msg.c_str());
      }
    }
    return 0;
  }
  if (cmd == "dump" && argc == 3) {
    st::Reader r(argv[2]);
    nlohmann::json out;
    out["metadata"] = nullptr;
    if (r.header().has_metadata) out["metadata"] = r.header().metadata;
    out["tensors"] = nlohmann::json::array();
    for (const st::TensorInfo& t : r.tensors()) {
      nlohmann::json j;
      j["name"] = t.name;
      j["dtype"] = st::dtype_name(t.dtype);
      j["shape"] = t.shape;
      j["data_offsets"] = {t.begin, t.end};
      j["hex"] = hex(read_all(r, t));
      out["tensors"].push_back(j);
    }
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  if (cmd == "copy" && argc == 4) {
    st::Reader r(argv[2]);
    std::vector<std::string> datas;
    datas.reserve(r.tensors().size());
    std::vector<st::WriteEntry> entries;
    for (const st::TensorInfo& t : r.tensors()) {
      datas.push_back(read_all(r, t));
      entries.push_back({t.name, t.dtype, t.shape, datas.back().data()});
    }
    st::write_file(argv[3], entries, r.header().has_metadata ? &r.header().metadata : nullptr);
    return 0;
  }
  std::fprintf(stderr, "usage: st_tool check FILE... | dump FILE | copy IN OUT\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const oslo::Error& e) {
    std::fprintf(stderr, "st_tool: %s\n", e.what());
    return 1;
  }
}
