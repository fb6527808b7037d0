#!/usr/bin/env bash
# README.md's C quick start works as written: its C program (the ```c block)
# is compiled against an installed oslo exactly as README says (pkg-config,
# strict C99, warnings as errors) and run on 2 ranks under the installed
# oslo-run.
# Usage: test_readme.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
awk '/^```c$/ { on = 1; n++; next } /^```$/ { on = 0 } on && n == 1' "$src/README.md" >"$tmp/prog.c"
if ! grep -q "int main" "$tmp/prog.c"; then
  echo "README.md has no C program in a \`\`\`c block"; echo "0 passed, 1 failed"; exit 1
fi
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
libdir=$(dirname "$(ls -d "$tmp"/prefix/lib*/pkgconfig | head -1)")
export PKG_CONFIG_PATH=$libdir/pkgconfig LD_LIBRARY_PATH=$libdir
# shellcheck disable=SC2046
${CC:-cc} -std=c99 -pedantic -Wall -Wextra -Werror "$tmp/prog.c" \
  $(pkg-config --cflags --libs oslo) -lm -o "$tmp/prog"
echo "README program compiled ($(wc -l <"$tmp/prog.c") lines)"
"$tmp/prefix/bin/oslo-run" --nproc-per-node 2 "$tmp/prog"
echo "README program ran on 2 ranks"
echo "2 passed, 0 failed"
