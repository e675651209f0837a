#!/bin/bash
# Pod sandbox benchmark: RunPodSandbox, Stop+Remove, status/list latency and memory (daemon RSS
# idle and with pods; RSS of each pod's own processes), for crust and for containerd in the same
# run (2.x built from its Go module, or Debian's 1.6 if that build fails: see
# hack/containerd-peer.sh; started here on temporary directories), both on the same CNI network
# config (bridge + host-local + portmap, no per-pod masquerade).
# Then containers (crust-bench-containers): create/start/stop/remove, ExecSync, a pod with a
# container from nothing, the runtime's memory for a pod of five containers, exit to event, and
# kubelet's relist with 110 pods of 3 containers (and what a relist is made of: the client's
# decoding, two empty RPCs), and on that full node a pod with a container from nothing and its
# removal; CONTAINER_ARGS passes options to it.
# Memory: RSS and PSS (/proc/<pid>/smaps_rollup: shared pages divided among the processes
# sharing them) of the runtime's own processes for a pod (crust's monitor; containerd's shim
# and pause), for 10 pods up together, a pod alone without containers and with five, each
# container of it, and each pod of the relist's 110; MEMORY_ONLY=1 measures only the pod
# alone, RELIST_ONLY=1 only the relist.
# The exec round trip twice: through `crictl exec` and through crust-bench-containers' own
# SPDY client (no crictl process start); EXEC_ONLY=1 measures only those two.
# Port-forward throughput through that same client: 100 MiB into a pod's port and out of it
# over PortForward, on SPDY and on SPDY in WebSocket, in turns with a plain copy over the pod's
# own loopback; PORTFORWARD_ONLY=1 measures only that. What one no-op NRI plugin adds to a
# container's create and start, on crust alone; NRI_ONLY=1 measures only that. A pod with a
# container from nothing is measured plain and in a user namespace of its own (hostUsers:
# false), and on crust under the runtime handlers runc and crun (Debian's binaries, the runc
# that containerd's shim runs) and runsc (gVisor); FROM_NOTHING_ONLY=1 measures only those. Checkpoint (and, on crust,
# restore) of a container holding 10 and 200 MiB of touched memory, both runtimes with the CRIU of
# hack/install-criu.sh; CHECKPOINT_ONLY=1 measures only those. The last lines compare crust with
# containerd where both were measured: the pods from nothing, the relist, memory, streaming and
# checkpoints.
# Needs root and a release build (make bench builds it). Usage: hack/bench.sh [--pods N]
set -euo pipefail
CONTAINER_ARGS=${CONTAINER_ARGS:-}
EXEC_ONLY=${EXEC_ONLY:-}
PORTFORWARD_ONLY=${PORTFORWARD_ONLY:-}
FROM_NOTHING_ONLY=${FROM_NOTHING_ONLY:-}
NRI_ONLY=${NRI_ONLY:-}
MEMORY_ONLY=${MEMORY_ONLY:-}
RELIST_ONLY=${RELIST_ONLY:-}
CHECKPOINT_ONLY=${CHECKPOINT_ONLY:-}
[ -n "$EXEC_ONLY" ] && CONTAINER_ARGS="$CONTAINER_ARGS --only-stream-execs"
[ -n "$PORTFORWARD_ONLY" ] && CONTAINER_ARGS="$CONTAINER_ARGS --only-port-forward"
[ -n "$FROM_NOTHING_ONLY" ] && CONTAINER_ARGS="$CONTAINER_ARGS --only-from-nothing"
[ -n "$MEMORY_ONLY" ] && CONTAINER_ARGS="$CONTAINER_ARGS --only-memory"
[ -n "$RELIST_ONLY" ] && CONTAINER_ARGS="$CONTAINER_ARGS --only-relist"
# Only some container rows: no pod sandbox rows, no NRI.
SOME=$EXEC_ONLY$PORTFORWARD_ONLY$FROM_NOTHING_ONLY$MEMORY_ONLY$RELIST_ONLY$CHECKPOINT_ONLY
# Those without an exec round trip.
NO_EXEC=$PORTFORWARD_ONLY$FROM_NOTHING_ONLY$MEMORY_ONLY$RELIST_ONLY$CHECKPOINT_ONLY
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release}
[ -x "$BIN/crust" ] && [ -x "$BIN/crust-bench" ] && [ -x "$BIN/crust-bench-containers" ] ||
  { echo "build first: cargo build --release --bins" >&2; exit 1; }
