#!/bin/sh
# Generates capi.go and capi_wrap.c from bindings/oslo.i with SWIG 4.
# OSLO_INCLUDE: the folder holding oslo.h and oslo/dlpack.h (default: the
# installed oslo's, from pkg-config). Run by `go generate ./...` in
# bindings/go, or by CMake with the build tree's folders.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
iface=${OSLO_SWIG_INTERFACE:-$here/../../../../oslo.i}
inc=${OSLO_INCLUDE:-$(pkg-config --variable=includedir oslo)}
swig=${SWIG:-$(command -v swig4.0 || command -v swig)}
set --
for d in $inc; do set -- "$@" "-I$d"; done
exec "$swig" -go -cgo -intgosize 64 -DSWIGWORDSIZE64 -Wall -Werror "$@" \
  -outdir "$here" -o "$here/capi_wrap.c" "$iface"
