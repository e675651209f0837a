#!/bin/bash
# Runs CMD (make test's integration tests) with the fuzz targets' build beside it, at the lowest
# CPU priority: that build (crust again, in release with the fuzzer's instrumentation, about
# 7 minutes of both cores after a change to src/) takes the cycles the tests leave idle while
# they wait on processes, sockets and timers, instead of running on its own afterwards. Fails
# when CMD fails or the build does (its output then follows); hack/fuzz.sh runs the targets
# afterwards, its build then a no-op.
#
# Usage: hack/beside-fuzz-build.sh CMD...
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
log=$(mktemp "${TMPDIR:-/tmp}/fuzz-build.XXXXXX")
trap 'rm -f "$log"' EXIT
nice -n 19 "$top/hack/fuzz.sh" --build-only >"$log" 2>&1 &
build=$!
"$@"
rc=$?
if ! wait "$build"; then
  tail -40 "$log" >&2
  echo "beside-fuzz-build: building the fuzz targets failed (its output above)" >&2
  exit 1
fi
exit "$rc"
