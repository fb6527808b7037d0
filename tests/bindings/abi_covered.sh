#!/bin/sh
# Every function of include/oslo.h is wrapped by bindings/oslo.i or the
# files it %includes, directly or through another (the per-area files
# model.i, tensor.i, ..., the per-language python/oslo_python*.i,
# java/oslo_java*.i, go/oslo_go.i; found next to it as SWIG finds them),
# except the few listed here with the reason. A function added to oslo.h
# without its binding fails this test.
#   abi_covered.sh include/oslo.h bindings/oslo.i
set -eu
header=$1 iface=$2
dir=$(dirname "$iface")
# The interface and the files of its own that it includes, at any depth
# ("stdint.i", "oslo.h" and SWIG's library are not in its folder).
files=$iface todo=$iface
while [ -n "$todo" ]; do
  next=""
  for f in $todo; do
    for inc in $(sed -n 's/^[[:space:]]*%include[[:space:]]*"\([^"]*\)".*/\1/p' "$f"); do
      case " $files " in *" $dir/$inc "*) continue ;; esac
      if [ -f "$dir/$inc" ]; then
        files="$files $dir/$inc"
        next="$next $dir/$inc"
      fi
    done
  done
  todo=$next
done
# Not wrapped on purpose:
#   oslo_last_error, oslo_clear_error: read and cleared by the one error
#     block of each language inside the failing call itself;
#   oslo_version: the same numbers as oslo_version_string, which is wrapped.
skip="oslo_clear_error oslo_version"
missing=0 n=0
for f in $(sed -n 's/^OSLO_API.*[ *]\(oslo_[a-z0-9_]*\)(.*/\1/p' "$header"); do
  n=$((n + 1))
  case " $skip " in *" $f "*) continue ;; esac
  # shellcheck disable=SC2086 # $files: the list of interface files
  if ! cat $files | grep -q "\b$f("; then
    echo "not wrapped by $(basename "$iface") or the files it includes: $f"
    missing=$((missing + 1))
  fi
done
echo "$n functions in $(basename "$header"), $(echo "$files" | wc -w) interface files, $missing not wrapped"
[ "$n" -gt 50 ] && [ "$missing" -eq 0 ]
