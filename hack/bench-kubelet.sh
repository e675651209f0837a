#!/bin/bash
# Pod start as kubelet measures it: the kubelet of the tests (k8s.io/kubernetes v1.37.2,
# standalone, static pods, hack/build-tools.sh kubelet) starts PODS pods of two containers each
# (an init container, then a main one; the image already present, imagePullPolicy Never) on
# crust, then on containerd (the same peer as hack/bench.sh), in the same run, with the same
# kubelet configuration and CNI network. For each runtime it prints:
#   - kubelet_pod_start_duration_seconds (kubelet's own histogram: from the pod first seen to
#     running, the init container included), its median and p95 interpolated in the buckets;
#   - kubelet_runtime_operations_duration_seconds of the CRI calls of a pod's start (median);
#   - the wall time from writing the manifests until kubelet reports every pod Running with
#     its main container running (its /pods, polled every 50 ms), and each pod's own time to
#     that, median and p95 (kubelet's histogram counts each pod twice, once at its first sync:
#     its median is near zero whatever the runtime);
# then crust's figures over containerd's. kubelet_pod_start_sli_duration_seconds is not
# printed: kubelet's start-up tracker ignores static pods (pkg/kubelet/config/config.go), and a
# standalone kubelet has no others.
# Needs root and a release build (make bench builds it). Usage: hack/bench-kubelet.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release}
PODS=${PODS:-30}
[ -x "$BIN/crust" ] || { echo "build first: cargo build --release --bins" >&2; exit 1; }
[ -x /bin/busybox ] || { echo "busybox-static missing (hack/install-deps.sh bench)" >&2; exit 1; }
for t in jq curl unshare; do
  command -v "$t" >/dev/null || { echo "$t is missing (hack/install-deps.sh bench)" >&2; exit 1; }
done
KUBELET=$(hack/build-tools.sh kubelet)/kubelet
# shellcheck source=hack/containerd-peer.sh
. hack/containerd-peer.sh
ctrd_pick

