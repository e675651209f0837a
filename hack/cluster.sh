#!/bin/bash
# Brings crust's test cluster up, shows it, checks it, takes it down (docs/cluster.md): a
# control-plane node and two workers on this machine, each node a network namespace with its
# own crust, kubelet and kube-proxy. The work is done by a small Go program, hack/cluster/;
# this only builds what it needs and passes the paths on.
#
# Usage: hack/cluster.sh up|down|status|smoke|e2e [harness flags, e.g. --workers 2 --retain]
#   up      builds (or reuses) the binaries, starts the offline registry with the suite's
#           stand-in images (hack/e2e-node-images.sh), brings the cluster up;
#           the last line it prints is KUBECONFIG=<path>, with kubectl beside that file
#   down    ends every process of the cluster and removes all it made (found by name)
#   status  what of the cluster runs; fails unless all of it does
#   smoke   pods on two workers reach each other by pod IP, Service and DNS name
#   e2e     the conformance suite against the cluster that is up (--focus, --procs; the
#           report in /var/lib/crust-cluster-reports/<name>)
# Env: CLUSTER_NAME (default local), CRUST_BIN (default target/release/crust),
#      OFFLINE_REGISTRY (default ../shared/tools/offline-registry.sh)
# Leaves on disk: the binaries in /var/cache/crust-tools, the images' build cache in
# /var/lib/crust-cluster-images, the registry's data (its own directory).
set -euo pipefail
shopt -s inherit_errexit
top=$(cd "$(dirname "$0")/.." && pwd)
fail() { echo "cluster.sh: FAILED: $*" >&2; exit 1; }

[ $# -ge 1 ] || fail "usage: $0 up|down|status|smoke|e2e [flags]"
cmd=$1
shift
[ "$(id -u)" = 0 ] || fail "run as root (network namespaces, cgroups, mounts)"
for t in go ip nsenter iptables skopeo; do
  command -v "$t" >/dev/null || fail "$t is missing (hack/install-deps.sh test installs it)"
done

# The harness itself: the standard library only, built in seconds into target/.
harness=$top/target/hack/cluster
(cd "$top/hack/cluster" && go build -o "$harness" .) || fail "building hack/cluster"

flags=(--name "${CLUSTER_NAME:-local}")
case $cmd in
  up)
    tools=$("$top/hack/build-tools.sh" cluster | tail -1) || fail "could not build the cluster's binaries"
    coredns=$("$top/hack/build-tools.sh" coredns | tail -1) || fail "could not build coredns"
    flags+=(--tools "$tools" --coredns "$coredns")
    ;;
  status|smoke|e2e) # the binaries up used, not built again
    flags+=(--tools "$("$top/hack/build-tools.sh" --dir cluster)")
    flags+=(--coredns "$("$top/hack/build-tools.sh" --dir coredns)")
    ;;
esac
if [ "$cmd" = up ]; then
  crust=${CRUST_BIN:-$top/target/release/crust}
  [ -x "$crust" ] || fail "crust not found at $crust (cargo build --release --bins)"
  # The offline registry with the suite's stand-ins (busybox, agnhost built above, nginx,
  # pause, ...), as make e2e-node has them, in a work directory of the cluster's own.
  E2E_IMAGES_WORK=/var/lib/crust-cluster-images "$top/hack/e2e-node-images.sh" "$tools/agnhost" ||
    fail "the offline registry or its stand-in images (hack/e2e-node-images.sh)"
  flags+=(--crust "$crust")
fi
exec "$harness" "${flags[@]}" "$@" "$cmd"
