#!/usr/bin/env bash
# Every environment variable the code reads is in docs/ENVIRONMENT.md: the
# names passed to getenv() and to the launch/shm helpers (env_int, env_size,
# env) in core/, backends/, transports/ and tools/.
# Usage: test_env_doc.sh SOURCE_DIR
set -euo pipefail
cd "$1"
doc=docs/ENVIRONMENT.md
dirs=()
for d in core backends transports tools; do [ -d "$d" ] && dirs+=("$d"); done
names=$(grep -rhoE '(getenv|env_int\(env,|env_size|env)\(? ?"[A-Z][A-Z0-9_]*"' \
          --include='*.c' --include='*.cpp' --include='*.hpp' --include='*.h' "${dirs[@]}" |
        grep -oE '"[A-Z][A-Z0-9_]*"' | tr -d '"' | sort -u)
[ -n "$names" ] || { echo "FAIL: found no environment variables at all (pattern broken?)"; exit 1; }
missing=0
for n in $names; do
  if ! grep -q "\`$n\`" "$doc"; then
    echo "FAIL: $n is read by the code but not documented in $doc"
    missing=$((missing + 1))
  fi
done
echo "env doc: $(echo "$names" | wc -l) variables read, $missing undocumented"
[ "$missing" = 0 ]
