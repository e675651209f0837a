#!/bin/bash
# Pods through kubelet: the kubelet of the tests (k8s.io/kubernetes v1.37.2, standalone, static
# pods, hack/build-tools.sh kubelet) on crust, then on containerd (the same peer as
# hack/bench.sh), in the same run, with the same kubelet configuration and CNI network (a /16 of
# host-local), the images already present (imagePullPolicy Never). Four parts, each on both
# runtimes, then each figure for both and crust's over containerd's:
#
# start   PODS (default 30) pods of an init and a main container, with the gates EventedPLEG and
#         PodAndContainerStatsFromCRI on:
#   - kubelet_pod_start_duration_seconds (kubelet's own histogram: from the pod first seen to
#     running, the init container included), its median and p95 interpolated in the buckets;
#   - kubelet_runtime_operations_duration_seconds of the CRI calls of a pod's start (median);
#   - the wall time from writing the manifests until kubelet reports every pod Running with
#     its main container running (its /pods, polled), and each pod's own time to that, median
#     and p95 (kubelet's histogram counts each pod twice, once at its first sync: its median is
#     near zero whatever the runtime).
#   kubelet_pod_start_sli_duration_seconds is not printed: kubelet's start-up tracker ignores
#   static pods (pkg/kubelet/config/config.go), and a standalone kubelet has no others.
# burst   BURST (default 110, kubelet's default max-pods) pods of an init and a main container,
#         their manifests moved in at once, kubelet with its default gates (generic PLEG: a
#         relist every second): the wall time until all are Running, each pod's own time (p50,
#         p95) and the runtime's CPU seconds for it; then the manifests removed: the time until
#         kubelet has no pod and the runtime no ready sandbox nor running container ("stopped"),
#         and until the runtime lists no sandbox at all ("removed": kubelet removes the
#         sandboxes of deleted pods in its container GC, once a minute, so this one is paced by
#         kubelet), with the CPU seconds to each.
# evented the same burst with the gate EventedPLEG on (both runtimes serve GetContainerEvents),
#         and crust's each-pod p50 there over containerd's without it (the target: <= 0.2x).
# idle    IDLE_PODS (default 110) pods of three main containers (sleep) Running, kubelet with its
#         default gates and polling (relist every second, stats every 10 s): the runtime's CPU
#         over IDLE_SECONDS (default 60) after IDLE_SETTLE (default 20) s, per minute; and
#         kubelet's relist over that window (kubelet_pleg_relist_duration_seconds, and the
#         ListPodSandbox / ListContainers calls in it). hack/bench.sh measures a crictl relist of
#         110 pods x 3 containers: not repeated here.
#
# The runtime's CPU, the same rule for both: utime+stime+cutime+cstime (/proc/<pid>/stat) of
#   the daemon, of its per-pod processes and of the pods' placeholder processes. The daemon runs
#   under a small reaper (python3, a child subreaper), so the per-pod processes that leave the
#   daemon are reparented to it rather than to PID 1 and are found as its children: crust's
#   monitors (`crust monitor`, which forks away from the daemon) and containerd's shims
#   (containerd-shim-runc-v2, which `shim start` forks away); the placeholders are their
#   children named pause (containerd's sandbox container) or crust-pod-init (a shared PID
#   namespace's init; none here). When one of them exits, the reaper reads its final times
#   before reaping it, so the CPU of those that end within a figure's window counts too. The
#   cutime+cstime of each is what it reaped: for the daemons the CNI plugins and the first
#   processes of a spawn (`crust monitor` before its fork, `shim start`); for shims and monitors
#   runc (containerd) and the pods' exited processes (init containers; main ones at deletion),
#   including their work before exec (runc init / libcontainer's setup). Not counted: the live
#   containers' processes, kubelet, crictl, and the reaper. The figures split the total into the
#   daemon's own, the daemon's reaped children, and the per-pod processes (with their children).
#
# Needs root and a release build (make bench builds it).
# Usage: hack/bench-kubelet.sh                 every part
#        PARTS="burst idle" hack/bench-kubelet.sh   those parts only (start, burst, evented, idle)
#        START_ONLY=1, BURST_ONLY=1, EVENTED_ONLY=1 or IDLE_ONLY=1: that part alone
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release}
PODS=${PODS:-30}
BURST=${BURST:-110}
IDLE_PODS=${IDLE_PODS:-110}
IDLE_SECONDS=${IDLE_SECONDS:-60}
IDLE_SETTLE=${IDLE_SETTLE:-20}
PARTS=${PARTS:-start burst evented idle}
[ "${START_ONLY:-}" != 1 ] || PARTS=start
[ "${BURST_ONLY:-}" != 1 ] || PARTS=burst
[ "${EVENTED_ONLY:-}" != 1 ] || PARTS=evented
[ "${IDLE_ONLY:-}" != 1 ] || PARTS=idle
for p in $PARTS; do
  case $p in start|burst|evented|idle) ;; *) echo "unknown part $p (start, burst, evented, idle)" >&2; exit 1 ;; esac
