#!/bin/bash
# Runs the integration tests that touch cgroups on pure cgroup v2, in the throw-away Debian 12
# guest of ../shared/tools/cgroupv2-vm.sh (kernel 6.1, cgroup_no_v1=all): the test binaries
# are built here (`cargo test --no-run`) and run there, each against a crust it starts there,
# with the guest's CNI plugins and docker-registry on the guest's loopback. This host and CI
# are cgroup v1 hybrid without systemd, so this is where crust's v2 and systemd paths run.
#
# Two boots, each printing how long it took:
#   cgroupfs  the VM script's small init as PID 1; the cgroupfs driver (tests in $CGROUPFS_SUITES)
#   systemd   systemd as PID 1 with D-Bus; cgroup_driver = "systemd" (tests in $SYSTEMD_SUITES,
#             which are #[ignore]d on the host for want of systemd, run here with --include-ignored;
#             among them the Debian package, installed, restarted, upgraded and removed)
# Each boot then runs critest's pod and container specs ($CRITEST_FOCUS) with hack/critest.sh
# against a crust with that boot's driver: crictl and critest (hack/build-tools.sh) and the
# offline registry's storage (../shared/tools/offline-registry.sh, built here) are shared into
# the guest, which serves a copy of it on 127.0.0.1:5000 with its own docker-registry.
# Emulation makes fork+exec about 30 times slower, so only the tests that inspect cgroups or
# depend on them (limits, updates, OOM kills, stats, teardown, recovery) run in the guest; the
# rest of the suite runs on the host only (docs/testing.md).
#
# `make test` runs the quick set (CGROUPV2_SET=quick): in the cgroupfs boot only the suites whose
# subject is cgroup v2 itself or exists only in the guest ($CGROUPFS_QUICK: limits and updates,
# OOM kills, the pod's memory limit and its monitor, AppArmor, crun), and critest's AppArmor,
# OOM and metrics specs; the systemd boot whole. `make cgroupv2-test` runs every suite below and
# both critest selections, about 20 minutes: run it before resolving an issue that changes what
# pods or containers do (docs/testing.md).
#
# Usage: hack/cgroupv2-tests.sh [cgroupfs|systemd|all]   (default: all)
# Env: CGROUPV2_SET (all, the default, or quick), CGROUPV2_VM (the VM script),
#      CGROUPV2_THREADS (test threads in the guest, default 2),
#      CGROUPV2_CRITEST_FOCUS (critest's --ginkgo.focus in both boots, default
#      $CRITEST_FOCUS_CGROUPFS and $CRITEST_FOCUS_SYSTEMD below),
#      OFFLINE_REGISTRY (the registry script), and the VM script's own V2VM_* knobs.
set -euo pipefail
shopt -s inherit_errexit
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

fail() { echo "cgroupv2-tests: FAILED: $*" >&2; exit 1; }

mode=${1:-all}
case $mode in cgroupfs|systemd|all) ;; *) echo "usage: $0 [cgroupfs|systemd|all]" >&2; exit 2 ;; esac
set_=${CGROUPV2_SET:-all}
case $set_ in all|quick) ;; *) echo "$0: CGROUPV2_SET must be all or quick" >&2; exit 2 ;; esac

