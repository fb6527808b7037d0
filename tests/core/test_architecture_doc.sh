#!/usr/bin/env bash
# docs/ARCHITECTURE.md stays one true page: at most 200 lines, naming every
# folder of core/, backends/ and transports/ (and, in a git checkout, every
# top-level folder); and every relative link of the project's markdown
# (README.md, CHANGELOG.md, docs/*.md, each folder's README.md and
# FORMAT.md) points to a file or folder that exists. Links inside fenced
# code blocks and `inline code` are not links and are skipped.
# Usage: test_architecture_doc.sh SOURCE_DIR
set -euo pipefail
cd "$1"
doc=docs/ARCHITECTURE.md
fail=0
lines=$(wc -l <"$doc")
if [ "$lines" -gt 200 ]; then
  echo "FAIL: $doc has $lines lines (at most 200: the detail goes to the folders' READMEs)"
  fail=1
fi

folders=()
for d in core/*/ backends/*/ transports/*/; do folders+=("${d%/}"); done
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  while read -r d; do folders+=("$d"); done < <(git ls-files | grep / | cut -d/ -f1 | grep -v "^\." | sort -u)
fi
[ "${#folders[@]}" -gt 10 ] || { echo "FAIL: found only ${#folders[@]} folders (pattern broken?)"; exit 1; }
for d in "${folders[@]}"; do
  if ! grep -qE "(^|[^A-Za-z0-9_/])$d/" "$doc"; then
    echo "FAIL: $doc does not name the folder $d/"
    fail=1
  fi
done

files=(README.md CHANGELOG.md docs/*.md)
for f in core/*/README.md core/*/FORMAT.md backends/*/README.md bindings/README.md \
         tools/*/README.md bench/*/README.md tests/*/fixtures/README.md; do
  [ -f "$f" ] && files+=("$f")
done
links=0
for f in "${files[@]}"; do
  dir=$(dirname "$f")
  # Fenced blocks out, inline code out, then every ](target) of a line.
  # shellcheck disable=SC2016 # the backquotes are sed's, not the shell's
  targets=$(awk '/^[[:space:]]*```/ { fence = !fence; next } !fence' "$f" |
            sed -e 's/`[^`]*`//g' | grep -oE '\]\([^) ]+\)' | sed -e 's/^](//' -e 's/)$//' || true)
  for t in $targets; do
    case "$t" in http://* | https://* | mailto:* | '#'*) continue ;; esac
    links=$((links + 1))
    path=${t%%#*}
    if [ ! -e "$dir/$path" ]; then
      echo "FAIL: $f links to $t, which does not exist ($dir/$path)"
      fail=1
    fi
  done
done
[ "$links" -gt 20 ] || { echo "FAIL: found only $links links (pattern broken?)"; exit 1; }
echo "architecture doc: $lines lines, ${#folders[@]} folders named; $links links in ${#files[@]} files checked"
[ "$fail" = 0 ]