# The node's address for kubelet (--node-ip). Without it a standalone kubelet looks its node name
# up in DNS each time it builds its node object, which it does in every sync of a static pod
# (to decide on a mirror pod); where that lookup waits for its timeout (5 s, offline) every pod
# worker waits with it, and the figures measure DNS, not the runtime.
NODE_IP=$(ip -4 -o route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p')
[ -n "$NODE_IP" ] || NODE_IP=$(ip -4 -o addr show scope global | awk '{ split($4, a, "/"); print a[1]; exit }')
[ -n "$NODE_IP" ] || { echo "no global IPv4 address on this machine for kubelet's --node-ip" >&2; exit 1; }

W=$(mktemp -d /tmp/crust-bench-kubelet.XXXXXX)
PIDS=()
BRIDGE=crustbenchk0
CGROUP_ROOT=/crust-bench-kubelet-$$
cgroup_dirs() { # every hierarchy's directory of the kubelet's cgroup root
  if [ -f /sys/fs/cgroup/cgroup.controllers ]; then echo "/sys/fs/cgroup$CGROUP_ROOT"; return; fi
  # v1 hierarchies and, on a hybrid host, the unified one (kubelet makes its cgroups there too).
  for h in /sys/fs/cgroup/*/; do
    [ -e "$h/cgroup.procs" ] && echo "${h%/}$CGROUP_ROOT"
  done
}
cgroup_pids() { # every process in kubelet's cgroups
  local d
  for d in $(cgroup_dirs); do
    [ -d "$d" ] && find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null
  done | sort -u
}
cleanup() {
  cgroup_pids | xargs -r kill -9 2>/dev/null || true
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  pkill -f "containerd-shim-runc-v2 .*-address $W/" 2>/dev/null || true
  grep -o " ${W}[^ ]*" /proc/self/mountinfo 2>/dev/null | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
  ip link del "$BRIDGE" 2>/dev/null || true
  for d in $(cgroup_dirs); do
    [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
  rm -rf "$W"
}
trap cleanup EXIT
wait_for() { for _ in $(seq 300); do [ -S "$1" ] && return 0; sleep 0.1; done; echo "timed out waiting for $1" >&2; return 1; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# shellcheck source=hack/bench-lib.sh
. hack/bench-lib.sh
bench_network "$W/net.d" "$BRIDGE" 10.91.0.0/16
bench_images "$W"
IMAGE=$BENCH_IMAGE

# One kubelet run against SOCKET, labelled LABEL: its figures go to $W/LABEL.figures.
kubelet_run() { # label socket
  local label=$1 sock=$2 k=$W/kubelet-$1 port ro healthz
  mkdir -p "$k/manifests" "$k/logs" "$k/device-plugins"
  for d in $(cgroup_dirs); do mkdir -p "$d"; done
  port=$(free_port); ro=$(free_port); healthz=$(free_port)
  cat > "$k/config.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: $k/manifests
fileCheckFrequency: 1s
syncFrequency: 60s
cgroupDriver: cgroupfs
cgroupRoot: $CGROUP_ROOT
cgroupsPerQOS: true
failSwapOn: false
failCgroupV1: false
address: 127.0.0.1
port: $port
readOnlyPort: $ro
healthzPort: $healthz
healthzBindAddress: 127.0.0.1
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: unix://$sock
imageServiceEndpoint: unix://$sock
podLogsDir: $k/logs
evictionHard: {memory.available: 1Mi, nodefs.available: 0%, nodefs.inodesFree: 0%, imagefs.available: 0%, imagefs.inodesFree: 0%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
enforceNodeAllocatable: []
resolvConf: /etc/resolv.conf
maxPods: $((PODS + 10))
featureGates: {EventedPLEG: true, PodAndContainerStatsFromCRI: true}
YAML
  # kubelet's device plugin directory is a fixed path every kubelet shares: a private one.
  unshare --mount --propagation slave -- sh -euc \
    'mkdir -p /var/lib/kubelet/device-plugins && mount --bind "$0" /var/lib/kubelet/device-plugins && exec "$@"' \
    "$k/device-plugins" "$KUBELET" --config "$k/config.yaml" --root-dir "$k/root" \
    --hostname-override bench-node --node-ip "$NODE_IP" -v=1 >"$k/kubelet.log" 2>&1 & PIDS+=($!)
  local kpid=$!
  for i in $(seq 600); do
    [ "$(curl -s "http://127.0.0.1:$healthz/healthz" || true)" = ok ] && break
    kill -0 "$kpid" 2>/dev/null || { tail -20 "$k/kubelet.log" >&2; echo "kubelet exited" >&2; exit 1; }
    [ "$i" -lt 600 ] || { tail -20 "$k/kubelet.log" >&2; echo "kubelet not healthy in 60 s" >&2; exit 1; }
    sleep 0.1
  done
  # The node settles (its first relist, the runtime's status) before anything is measured.
  sleep 3
  for i in $(seq "$PODS"); do
    cat > "$k/.p$i.yaml" <<YAML
apiVersion: v1
kind: Pod
metadata: {name: p$i, namespace: bench}
spec:
  terminationGracePeriodSeconds: 0
  initContainers:
  - {name: init, image: $IMAGE, imagePullPolicy: Never, command: ["true"]}
  containers:
  - {name: main, image: $IMAGE, imagePullPolicy: Never, command: [sleep, "3600"]}
YAML
  done
  local t0 t1 now running name
  # Each pod's time from the write to the first poll that shows it Running: a median and p95
  # finer than kubelet's histogram, whose lowest buckets end at 0.5 and 1 s.
  local -A ready=()
  t0=$(date +%s%N)
  for i in $(seq "$PODS"); do mv "$k/.p$i.yaml" "$k/manifests/p$i.yaml"; done
  for i in $(seq 2400); do
    for name in $(curl -s "http://127.0.0.1:$ro/pods" | jq -r '(.items // [])[] | select(.status.phase == "Running"
      and ([.status.containerStatuses[]? | select(.name == "main" and .state.running)] | length) == 1)
      | .metadata.name' || true); do
      now=$(date +%s%N)
      [ -n "${ready[$name]:-}" ] || ready[$name]=$(((now - t0) / 1000000))
    done
    running=${#ready[@]}
    [ "$running" = "$PODS" ] && break
    [ "$i" -lt 2400 ] || { tail -30 "$k/kubelet.log" >&2; echo "$label: $running of $PODS pods running after 120 s" >&2; exit 1; }
    sleep 0.05
  done
  t1=$(date +%s%N)
  curl -s "http://127.0.0.1:$ro/metrics" > "$k/metrics"
  {
    echo "wall $(((t1 - t0) / 1000000))"
    printf '%s\n' "${ready[@]}" | sort -n | awk '{ t[NR] = $1 }
      END { p50 = t[int((NR + 1) / 2)]; p95 = t[int(NR * 0.95 + 0.999)]; print "each", p50, p95, NR }'
    histogram "$k/metrics" kubelet_pod_start_duration_seconds '' pod_start
    for op in run_podsandbox create_container start_container; do
      histogram "$k/metrics" kubelet_runtime_operations_duration_seconds "operation_type=\"$op\"" "$op"
    done
  } > "$W/$label.figures"
  # Down again: the manifests go and kubelet stops everything. kubelet's /pods forgets a static
  # pod as soon as its manifest goes, so the wait is on the processes: none left in kubelet's
  # cgroups (the runtime's own pod processes, monitors or pause containers, included).
  rm -f "$k/manifests/"*.yaml
  for i in $(seq 1200); do
    [ -z "$(cgroup_pids)" ] && break
    [ "$i" -lt 1200 ] || { echo "$label: processes left in kubelet's cgroups after 120 s" >&2; exit 1; }
    sleep 0.1
  done
  kill "$kpid"; wait "$kpid" 2>/dev/null || true
}

# `histogram FILE NAME LABELS KEY`: KEY's median and p95 in ms, linearly interpolated inside
# the bucket the rank falls in (kubelet's buckets are coarse: the figures are estimates), and
# the count.
histogram() {
  awk -v name="$2" -v want="$3" -v key="$4" '
    index($0, name "_bucket{") == 1 && (want == "" || index($0, want)) {
      le = $0; sub(/.*le="/, "", le); sub(/".*/, "", le)
      n++; bound[n] = (le == "+Inf") ? 1e9 : le + 0; cum[n] = $NF + 0
    }
    END {
      if (n == 0 || cum[n] == 0) { printf "%s none\n", key; exit }
      total = cum[n]
      split("0.5 0.95", qs, " ")
      for (q = 1; q <= 2; q++) {
        rank = qs[q] * total; lo = 0; prev = 0
        for (i = 1; i <= n; i++) {
          if (cum[i] >= rank) {
            width = bound[i] - lo; inb = cum[i] - prev
            v[q] = lo + (inb > 0 ? width * (rank - prev) / inb : 0)
            break
          }
          lo = bound[i]; prev = cum[i]
        }
      }
      printf "%s %.1f %.1f %d\n", key, v[1] * 1000, v[2] * 1000, total
    }' "$1"
}

