#!/bin/bash
# The guest half of hack/cgroupv2-tests.sh: runs as root in the cgroup v2 VM, with the work tree
# shared at its host path. Makes the guest look like the host the tests expect (the static
# busybox the test image is built from, ping), checks the hierarchy, then runs each suite of the
# manifest and prints its time. Exits 1 if any test fails.
#
# Usage: cgroupv2-guest.sh MODE MANIFEST THREADS
#   MANIFEST: "<test binary> <exact test name>..." per line
set -euo pipefail
mode=$1 manifest=$2 threads=$3
here=$(cd "$(dirname "$0")" && pwd)
out=$here/../target/cgroupv2

fail() { echo "cgroupv2-guest: FAILED: $*" >&2; exit 1; }

[ -f /sys/fs/cgroup/cgroup.controllers ] || fail "/sys/fs/cgroup is not cgroup2"
[ ! -d /sys/fs/cgroup/memory ] || fail "a cgroup v1 memory hierarchy is mounted"
echo "cgroupv2-guest: $mode: kernel $(uname -r), PID 1 $(cat /proc/1/comm)," \
  "controllers: $(cat /sys/fs/cgroup/cgroup.controllers), $(nproc) CPUs"

install -m 755 "$out/busybox" /bin/busybox
tools=/run/cgroupv2-tools
mkdir -p "$tools"
# Tools the tests call that the guest image lacks, as busybox applets.
command -v ping >/dev/null || ln -sf /bin/busybox "$tools/ping"
export PATH=$tools:$PATH RUST_BACKTRACE=${RUST_BACKTRACE:-0} TMPDIR=/tmp

extra=()
[ "$mode" = systemd ] && extra=(--include-ignored)
rc=0
while read -r exe names; do
  [ -n "$exe" ] || continue
  t0=$(date +%s)
  # shellcheck disable=SC2086
  if "$exe" --exact --test-threads="$threads" "${extra[@]}" $names; then
    echo "cgroupv2-guest: ${exe##*/}: passed in $(($(date +%s) - t0)) s"
  else
    echo "cgroupv2-guest: ${exe##*/}: FAILED after $(($(date +%s) - t0)) s" >&2
    rc=1
  fi
done <"$manifest"
exit $rc
