#!/bin/bash
# Kubernetes' conformance suite on crust's test cluster (docs/cluster.md), as kind's CI runs it:
# the cluster up, the suite against it, then the cluster-life test (hack/cluster.sh life), the
# logs kept, the cluster down, and the first failure as the exit status. hack/cluster.sh does each step (its Go harness, hack/cluster/).
#
# A cluster of the same name (CLUSTER_NAME, default local) that is up already is taken down
# first: it is what a killed run left, or one brought up by hand.
#
# Usage: hack/e2e-cluster.sh [harness flags]   e.g. --focus='\[sig-network\] DNS' --procs=2
#   The focus defaults to `\[Conformance\]` (462 specs in v1.37.2, hours on two cores).
# The report, the suite's output and every component's log (the kube-system pods' too) stay in
# /var/lib/crust-cluster-reports/<name> until the next run. It prints, last,
# `e2e-cluster: N passed, N failed, N skipped` (skipped: specs the suite skipped by itself,
# which fail the run as failures do).
set -euo pipefail
shopt -s inherit_errexit
top=$(cd "$(dirname "$0")/.." && pwd)
name=${CLUSTER_NAME:-local}
reports=/var/lib/crust-cluster-reports/$name
# E2E_RUNTIME=containerd: the same cluster with containerd 2.4.2 on its nodes, to tell a fact of
# this host (which containerd's run shares) from a crust bug; its reports kept apart.
[ "${E2E_RUNTIME:-crust}" = crust ] || reports=$reports-$E2E_RUNTIME

save_logs() { # before the cluster goes: down removes them with it
  local base=/var/lib/crust-cluster/$name d n
  [ -d "$base/logs" ] || return 0
  mkdir -p "$reports"
  rm -rf "$reports/logs"
  cp -r "$base/logs" "$reports/logs" || true
  # and the kube-system pods' (the control plane's static pods, CoreDNS)
  for d in "$base"/nodes/*/pod-logs/kube-system_*; do
    [ -d "$d" ] || continue
    n=$(basename "$(dirname "$(dirname "$d")")")
    mkdir -p "$reports/logs/$n/pods"
    cp -r "$d" "$reports/logs/$n/pods/" || true
  done
}
trap 'save_logs; "$top/hack/cluster.sh" down; exit 130' INT TERM
"$top/hack/cluster.sh" down >/dev/null 2>&1 || true   # what a killed run left

res=0
"$top/hack/cluster.sh" up --retain || { res=$?; echo "e2e-cluster: FAILED: the cluster did not come up" >&2; }
if [ "$res" -eq 0 ]; then
  "$top/hack/cluster.sh" smoke || { res=$?; echo "e2e-cluster: FAILED: the cluster's smoke test" >&2; }
fi
verdict=
if [ "$res" -eq 0 ]; then
  out=$(mktemp)
  "$top/hack/cluster.sh" e2e --report-dir "$reports" "$@" | tee "$out" || res=$?
  verdict=$(grep -E '^e2e-cluster: [0-9]+ passed' "$out" || true)
  rm -f "$out"
  # A cluster's life beyond the suite, on the same cluster, whatever the suite's verdict.
  life=0
  "$top/hack/cluster.sh" life || life=$?
  if [ "$life" -ne 0 ]; then
    echo "e2e-cluster: FAILED: the cluster-life test (hack/cluster.sh life)" >&2
    [ "$res" -ne 0 ] || res=$life
  fi
fi
save_logs
"$top/hack/cluster.sh" down || { echo "e2e-cluster: FAILED: down left something behind" >&2; [ "$res" -ne 0 ] || res=1; }
[ -z "$verdict" ] || echo "$verdict"
exit "$res"