[ -x /bin/busybox ] || { echo "busybox-static missing (hack/install-deps.sh bench)" >&2; exit 1; }
# The CRIU both runtimes checkpoint with: crust is given its path, containerd's runc finds it on
# its PATH.
CRIU=$(hack/install-criu.sh)

# The containerd to compare with, built (or reused from the cache) before anything is measured.
# shellcheck source=hack/containerd-peer.sh
. hack/containerd-peer.sh
ctrd_pick

W=$(mktemp -d /tmp/crust-bench.XXXXXX)
# Searchable by others, as a node's /var/lib and /run are: the processes of a pod in a user
# namespace are nobody on the node and pass through it to their files (both runtimes need it).
chmod 0711 "$W"
[ -n "$CHECKPOINT_ONLY" ] && CONTAINER_ARGS="$CONTAINER_ARGS --only-checkpoint --checkpoint-dir $W/checkpoints"
: > "$W/rows"
PIDS=()
BRIDGE=crustbench0
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  # The shims outlive their daemon; theirs name our socket.
  pkill -f "containerd-shim-runc-v2 .*-address $W/" 2>/dev/null || true
  grep -o " ${W}[^ ]*" /proc/self/mountinfo 2>/dev/null | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
  ip link del "$BRIDGE" 2>/dev/null || true
  rm -rf "$W"
}
trap cleanup EXIT
[ -n "${KEEP:-}" ] && trap - EXIT
wait_for() { for _ in $(seq 200); do [ -S "$1" ] && return 0; sleep 0.1; done; echo "timed out waiting for $1" >&2; return 1; }

# shellcheck source=hack/bench-lib.sh
. hack/bench-lib.sh
bench_network "$W/net.d" "$BRIDGE" 10.90.0.0/16
# The containers' image for both runtimes, and containerd's pause image.
bench_images "$W"
IMAGE=$BENCH_IMAGE

# `crictl exec <id> true` (Exec RPC, the streaming upgrade, the command and its exit code, crictl's
# own start included, the same for both runtimes): median of EXEC_ROUNDS.
CRICTL=$(hack/build-tools.sh --dir cri-tools)/crictl
[ -x "$CRICTL" ] || hack/build-tools.sh cri-tools
EXEC_ROUNDS=${EXEC_ROUNDS:-30}
printf '{"metadata":{"name":"exec-bench","namespace":"bench","uid":"exec-bench-uid"},"log_directory":"%s/exec-logs","linux":{}}' "$W" > "$W/exec-pod.json"
printf '{"metadata":{"name":"sleeper"},"image":{"image":"%s"},"command":["sleep","3600"],"log_path":"sleeper.log","linux":{}}' "$IMAGE" > "$W/exec-ctr.json"
exec_roundtrip() { # label endpoint
  local c=("$CRICTL" --runtime-endpoint "$2" --image-endpoint "$2" --timeout 30s) pod ctr
  pod=$("${c[@]}" runp "$W/exec-pod.json")
  ctr=$("${c[@]}" create "$pod" "$W/exec-ctr.json" "$W/exec-pod.json")
  "${c[@]}" start "$ctr" >/dev/null
  for _ in $(seq "$EXEC_ROUNDS"); do
    local t0 t1; t0=$(date +%s%N)
    "${c[@]}" exec "$ctr" true
    t1=$(date +%s%N); echo $(((t1 - t0) / 1000))
  done | sort -n | awk -v l="$1" -v n="$EXEC_ROUNDS" '{v[NR]=$1} END {printf "%-12s %-34s n=%-4d median=%8.2f ms\n", l, "crictl exec (stream, true)", n, v[int((NR+1)/2)]/1000}'
  "${c[@]}" stopp "$pod" >/dev/null; "${c[@]}" rmp "$pod" >/dev/null
}