done
part() { case " $PARTS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
MAX_PODS=$(printf '%s\n' "$PODS" "$BURST" "$IDLE_PODS" 110 | sort -n | tail -1)
[ -x "$BIN/crust" ] || { echo "build first: cargo build --release --bins" >&2; exit 1; }
[ -x /bin/busybox ] || { echo "busybox-static missing (hack/install-deps.sh bench)" >&2; exit 1; }
for t in jq curl unshare python3; do
  command -v "$t" >/dev/null || { echo "$t is missing (hack/install-deps.sh bench)" >&2; exit 1; }
done
KUBELET=$(hack/build-tools.sh kubelet)/kubelet
CRICTL=$(hack/build-tools.sh cri-tools)/crictl
HZ=$(getconf CLK_TCK)
# 110 pods: a few thousand descriptors for the daemons (sockets, fifos, logs).
ulimit -n "$(ulimit -Hn)"
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
  # The reapers' children first (daemons, monitors, shims), then kubelets and reapers.
  for p in "${PIDS[@]}"; do pkill -9 -P "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  pkill -f "containerd-shim-runc-v2 .*-address $W/" 2>/dev/null || true
  grep -o " ${W}[^ ]*" /proc/self/mountinfo 2>/dev/null | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
  ip link del "$BRIDGE" 2>/dev/null || true
  for d in $(cgroup_dirs); do
    if [ -d "$d" ]; then find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true; fi
  done
  rm -rf "$W"
}
trap cleanup EXIT
wait_for() { for _ in $(seq 300); do [ -S "$1" ] && return 0; sleep 0.1; done; echo "timed out waiting for $1" >&2; return 1; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
now_ms() { local t=${EPOCHREALTIME/[.,]/}; NOW=$((t / 1000)); } # sets NOW, without a fork

# shellcheck source=hack/bench-lib.sh
. hack/bench-lib.sh
bench_network "$W/net.d" "$BRIDGE" 10.91.0.0/16
bench_images "$W"
IMAGE=$BENCH_IMAGE

# The reaper a daemon runs under (see the header): `reaper.py LOG COMMAND...` writes
# "reaper PID daemon PID" then, for each child it reaps, "pid:starttime self children" (clock
# ticks: utime+stime, cutime+cstime, read while it is a zombie).
cat > "$W/reaper.py" <<'PY'
import ctypes, os, sys
log = open(sys.argv[1], "a", buffering=1)
if ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER
    sys.exit("reaper: prctl: %s" % os.strerror(ctypes.get_errno()))
daemon = os.fork()
if daemon == 0:
    os.execvp(sys.argv[2], sys.argv[2:])
log.write("reaper %d daemon %d\n" % (os.getpid(), daemon))
while True:
    try:
        pid = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOWAIT).si_pid
    except ChildProcessError:
        break
    try:
        with open("/proc/%d/stat" % pid) as f:
            s = f.read().rsplit(")", 1)[1].split()
        log.write("%d:%s %d %d\n" % (pid, s[19], int(s[11]) + int(s[12]), int(s[13]) + int(s[14])))
    except (OSError, IndexError, ValueError):
        pass
    os.waitpid(pid, 0)
PY

