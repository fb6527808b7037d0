#!/bin/sh
# The torch plugin exports oslo_backend_plugin_v1 and _v2 and nothing else, and does
# not link liboslo; liboslo (second argument, optional) does not need libtorch.
set -eu
plugin=$1
syms=$(nm -D --defined-only "$plugin" | awk 'NF == 3 {print $3}' | sort -u)
want=$(printf 'oslo_backend_plugin_v1\noslo_backend_plugin_v2')
if [ "$syms" != "$want" ]; then
  echo "unexpected exports of $plugin:"
  echo "$syms"
  exit 1
fi
if readelf -d "$plugin" | grep -q 'Shared library: \[liboslo\.'; then
  echo "$plugin links liboslo"
  exit 1
fi
if [ $# -ge 2 ] && [ ! -f "$2" ]; then
  echo "$2 not built"
  exit 1
fi
if [ $# -ge 2 ] && readelf -d "$2" | grep -Eq 'Shared library: \[lib(torch|c10)'; then
  echo "$2 links libtorch"
  exit 1
fi
echo "exports OK:" $syms
