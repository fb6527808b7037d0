#!/usr/bin/env bash
# Fails if code outside core/parallel (the communication ops) and the context
# reaches a communicator directly: a context's communicators take the
# backend's memory only, so every collective goes through core/parallel's
# mappings (tensor memory, with the queue ordered in one place) or a group's
# Control (host values: core/comm/control.hpp). Also fails on a copy of the
# "drain the queue before a host transport" rule outside core/parallel.
#
# Usage: test_no_direct_comm.sh SOURCE_DIR
# Scans the C/C++ sources of core/, tools/, bench/ and backends/ with
# comments removed; prints every hit as file:line: text; exit 1 if any.
set -u
src=${1:?usage: test_no_direct_comm.sh SOURCE_DIR}
cd "$src" || exit 2
hits=$(
  find core tools bench backends -type f \( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' \
    -o -name '*.c' -o -name '*.cu' -o -name '*.cuh' \) \
    ! -path 'core/parallel/*' ! -path 'core/context/*' | sort | while read -r f; do
    # Comments out (// to the end of a line; /* */ on one line), then the
    # calls: ctx.comm(g), ctx->comm(g), grad_comm(), host_transport(g).
    sed -e 's://.*$::' -e 's:/\*.*\*/::g' "$f" |
      grep -nE '(\.|->)comm\(|grad_comm\(\)|(^|[^_[:alnum:]])host_transport\(|grad_comm_host_transport\(' |
      sed "s|^|$f:|"
  done
)
if [ -n "$hits" ]; then
  echo "direct communicator use outside core/parallel and core/context:"
  echo "$hits"
  echo "(tensor memory: core/parallel/mappings.hpp; host values: ctx.control(g), core/comm/control.hpp)"
  exit 1
fi
echo "no direct communicator use outside core/parallel and core/context"
