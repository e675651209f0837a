#!/bin/bash
# Runs the integration tests (every `cargo test` suite) and the whole critest run ROUNDS times
# (default 5, or STRESS_ROUNDS), each round on a machine made hostile the way a fresh CI machine
# is: the page cache dropped before the round, and two CPU-bound busy loops beside it for its
# whole length (on 2 cores, every test then runs on a loaded machine). Prints every test and
# spec that failed in any round, with the round and its message, and fails if there was one.
#
# A flake this finds is fixed at its cause (a race in crust, or a test that waits by sleeping
# instead of on a condition), never by a retry or a longer sleep.
#
# Usage: hack/test-stress.sh [ROUNDS]      (make test-stress; root; PATH has crictl and critest)
# Output: one directory per round under $STRESS_DIR (default /var/tmp/crust-stress), with the
# cargo and critest logs of that round.
set -euo pipefail
shopt -s inherit_errexit
top=$(cd "$(dirname "$0")/.." && pwd)
rounds=${1:-${STRESS_ROUNDS:-5}}
out=${STRESS_DIR:-/var/tmp/crust-stress}
[ "$(id -u)" -eq 0 ] || { echo "test-stress: run as root (the tests need it)" >&2; exit 1; }
case $rounds in '' | *[!0-9]*) echo "test-stress: ROUNDS must be a number" >&2; exit 2 ;; esac
command -v critest >/dev/null || { echo "test-stress: critest is not on PATH (make test-stress builds it)" >&2; exit 1; }

busy=()
stop_busy() {
  local p
  for p in "${busy[@]}"; do kill "$p" 2>/dev/null || true; done
  busy=()
}
trap stop_busy EXIT

rm -rf "$out"
mkdir -p "$out"
cd "$top"
failures=0
for round in $(seq 1 "$rounds"); do
  dir=$out/round-$round
  mkdir -p "$dir"
  sync
  echo 3 > /proc/sys/vm/drop_caches
  for _ in 1 2; do
    (while :; do :; done) &
    busy+=($!)
  done
  echo "test-stress: round $round of $rounds (page cache dropped, 2 busy loops)"
  start=$SECONDS
  cargo test --no-fail-fast -- --test-threads=2 >"$dir/cargo.log" 2>&1 && cargo_rc=0 || cargo_rc=$?
  hack/critest.sh >"$dir/critest.log" 2>&1 && critest_rc=0 || critest_rc=$?
  stop_busy
  # Every failed test: its name, then the first line of its panic.
  awk '/^test .* \.\.\. FAILED$/ {print "  cargo: " $2}' "$dir/cargo.log" >"$dir/failed.txt"
  awk '/^thread .* panicked at / {getline msg; print "    " $0 "\n      " msg}' \
    "$dir/cargo.log" >"$dir/panics.txt"
  if [ "$cargo_rc" -ne 0 ] && [ ! -s "$dir/failed.txt" ]; then
    echo "  cargo: exited $cargo_rc without a failed test (a build or harness error)" >>"$dir/failed.txt"
  fi
  if [ "$critest_rc" -ne 0 ]; then
    # The names under "critest: failed:" (two spaces in), and a WebSocket round that failed.
    awk '/^critest: failed:/ {f = 1; next} /^critest:|^---/ {f = 0} f && /^  [^ ]/ {print "  critest: " substr($0, 3)}
         /^critest: Streaming over WebSocket: .* [1-9][0-9]* failed/ {print "  " $0}' \
      "$dir/critest.log" >>"$dir/failed.txt"
    grep -q critest "$dir/failed.txt" || echo "  critest: exited $critest_rc ($(tail -1 "$dir/critest.log"))" >>"$dir/failed.txt"
  fi
  echo "test-stress: round $round took $((SECONDS - start)) s; $(grep -c . "$dir/failed.txt" || true) failed"
  if [ -s "$dir/failed.txt" ]; then
    failures=$((failures + 1))
    cat "$dir/failed.txt" "$dir/panics.txt"
  fi
done

echo "test-stress: $rounds rounds, $failures with failures (logs in $out)"
[ "$failures" -eq 0 ]