# "<test target> <test name>..." per line; names are exact (libtest --exact).
CGROUPFS_SUITES=(
  "cgroups limits_updates_and_the_container_s_view_in_the_hierarchy_in_use cpu_shares_map_to_weights_as_runc_maps_them pod_sandbox_resources_reach_the_live_pod_cgroup"
  "apparmor apparmor_profiles_as_the_host_has_them"
  "confinement_differential crust_confines_pods_as_containerd_does"
  "containers a_container_runs_logs_execs_stops_and_leaves_nothing_behind a_container_over_its_memory_limit_is_oom_killed resource_updates_reach_the_live_cgroup"
  "sandbox_lifecycle pod_gets_namespaces_network_cgroup_dns_and_leaves_nothing_behind pod_stats_measure_the_pod_cgroup_and_network"
  "sandbox_recovery sigkilled_daemon_recovers_every_pod_with_its_state_and_ip a_dead_monitor_makes_the_pod_not_ready_and_stop_still_cleans_up"
  "container_recovery containers_keep_running_and_exits_are_kept_across_a_daemon_sigkill containers_of_a_pod_whose_monitor_died_end_as_killed"
  "monitor_death the_pod_s_memory_limit_takes_a_container_never_its_monitor a_container_reads_exited_only_once_its_processes_are_gone"
  "diagnose an_oom_killed_container_is_blamed_on_its_own_limit an_oom_kill_at_the_pod_s_limit_is_blamed_on_the_pod a_healthy_pod_then_a_stopped_container_then_a_dead_daemon"
  "user_namespaces a_pod_s_root_is_an_unprivileged_range_of_host_ids volumes_with_the_pod_s_mappings_are_id_mapped the_pod_lives_through_a_daemon_kill_and_leaves_nothing"
  "runtime_handlers a_pod_runs_under_crun"
)
# The quick set's cgroupfs suites (names of CGROUPFS_SUITES' test targets): what runs on cgroup
# v2 only or exists only in the guest; the rest of CGROUPFS_SUITES also runs on the host (v1).
CGROUPFS_QUICK=(cgroups containers monitor_death apparmor runtime_handlers)
SYSTEMD_SUITES=(
  "cgroups the_systemd_driver_puts_scopes_in_kubelet_s_slices_and_leaves_none the_systemd_driver_s_scopes_survive_a_daemon_sigkill_and_go_with_removal the_systemd_driver_s_oom_kill_is_read_from_the_container_s_own_scope"
  "package_install the_package_installs_restarts_upgrades_reloads_and_removes_under_systemd"
)
# critest's specs each boot runs (--ginkgo.focus); every one must pass (critest-config/skips.txt
# applies; its "host: AppArmor absent" entry does not where AppArmor is on). Under emulation a
# spec takes about 9 s (all 35 Container and PodSandbox specs took 5.5 min in the cgroupfs
# boot), so to stay within the guest's 15-minute budget each boot runs the specs that go
# through cgroups: pod basics and metrics, container basics with their stats, the OOM kill
# (21 specs), and in the cgroupfs boot the 9 AppArmor specs, as this guest is where the LSM
# is on; the systemd boot, whose own tests are slower, the pod ones, container start and
# stats, and the OOM kill, read from the container's own scope (9). The rest of critest runs
# on the host. The tests of AppArmor and the differential test against containerd run in the
# cgroupfs boot, for AppArmor too.
CRITEST_FOCUS_CGROUPFS='\[k8s\.io\] (AppArmor|Security Context UserNamespaces|PodSandbox runtime should support (basic|metrics) operations|Container (OOM|runtime should support basic operations)) '
CRITEST_FOCUS_QUICK='\[k8s\.io\] (AppArmor|PodSandbox runtime should support metrics operations|Container OOM) '
CRITEST_FOCUS_SYSTEMD='\[k8s\.io\] (PodSandbox runtime should support (basic|metrics) operations|Container (OOM|runtime should support basic operations on container runtime should support (starting|listing container stats)) )'

[ "$(id -u)" -eq 0 ] || fail "run as root (the VM script builds its image and boots as root)"
vm=${CGROUPV2_VM:-$top/../shared/tools/cgroupv2-vm.sh}
[ -f "$vm" ] || fail "the VM script is not at $vm (set CGROUPV2_VM)"
for t in jq cargo; do
  command -v "$t" >/dev/null || fail "$t is missing (hack/install-deps.sh test installs jq)"
done
if [ ! -x /bin/busybox ] || ldd /bin/busybox >/dev/null 2>&1; then
  fail "/bin/busybox is missing or not static: install busybox-static (hack/install-deps.sh test)"
fi

bash "$vm" build || fail "building the guest image ($vm build)"

# --- the test binaries, built here
cargo build --bins
targets=()
for s in "${CGROUPFS_SUITES[@]}" "${SYSTEMD_SUITES[@]}"; do targets+=(--test "${s%% *}"); done
out=$top/target/cgroupv2
rm -rf "$out"
mkdir -p "$out"
cargo test --no-run --message-format=json "${targets[@]}" >"$out/build.json" ||
  fail "building the test binaries"
jq -r 'select(.reason == "compiler-artifact" and .executable != null and .profile.test)
       | "\(.target.name)\t\(.executable)"' "$out/build.json" | sort -u >"$out/binaries"
# The guest's busybox is Debian's dynamic one; the tests build their image from a static one.
cp /bin/busybox "$out/busybox"
# The differential test's peer: containerd 2.4.2 (hack/build-tools.sh, shared) with the host's
# runc (Debian's, the guest has its libseccomp); the Go-built probe and containerd's defaults
# tool are built here, where Go is (tests/common/tools.rs rebuilds neither while it is newer
# than its sources).
ctrd=$(hack/build-tools.sh containerd) || fail "could not build containerd"
cp /usr/sbin/runc "$out/runc" || fail "runc is missing (hack/install-deps.sh test)"
# crun as a runtime handler (tests/runtime_handlers.rs): the host's crun 1.8.1 refuses its hybrid
# hierarchy, so the guest's pure v2 is where a pod runs under it; the guest image has no crun,
# so Debian's binary goes in with the one library of it the image lacks (yajl).
cp /usr/bin/crun "$out/crun" || fail "crun is missing (hack/install-deps.sh test)"
cp -L /usr/lib/x86_64-linux-gnu/libyajl.so.2 "$out/libyajl.so.2" ||
  fail "crun's libyajl.so.2 is missing (hack/install-deps.sh test installs crun)"
