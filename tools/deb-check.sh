#!/usr/bin/env bash
# The Debian packages on a clean Debian 12, as a user installs them: builds
# oslo, makes the packages with `cpack -G DEB`, removes the build
# dependencies again (so that the libraries liboslo0 needs are no longer
# there), installs the packages with `apt install ./liboslo0_*.deb
# ./liboslo-dev_*.deb ./oslo-tools_*.deb` (apt fetches what their Depends
# name, oneDNN among them), then builds examples/outside against the installed oslo with
# pkg-config (its Makefile) and with find_package (its CMakeLists.txt), runs
# both on 2 ranks under the installed oslo-run and checks that every rank
# prints MATCH. A small program also loads a SentencePiece .model through
# the packaged shim (libsentencepiece comes from liboslo0's Depends), and
# the main job (examples/minilm/semantic_search.c, the real MiniLM fetched
# by tools/fetch-minilm.sh) built against the packages prints its table and
# MATCH on 2 ranks. A Go user's module (examples/go/semantic_search in a
# folder of its own) gets the binding with `go get` from the module proxy
# tree liboslo-dev installs (/usr/share/oslo/go-proxy, no replace, SWIG
# purged) and prints the C main job's table and MATCH on 2 ranks.
#
# It changes the system it runs on (apt-get install / purge as root): run it
# on a throwaway machine, e.g. a brand-new minimal Debian 12:
#
#   ../shared/tools/fresh-machine.sh "bash tools/deb-check.sh"
#
# OSLO_DEB_BUILD names the build folder (default build-deb).
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD
build=${OSLO_DEB_BUILD:-build-deb}
export DEBIAN_FRONTEND=noninteractive
[ "$(id -u)" -eq 0 ] || { echo "deb-check.sh installs packages: run it as root on a throwaway system" >&2; exit 2; }

echo "== build dependencies (tools/deps.sh), the packaging tools (dpkg-dev, file), SWIG and Go"
bash tools/deps.sh
# swig4.0 and golang-go: the Go binding, whose module proxy tree liboslo-dev
# ships (share/oslo/go-proxy). A Go user needs Go, not SWIG: swig4.0 is
# purged with the build dependencies below.
apt-get install -y -qq --no-install-recommends dpkg-dev file swig4.0 golang-go >/dev/null

echo "== build (Release, prefix /usr)"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/usr \
  -DOSLO_BUILD_TESTS=OFF -DOSLO_BUILD_BENCH=OFF -DOSLO_BUILD_PYTHON=OFF -DOSLO_BUILD_JAVA=OFF \
  -DOSLO_BUILD_GO=ON -DOSLO_BACKEND_TORCH=OFF -DOSLO_BUILD_CUDA=OFF >/dev/null
cmake --build "$build" -j"$(nproc)"

echo "== cpack -G DEB"
(cd "$build" && cpack -G DEB)
debs=$(mktemp -d)
cp "$build"/liboslo0_*.deb "$build"/liboslo-dev_*.deb "$build"/oslo-tools_*.deb "$debs/"
for d in "$debs"/*.deb; do
  echo "-- $(basename "$d")"
  dpkg-deb --field "$d" Package Version Section Depends
done
# Nothing may come from the build tree from here on.
rm -rf "$build"

echo "== removing the build dependencies' libraries"
apt-get purge -y -qq libdnnl-dev libgloo-dev nlohmann-json3-dev libpcre2-dev libutf8proc-dev \
  libsentencepiece-dev swig4.0 >/dev/null
apt-get autoremove -y -qq >/dev/null
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
# The packages liboslo0's Depends names (dpkg-shlibdeps computed them).
needs=$(dpkg-deb --field "$debs"/liboslo0_*.deb Depends | tr ',' '\n' | sed 's/^ *//; s/[ (].*//' |
  grep -v '^$')
absent=()
for p in $needs; do installed "$p" || absent+=("$p"); done
echo "liboslo0 depends on: $(echo $needs); not installed now: ${absent[*]:-none}"
# oneDNN came only with the build dependencies: apt must fetch it again.
case " ${absent[*]:-} " in
  *" libdnnl"*) ;;
  *) echo "oneDNN (libdnnl*) is still installed, or liboslo0 does not depend on it" >&2; exit 1 ;;
esac

echo "== apt install ./liboslo0_*.deb ./liboslo-dev_*.deb ./oslo-tools_*.deb"
(cd "$debs" && apt-get install -y -qq ./liboslo0_*.deb ./liboslo-dev_*.deb ./oslo-tools_*.deb \
  >/dev/null)