echo "== kubelet $("$KUBELET" --version | awk '{print $2}'), $PODS static pods of an init and a main container"
echo "== crust $("$BIN/crust" version | awk '{print $2}')"
mkdir -p "$W/crust"
printf '[network]\nconf_dir = "%s"\nmasquerade_subnets = []\n[nri]\nenable = false\n' "$W/net.d" > "$W/crust/config.toml"
"$BIN/crust" image import --root "$W/crust/root" --state "$W/crust/state" \
  --config "$W/crust/config.toml" "$W/busybox.tar" >/dev/null
"$BIN/crust" serve --listen "$W/crust/crust.sock" --root "$W/crust/root" --state "$W/crust/state" \
  --config "$W/crust/config.toml" --log-level warn >"$W/crust/log" 2>&1 & PIDS+=($!)
CRUST_PID=$!
wait_for "$W/crust/crust.sock"
kubelet_run crust "$W/crust/crust.sock"
kill "$CRUST_PID"; wait "$CRUST_PID" 2>/dev/null || true

echo "== containerd $CTRD_DESC"
C=$W/ctrd
mkdir -p "$C"
ctrd_config "$C/config.toml" "$C/root" "$C/state" "$C/containerd.sock" \
  cni_conf_dir="$W/net.d" sandbox_image=crust.bench/pause:1
ctrd_start "$C/config.toml" "$C/log"
PIDS+=("$CTRD_PID")
wait_for "$C/containerd.sock" || { cat "$C/log" >&2; exit 1; }
"$CTRD_DIR/ctr" --address "$C/containerd.sock" -n k8s.io images import "$W/pause.tar" >/dev/null
"$CTRD_DIR/ctr" --address "$C/containerd.sock" -n k8s.io images import "$W/busybox.tar" >/dev/null
kubelet_run containerd "$C/containerd.sock"

# The table: each figure for both, and crust's over containerd's.
awk '
  FNR == 1 { rt = (FILENAME ~ /crust.figures$/) ? "crust" : "containerd" }
  $1 == "wall" { v[rt, "wall"] = $2; next }
  $2 != "none" { v[rt, $1 " p50"] = $2; v[rt, $1 " p95"] = $3; n[rt, $1] = $4 }
  END {
    split("wall|each p50|each p95|pod_start p50|pod_start p95|run_podsandbox p50|create_container p50|start_container p50", rows, "|")
    desc["wall"] = "all pods Running (wall)"
    desc["each p50"] = "each pod Running (polled) p50"
    desc["each p95"] = "each pod Running (polled) p95"
    desc["pod_start p50"] = "kubelet_pod_start_duration p50"
    desc["pod_start p95"] = "kubelet_pod_start_duration p95"
    desc["run_podsandbox p50"] = "runtime op run_podsandbox p50"
    desc["create_container p50"] = "runtime op create_container p50"
    desc["start_container p50"] = "runtime op start_container p50"
    for (r = 1; r <= 8; r++) {
      c = v["crust", rows[r]]; d = v["containerd", rows[r]]
      if (c == "" || d == "") continue
      printf "%-12s %-34s crust %8.1f ms, containerd %8.1f ms: %.2fx containerd'"'"'s\n", "kubelet", desc[rows[r]], c, d, (d > 0 ? c / d : 0)
    }
  }' "$W/crust.figures" "$W/containerd.figures"
