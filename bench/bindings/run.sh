#!/bin/sh
# Benchmark 8: per-call overhead of the bindings against C, and 256 MB
# buffers passed without a copy. Runs the C, Python, Java and Go benchmarks
# (those built) in ROUNDS interleaved rounds of one run, takes each number's
# median over the rounds and prints the table of docs/BENCHMARKS.md.
#
#   sh bench/bindings/run.sh [BUILD_DIR] [ROUNDS]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(cd "${1:-build}" && pwd)
rounds=${2:-3}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
langs=""
[ -x "$build/bench/bindings/bench_call_overhead" ] && langs="$langs c"
[ -d "$build/bindings/python/oslo" ] && langs="$langs python"
[ -f "$root/bench/java/run.sh" ] && [ -f "$build/bindings/java/oslo.jar" ] && langs="$langs java"
[ -f "$root/bench/go/run.sh" ] && [ -d "$build/bindings/go" ] && langs="$langs go"
echo "languages:$langs; $rounds rounds" >&2
r=1
while [ "$r" -le "$rounds" ]; do
  for l in $langs; do
    case $l in
      c) "$build/bench/bindings/bench_call_overhead" ;;
      *) sh "$root/bench/$l/run.sh" "$build" ;;
    esac | grep '^BENCH ' >>"$out" || { echo "the $l benchmark failed" >&2; exit 1; }
  done
  r=$((r + 1))
done
# One row per (lang, case, mode): the median over the rounds.
awk '
function val(k,   i, kv) { for (i = 2; i <= NF; ++i) { split($i, kv, "="); if (kv[1] == k) return kv[2] } return "" }
{ key = val("lang") " " val("case") " " val("mode")
  if (val("ns_per_call") != "") { v[key] = v[key] " " val("ns_per_call") }
  else { v[key] = v[key] " " val("ms"); p[key] = p[key] " " val("peak_rss_delta_mb") }
  if (!(key in seen)) { seen[key] = 1; order[++n] = key } }
function median(s,   a, m, i, j, t) {
  m = split(s, a, " ")
  for (i = 1; i <= m; ++i) for (j = i + 1; j <= m; ++j) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
  return (m % 2) ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2 }
END {
  c = median(v["c forward_1x64x64 "])
  print "| call | language | ns per call | added vs C (us) |"
  print "|---|---|---:|---:|"
  for (i = 1; i <= n; ++i) { split(order[i], f, " ")
    if (f[2] ~ /^forward/) printf "| %s | %s | %.0f | %s |\n", f[2], f[1], median(v[order[i]]),
      (f[1] == "c") ? "-" : sprintf("%+.2f", (median(v[order[i]]) - c) / 1000) }
  print ""
  print "| 256 MiB buffer | language | mode | ms | peak RSS growth (MiB) |"
  print "|---|---|---|---:|---:|"
  for (i = 1; i <= n; ++i) { split(order[i], f, " ")
    if (f[2] == "pass_256mb") printf "| pass_256mb | %s | %s | %.2f | %.1f |\n", f[1], f[3], median(v[order[i]]), median(p[order[i]]) }
}' "$out"
