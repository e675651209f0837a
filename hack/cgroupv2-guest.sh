#!/bin/bash
# The guest half of hack/cgroupv2-tests.sh: runs as root in the cgroup v2 VM, with the work tree
# shared at its host path. Makes the guest look like the host the tests expect (the static
# busybox the test image is built from, ping), checks the hierarchy, then runs each suite of the
# manifest and prints its time; then, when given critest's directory, runs hack/critest.sh with
# the focus given against a crust of its own, with the driver of MODE and the offline registry
# served on 127.0.0.1:5000, read-only, from the host's registry storage. Exits 1 if any test or
# spec fails.
#
# Usage: cgroupv2-guest.sh MODE MANIFEST THREADS [CRITOOLS_DIR REGISTRY_DATA FOCUS]
#   MANIFEST: "<test binary> <exact test name>..." per line
#   CRITOOLS_DIR: where critest and crictl are; REGISTRY_DATA: offline-registry.sh's storage
set -euo pipefail
mode=$1 manifest=$2 threads=$3 critools=${4:-} registry_data=${5:-} focus=${6:-}
here=$(cd "$(dirname "$0")" && pwd)
out=$here/../target/cgroupv2

fail() { echo "cgroupv2-guest: FAILED: $*" >&2; exit 1; }

[ -f /sys/fs/cgroup/cgroup.controllers ] || fail "/sys/fs/cgroup is not cgroup2"
[ ! -d /sys/fs/cgroup/memory ] || fail "a cgroup v1 memory hierarchy is mounted"
echo "cgroupv2-guest: $mode: kernel $(uname -r), PID 1 $(cat /proc/1/comm)," \
  "controllers: $(cat /sys/fs/cgroup/cgroup.controllers), $(nproc) CPUs"

install -m 755 "$out/busybox" /bin/busybox
# Debian's crun and runc as runtime handlers, where tests/runtime_handlers.rs looks for them
# (the root file system is a throw-away copy).
install -m 755 "$out/crun" /usr/bin/crun
install -m 644 "$out/libyajl.so.2" /usr/lib/x86_64-linux-gnu/libyajl.so.2
[ -x /usr/sbin/runc ] || install -m 755 "$out/runc" /usr/sbin/runc
crun --version | head -1 || fail "crun does not run in the guest"
tools=/run/cgroupv2-tools
mkdir -p "$tools"
# Tools the tests call that the guest image lacks, as busybox applets.
command -v ping >/dev/null || ln -sf /bin/busybox "$tools/ping"
# critest loads its AppArmor profiles with `sudo apparmor_parser`; this is root already.
if ! command -v sudo >/dev/null; then
  printf '#!/bin/sh\nexec "$@"\n' >"$tools/sudo"
  chmod 755 "$tools/sudo"
fi
# The tests' and critest's daemons keep their roots on the guest's ext4 disk, as a node keeps
# /var/lib/crust: the guest's /tmp is a tmpfs, which Linux 6.1 cannot id-map, and pods with user
# namespaces need id-mapped image layers.
export PATH=$tools:$PATH RUST_BACKTRACE=${RUST_BACKTRACE:-0} TMPDIR=/var/tmp

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

# The offline registry, served read-only from the host's storage (shared) on the address
# critest-config/crust.toml's mirrors name. The guest has no curl: bash's /dev/tcp tells when
# it listens.
serve_registry() {
  local dir=/tmp/cgroupv2-registry t0
  t0=$(date +%s)
  [ -d "$registry_data/docker/registry/v2/repositories" ] ||
    fail "no registry storage at $registry_data"
  mkdir -p "$dir"
  printf '%s\n' 'version: 0.1' 'log:' '  level: warn' 'storage:' '  filesystem:' \
    "    rootdirectory: $registry_data" '  maintenance:' '    uploadpurging:' \
    '      enabled: false' '    readonly:' '      enabled: true' 'http:' \
    '  addr: 127.0.0.1:5000' >"$dir/config.yml"
  docker-registry serve "$dir/config.yml" >"$dir/log" 2>&1 &
  for _ in $(seq 100); do
    if (exec 3<>/dev/tcp/127.0.0.1/5000) 2>/dev/null; then
      echo "cgroupv2-guest: registry up in $(($(date +%s) - t0)) s"
      return 0
    fi
    sleep 0.2
  done
  cat "$dir/log" >&2
  fail "docker-registry did not listen on 127.0.0.1:5000 (its log above)"
}

if [ -n "$critools" ]; then
  serve_registry
  t0=$(date +%s)
  if CRITEST=$critools/critest CRICTL=$critools/crictl OFFLINE_REGISTRY=running \
    CRITEST_CGROUP_DRIVER=$mode bash "$here/critest.sh" "--ginkgo.focus=$focus"; then
    echo "cgroupv2-guest: critest: passed in $(($(date +%s) - t0)) s"
  else
    echo "cgroupv2-guest: critest: FAILED after $(($(date +%s) - t0)) s" >&2
    rc=1
  fi
fi
exit $rc
