#!/bin/sh
# Every function of include/oslo.h is wrapped by bindings/oslo.i (so Python,
# Java and Go all get it), except the few listed here with the reason. A
# function added to oslo.h without its binding fails this test.
#   abi_covered.sh include/oslo.h bindings/oslo.i
set -eu
header=$1 iface=$2
# Not wrapped on purpose:
#   oslo_last_error, oslo_clear_error: read and cleared by the one error
#     block of each language inside the failing call itself;
#   oslo_version: the same numbers as oslo_version_string, which is wrapped.
skip="oslo_clear_error oslo_version"
missing=0 n=0
for f in $(sed -n 's/^OSLO_API.*[ *]\(oslo_[a-z0-9_]*\)(.*/\1/p' "$header"); do
  n=$((n + 1))
  case " $skip " in *" $f "*) continue ;; esac
  if ! grep -q "\b$f(" "$iface"; then
    echo "not wrapped by $(basename "$iface"): $f"
    missing=$((missing + 1))
  fi
done
echo "$n functions in $(basename "$header"), $missing not wrapped"
[ "$n" -gt 50 ] && [ "$missing" -eq 0 ]
