# Shared by the `oslo generate` CLI tests (sourced, POSIX sh): compare what
# several ranks print with what one rank printed. The caller sets $tmp (a
# scratch folder) and $fails (a counter), and writes one rank's output to
# $tmp/one. Output is one line per prompt: "[i] id id id ...".

# baseline WHAT ARGS...: runs ARGS (one rank) into $tmp/one, the output the
# comparisons below take as the reference; exits 1 naming WHAT if it fails.
baseline() {
  what=$1
  shift
  "$@" >"$tmp/one" 2>"$tmp/one.err" && return 0
  echo "FAIL: one rank ($what):"
  sed 's/^/  /' "$tmp/one.err"
  exit 1
}

# ran ARGS...: runs ARGS into $tmp/$name (stderr $tmp/$name.err); counts and
# shows a non-zero exit.
ran() {
  "$@" >"$tmp/$name" 2>"$tmp/$name.err" && return 0
  fails=$((fails + 1))
  echo "FAIL: $name exited non-zero:"
  sed 's/^/  /' "$tmp/$name.err"
  return 1
}

# same NAME ARGS...: run ARGS; its output must equal $tmp/one byte for byte.
# For layouts that do not change the arithmetic (pipeline stages), or whose
# changes are far below the model's logit margins (f32 under TP).
same() {
  name=$1
  shift
  ran "$@" || return
  if cmp -s "$tmp/one" "$tmp/$name"; then
    echo "$name: $(tr '\n' ' ' <"$tmp/$name")(same as one rank)"
  else
    fails=$((fails + 1))
    echo "FAIL: $name printed"
    sed 's/^/  /' "$tmp/$name"
    echo "  one rank printed"
    sed 's/^/  /' "$tmp/one"
  fi
}

# same_stable NAME EXACT ARGS...: run ARGS; on each line its ids must equal
# $tmp/one's over the prefix where $tmp/one agrees with the file EXACT (the
# same run without the approximation under test), and that prefix must hold
# at least 4 ids over all lines. For a lossy cache under TP: the ranks' sums
# round differently in the last bit, which can move one int8 value by one
# step; where the whole approximation left the tokens alone, so must that.
same_stable() {
  name=$1 exact=$2
  shift 2
  ran "$@" || return
  if verdict=$(awk -v one="$tmp/one" -v exact="$exact" '
      function ids(line, out,   n, i, f) {
        n = split(line, f, " ")
        for (i = 2; i <= n; i++) out[i - 1] = f[i]
        return n - 1
      }
      {
        if ((getline a < one) <= 0 || (getline b < exact) <= 0) { print "more lines than one rank"; bad = 1; exit }
        nc = ids($0, c); na = ids(a, ra); nb = ids(b, rb)
        p = 0
        while (p < na && p < nb && ra[p + 1] == rb[p + 1]) p++
        for (i = 1; i <= p; i++)
          if (i > nc || c[i] != ra[i]) { printf "line %d differs at id %d of %d stable ones\n", NR, i, p; bad = 1; exit }
        total += p
      }
      END {
        if (bad) exit 1
        if ((getline a < one) > 0) { print "fewer lines than one rank"; exit 1 }
        if (total < 4) { printf "only %d stable ids to compare (need 4)\n", total; exit 1 }
        printf "%d stable ids\n", total
      }' "$tmp/$name"); then
    echo "$name: $(tr '\n' ' ' <"$tmp/$name")(one rank's over $verdict)"
  else
    fails=$((fails + 1))
    echo "FAIL: $name: $verdict; it printed"
    sed 's/^/  /' "$tmp/$name"
    echo "  one rank printed"
    sed 's/^/  /' "$tmp/one"
    echo "  one rank without the approximation printed"
    sed 's/^/  /' "$exact"
  fi
}
