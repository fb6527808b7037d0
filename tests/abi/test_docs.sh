#!/usr/bin/env bash
# Every public function of oslo.h has a doc comment right above it that
# states who owns what ("Ownership:"), which errors it returns ("Errors:")
# and whether it is thread-safe ("Thread-safety:"), after saying what it does.
# Usage: test_docs.sh path/to/oslo.h
set -euo pipefail
awk '
  /^\/\*\*/ { in_doc = 1; doc = "" }
  in_doc { doc = doc $0 "\n" }
  in_doc && /\*\// { in_doc = 0; doc_end = NR }
  /^OSLO_API/ {
    match($0, /oslo_[a-z0-9_]+\(/)
    name = substr($0, RSTART, RLENGTH - 1)
    missing = ""
    if (doc_end != NR - 1) missing = " doc comment"
    else {
      if (doc !~ /Ownership:/) missing = missing " Ownership:"
      if (doc !~ /Errors:/) missing = missing " Errors:"
      if (doc !~ /Thread-safety:/) missing = missing " Thread-safety:"
      # what it does: some text before the first of the three
      first = doc; sub(/(Ownership|Errors|Thread-safety):.*/, "", first)
      gsub(/[\/* \n]/, "", first)
      if (first == "") missing = missing " description"
    }
    if (missing != "") { print name ": missing" missing; bad++ } else good++
  }
  END {
    if (good + bad == 0) { print "no OSLO_API declarations found"; bad = 1 }
    print good " passed, " bad + 0 " failed"
    exit bad > 0
  }' "$1"