for p in liboslo0 liboslo-dev oslo-tools $needs; do
  installed "$p" || { echo "$p is not installed" >&2; exit 1; }
  printf '  %-22s %s\n' "$p" "$(dpkg-query -W -f='${Version}' "$p")"
done
test -x /usr/bin/oslo-run
test -x /usr/bin/oslo
oslo-run --version
oslo --help >/dev/null

work=$(mktemp -d)
trap 'rm -rf "$work" "$debs"' EXIT
cp -r "$src/examples/outside" "$work/outside"
cp "$src/examples/tp_mlp/tp_mlp.c" "$work/outside/prog.c"
ranks_match() {  # every one of the 2 ranks prints MATCH
  local out=$1
  cat "$out"
  [ "$(grep -c 'tp=2 .* -> MATCH$' "$out")" = 2 ] || { echo "expected 2 ranks to MATCH" >&2; exit 1; }
}

echo "== examples/outside with pkg-config: $(pkg-config --cflags --libs oslo)"
make -s -C "$work/outside" SRC=prog.c tp_mlp
oslo-run --nproc-per-node 2 "$work/outside/tp_mlp" >"$work/pc.out"
ranks_match "$work/pc.out"

echo "== examples/outside with find_package(oslo 0.3 REQUIRED)"
cmake -S "$work/outside" -B "$work/build-cmake" -DTP_MLP_SOURCE="$work/outside/prog.c" >/dev/null
cmake --build "$work/build-cmake" >/dev/null
oslo-run --nproc-per-node 2 "$work/build-cmake/tp_mlp" >"$work/cmake.out"
ranks_match "$work/cmake.out"

echo "== SentencePiece .model through the packaged shim"
cc -std=c99 -Wall -Wextra -Werror $(pkg-config --cflags oslo) "$src/tests/install/spm_prog.c" \
  $(pkg-config --libs oslo) -o "$work/spm"
"$work/spm" "$src/tests/tokenizer/fixtures/llama2_spm/tokenizer.model"
echo "== the main job against the packages: examples/minilm/semantic_search.c, all-MiniLM-L6-v2 on 2 ranks"
cc -std=c99 -O2 -Wall -Wextra -Werror $(pkg-config --cflags oslo) "$src/examples/minilm/semantic_search.c" \
  $(pkg-config --libs oslo) -lm -o "$work/semantic_search"
bash "$src/tools/fetch-minilm.sh" "$work/minilm"
oslo-run --nproc-per-node 2 "$work/semantic_search" "$work/minilm" \
  "$src/examples/minilm/reference.txt" >"$work/minilm.out"
cat "$work/minilm.out"
grep -qx MATCH "$work/minilm.out" || { echo "the main job did not print MATCH" >&2; exit 1; }
grep -q '^cosine similarity (TP=2)' "$work/minilm.out" || { echo "no similarity table" >&2; exit 1; }

echo "== Go: go get from liboslo-dev's module proxy tree, the MiniLM example in a module of one's own"
module=github.com/oslo/oslo/bindings/go
version=$(dpkg-query -W -f='${Version}' liboslo-dev | sed 's/-.*//')
proxy=/usr/share/oslo/go-proxy
test -s "$proxy/$module/@v/v$version.zip" || { echo "liboslo-dev has no $proxy/$module/@v/v$version.zip" >&2; exit 1; }
mkdir -p "$work/gohome" "$work/gouser"
cp "$src/examples/go/semantic_search/main.go" "$work/gouser/"
goenv=(env -i PATH=/usr/bin:/bin HOME="$work/gohome" GOPATH="$work/gopath" GOCACHE="$work/gocache"
       GOPROXY="file://$proxy" GONOSUMDB="$module" GOFLAGS=-mod=mod)
(cd "$work/gouser" && "${goenv[@]}" go mod init example.com/semantic_search &&
  "${goenv[@]}" go get "$module@v$version" && "${goenv[@]}" go build -o semantic_search .)
! grep -q replace "$work/gouser/go.mod" || { echo "go.mod has a replace" >&2; exit 1; }
# Both examples on 2 ranks, the tables compared (tests/bindings/same_output.sh).
sh "$src/tests/bindings/same_output.sh" /usr/bin/oslo-run "$work/semantic_search" "$work/minilm" \
  "$src/examples/minilm/reference.txt" -- "$work/gouser/semantic_search"
echo "Go: go get $module@v$version from $proxy (no replace), the same table as C's and MATCH"
echo "deb-check: OK (liboslo0, liboslo-dev and oslo-tools installed with apt; examples/outside built both ways and matched on 2 ranks; the main job's table and MATCH in C and in Go through go get from liboslo-dev's module proxy)"
