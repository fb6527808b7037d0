#!/usr/bin/env bash
# Fails if liboslo exports any dynamic symbol not starting with oslo_, or if
# its SONAME is not liboslo.so.0.
set -euo pipefail
lib=$1
bad=$(nm -D --defined-only "$lib" | awk '{print $3}' | grep -v '^oslo_' || true)
if [ -n "$bad" ]; then
  echo "symbols exported without the oslo_ prefix:"; echo "$bad"; echo "0 passed, 1 failed"; exit 1
fi
n=$(nm -D --defined-only "$lib" | awk '{print $3}' | grep -c '^oslo_')
soname=$(readelf -d "$lib" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
if [ "$soname" != "liboslo.so.0" ]; then echo "SONAME is '$soname'"; echo "1 passed, 1 failed"; exit 1; fi
echo "$n oslo_* symbols exported, SONAME $soname"
echo "2 passed, 0 failed"
