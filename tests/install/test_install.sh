#!/usr/bin/env bash
# Installs oslo into a temporary prefix, builds the example as a program
# outside the tree with `cc prog.c $(pkg-config --cflags --libs oslo)`, and
# runs it under the installed oslo-run on 2 ranks: it must match the
# unsharded layer.
set -euo pipefail
build=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
mkdir "$tmp/user"
cp "$src/examples/tp_mlp/tp_mlp.c" "$tmp/user/prog.c"
cd "$tmp/user"
libdir=$(ls -d "$tmp"/prefix/lib*/pkgconfig | head -1)
export PKG_CONFIG_PATH=$libdir
echo "pkg-config --cflags --libs oslo: $(pkg-config --cflags --libs oslo)"
cc -std=c99 -Wall -Wextra -Werror -D_DEFAULT_SOURCE prog.c $(pkg-config --cflags --libs oslo) -lm -o prog
test -x "$tmp/prefix/bin/oslo-run"
LD_LIBRARY_PATH=$(dirname "$libdir") "$tmp/prefix/bin/oslo-run" --nproc-per-node 2 ./prog
# Only the public header and the library are needed: no core headers installed.
test ! -e "$tmp/prefix/include/core"
echo "install: 3 passed, 0 failed"