echo "== crust $("$BIN/crust" version | awk '{print $2}')"
mkdir -p "$W/crust"
# What one NRI plugin costs a container: the lifecycle rows on the same daemon, first as it
# ships (NRI on, no plugin), then with the no-op plugin of tests/fixtures/nri-plugin (NRI's own
# pkg/stub) registered and subscribed to every event, answering each with no adjustment.
nri_cost() {
  local sock="unix://$W/crust/crust.sock" events="$W/nri-noop.events"
  (cd tests/fixtures/nri-plugin && CGO_ENABLED=0 go build -mod=readonly -o "$W/nri-noop" .)
  "$BIN/crust-bench-containers" --endpoint "$sock" --label crust-nri0 --image "$IMAGE" \
    --only-lifecycle | tee -a "$W/rows"
  "$W/nri-noop" -name noop -idx 10 -socket "$W/crust/nri.sock" -log "$events" \
    >/dev/null 2>&1 & PIDS+=($!)
  local noop=$!
  # Registered once crust has synchronized it (the plugin logs that event).
  for _ in $(seq 300); do grep -q Synchronize "$events" 2>/dev/null && break; sleep 0.1; done
  grep -q Synchronize "$events" || { echo "the NRI plugin never synchronized" >&2; exit 1; }
  "$BIN/crust-bench-containers" --endpoint "$sock" --label crust-nri1 --image "$IMAGE" \
    --only-lifecycle | tee -a "$W/rows"
  kill "$noop"; wait "$noop" 2>/dev/null || true
  awk '
    ($1 == "crust-nri0" || $1 == "crust-nri1") && /(CreateContainer|StartContainer)  / {
      for (i = 1; i <= NF; i++) if ($i ~ /^median=/) { v = substr($i, 8); if (v == "") v = $(i + 1); ms[$1, $2] = v } }
    END {
      split("CreateContainer|StartContainer|CreateContainer+StartContainer", rows, "|")
      for (r = 1; r <= 3; r++) {
        a = ms["crust-nri0", rows[r]]; b = ms["crust-nri1", rows[r]]
        if (a && b)
          printf "%-12s %-34s %.2f ms without, %.2f ms with one no-op plugin: %+.2f ms\n", "nri", rows[r], a, b, b - a
      }
    }' "$W/rows"
}

# NRI as it ships (on, no plugins), on a socket of this run's own; Debian's runc and crun, and
# gVisor's runsc (a sandbox per pod, hack/build-tools.sh runsc), as runtime handlers
# (docs/containers.md#runtime-handlers-another-oci-runtime). Not named runc: that is the default
# handler's name, which a [runtimes.runc] table would give to the binary.
RUNSC=$(hack/build-tools.sh runsc)/runsc
HANDLERS="runc-binary=/usr/sbin/runc crun=/usr/bin/crun runsc=$RUNSC"
{
  printf 'criu_path = "%s"\n' "$CRIU"
  printf '[network]\nconf_dir = "%s"\nmasquerade_subnets = []\n[nri]\nsocket_path = "%s"\nplugin_path = "%s"\n' \
    "$W/net.d" "$W/crust/nri.sock" "$W/crust/nri-plugins"
  for h in $HANDLERS; do
    [ -x "${h#*=}" ] || { echo "${h#*=} missing (hack/install-deps.sh bench)" >&2; exit 1; }
    printf '[runtimes.%s]\nruntime_path = "%s"\n' "${h%%=*}" "${h#*=}"
  done
} > "$W/crust/config.toml"
# A pod with a container from nothing under each handler, on the same daemon: the OCI runtime's
# own cost beside libcontainer in the monitor. A handler the host refuses (crun 1.8.1 on a
# hybrid cgroup host) prints its row as not measured, with the runtime's words.
# Checkpoint (and restore) rows, which the full container run leaves out; archives on disk.
checkpoint_rows() { # label endpoint
  "$BIN/crust-bench-containers" --endpoint "$2" --label "$1" --image "$IMAGE" --only-checkpoint \
    --checkpoint-dir "$W/checkpoints" | tee -a "$W/rows"
}
handler_rows() {
  local h out
  for h in $HANDLERS; do
    h=${h%%=*}
    if ! out=$("$BIN/crust-bench-containers" --endpoint "unix://$W/crust/crust.sock" \
      --label "crust-$h" --image "$IMAGE" --only-from-nothing --runtime-handler "$h" 2>&1); then
      out=$(printf '%-12s pod + container from nothing: not measured: %s' "crust-$h" \
        "$(grep -m1 '^Error' <<<"$out" || tail -1 <<<"$out")")
    fi
    echo "$out" | tee -a "$W/rows"
  done
}
"$BIN/crust" image import --root "$W/crust/root" --state "$W/crust/state" \
  --config "$W/crust/config.toml" "$W/busybox.tar" >/dev/null
