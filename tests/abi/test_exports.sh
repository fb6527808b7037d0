#!/usr/bin/env bash
# Fails if liboslo exports any dynamic symbol not starting with oslo_, if its
# SONAME is not liboslo.so.0, or if it links libsentencepiece / libprotobuf or
# refers to any of their symbols (they are reached only through the shim
# liboslo_sentencepiece.so, loaded with RTLD_LOCAL: libsentencepiece's bundled
# protobuf-lite must never sit in a process's global scope). With a second
# argument, the shim itself must export exactly oslo_spm_api_v1.
# Usage: test_exports.sh LIBOSLO [LIBOSLO_SENTENCEPIECE]
set -euo pipefail
lib=$1
shim=${2:-}
passed=0
failed=0
bad=$(nm -D --defined-only "$lib" | awk '{print $3}' | grep -v '^oslo_' || true)
if [ -n "$bad" ]; then
  echo "symbols exported without the oslo_ prefix:"; echo "$bad"; failed=$((failed + 1))
else
  n=$(nm -D --defined-only "$lib" | awk '{print $3}' | grep -c '^oslo_')
  echo "$n oslo_* symbols exported"; passed=$((passed + 1))
fi
soname=$(readelf -d "$lib" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
if [ "$soname" != "liboslo.so.0" ]; then
  echo "SONAME is '$soname'"; failed=$((failed + 1))
else
  echo "SONAME $soname"; passed=$((passed + 1))
fi
needed=$(readelf -d "$lib" | sed -n 's/.*NEEDED.*\[\(.*\)\]/\1/p')
if echo "$needed" | grep -Ei 'sentencepiece|protobuf'; then
  echo "liboslo links the libraries above (NEEDED)"; failed=$((failed + 1))
else
  echo "no libsentencepiece / libprotobuf in NEEDED"; passed=$((passed + 1))
fi
# Defined or undefined: no protobuf or sentencepiece symbol at all.
pb=$(nm -D -C "$lib" | grep -Ei 'google::protobuf|sentencepiece' || true)
if [ -n "$pb" ]; then
  echo "protobuf / sentencepiece symbols in liboslo's dynamic table:"; echo "$pb" | head -20
  failed=$((failed + 1))
else
  echo "no protobuf / sentencepiece symbols"; passed=$((passed + 1))
fi
if [ -n "$shim" ]; then
  exports=$(nm -D --defined-only "$shim" | awk '{print $3}' | sort | tr '\n' ' ')
  if [ "$exports" != "oslo_spm_api_v1 " ]; then
    echo "$shim exports: $exports(want only oslo_spm_api_v1)"; failed=$((failed + 1))
  else
    echo "$(basename "$shim") exports only oslo_spm_api_v1"; passed=$((passed + 1))
  fi
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
