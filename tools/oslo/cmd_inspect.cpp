// oslo inspect: describes any checkpoint.
#include "tools/oslo/cli.hpp"

#include <cstdio>
#include <string>

namespace oslo_cli {

namespace {

const char* kInspectHelp =
    "usage: oslo inspect PATH [--json]\n"
    "Describes a Hugging Face folder, an oslo parallel checkpoint or a .safetensors file:\n"
    "format, parallel layout, config summary, and every tensor's dtype, shape and slices.\n";

}  // namespace

int cmd_inspect(int argc, char** argv) {
  Args a = parse(argc, argv, 2, {"json", "help"}, {});
  if (a.has("help")) return std::printf("%s", kInspectHelp), 0;
  if (a.pos.size() != 1) die("inspect needs one PATH (see --help)", 2);
  size_t n = 0;
  check(oslo_checkpoint_inspect(a.pos[0].c_str(), a.has("json"), nullptr, 0, &n), "inspect");
  std::string s(n + 1, '\0');
  check(oslo_checkpoint_inspect(a.pos[0].c_str(), a.has("json"), s.data(), s.size(), &n),
        "inspect");
  s.resize(n);
  std::fwrite(s.data(), 1, s.size(), stdout);
  if (!s.empty() && s.back() != '\n') std::printf("\n");
  return 0;
}

}  // namespace oslo_cli
