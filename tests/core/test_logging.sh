#!/usr/bin/env bash
# OSLO_LOG_LEVEL: info lines appear, each prefixed with [rank N]; at the
# default level (warn) a healthy run prints nothing; an unknown level warns.
set -euo pipefail
run=$1; bin=$2
out=$(OSLO_LOG_LEVEL=info "$run" --nproc-per-node 2 "$bin" topology --tp 2 2>&1 >/dev/null)
echo "$out" | grep -q '^\[rank 0\] oslo INFO' || { echo "no [rank 0] INFO line: $out"; exit 1; }
echo "$out" | grep -q '^\[rank 1\] oslo INFO' || { echo "no [rank 1] INFO line: $out"; exit 1; }
echo "$out" | grep -q 'uses shm' || { echo "info does not name the transport: $out"; exit 1; }
bad=$(echo "$out" | grep -v '^\[rank [01]\] oslo ' || true)
[ -z "$bad" ] || { echo "lines without a rank prefix: $bad"; exit 1; }
quiet=$("$run" --nproc-per-node 2 "$bin" topology --tp 2 2>&1 >/dev/null)
[ -z "$quiet" ] || { echo "default level printed: $quiet"; exit 1; }
warn=$(OSLO_LOG_LEVEL=chatty "$bin" topology 2>&1 >/dev/null)
echo "$warn" | grep -q "unknown OSLO_LOG_LEVEL 'chatty'" || { echo "no warning: $warn"; exit 1; }
echo "logging: 6 passed, 0 failed"