mkdir -p target/tools
(cd tests/fixtures/probe && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -o "$top/target/tools/probe" .) ||
  fail "building tests/fixtures/probe"

# --- critest's tools and images, shared into the guest
critools=$(hack/build-tools.sh cri-tools) || fail "could not build crictl and critest"

# The package install test's two packages, from the binary built above: an install, then an
# upgrade to a higher version (tests/package_install.rs).
version=$(awk -F'"' '/^version = / { print $2; exit }' Cargo.toml)
deb_old=$(hack/deb.sh --binary target/debug/crust --version "$version-1" --out "$out/deb") ||
  fail "building the package (hack/deb.sh)"
deb_new=$(hack/deb.sh --binary target/debug/crust --version "$version-2" --out "$out/deb") ||
  fail "building the upgrade package (hack/deb.sh)"
registry=${OFFLINE_REGISTRY:-$top/../shared/tools/offline-registry.sh}
[ -f "$registry" ] || fail "offline registry script not found at $registry (set OFFLINE_REGISTRY)"
extra=$top/critest-config/offline-images.txt
if [ -f "$extra" ] && grep -qvE '^[[:space:]]*(#|$)' "$extra"; then
  export OFFLINE_REGISTRY_EXTRA=$extra
fi
bash "$registry" start || fail "the offline registry did not build or start ($registry)"
# Where that script keeps its storage (its TOP/data).
registry_data=/var/lib/offline-registry/data
[ -d "$registry_data/docker" ] || fail "no registry storage at $registry_data after $registry start"

manifest() {  # manifest SUITE...: "<binary> <name>..." per suite
  local s name exe
  for s in "$@"; do
    name=${s%% *}
    exe=$(awk -F'\t' -v n="$name" '$1 == n { print $2 }' "$out/binaries")
    [ -n "$exe" ] || fail "no test binary for $name"
    echo "$exe ${s#* }"
  done
}

# --- the guest runs
rc=0
run_guest() {  # run_guest MODE SUITE...: MODE systemd boots with systemd as PID 1
  local m=$1 t0 flags=() focus=$CRITEST_FOCUS_CGROUPFS
  shift
  if [ "$m" = systemd ]; then flags=(--systemd) focus=$CRITEST_FOCUS_SYSTEMD; fi
  focus=${CGROUPV2_CRITEST_FOCUS:-$focus}
  manifest "$@" >"$out/$m.suites"
  t0=$SECONDS
  echo "cgroupv2-tests: $m: booting the guest"
  if CRUST_CONTAINERD_DIR=$ctrd CRUST_RUNC=$out/runc CRUST_DEB_OLD=$deb_old \
    CRUST_DEB_NEW=$deb_new CRUST_CRICTL=$critools/crictl \
    V2VM_PASSENV="RUST_BACKTRACE RUST_LOG CRUST_CONTAINERD_DIR CRUST_RUNC CRUST_DEB_OLD CRUST_DEB_NEW CRUST_CRICTL" \
    bash "$vm" run "${flags[@]}" --share "$top" --share "$critools" --share "$registry_data" \
      --share "$ctrd" \
      -- bash "$top/hack/cgroupv2-guest.sh" "$m" "$out/$m.suites" "${CGROUPV2_THREADS:-2}" \
      "$critools" "$registry_data" "$focus"; then
    echo "cgroupv2-tests: $m: passed in $((SECONDS - t0)) s"
  else
    echo "cgroupv2-tests: $m: FAILED after $((SECONDS - t0)) s" >&2
    rc=1
  fi
}
cgroupfs_suites=("${CGROUPFS_SUITES[@]}")
if [ "$set_" = quick ]; then
  cgroupfs_suites=()
  for s in "${CGROUPFS_SUITES[@]}"; do
    for q in "${CGROUPFS_QUICK[@]}"; do
      if [ "${s%% *}" = "$q" ]; then cgroupfs_suites+=("$s"); fi
    done
  done
  CRITEST_FOCUS_CGROUPFS=$CRITEST_FOCUS_QUICK
fi
if [ "$mode" != systemd ]; then run_guest cgroupfs "${cgroupfs_suites[@]}"; fi
if [ "$mode" != cgroupfs ]; then run_guest systemd "${SYSTEMD_SUITES[@]}"; fi
exit $rc