# rt_start LABEL COMMAND...: the daemon under its reaper; sets REAPED (its log), REAPER, DAEMON.
rt_start() {
  local label=$1
  shift
  REAPED=$W/$label.reaped
  python3 "$W/reaper.py" "$REAPED" "$@" & PIDS+=($!)
  for _ in $(seq 200); do [ -s "$REAPED" ] && break; sleep 0.05; done
  REAPER=$(awk 'NR == 1 { print $2 }' "$REAPED")
  DAEMON=$(awk 'NR == 1 { print $4 }' "$REAPED")
  [ -n "$DAEMON" ] || { echo "$label: the daemon did not start under its reaper" >&2; exit 1; }
}
# rt_stop: stops the daemon; per-pod processes still there are reported and killed.
rt_stop() {
  local left
  kill "$DAEMON" 2>/dev/null || true
  for _ in $(seq 300); do kill -0 "$DAEMON" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$DAEMON" 2>/dev/null || true
  left=$(pgrep -P "$REAPER" | wc -l || true)
  if [ "$left" != 0 ]; then
    echo "   ($left per-pod processes left after the daemon stopped: killed)"
    pkill -9 -P "$REAPER" || true
  fi
  wait "$REAPER" 2>/dev/null || true
}

# cpu_mark NAME start|end: the runtime's processes' ticks now ($W/cpu.NAME.snap: "pid:starttime
# self children d|p", d the daemon, p the per-pod ones) and the length of the reaper's log
# (read before the snapshot at a start, after it at an end).
cpu_mark() {
  local f=$W/cpu.$1
  [ "$2" = end ] || wc -l < "$REAPED" > "$f.off"
  { cat /proc/[0-9]*/stat 2>/dev/null || true; } | awk -v r="$REAPER" -v d="$DAEMON" '
    {
      k = length($0); while (k > 0 && substr($0, k, 1) != ")") k--
      o = index($0, "("); p = $1; name[p] = substr($0, o + 1, k - o - 1)
      split(substr($0, k + 2), f, " ")
      ppid[p] = f[2]; self[p] = f[12] + f[13]; kids[p] = f[14] + f[15]; st[p] = f[20]
    }
    END {
      for (p in ppid) if (ppid[p] == r) helper[p] = 1
      for (p in ppid) {
        if (p == d) c = "d"
        else if (helper[p]) c = "p"
        else if (helper[ppid[p]] && (name[p] == "pause" || name[p] == "crust-pod-init")) c = "p"
        else continue
        print p ":" st[p], self[p], kids[p], c
      }
    }' > "$f.snap"
  [ "$2" = start ] || wc -l < "$REAPED" > "$f.off"
}
# cpu_between FROM TO: "total daemon daemon_children per_pod" CPU seconds between two marks: for
# each process, its last times (at its reaping if it ended, else at TO; zero if it ended reaped
# by a counted process, whose cutime has them) less its times at FROM.
cpu_between() {
  local a=$W/cpu.$1 b=$W/cpu.$2
  awk -v from="$(cat "$a.off")" -v to="$(cat "$b.off")" 'NR > from && NR <= to' "$REAPED" |
    awk -v d="$DAEMON" -v hz="$HZ" -v A="$a.snap" -v B="$b.snap" '
      BEGIN {
        while ((getline l < A) > 0) { split(l, x, " "); s0[x[1]] = x[2]; c0[x[1]] = x[3]; cat[x[1]] = x[4] }
        while ((getline l < B) > 0) { split(l, x, " "); s1[x[1]] = x[2]; c1[x[1]] = x[3]; cat[x[1]] = x[4] }
      }
      { s1[$1] = $2; c1[$1] = $3; split($1, y, ":"); cat[$1] = (y[1] == d) ? "d" : "p" }
      END {
        for (k in cat) {
          ds = s1[k] - s0[k]; dc = c1[k] - c0[k]
          if (cat[k] == "d") { dself += ds; dkids += dc } else pods += ds + dc
        }
        printf "%.2f %.2f %.2f %.2f\n", (dself + dkids + pods) / hz, dself / hz, dkids / hz, pods / hz
      }'
}
# cpu_figures KEY FROM TO: the figures KEY_cpu, KEY_cpu_daemon, KEY_cpu_daemon_children, KEY_cpu_pods.
cpu_figures() {
  cpu_between "$2" "$3" | awk -v k="$1" '{ print k "_cpu", $1; print k "_cpu_daemon", $2
    print k "_cpu_daemon_children", $3; print k "_cpu_pods", $4 }'
}

