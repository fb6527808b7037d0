# shellcheck shell=sh disable=SC2154 # $work, $src: set by the sourcing script
# The set-up the `oslo train` CLI tests share (test_cli_train.sh,
# test_cli_train_ids.sh, test_cli_train_device.sh), sourced by each after it
# has set $work (its scratch folder) and $src (the source tree):
#   a fresh $work as the current folder, the counters n (checks), fails and
#   skips, corpus.txt (the first 200 lines of README.md), and the checks
#   ok, expect and check_run below; finish LABEL prints the summary and
#   exits 1 on a failure, 77 on a skip (else it removes $work).
# POSIX sh; every check counts in n, and a failed one in fails, so a test
# fails whenever what a check holds breaks.
rm -rf "$work"
mkdir -p "$work"
cd "$work" || exit 1
fails=0 n=0 skips=0
sed -n '1,200p' "$src/README.md" >corpus.txt

# ok NAME CMD...: the command succeeds (its output is in NAME.out/.err).
ok() {
  name=$1
  shift
  n=$((n + 1))
  "$@" >"$name.out" 2>"$name.err"
  rc=$?
  if [ $rc -ne 0 ]; then
    fails=$((fails + 1))
    echo "FAIL: $name: $* exited $rc:"
    tail -n 20 "$name.err" | sed 's/^/  /'
    tail -n 5 "$name.out" | sed 's/^/  /'
    return 1
  fi
  return 0
}

# expect STATUS NEEDLE CMD...: exits with STATUS and stderr holds NEEDLE.
expect() {
  want=$1 needle=$2
  shift 2
  n=$((n + 1))
  "$@" >err.out 2>err.txt
  got=$?
  if [ "$got" -ne "$want" ] || ! grep -qF -- "$needle" err.txt; then
    fails=$((fails + 1))
    echo "FAIL: $* -> exit $got (want $want), stderr:"
    sed 's/^/  /' err.txt
    echo "  (wanted it to hold: $needle)"
  fi
}

# check_run NAME WHAT CMD...: a checker (check_train.py) run as CMD holds
# (77: skipped); its output, in NAME.out, is printed when it fails, under
# "FAIL: NAME: WHAT", or always when WHAT is "-" (then without a header on
# success).
check_run() {
  name=$1 what=$2
  shift 2
  n=$((n + 1))
  "$@" >"$name.out" 2>&1
  rc=$?
  if [ "$what" = - ]; then
    cat "$name.out"
  fi
  if [ $rc = 77 ]; then
    skips=$((skips + 1))
  elif [ $rc != 0 ] && [ "$what" = - ]; then
    fails=$((fails + 1))
    echo "FAIL: $name"
  elif [ $rc != 0 ]; then
    fails=$((fails + 1))
    echo "FAIL: $name: $what:"
    sed 's/^/  /' "$name.out"
  fi
}

# finish LABEL: the summary; exit 1 on a failure, 77 on a skip, else $work
# is removed and the script goes on (to its end).
finish() {
  if [ "$skips" -eq 0 ]; then
    echo "$1: $((n - fails)) passed, $fails failed"
  else
    echo "$1: $((n - fails - skips)) passed, $fails failed, $skips skipped"
  fi
  [ "$fails" -eq 0 ] || exit 1
  [ "$skips" -eq 0 ] || exit 77
  rm -rf "$work"
}
