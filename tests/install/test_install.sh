#!/usr/bin/env bash
# Installs oslo into a temporary prefix and builds the out-of-tree example
# project (examples/outside) against it both ways a user would: with
# pkg-config (its Makefile) and with find_package(oslo 0.3 REQUIRED) (its
# CMakeLists.txt). Each program runs under the installed oslo-run on 2 ranks
# and must match the unsharded computation. The prefix is then moved and both
# builds are repeated: the installed package files are relocatable. A small
# program also checks that <oslo/dlpack.h> is installed where oslo.h says, and
# another that a SentencePiece .model tokenizer loads through the installed
# liboslo_sentencepiece.so, found next to liboslo (also after the move).
# Usage: test_install.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
cp -r "$src/examples/outside" "$tmp/outside"
cp "$src/examples/tp_mlp/tp_mlp.c" "$tmp/outside/prog.c"
passed=0
cat >"$tmp/dlpack_prog.c" <<'C'
#include <oslo.h>
#include <oslo/dlpack.h>
#include <stdio.h>

int main(void) {
  oslo_context *ctx = NULL;
  oslo_tensor *t = NULL;
  struct DLManagedTensorVersioned *m = NULL;
  int64_t shape[2] = {2, 3};
  if (oslo_context_create(NULL, &ctx) || oslo_tensor_create(ctx, OSLO_DTYPE_F32, 2, shape, &t) ||
      oslo_tensor_to_dlpack_versioned(t, &m)) {
    fprintf(stderr, "%s\n", oslo_last_error());
    return 1;
  }
  int good = m->version.major == DLPACK_MAJOR_VERSION && m->dl_tensor.strides &&
             m->dl_tensor.strides[0] == 3 && m->dl_tensor.strides[1] == 1;
  m->deleter(m);
  oslo_tensor_destroy(t);
  oslo_context_destroy(ctx);
  printf("DLPack %u.%u export: %s\n", DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION,
         good ? "ok" : "WRONG");
  return good ? 0 : 1;
}
C

check_prefix() {
  local prefix=$1 tag=$2
  local libdir
  libdir=$(dirname "$(ls -d "$prefix"/lib*/pkgconfig | head -1)")
  test -x "$prefix/bin/oslo-run"
  # Only the public headers and the library are installed: no core headers.
  test -f "$prefix/include/oslo.h"
  test -f "$prefix/include/oslo/dlpack.h"
  test ! -e "$prefix/include/core"
  test -f "$libdir/cmake/oslo/osloConfig.cmake"
  test -f "$libdir/cmake/oslo/osloConfigVersion.cmake"

  echo "== [$tag] pkg-config: $(PKG_CONFIG_PATH=$libdir/pkgconfig pkg-config --cflags --libs oslo)"
  rm -f "$tmp/outside/tp_mlp"
  PKG_CONFIG_PATH="$libdir/pkgconfig" make -s -C "$tmp/outside" SRC=prog.c tp_mlp
  LD_LIBRARY_PATH=$libdir "$prefix/bin/oslo-run" --nproc-per-node 2 "$tmp/outside/tp_mlp"
  passed=$((passed + 1))

  # <oslo/dlpack.h>, where oslo.h says it is, works with oslo.h.
  echo "== [$tag] #include <oslo/dlpack.h>"
  ${CC:-cc} -std=c99 -pedantic -Wall -Wextra -Werror \
    $(PKG_CONFIG_PATH=$libdir/pkgconfig pkg-config --cflags oslo) "$tmp/dlpack_prog.c" \
    $(PKG_CONFIG_PATH=$libdir/pkgconfig pkg-config --libs oslo) -o "$tmp/dlpack_prog"
  LD_LIBRARY_PATH=$libdir "$tmp/dlpack_prog"
  passed=$((passed + 1))

  # The SentencePiece shim is installed beside liboslo and is the one loaded
  # (not the build tree's); liboslo itself does not need libsentencepiece.
  echo "== [$tag] SentencePiece .model through $libdir/liboslo_sentencepiece.so"
  test -f "$libdir/liboslo_sentencepiece.so"
  if readelf -d "$libdir/liboslo.so.0" | grep -E 'NEEDED.*(sentencepiece|protobuf)'; then
    echo "installed liboslo links libsentencepiece / libprotobuf"; exit 1
  fi
  ${CC:-cc} -std=c99 -Wall -Wextra -Werror \
    $(PKG_CONFIG_PATH=$libdir/pkgconfig pkg-config --cflags oslo) "$src/tests/install/spm_prog.c" \
    $(PKG_CONFIG_PATH=$libdir/pkgconfig pkg-config --libs oslo) -o "$tmp/spm_prog"
  LD_LIBRARY_PATH=$libdir LD_DEBUG=files LD_DEBUG_OUTPUT="$tmp/ld_debug" \
    "$tmp/spm_prog" "$src/tests/tokenizer/fixtures/llama2_spm/tokenizer.model"
  if ! cat "$tmp"/ld_debug* | grep -q "file=$libdir/liboslo_sentencepiece.so "; then
    echo "liboslo_sentencepiece.so was not loaded from $libdir:"
    cat "$tmp"/ld_debug* | grep 'file=.*sentencepiece' || true
    exit 1
  fi
  rm -f "$tmp"/ld_debug*
  passed=$((passed + 1))

  echo "== [$tag] find_package(oslo 0.3 REQUIRED)"
  rm -rf "$tmp/build-cmake"
  cmake -S "$tmp/outside" -B "$tmp/build-cmake" -DCMAKE_PREFIX_PATH="$prefix" \
    -DTP_MLP_SOURCE="$tmp/outside/prog.c" >/dev/null
  cmake --build "$tmp/build-cmake" >/dev/null
  # No LD_LIBRARY_PATH: CMake gives the program a run path to the library.
  "$prefix/bin/oslo-run" --nproc-per-node 2 "$tmp/build-cmake/tp_mlp"
  passed=$((passed + 1))
}

check_prefix "$tmp/prefix" installed
mv "$tmp/prefix" "$tmp/moved-prefix"
check_prefix "$tmp/moved-prefix" moved

# Versions the package does not provide are refused: a later one, and while
# oslo is 0.x the earlier minor ones (0.1's and 0.2's APIs differ from 0.3's).
for v in 9.0 0.1 0.2; do
  mkdir -p "$tmp/v$v"
  cat >"$tmp/v$v/CMakeLists.txt" <<CM
cmake_minimum_required(VERSION 3.20)
project(v LANGUAGES C)
find_package(oslo $v QUIET)
if(oslo_FOUND)
  message(FATAL_ERROR "find_package(oslo $v) accepted version \${oslo_VERSION}")
endif()
CM
  cmake -S "$tmp/v$v" -B "$tmp/v$v/build" -DCMAKE_PREFIX_PATH="$tmp/moved-prefix" >/dev/null
  passed=$((passed + 1))
done
echo "install: $passed passed, 0 failed"