"$BIN/crust" serve --listen "$W/crust/crust.sock" --root "$W/crust/root" --state "$W/crust/state" \
  --config "$W/crust/config.toml" --log-level warn >"$W/crust/log" 2>&1 & PIDS+=($!)
CRUST_PID=$!
wait_for "$W/crust/crust.sock"
sleep 1
if [ -z "$NRI_ONLY" ]; then
  [ -n "$SOME" ] || "$BIN/crust-bench" --endpoint "unix://$W/crust/crust.sock" --label crust \
    --daemon-pid "$CRUST_PID" "$@" | tee -a "$W/rows"
  "$BIN/crust-bench-containers" --endpoint "unix://$W/crust/crust.sock" --label crust \
    --daemon-pid "$CRUST_PID" --image "$IMAGE" $CONTAINER_ARGS | tee -a "$W/rows"
  [ -n "$NO_EXEC" ] || exec_roundtrip crust "unix://$W/crust/crust.sock"
  [ -n "$SOME" ] && [ -z "$FROM_NOTHING_ONLY" ] || handler_rows
  [ -n "$SOME" ] || checkpoint_rows crust "unix://$W/crust/crust.sock"
fi
[ -n "$SOME" ] || nri_cost
kill "$CRUST_PID"; wait "$CRUST_PID" 2>/dev/null || true
[ -z "$NRI_ONLY" ] || exit 0

echo "== containerd $CTRD_DESC"
C=$W/ctrd
mkdir -p "$C"
ctrd_config "$C/config.toml" "$C/root" "$C/state" "$C/containerd.sock" \
  cni_conf_dir="$W/net.d" sandbox_image=crust.bench/pause:1
PATH="$(dirname "$CRIU"):$PATH" ctrd_start "$C/config.toml" "$C/log"
PIDS+=("$CTRD_PID")
wait_for "$C/containerd.sock" || { cat "$C/log" >&2; exit 1; }
"$CTRD_DIR/ctr" --address "$C/containerd.sock" -n k8s.io images import "$W/pause.tar" >/dev/null
"$CTRD_DIR/ctr" --address "$C/containerd.sock" -n k8s.io images import "$W/busybox.tar" >/dev/null
sleep 1
[ -n "$SOME" ] || "$BIN/crust-bench" --endpoint "unix://$C/containerd.sock" --label containerd \
  --daemon-pid "$CTRD_PID" "$@" | tee -a "$W/rows"
"$BIN/crust-bench-containers" --endpoint "unix://$C/containerd.sock" --label containerd \
  --daemon-pid "$CTRD_PID" --image "$IMAGE" $CONTAINER_ARGS | tee -a "$W/rows"
[ -n "$NO_EXEC" ] || exec_roundtrip containerd "unix://$C/containerd.sock"
[ -n "$SOME" ] || checkpoint_rows containerd "unix://$C/containerd.sock"

