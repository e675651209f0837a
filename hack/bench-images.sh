#!/bin/bash
# Image benchmark: cold/warm pull of a ~50 MB 5-layer image from a local registry, and
# ListImages/ImageStatus latency with 100 images stored, against crust and containerd in the same
# run (2.x built from its Go module, or Debian's 1.6 if that build fails: see
# hack/containerd-peer.sh; started here on temporary directories), and each daemon's memory:
# idle, peak during the runs, and after them (crust's held to a budget).
# Needs root, docker-registry, and a release build (make bench builds it).
# Usage: hack/bench-images.sh [--cold N] [--warm N] [--queries N]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release}
[ -x "$BIN/crust" ] && [ -x "$BIN/crust-bench-images" ] || { echo "build first: cargo build --release --bins" >&2; exit 1; }
command -v docker-registry >/dev/null || { echo "docker-registry missing (hack/install-deps.sh bench)" >&2; exit 1; }

# The containerd to compare with, built (or reused from the cache) before anything is measured.
# shellcheck source=hack/containerd-peer.sh
. hack/containerd-peer.sh
ctrd_pick

# BENCH_DIR: where both daemons keep their roots (default /tmp).
W=$(mktemp -d "${BENCH_DIR:-/tmp}/crust-bench-images.XXXXXX")
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  # crust mounts a tmpfs on its state dir and its ns dir on itself; containerd may leave
  # snapshot mounts.
  grep -o " ${W}[^ ]*" /proc/self/mountinfo 2>/dev/null | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
  rm -rf "$W"
}
trap cleanup EXIT

kb() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/status"; }
mb() { awk -v v="$1" 'BEGIN {printf "%.1f MB", v / 1024}'; }
# Memory of a daemon: idle (before the runs), peak (VmHWM: during the pulls), and after (every
# image removed, then QUIET seconds without pulls). crust's idle and after must stay within
# BUDGET_KB; containerd's are printed beside for comparison.
BUDGET_KB=${BUDGET_KB:-15360}
QUIET=${QUIET:-7}
run_measured() { # name pid endpoint args...
  local name=$1 pid=$2 endpoint=$3; shift 3
  sleep 1
  local idle; idle=$(kb "$pid" VmRSS)
  "$BIN/crust-bench-images" run --endpoint "$endpoint" --host "$HOST" --name "$name" "$@"
  sleep "$QUIET"
  local peak after; peak=$(kb "$pid" VmHWM); after=$(kb "$pid" VmRSS)
  printf '%-12s %-28s idle=%s  peak=%s  after=%s\n' "$name" "memory (VmRSS)" \
    "$(mb "$idle")" "$(mb "$peak")" "$(mb "$after")"
  if [ "$name" = crust ] && { [ "$idle" -gt "$BUDGET_KB" ] || [ "$after" -gt "$BUDGET_KB" ]; }; then
    echo "crust is over its memory budget of $(mb "$BUDGET_KB") (idle and after pulls)" >&2
    return 1
  fi
}
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_for() { for _ in $(seq 100); do [ -e "$1" ] && return 0; sleep 0.1; done; echo "timed out waiting for $1" >&2; return 1; }

REG=127.0.0.1:$(port)
HOST=bench.local
cat > "$W/registry.yml" <<YML
version: 0.1
log: {level: error, accesslog: {disabled: true}}
storage: {filesystem: {rootdirectory: $W/registry}, delete: {enabled: true}}
http: {addr: $REG}
YML
docker-registry serve "$W/registry.yml" >"$W/registry.log" 2>&1 & PIDS+=($!)
for _ in $(seq 100); do curl -fs "http://$REG/v2/" >/dev/null 2>&1 && break; sleep 0.1; done
"$BIN/crust-bench-images" push --registry "$REG"

echo "== crust"
mkdir -p "$W/crust"
printf '[registry.mirrors."%s"]\nendpoints = ["http://%s"]\n[nri]\nsocket_path = "%s"\nplugin_path = "%s"\n' \
  "$HOST" "$REG" "$W/crust/nri.sock" "$W/crust/nri-plugins" > "$W/crust/config.toml"
"$BIN/crust" serve --listen "$W/crust/crust.sock" --root "$W/crust/root" --state "$W/crust/state" \
  --config "$W/crust/config.toml" --log-level warn >"$W/crust/log" 2>&1 & PIDS+=($!)
CRUST_PID=$!
wait_for "$W/crust/crust.sock"
run_measured crust "$CRUST_PID" "unix://$W/crust/crust.sock" "$@"

echo "== containerd $CTRD_DESC"
C=$W/ctrd
mkdir -p "$C/certs.d/$HOST"
cat > "$C/certs.d/$HOST/hosts.toml" <<TOML
server = "http://$REG"
[host."http://$REG"]
  capabilities = ["pull", "resolve"]
TOML
ctrd_config "$C/config.toml" "$C/root" "$C/state" "$C/containerd.sock" \
  registry_config_path="$C/certs.d"
ctrd_start "$C/config.toml" "$C/log"
PIDS+=("$CTRD_PID")
wait_for "$C/containerd.sock" || { cat "$C/log" >&2; exit 1; }
run_measured containerd "$CTRD_PID" "unix://$C/containerd.sock" "$@"
