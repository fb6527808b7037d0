#!/bin/sh
# Fails unless ctest lists <lang>_<case> for every language given and every
# case of cases.txt (a case ending in _w2 as <lang>_<case>_procs and
# <lang>_<case>_threads).
#   cases_complete.sh CTEST BUILD_DIR cases.txt LANG...
set -eu
ctest=$1 build=$2 cases=$3
shift 3
list=$(cd "$build" && "$ctest" -N | sed -n 's/^ *Test *#[0-9]*: //p')
missing=0 found=0
for lang in "$@"; do
  for c in $(sed 's/#.*//' "$cases"); do
    case $c in
      *_w2) names="${lang}_${c}_procs ${lang}_${c}_threads" ;;
      *) names="${lang}_${c}" ;;
    esac
    for n in $names; do
      if printf '%s\n' "$list" | grep -qx "$n"; then
        found=$((found + 1))
      else
        echo "missing: $n"
        missing=$((missing + 1))
      fi
    done
  done
done
echo "languages: $*; $found case tests registered, $missing missing"
[ "$missing" -eq 0 ]
