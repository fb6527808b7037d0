#!/usr/bin/env bash
# The Go module against an installed oslo, as a Go user has it: installs
# oslo's lib and dev components (what liboslo0 and liboslo-dev hold) into a
# temporary prefix, then one of:
#
# suite (go_module_installed): copies the module (bindings/go) into a
#   checkout-shaped folder, sets only PKG_CONFIG_PATH (no
#   CGO_CFLAGS/CGO_LDFLAGS: cgo finds oslo through `#cgo pkg-config: oslo`),
#   runs `go generate ./...` (SWIG, headers from pkg-config), `go vet ./oslo
#   ./tests` and `go test ./...` from the module root (the whole Go suite,
#   fixtures found in the checkout).
# proxy (go_module_proxy): a module of one's own in a folder outside both
#   trees, with only GOPROXY=file://<prefix>/share/oslo/go-proxy (the module
#   proxy tree the dev component installs), GONOSUMDB, GOFLAGS=-mod=mod,
#   PKG_CONFIG_PATH and HOME/GOPATH/GOCACHE in the temporary folder: `go get
#   <module>@v<version>` (no replace, no checkout), then the MiniLM example
#   (examples/go/semantic_search) built in that module prints the C main
#   job's table on 2 ranks (tests/bindings/same_output.sh).
#
# Usage: module_installed.sh BUILD_DIR SOURCE_DIR GO suite
#        module_installed.sh BUILD_DIR SOURCE_DIR GO proxy MODULE VERSION OSLO_RUN C_EXAMPLE MODEL REFERENCE
set -euo pipefail
build=$1
src=$2
go=$3
mode=${4:-}
case "$mode" in
  suite) [ $# -eq 4 ] ;;
  proxy) [ $# -eq 10 ] ;;
  *) false ;;
esac || { echo "usage: $0 BUILD_DIR SOURCE_DIR GO suite|proxy ..." >&2; exit 2; }
tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
for c in lib dev; do
  cmake --install "$build" --prefix "$tmp/prefix" --component $c >/dev/null
done
libdir=$(dirname "$(ls -d "$tmp"/prefix/lib*/pkgconfig | head -1)")
unset CGO_CFLAGS CGO_LDFLAGS CGO_CPPFLAGS OSLO_FIXTURES OSLO_MINILM OSLO_MINILM_REFERENCE \
  OSLO_HEADER OSLO_TRAIN_CASE OSLO_TOKREF OSLO_BATCHREF OSLO_PADREF OSLO_CHATREF OSLO_TEMPLATES \
  WORLD_SIZE RANK

if [ "$mode" = proxy ]; then
  module=$5 version=$6 run=$7 c_example=$8 model=$9 ref=${10}
  proxy=$tmp/prefix/share/oslo/go-proxy
  echo "== the installed module proxy tree ($proxy)"
  (cd "$proxy" && find . -type f | sort)
  mkdir -p "$tmp/home" "$tmp/user/semantic_search"
  cp "$src/examples/go/semantic_search/main.go" "$tmp/user/semantic_search/"
  cd "$tmp/user/semantic_search"
  # What a user sets, and nothing else of this environment (no GOENV file,
  # no GOPATH or caches outside the temporary folder).
  user_env=(env -i PATH="$(dirname "$go"):/usr/bin:/bin" HOME="$tmp/home"
            GOPATH="$tmp/gopath" GOCACHE="$tmp/gocache"
            GOPROXY="file://$proxy" GONOSUMDB="$module" GOFLAGS=-mod=mod
            PKG_CONFIG_PATH="$libdir/pkgconfig")
  echo "== go mod init; go get $module@v$version"
  "${user_env[@]}" go mod init example.com/semantic_search
  "${user_env[@]}" go get "$module@v$version"
  cat go.mod
  ! grep -q replace go.mod || { echo "FAIL: go.mod has a replace"; exit 1; }
  grep -q "^$module v$version h1:" go.sum || { echo "FAIL: go.sum lacks $module v$version"; exit 1; }
  dir=$("${user_env[@]}" go list -m -f '{{.Dir}}' "$module")
  case "$dir" in
    "$tmp/gopath/pkg/mod/"*) echo "module in the module cache: $dir" ;;
    *) echo "FAIL: $module comes from $dir, not the module cache"; exit 1 ;;
  esac
  echo "== go build (the MiniLM example)"
  "${user_env[@]}" go build -o semantic_search .
  # The prefix is not on the loader's path (liboslo0's /usr/lib is).
  export LD_LIBRARY_PATH=$libdir
  sh "$src/tests/bindings/same_output.sh" "$run" "$c_example" "$model" "$ref" -- \
    ./semantic_search --device cpu
  echo "go get from the installed module proxy: OK"
  exit 0
fi
# A checkout: the module copied, the fixtures it reads linked.
co=$tmp/checkout
mkdir -p "$co/bindings" "$co/build"
cp -r "$src/bindings/go" "$co/bindings/go"
rm -f "$co/bindings/go/CMakeLists.txt" "$co"/bindings/go/oslo/internal/capi/capi{.go,_wrap.c}
for f in "$src"/bindings/*; do  # oslo.i and the other languages' parts it names
  [ "$(basename "$f")" = go ] || ln -s "$f" "$co/bindings/"
done
for d in include tests examples; do ln -s "$src/$d" "$co/$d"; done
[ -d "$build/minilm" ] && ln -s "$build/minilm" "$co/build/minilm"

export PKG_CONFIG_PATH=$libdir/pkgconfig PKG_CONFIG_LIBDIR=$libdir/pkgconfig
export GOFLAGS="-mod=mod -buildvcs=false" GOPROXY=off GOTOOLCHAIN=local GOENV=off GOTELEMETRY=off
export GOCACHE=$tmp/gocache GOPATH=$tmp/gopath CGO_ENABLED=1
# The prefix is not on the loader's path (liboslo-dev's is).
export LD_LIBRARY_PATH=$libdir
echo "== pkg-config: $(pkg-config --cflags --libs oslo)"
cd "$co/bindings/go"
echo "== go generate ./..."
"$go" generate ./...
echo "== go vet ./oslo ./tests (not the generated capi)"
"$go" vet ./oslo ./tests
echo "== go test ./..."
rc=0
"$go" test -count=1 -v ./... >"$tmp/test.out" 2>&1 || rc=$?
grep -E '^(ok|FAIL|\?) |^--- (FAIL|SKIP)' "$tmp/test.out" || true
# Every test runs: a skip (a fixture not found in the checkout) fails here.
if [ $rc != 0 ] || grep -q -- '^--- SKIP' "$tmp/test.out" ||
  ! grep -q '^ok .*/bindings/go/tests' "$tmp/test.out"; then
  cat "$tmp/test.out"
  exit 1
fi
echo "$(grep -c -- '^--- PASS' "$tmp/test.out") Go tests passed"

echo "go module against an installed oslo: OK"
