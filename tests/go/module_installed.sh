#!/usr/bin/env bash
# The Go module against an installed oslo, as a Go user has it: installs
# oslo's lib and dev components (what liboslo0 and liboslo-dev hold) into a
# temporary prefix, copies the module (bindings/go) into a checkout-shaped
# folder, sets only PKG_CONFIG_PATH (no CGO_CFLAGS/CGO_LDFLAGS: cgo finds
# oslo through `#cgo pkg-config: oslo`), runs `go generate ./...` (SWIG,
# headers from pkg-config), `go vet ./oslo ./tests` and `go test ./...` from the
# module root (the whole Go suite, fixtures found in the checkout), then
# builds and runs a module of its own that requires
# github.com/oslo/oslo/bindings/go (a replace to the copy: nothing is
# published) and prints oslo's version.
# Usage: module_installed.sh BUILD_DIR SOURCE_DIR GO
set -euo pipefail
build=$1
src=$2
go=$3
tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
for c in lib dev; do
  cmake --install "$build" --prefix "$tmp/prefix" --component $c >/dev/null
done
libdir=$(dirname "$(ls -d "$tmp"/prefix/lib*/pkgconfig | head -1)")
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

unset CGO_CFLAGS CGO_LDFLAGS CGO_CPPFLAGS OSLO_FIXTURES OSLO_MINILM OSLO_MINILM_REFERENCE \
  OSLO_HEADER OSLO_TRAIN_CASE OSLO_TOKREF WORLD_SIZE RANK
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

echo "== a module of one's own: require github.com/oslo/oslo/bindings/go"
mkdir -p "$tmp/consumer"
cat >"$tmp/consumer/go.mod" <<MOD
module example.com/consumer

go 1.19

require github.com/oslo/oslo/bindings/go v0.2.0

replace github.com/oslo/oslo/bindings/go => $co/bindings/go
MOD
cat >"$tmp/consumer/main.go" <<'GO'
package main

import (
	"fmt"
	"os"

	"github.com/oslo/oslo/bindings/go/oslo"
)

func main() {
	ctx, err := oslo.NewContext("")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer ctx.Close()
	fmt.Println("oslo", oslo.Version())
}
GO
cd "$tmp/consumer"
"$go" build -o consumer .
out=$(./consumer)
echo "$out"
want=$(pkg-config --modversion oslo)
[ "$out" = "oslo $want" ] || { echo "expected: oslo $want"; exit 1; }
echo "go module against an installed oslo: OK"
