#!/bin/bash
# Brings crust's test cluster up, shows it, checks it, takes it down (docs/cluster.md): a
# control-plane node and two workers on this machine, each node a network namespace with its
# own crust, kubelet and kube-proxy. The work is done by a small Go program, hack/cluster/;
# this only builds what it needs and passes the paths on.
#
# Usage: hack/cluster.sh up|down|status|smoke|e2e|life [harness flags, e.g. --workers 2 --retain]
#   up      builds (or reuses) the binaries, starts the offline registry with the suite's
#           stand-in images (hack/e2e-node-images.sh), brings the cluster up;
#           the last line it prints is KUBECONFIG=<path>, with kubectl beside that file
#   down    ends every process of the cluster and removes all it made (found by name)
#   status  what of the cluster runs; fails unless all of it does
#   smoke   pods on two workers reach each other by pod IP, Service and DNS name
#   e2e     the conformance suite against the cluster that is up (--focus, --procs; the
#           report in /var/lib/crust-cluster-reports/<name>)
#   life    a cluster's life beyond the suite: a Deployment of 20 behind a Service reached by
#           name, kubectl exec/logs -f/port-forward/cp, a rolling update, a drain, a worker's
#           crust SIGKILLed and restarted mid-rollout (hack/cluster/life.go)
# Env: CLUSTER_NAME (default local), CLUSTER_SUBNET (up's --node-subnet, default
#      172.30.40.0/24: a second cluster beside the first needs a /24 of its own),
#      CRUST_BIN (default target/release/crust),
#      E2E_RUNTIME (the nodes' runtime: crust, the default, or containerd 2.4.2 built by
#      hack/build-tools.sh containerd, the peer a failure is checked against; the other
#      commands use the runtime the cluster was brought up with),
#      E2E_CLUSTER_SKIPS (e2e's skip list, default e2e-cluster-config/skips.txt),
#      OFFLINE_REGISTRY (default ../shared/tools/offline-registry.sh)
# Leaves on disk: the binaries in /var/cache/crust-tools, the images' build cache in
# /var/lib/crust-cluster-images, the registry's data (its own directory).
set -euo pipefail
shopt -s inherit_errexit
top=$(cd "$(dirname "$0")/.." && pwd)
fail() { echo "cluster.sh: FAILED: $*" >&2; exit 1; }

[ $# -ge 1 ] || fail "usage: $0 up|down|status|smoke|e2e|life [flags]"
cmd=$1
shift
[ "$(id -u)" = 0 ] || fail "run as root (network namespaces, cgroups, mounts)"
for t in go ip nsenter iptables skopeo; do
  command -v "$t" >/dev/null || fail "$t is missing (hack/install-deps.sh test installs it)"
done

# The harness itself: the standard library only, built in seconds into target/.
harness=$top/target/hack/cluster
(cd "$top/hack/cluster" && go build -o "$harness" .) || fail "building hack/cluster"

runtime=${E2E_RUNTIME:-crust}
case $runtime in crust|containerd) ;; *) fail "E2E_RUNTIME is crust or containerd, not $runtime" ;; esac
flags=(--name "${CLUSTER_NAME:-local}" --runtime "$runtime")
case $cmd in
  up)
    tools=$("$top/hack/build-tools.sh" cluster | tail -1) || fail "could not build the cluster's binaries"
    coredns=$("$top/hack/build-tools.sh" coredns | tail -1) || fail "could not build coredns"
    flags+=(--tools "$tools" --coredns "$coredns")
    if [ "$runtime" = containerd ]; then
      flags+=(--containerd "$("$top/hack/build-tools.sh" containerd | tail -1)") ||
        fail "could not build containerd"
    fi
    ;;
  status|smoke|e2e|life) # the binaries up used, not built again
    flags+=(--tools "$("$top/hack/build-tools.sh" --dir cluster)")
    flags+=(--coredns "$("$top/hack/build-tools.sh" --dir coredns)")
    flags+=(--containerd "$("$top/hack/build-tools.sh" --dir containerd)")
    [ "$cmd" != e2e ] || flags+=(--skips "${E2E_CLUSTER_SKIPS:-$top/e2e-cluster-config/skips.txt}")
    ;;
esac
if [ "$cmd" = up ]; then
  crust=${CRUST_BIN:-$top/target/release/crust}
  [ "$runtime" = containerd ] || [ -x "$crust" ] || fail "crust not found at $crust (cargo build --release --bins)"
  # The offline registry with the suite's stand-ins (busybox, agnhost built above, nginx,
  # pause, ...), as make e2e-node has them, in a work directory of the cluster's own.
  E2E_IMAGES_WORK=/var/lib/crust-cluster-images "$top/hack/e2e-node-images.sh" "$tools/agnhost" ||
    fail "the offline registry or its stand-in images (hack/e2e-node-images.sh)"
  flags+=(--crust "$crust")
  [ -z "${CLUSTER_SUBNET:-}" ] || flags+=(--node-subnet "$CLUSTER_SUBNET")
fi
exec "$harness" "${flags[@]}" "$@" "$cmd"
