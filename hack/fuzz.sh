#!/bin/sh
# Runs every cargo-fuzz target of fuzz/ for a bounded time (default 60 s each), with
# allocations over 64 MiB and RSS over 512 MiB counted as failures (a decoder must never
# allocate by what a peer claims). Needs the nightly toolchain; installs cargo-fuzz if missing.
#
#   hack/fuzz.sh [SECONDS] [TARGET...]
#
# A crash leaves its input under fuzz/artifacts/<target>/; replay it with
#   cargo +nightly fuzz run <target> fuzz/artifacts/<target>/<file>
set -eu
cd "$(dirname "$0")/.."
secs=${1:-60}
[ $# -gt 0 ] && shift
if ! rustup toolchain list | grep -q '^nightly'; then
  echo "fuzz.sh: the nightly toolchain is needed (rustup toolchain install nightly)" >&2
  exit 1
fi
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
targets=${*:-$(cargo +nightly fuzz list --fuzz-dir fuzz)}
for t in $targets; do
  echo "== $t: ${secs}s"
  mkdir -p "fuzz/corpus/$t"
  cargo +nightly fuzz run --fuzz-dir fuzz "$t" "fuzz/corpus/$t" -- \
    -max_total_time="$secs" -malloc_limit_mb=64 -rss_limit_mb=512 -max_len=65536 \
    -print_final_stats=1
done
echo "fuzz.sh: every target ran ${secs}s without a failure"