# crust against containerd: the pods from nothing, the relist's median time, memory (RSS and PSS
# medians), and the streaming rows, each as crust's figure over containerd's.
awk '
  # The words of a row, between the label and n=.
  function what(line) { sub(/^[^ ]+ +/, "", line); sub(/ +n=.*/, "", line); return line }
  function num(line, key) {
    if (!match(line, key "= *[0-9.]+")) return ""
    line = substr(line, RSTART, RLENGTH); sub(key "= *", "", line); return line
  }
  /pod \+ container from nothing/ && / median=/ && !/full node/ { k = ($0 ~ /userns/) ? "pod + container from nothing, userns" : "pod + container from nothing"; for (i = 1; i <= NF; i++) if ($i ~ /^median=/) { v = substr($i, 8); if (v == "") v = $(i + 1); fresh[$1, k] = v } }
  / (rss|pss)= / { k = what($0); rss[$1, k] = num($0, "rss"); pss[$1, k] = num($0, "pss"); if (!(k in seen)) { seen[k] = 1; mem[++nmem] = k } }
  /relist \(|relist: |full node: / { k = what($0); t[$1, k] = num($0, "median"); if (!(k in tseen)) { tseen[k] = 1; times[++ntimes] = k } }
  /checkpoint, [0-9]+ MiB touched/ { k = what($0); t[$1, k] = num($0, "median"); if (!(k in tseen)) { tseen[k] = 1; times[++ntimes] = k } }
  /Exec over SPDY/ { for (i = 1; i <= NF; i++) if ($i ~ /^median=/) { v = substr($i, 8); if (v == "") v = $(i + 1); ms[$1] = v } }
  /port-forward .* (up|down) \((SPDY|WebSocket)\)/ { for (i = 1; i <= NF; i++) if ($i ~ /^median=/) { v = substr($i, 8); if (v == "") v = $(i + 1); rate[$1, $5 " " $6] = v } }
  END {
    split("pod + container from nothing|pod + container from nothing, userns", pods, "|")
    for (k = 1; k <= 2; k++)
      if (fresh["crust", pods[k]] && fresh["containerd", pods[k]])
        printf "%-12s %-34s crust %.2f ms, containerd %.2f ms: %.2fx containerd'"'"'s time\n", "ratio", pods[k], fresh["crust", pods[k]], fresh["containerd", pods[k]], fresh["crust", pods[k]] / fresh["containerd", pods[k]]
    # Under a runtime handler (crust-runc: the same runc binary as containerd'"'"'s shim runs).
    n = split("runc-binary crun", hs, " ")
    for (k = 1; k <= n; k++) {
      c = fresh["crust-" hs[k], pods[1]]; d = fresh["containerd", pods[1]]
      if (c && d)
        printf "%-12s %-34s crust (%s) %.2f ms, containerd (runc) %.2f ms: %.2fx containerd'"'"'s time\n", "ratio", pods[1], hs[k], c, d, c / d
    }
    for (i = 1; i <= ntimes; i++) {
      c = t["crust", times[i]]; d = t["containerd", times[i]]
      if (c && d)
        printf "%-12s %-34s crust %.2f ms, containerd %.2f ms: %.2fx containerd'"'"'s time\n", "ratio", times[i], c, d, c / d
    }
    for (i = 1; i <= nmem; i++) {
      k = mem[i]
      if (pss["crust", k] != "" && pss["containerd", k] > 0)
        printf "%-12s %-34s PSS crust %.2f MiB, containerd %.2f MiB: %.2fx; RSS %.2f, %.2f MiB: %.2fx\n", "ratio", k, pss["crust", k], pss["containerd", k], pss["crust", k] / pss["containerd", k], rss["crust", k], rss["containerd", k], rss["crust", k] / rss["containerd", k]
    }
    if (ms["crust"] && ms["containerd"])
      printf "%-12s %-34s crust %.2f ms, containerd %.2f ms: %.2fx containerd'"'"'s time\n", "ratio", "Exec over SPDY (true)", ms["crust"], ms["containerd"], ms["crust"] / ms["containerd"]
    split("up (SPDY)|up (WebSocket)|down (SPDY)|down (WebSocket)", kinds, "|")
    for (k = 1; k <= 4; k++) {
      c = rate["crust", kinds[k]]; d = rate["containerd", kinds[k]]
      if (c && d)
        printf "%-12s %-34s crust %.1f MiB/s, containerd %.1f MiB/s: %.2fx containerd'"'"'s time\n", "ratio", "port-forward " kinds[k], c, d, d / c
    }
  }' "$W/rows"