cri() { "$CRICTL" --runtime-endpoint "unix://$SOCK" --image-endpoint "unix://$SOCK" --timeout 60s "$@" 2>/dev/null; }
cri_none() { local out; out=$(cri "$@") && [ -z "$out" ]; } # the call worked and listed nothing
kubelet_pods() { curl -s "http://127.0.0.1:$RO/pods" | jq '(.items // []) | length'; }

# kubelet_start NAME GATES: a kubelet on $SOCK with feature gates GATES ("A: true, B: true" or
# empty: kubelet's defaults), healthy and settled; sets K (its directory), KPID, RO.
kubelet_start() {
  local port healthz
  K=$W/kubelet-$1
  mkdir -p "$K/manifests" "$K/staged" "$K/logs" "$K/device-plugins"
  for d in $(cgroup_dirs); do mkdir -p "$d"; done
  port=$(free_port); RO=$(free_port); healthz=$(free_port)
  cat > "$K/config.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: $K/manifests
fileCheckFrequency: 1s
syncFrequency: 60s
cgroupDriver: cgroupfs
cgroupRoot: $CGROUP_ROOT
cgroupsPerQOS: true
failSwapOn: false
failCgroupV1: false
address: 127.0.0.1
port: $port
readOnlyPort: $RO
healthzPort: $healthz
healthzBindAddress: 127.0.0.1
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: unix://$SOCK
imageServiceEndpoint: unix://$SOCK
podLogsDir: $K/logs
evictionHard: {memory.available: 1Mi, nodefs.available: 0%, nodefs.inodesFree: 0%, imagefs.available: 0%, imagefs.inodesFree: 0%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
enforceNodeAllocatable: []
resolvConf: /etc/resolv.conf
maxPods: $((MAX_PODS + 10))
featureGates: {$2}
YAML
  # kubelet's device plugin directory is a fixed path every kubelet shares: a private one.
  # shellcheck disable=SC2016  # $0 and $@ are the inner shell's
  unshare --mount --propagation slave -- sh -euc \
    'mkdir -p /var/lib/kubelet/device-plugins && mount --bind "$0" /var/lib/kubelet/device-plugins && exec "$@"' \
    "$K/device-plugins" "$KUBELET" --config "$K/config.yaml" --root-dir "$K/root" \
    --hostname-override bench-node --node-ip "$NODE_IP" -v=1 >"$K/kubelet.log" 2>&1 & PIDS+=($!)
  KPID=$!
  for i in $(seq 600); do
    [ "$(curl -s "http://127.0.0.1:$healthz/healthz" || true)" = ok ] && break
    kill -0 "$KPID" 2>/dev/null || { tail -20 "$K/kubelet.log" >&2; echo "kubelet exited" >&2; exit 1; }
    [ "$i" -lt 600 ] || { tail -20 "$K/kubelet.log" >&2; echo "kubelet not healthy in 60 s" >&2; exit 1; }
    sleep 0.1
  done
  # The node settles (its first relist, the runtime's status) before anything is measured.
  sleep 3
}
kubelet_stop() { kill "$KPID"; wait "$KPID" 2>/dev/null || true; }
# kubelet_ticks: kubelet's own utime+stime (for scale: not the runtime's, not in its figures).
kubelet_ticks() { awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$KPID/stat"; }

# stage_pods PREFIX COUNT init|three: COUNT manifests in $K/staged, pods PREFIX1... of an init
# and a main container, or of three main containers.
stage_pods() {
  local i
  for i in $(seq "$2"); do
    {
      printf 'apiVersion: v1\nkind: Pod\nmetadata: {name: %s%d, namespace: bench}\n' "$1" "$i"
      printf 'spec:\n  terminationGracePeriodSeconds: 0\n'
      if [ "$3" = init ]; then
        printf '  initContainers:\n  - {name: init, image: %s, imagePullPolicy: Never, command: ["true"]}\n' "$IMAGE"
        printf '  containers:\n  - {name: main, image: %s, imagePullPolicy: Never, command: [sleep, "3600"]}\n' "$IMAGE"
      else
        printf '  containers:\n'
        printf '  - {name: c%d, image: %s, imagePullPolicy: Never, command: [sleep, "3600"]}\n' 1 "$IMAGE" 2 "$IMAGE" 3 "$IMAGE"
      fi
    } > "$K/staged/$1$i.yaml"
  done
}
# release_pods: the staged manifests into kubelet's directory at once (one rename each, one
# process); T0 is then.
release_pods() { now_ms; T0=$NOW; mv "$K/staged/"*.yaml "$K/manifests/"; }

# wait_running COUNT CONTAINERS TIMEOUT POLL: polls kubelet's /pods until COUNT pods are Running
# with CONTAINERS containers running each; prints "wall MS" (from T0) and "each P50 P95 N", each
# pod's time from T0 to the first poll that showed it Running (finer than kubelet's histogram,
# whose lowest buckets end at 0.5 and 1 s).
wait_running() {
  local names name end
  local -A ready=()
  end=$((T0 + $3 * 1000))
  while :; do
    names=$(curl -s "http://127.0.0.1:$RO/pods" | jq -r --argjson n "$2" '(.items // [])[]
      | select(.status.phase == "Running" and ([.status.containerStatuses[]? | select(.state.running)] | length) == $n)
      | .metadata.name' || true)
    now_ms
    for name in $names; do [ -n "${ready[$name]:-}" ] || ready[$name]=$((NOW - T0)); done
    [ "${#ready[@]}" -lt "$1" ] || break
    [ "$NOW" -lt "$end" ] || { tail -30 "$K/kubelet.log" >&2; echo "${#ready[@]} of $1 pods running after $3 s" >&2; exit 1; }
    sleep "$4"
  done
  echo "wall $((NOW - T0))"
  printf '%s\n' "${ready[@]}" | sort -n | awk '{ t[NR] = $1 }
    END { p50 = t[int((NR + 1) / 2)]; p95 = t[int(NR * 0.95 + 0.999)]; print "each", p50, p95, NR }'
}

# wait_gone KEY: after the manifests went (at T0), waits until kubelet has no pod and the
# runtime no ready sandbox nor running container (KEY_del_stop), then until it lists no sandbox
# (KEY_del_removed), marking the CPU at each; prints those figures. Where kubelet's GC has not
# removed the sandboxes in 150 s, crictl does (and the figure says none).
wait_gone() {
  local stopped="" removed=none
  while [ -z "$stopped" ]; do
    if [ "$(kubelet_pods)" = 0 ] && cri_none pods --state ready -q && cri_none ps -q; then
      now_ms; stopped=$((NOW - T0)); cpu_mark "$1.stopped" end
    else
      now_ms
      [ "$NOW" -lt $((T0 + 240000)) ] || { tail -30 "$K/kubelet.log" >&2; echo "pods not stopped in 240 s" >&2; exit 1; }
      sleep 0.25
    fi
  done
  while :; do
    if cri_none pods -q; then now_ms; removed=$((NOW - T0)); cpu_mark "$1.removed" end; break; fi
    now_ms
    if [ "$NOW" -ge $((T0 + 150000)) ]; then
      echo "   (kubelet had not removed the sandboxes in 150 s: crictl removes them)"
      cri rmp -a -f >/dev/null || true
      break
    fi
    sleep 0.5
  done
  echo "$1_del_stop $stopped"
  cpu_figures "$1_del_stop" "$1.deleting" "$1.stopped"
  echo "$1_del_removed $removed"
  [ "$removed" = none ] || cpu_figures "$1_del_removed" "$1.deleting" "$1.removed"
}

# force_empty: every sandbox of the runtime stopped and removed (between parts, not measured).
force_empty() {
  cri rmp -a -f >/dev/null || true
  for _ in $(seq 600); do cri_none pods -q && return 0; sleep 0.1; done
  echo "$LABEL: sandboxes left after crictl rmp -a -f" >&2; exit 1
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
# metrics_delta A B: B's samples less A's (counters and histogram buckets over a window).
metrics_delta() {
  awk 'NR == FNR { if ($0 !~ /^#/) a[$1] = $NF; next }
    !/^#/ { print $1, $NF - (($1 in a) ? a[$1] : 0) }' "$1" "$2"
}

# The parts, on the runtime at $SOCK; figures go to $W/$LABEL.figures (start) and
# $W/$LABEL.more (the others, "key value").
part_start() {
  kubelet_start "$LABEL-start" "EventedPLEG: true, PodAndContainerStatsFromCRI: true"
  stage_pods p "$PODS" init
  release_pods
  wait_running "$PODS" 1 120 0.05 > "$K/ready"
  curl -s "http://127.0.0.1:$RO/metrics" > "$K/metrics"
  {
    cat "$K/ready"
    histogram "$K/metrics" kubelet_pod_start_duration_seconds '' pod_start
    for op in run_podsandbox create_container start_container; do
      histogram "$K/metrics" kubelet_runtime_operations_duration_seconds "operation_type=\"$op\"" "$op"
    done
  } > "$W/$LABEL.figures"
  # Down again: the manifests go and kubelet stops everything. kubelet's /pods forgets a static
  # pod as soon as its manifest goes, so the wait is on the processes: none left in kubelet's
  # cgroups (the runtime's own pod processes, monitors or pause containers, included).
  rm -f "$K/manifests/"*.yaml
  for i in $(seq 1200); do
    [ -z "$(cgroup_pids)" ] && break
    [ "$i" -lt 1200 ] || { echo "$LABEL: processes left in kubelet's cgroups after 120 s" >&2; exit 1; }
    sleep 0.1
  done
  kubelet_stop
  force_empty
}

# part_burst KEY GATES: BURST pods at once, then deleted.
part_burst() {
  local k0
  kubelet_start "$LABEL-$1" "$2"
  stage_pods b "$BURST" init
  cpu_mark "$1.before" start
  k0=$(kubelet_ticks)
  release_pods
  wait_running "$BURST" 1 300 0.1 > "$K/ready"
  cpu_mark "$1.running" end
  {
    echo "$1_kubelet_cpu $(awk -v a="$k0" -v b="$(kubelet_ticks)" -v hz="$HZ" 'BEGIN { printf "%.2f", (b - a) / hz }')"
    awk -v k="$1" '{ if ($1 == "wall") print k "_wall", $2; else { print k "_each_p50", $2; print k "_each_p95", $3 } }' "$K/ready"
    cpu_figures "$1" "$1.before" "$1.running"
    echo "$1_procs $(awk '$4 == "p"' "$W/cpu.$1.running.snap" | wc -l)"
  } >> "$W/$LABEL.more"
  cpu_mark "$1.deleting" start
  now_ms; T0=$NOW
  rm -f "$K/manifests/"*.yaml
  wait_gone "$1" >> "$W/$LABEL.more"
  kubelet_stop
  force_empty
}

part_idle() {
  local k0 k1
  kubelet_start "$LABEL-idle" ""
  stage_pods i "$IDLE_PODS" three
  release_pods
  wait_running "$IDLE_PODS" 3 600 0.2 > "$K/ready"
  sleep "$IDLE_SETTLE"
  curl -s "http://127.0.0.1:$RO/metrics" > "$K/metrics.0"
  cpu_mark idle.0 start
  k0=$(kubelet_ticks)
  sleep "$IDLE_SECONDS"
  cpu_mark idle.1 end
  k1=$(kubelet_ticks)
  curl -s "http://127.0.0.1:$RO/metrics" > "$K/metrics.1"
  metrics_delta "$K/metrics.0" "$K/metrics.1" > "$K/metrics.window"
  {
    awk '$1 == "wall" { print "idle_start_wall", $2 }' "$K/ready"
    cpu_between idle.0 idle.1 | awk -v s="$IDLE_SECONDS" '{ print "idle_cpu_min", $1 * 60 / s
      print "idle_cpu_min_daemon", $2 * 60 / s; print "idle_cpu_min_daemon_children", $3 * 60 / s
      print "idle_cpu_min_pods", $4 * 60 / s }'
    echo "idle_procs $(awk '$4 == "p"' "$W/cpu.idle.1.snap" | wc -l)"
    awk -v a="$k0" -v b="$k1" -v hz="$HZ" -v s="$IDLE_SECONDS" 'BEGIN { printf "idle_kubelet_cpu_min %.2f\n", (b - a) / hz * 60 / s }'
    histogram "$K/metrics.window" kubelet_pleg_relist_duration_seconds '' idle_relist |
      awk '$2 != "none" { print $1 "_p50", $2; print $1 "_p95", $3; print $1 "_n", $4 }'
    for op in list_podsandbox list_containers; do
      histogram "$K/metrics.window" kubelet_runtime_operations_duration_seconds "operation_type=\"$op\"" "idle_$op" |
        awk '$2 != "none" { print $1 "_p50", $2; print $1 "_n", $4 }'
    done
  } >> "$W/$LABEL.more"
  rm -f "$K/manifests/"*.yaml
  for _ in $(seq 1200); do
    [ "$(kubelet_pods)" = 0 ] && cri_none pods --state ready -q && break
    sleep 0.25
  done
  kubelet_stop
  force_empty
}

run_parts() {
  : > "$W/$LABEL.more"
  if part start; then part_start; echo "   start: done"; fi
  if part burst; then part_burst burst ""; echo "   burst: done"; fi
  if part evented; then part_burst evented "EventedPLEG: true"; echo "   evented: done"; fi
  if part idle; then part_idle; echo "   idle: done"; fi
}

echo "== $(date -u '+%F %T UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores; parts: $PARTS"
echo "== kubelet $("$KUBELET" --version | awk '{print $2}'): start $PODS pods (init + main), burst $BURST pods (init + main), idle $IDLE_PODS pods x 3 containers over $IDLE_SECONDS s"
echo "== crust $("$BIN/crust" version | awk '{print $2}')"
mkdir -p "$W/crust"
printf '[network]\nconf_dir = "%s"\nmasquerade_subnets = []\n[nri]\nenable = false\n' "$W/net.d" > "$W/crust/config.toml"
"$BIN/crust" image import --root "$W/crust/root" --state "$W/crust/state" \
  --config "$W/crust/config.toml" "$W/busybox.tar" >/dev/null
rt_start crust "$BIN/crust" serve --listen "$W/crust/crust.sock" --root "$W/crust/root" \
  --state "$W/crust/state" --config "$W/crust/config.toml" --log-level warn >"$W/crust/log" 2>&1
wait_for "$W/crust/crust.sock"
LABEL=crust SOCK=$W/crust/crust.sock
run_parts
rt_stop

echo "== containerd $CTRD_DESC"
C=$W/ctrd
mkdir -p "$C"
ctrd_config "$C/config.toml" "$C/root" "$C/state" "$C/containerd.sock" \
  cni_conf_dir="$W/net.d" sandbox_image=crust.bench/pause:1
# As ctrd_start does (its own shim first on PATH), under the reaper.
PATH="$CTRD_DIR:$PATH" rt_start containerd "$CTRD_DIR/containerd" --config "$C/config.toml" >"$C/log" 2>&1
wait_for "$C/containerd.sock" || { cat "$C/log" >&2; exit 1; }
"$CTRD_DIR/ctr" --address "$C/containerd.sock" -n k8s.io images import "$W/pause.tar" >/dev/null
"$CTRD_DIR/ctr" --address "$C/containerd.sock" -n k8s.io images import "$W/busybox.tar" >/dev/null
LABEL=containerd SOCK=$C/containerd.sock
run_parts
rt_stop

# The tables: each figure for both, and crust's over containerd's.
if part start; then
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
fi
# KEY|UNIT|GROUP|DESCRIPTION; a row is printed where both runtimes have the figure.
cat > "$W/rows" <<ROWS
burst_wall|ms|burst$BURST|all pods Running (wall)
burst_each_p50|ms|burst$BURST|each pod Running (polled) p50
burst_each_p95|ms|burst$BURST|each pod Running (polled) p95
burst_cpu|s|burst$BURST|runtime CPU to all Running
burst_cpu_daemon|s|burst$BURST|  of it the daemon's own
burst_cpu_daemon_children|s|burst$BURST|  of it the daemon's reaped children
burst_cpu_pods|s|burst$BURST|  of it per-pod processes
burst_procs|n|burst$BURST|per-pod processes counted
burst_kubelet_cpu|s|burst$BURST|(kubelet's own CPU to all Running)
burst_del_stop|ms|burst$BURST|delete: all stopped (wall)
burst_del_stop_cpu|s|burst$BURST|delete: runtime CPU to all stopped
burst_del_stop_cpu_daemon|s|burst$BURST|  of it the daemon's own
burst_del_stop_cpu_daemon_children|s|burst$BURST|  of it the daemon's reaped children
burst_del_stop_cpu_pods|s|burst$BURST|  of it per-pod processes
burst_del_removed|ms|burst$BURST|delete: none listed (kubelet GC, 1/min)
burst_del_removed_cpu|s|burst$BURST|delete: runtime CPU to none listed
evented_wall|ms|evented$BURST|all pods Running (wall)
evented_each_p50|ms|evented$BURST|each pod Running (polled) p50
evented_each_p95|ms|evented$BURST|each pod Running (polled) p95
evented_cpu|s|evented$BURST|runtime CPU to all Running
evented_kubelet_cpu|s|evented$BURST|(kubelet's own CPU to all Running)
evented_del_stop|ms|evented$BURST|delete: all stopped (wall)
evented_del_stop_cpu|s|evented$BURST|delete: runtime CPU to all stopped
idle_start_wall|ms|idle${IDLE_PODS}x3|all pods Running (wall, not idle)
idle_cpu_min|s|idle${IDLE_PODS}x3|runtime CPU per minute idle
idle_cpu_min_daemon|s|idle${IDLE_PODS}x3|  of it the daemon's own
idle_cpu_min_daemon_children|s|idle${IDLE_PODS}x3|  of it the daemon's reaped children
idle_cpu_min_pods|s|idle${IDLE_PODS}x3|  of it per-pod processes
idle_procs|n|idle${IDLE_PODS}x3|per-pod processes counted
idle_kubelet_cpu_min|s|idle${IDLE_PODS}x3|(kubelet's own CPU per minute)
idle_relist_p50|ms|idle${IDLE_PODS}x3|kubelet PLEG relist p50
idle_relist_p95|ms|idle${IDLE_PODS}x3|kubelet PLEG relist p95
idle_relist_n|n|idle${IDLE_PODS}x3|kubelet PLEG relists in the window
idle_list_podsandbox_p50|ms|idle${IDLE_PODS}x3|runtime op list_podsandbox p50
idle_list_containers_p50|ms|idle${IDLE_PODS}x3|runtime op list_containers p50
ROWS
awk '
  FILENAME ~ /crust.more$/ { c[$1] = $2; next }
  FILENAME ~ /containerd.more$/ { d[$1] = $2; next }
  {
    split($0, f, "|"); k = f[1]
    if (!(k in c) || !(k in d) || c[k] == "none" || d[k] == "none") next
    r = d[k] > 0 ? sprintf("%.2fx containerd'"'"'s", c[k] / d[k]) : "-"
    if (f[2] == "ms") printf "%-12s %-40s crust %8.1f ms, containerd %8.1f ms: %s\n", f[3], f[4], c[k], d[k], r
    else if (f[2] == "s") printf "%-12s %-40s crust %8.2f s,  containerd %8.2f s:  %s\n", f[3], f[4], c[k], d[k], r
    else printf "%-12s %-40s crust %8d,     containerd %8d\n", f[3], f[4], c[k], d[k]
  }
  END {
    if (("evented_each_p50" in c) && ("burst_each_p50" in d) && d["burst_each_p50"] > 0)
      printf "%-12s %-40s crust %8.1f ms, containerd %8.1f ms: %.2fx (target <= 0.2x)\n", "evented'"$BURST"'",
        "crust evented / containerd generic p50", c["evented_each_p50"], d["burst_each_p50"],
        c["evented_each_p50"] / d["burst_each_p50"]
  }' "$W/crust.more" "$W/containerd.more" "$W/rows"
if part idle; then
  echo "(a relist of $IDLE_PODS pods x 3 containers through crictl, pods + ps: hack/bench.sh's relist row)"
fi
