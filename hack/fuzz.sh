#!/bin/sh
# Runs every cargo-fuzz target of fuzz/ for a bounded time (default 60 s each), with
# allocations over 64 MiB and RSS over 512 MiB counted as failures (a decoder must never
# allocate by what a peer claims). `make test` runs it for a few seconds per target; run it
# longer by hand. Uses the stable toolchain with its unstable flags unlocked (RUSTC_BOOTSTRAP;
# stable ships the AddressSanitizer runtime too), or FUZZ_TOOLCHAIN (e.g. nightly).
# Installs cargo-fuzz (pinned) if missing.
#
#   hack/fuzz.sh [SECONDS] [TARGET...]
#   hack/fuzz.sh --build-only        build every target, run none (make test builds them beside
#                                    the integration tests, hack/beside-fuzz-build.sh)
#
# Each target starts from the typical inputs committed in fuzz/seeds/<target>/ (if any) and
# what earlier runs found in fuzz/corpus/<target>/. A crash leaves its input under
# fuzz/artifacts/<target>/; replay it with
#   cargo fuzz run --fuzz-dir fuzz <target> fuzz/artifacts/<target>/<file>
# and turn it into a unit test beside the entry point.
set -eu
cd "$(dirname "$0")/.."
build_only=
if [ "${1:-}" = --build-only ]; then build_only=1; shift; fi
secs=${1:-60}
[ $# -gt 0 ] && shift
toolchain=+${FUZZ_TOOLCHAIN:-stable}
[ "$toolchain" = +stable ] && export RUSTC_BOOTSTRAP=1
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --version 0.13.2 --locked
targets=${*:-$(cargo $toolchain fuzz list --fuzz-dir fuzz)}
# One build for every target (each `run` would otherwise check the whole crate again).
cargo $toolchain fuzz build --fuzz-dir fuzz
[ -z "$build_only" ] || exit 0
# Targets run FUZZ_JOBS at a time (default 2; each is one single-threaded process), their
# reports printed in order once a batch is done.
jobs=${FUZZ_JOBS:-2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
run_target() { # target: its report in $work/<target>.log, its status in $work/<target>.rc
  mkdir -p "fuzz/corpus/$1"
  seeds=""
  [ -d "fuzz/seeds/$1" ] && seeds="fuzz/seeds/$1"
  # shellcheck disable=SC2086
  if cargo $toolchain fuzz run --fuzz-dir fuzz "$1" "fuzz/corpus/$1" $seeds -- \
    -max_total_time="$secs" -malloc_limit_mb=64 -rss_limit_mb=512 -max_len=65536 \
    -print_final_stats=1 >"$work/$1.log" 2>&1; then
    echo 0 >"$work/$1.rc"
  else
    echo 1 >"$work/$1.rc"
  fi
}
report() { # target
  echo "== $1: ${secs}s"
  if [ "$(cat "$work/$1.rc")" != 0 ]; then
    tail -60 "$work/$1.log" >&2
    echo "fuzz.sh: $1 failed; its input is in fuzz/artifacts/$1/" >&2
    exit 1
  fi
  grep -E '^stat::(number_of_executed_units|peak_rss_mb)' "$work/$1.log" || true
}
batch=""
for t in $targets; do
  run_target "$t" &
  batch="$batch $t"
  if [ "$(echo $batch | wc -w)" -ge "$jobs" ]; then
    wait
    for b in $batch; do report "$b"; done
    batch=""
  fi
done
wait
for b in $batch; do report "$b"; done
echo "fuzz.sh: every target ran ${secs}s without a failure"
