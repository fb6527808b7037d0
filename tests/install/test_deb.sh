#!/usr/bin/env bash
# The Debian packages `cpack -G DEB` makes from this build (cmake/
# OsloPackaging.cmake), checked without installing them: the package names
# and versions, the files each holds (the library in liboslo0, nothing to
# build with; the header, the liboslo.so link, oslo.pc and the CMake package
# in liboslo-dev, with the Go module proxy tree when the Go binding is
# built; the commands in oslo-tools; a backend plugin's package
# when the plugin is built), liboslo0's Depends as dpkg-shlibdeps computed
# them, the exact-version Depends on liboslo0 of the others, and liboslo0's
# shlibs file. tools/deb-check.sh installs them on a clean system.
# Usage: test_deb.sh BUILD_DIR VERSION
set -euo pipefail
build=$1
version=$2-1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cpack -G DEB --config "$build/CPackConfig.cmake" -B "$tmp" >"$tmp/cpack.log" 2>&1 ||
  { cat "$tmp/cpack.log"; exit 1; }
arch=$(dpkg --print-architecture)
fail=0
bad() { echo "FAIL: $*"; fail=1; }
pkgs="liboslo0 liboslo-dev oslo-tools"
[ -e "$build/liboslo_backend_torch.so" ] && pkgs="$pkgs liboslo0-backend-torch"
[ -e "$build/liboslo_backend_cuda.so" ] && pkgs="$pkgs liboslo0-backend-cuda"
made=$(cd "$tmp" && ls ./*.deb | sed 's|^\./||' | sort | tr '\n' ' ')
want=$(for p in $pkgs; do echo "${p}_${version}_${arch}.deb"; done | sort | tr '\n' ' ')
[ "$made" = "$want" ] || bad "packages made: $made; expected: $want"

field() { dpkg-deb --field "$tmp/${1}_${version}_${arch}.deb" "$2"; }
files() { dpkg-deb --contents "$tmp/${1}_${version}_${arch}.deb" | awk '{print $6 $7 $8}'; }
has() {  # has PACKAGE REGEX: a file of PACKAGE matches the (extended) regex
  files "$1" | grep -Eq "$2" || bad "$1 has no file matching $2"
}
hasnt() {
  if files "$1" | grep -Eq "$2"; then bad "$1 has a file matching $2"; fi
}
lib='^\./usr/lib(/[a-z0-9_]+-linux-gnu[a-z0-9]*)?/'

for p in $pkgs; do
  echo "== $p: $(field "$p" Version), section $(field "$p" Section)"
  echo "   Depends: $(field "$p" Depends)"
  [ "$(field "$p" Package)" = "$p" ] || bad "$p: Package field"
  [ "$(field "$p" Maintainer)" = "oslo developers" ] || bad "$p: Maintainer $(field "$p" Maintainer)"
  [ -z "$(field "$p" Homepage)" ] || bad "$p: a Homepage field"
  desc=$(field "$p" Description)
  [ "$(echo "$desc" | wc -l)" -ge 2 ] || bad "$p: no long description"
  case "$desc" in *"built using CMake"*) bad "$p: CPack's default description" ;; esac
  if [ "$p" != liboslo0 ]; then
    field "$p" Depends | grep -Eq "(^|, )liboslo0 \(= ${version//./\\.}\)" ||
      bad "$p does not depend on liboslo0 (= $version)"
  fi
done

# liboslo0: the shared library and the SentencePiece shim, nothing else.
has liboslo0 "${lib}liboslo\.so\.0->liboslo\.so\.${2//./\\.}$"
has liboslo0 "${lib}liboslo\.so\.${2//./\\.}$"
has liboslo0 "${lib}liboslo_sentencepiece\.so$"
hasnt liboslo0 "${lib}liboslo\.so$|/include/|\.pc$|\.cmake$|/bin/|backend"
# Computed by dpkg-shlibdeps: oneDNN, gloo and the C++ runtime are named,
# with versions; the shim's libsentencepiece too.
dep=$(field liboslo0 Depends)
for d in 'libc6 \(>= ' 'libstdc\+\+6 \(>= ' 'libdnnl[0-9]+ \(>= ' 'libgloo[0-9]+' 'libsentencepiece[0-9]+' \
         'libgomp1 \(>= '; do
  echo "$dep" | grep -Eq "(^|, )$d" || bad "liboslo0's Depends lack $d: $dep"
done
dpkg-deb --ctrl-tarfile "$tmp/liboslo0_${version}_${arch}.deb" | tar -xO ./shlibs >"$tmp/shlibs" ||
  bad "liboslo0 has no shlibs file"
grep -qx "liboslo 0 liboslo0 (= $version)" "$tmp/shlibs" || bad "shlibs: $(cat "$tmp/shlibs")"

has liboslo-dev '^\./usr/include/oslo\.h$'
has liboslo-dev '^\./usr/include/oslo/dlpack\.h$'
has liboslo-dev "${lib}liboslo\.so->liboslo\.so\.0$"
has liboslo-dev "${lib}pkgconfig/oslo\.pc$"
for f in osloConfig osloConfigVersion osloTargets; do has liboslo-dev "${lib}cmake/oslo/$f\.cmake$"; done
hasnt liboslo-dev "${lib}liboslo\.so\.0|/bin/"
# The Go module proxy tree, when the Go binding is built (bindings/go).
if [ -d "$build/bindings/go/go-proxy" ]; then
  at='^\./usr/share/oslo/go-proxy/github\.com/oslo/oslo/bindings/go/@v/'
  for f in list "v${2//./\\.}\\.info" "v${2//./\\.}\\.mod" "v${2//./\\.}\\.zip"; do
    has liboslo-dev "$at$f$"
  done
fi
# No dependency computed for the headers: only liboslo0's.
[ "$(field liboslo-dev Depends)" = "liboslo0 (= $version)" ] ||
  bad "liboslo-dev Depends: $(field liboslo-dev Depends)"

has oslo-tools '^\./usr/bin/oslo$'
has oslo-tools '^\./usr/bin/oslo-run$'
hasnt oslo-tools '/lib/|/include/'
if [[ " $pkgs " == *" liboslo0-backend-torch "* ]]; then
  has liboslo0-backend-torch "${lib}liboslo_backend_torch\.so$"
  field liboslo0-backend-torch Depends | grep -Eq '(^|, )libtorch' ||
    bad "liboslo0-backend-torch does not depend on libtorch"
fi
[ $fail = 0 ] || exit 1
echo "deb packages: $pkgs: OK"
