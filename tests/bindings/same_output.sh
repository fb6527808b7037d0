#!/bin/sh
# A language's semantic-search example against the C main job's: both run at
# TP=2 under oslo-run on the same model and sentences; the ranking and the
# similarity table (everything before the "agreement" block) must be
# identical text, and both must end in MATCH.
#
#   same_output.sh OSLO_RUN C_EXAMPLE MODEL_DIR REFERENCE -- CMD [ARG...]
#
# CMD gets MODEL_DIR REFERENCE appended, as the C example does.
set -eu
[ $# -ge 6 ] && [ "$5" = "--" ] || { echo "usage: $0 OSLO_RUN C_EXAMPLE MODEL_DIR REFERENCE -- CMD [ARG...]" >&2; exit 2; }
run=$1 c_example=$2 model=$3 ref=$4
shift 5
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$run" --nproc-per-node 2 "$c_example" "$model" "$ref" >"$tmp/c.out"
"$run" --nproc-per-node 2 "$@" "$model" "$ref" >"$tmp/lang.out"
for f in c lang; do
  grep -qx MATCH "$tmp/$f.out" || { echo "FAIL: the $f example did not print MATCH:"; cat "$tmp/$f.out"; exit 1; }
  sed '/^agreement/,$d' "$tmp/$f.out" >"$tmp/$f.table"
  [ "$(grep -c . "$tmp/$f.table")" -ge 10 ] || { echo "FAIL: the $f example printed no table:"; cat "$tmp/$f.out"; exit 1; }
done
if ! diff -u "$tmp/c.table" "$tmp/lang.table"; then
  echo "FAIL: the example's table differs from the C main job's (above)"
  exit 1
fi
cat "$tmp/lang.out"
echo "same table as the C main job: $(grep -c . "$tmp/c.table") lines"
