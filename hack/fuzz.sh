#!/bin/sh
# Runs every cargo-fuzz target of fuzz/ for a bounded time (default 60 s each), with
# allocations over 64 MiB and RSS over 512 MiB counted as failures (a decoder must never
# allocate by what a peer claims). `make test` runs it for a few seconds per target; run it
# longer by hand. Uses the stable toolchain with its unstable flags unlocked (RUSTC_BOOTSTRAP;
# stable ships the AddressSanitizer runtime too), or FUZZ_TOOLCHAIN (e.g. nightly).
# Installs cargo-fuzz (pinned) if missing.
#
#   hack/fuzz.sh [SECONDS] [TARGET...]
#
# Each target starts from the typical inputs committed in fuzz/seeds/<target>/ (if any) and
# what earlier runs found in fuzz/corpus/<target>/. A crash leaves its input under
# fuzz/artifacts/<target>/; replay it with
#   cargo fuzz run --fuzz-dir fuzz <target> fuzz/artifacts/<target>/<file>
# and turn it into a unit test beside the entry point.
set -eu
cd "$(dirname "$0")/.."
secs=${1:-60}
[ $# -gt 0 ] && shift
toolchain=+${FUZZ_TOOLCHAIN:-stable}
[ "$toolchain" = +stable ] && export RUSTC_BOOTSTRAP=1
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --version 0.13.2 --locked
targets=${*:-$(cargo $toolchain fuzz list --fuzz-dir fuzz)}
# One build for every target (each `run` would otherwise check the whole crate again).
cargo $toolchain fuzz build --fuzz-dir fuzz
for t in $targets; do
  echo "== $t: ${secs}s"
  mkdir -p "fuzz/corpus/$t"
  seeds=""
  [ -d "fuzz/seeds/$t" ] && seeds="fuzz/seeds/$t"
  log=$(mktemp)
  # shellcheck disable=SC2086
  if ! cargo $toolchain fuzz run --fuzz-dir fuzz "$t" "fuzz/corpus/$t" $seeds -- \
    -max_total_time="$secs" -malloc_limit_mb=64 -rss_limit_mb=512 -max_len=65536 \
    -print_final_stats=1 >"$log" 2>&1; then
    tail -60 "$log" >&2
    rm -f "$log"
    echo "fuzz.sh: $t failed; its input is in fuzz/artifacts/$t/" >&2
    exit 1
  fi
  grep -E '^stat::(number_of_executed_units|peak_rss_mb)' "$log" || true
  rm -f "$log"
done
echo "fuzz.sh: every target ran ${secs}s without a failure"
