#!/bin/bash
# Image benchmark: cold/warm pull of a ~50 MB 5-layer image from a local registry, cold pulls of
# two ~500 MB images (10 layers, 1 layer) of files that compress like a real image's, and
# ListImages/ImageStatus latency with 100 images stored, against crust and containerd in the same
# run (2.x built from its Go module, or Debian's 1.6 if that build fails: see
# hack/containerd-peer.sh; started here on temporary directories), and each daemon's memory:
# idle, peak during the runs, and after them (crust's held to a budget).
# containerd runs twice: as built, inflating gzip in Go, and at its best, through pigz's unpigz
# (it runs unpigz, or ISA-L's igzip before it, when it finds one on its PATH; both are turned off
# for the first run with its CONTAINERD_DISABLE_PIGZ and CONTAINERD_DISABLE_IGZIP, igzip for the
# second). Each run counts the unpigz processes containerd starts and fails unless the first saw
# none and the second some. The medians end as a markdown table with crust's ratio to each.
# Needs root, docker-registry, pigz, and a release build (make bench builds it).
# Usage: hack/bench-images.sh [--cold N] [--warm N] [--queries N] [--big N]
#   --big N: cold pulls of each 500 MB image (default 3; 0 leaves them out).
# The registry's storage is kept in CRUST_BENCH_CACHE (default /var/cache/crust-bench), as
# building the 500 MB images takes about a minute; later runs reuse them.
set -euo pipefail
cd "$(dirname "$0")/.."
ARGS=("$@")
BIN=${BIN:-target/release}
if ! [ -x "$BIN/crust" ] || ! [ -x "$BIN/crust-bench-images" ]; then
  echo "build first: cargo build --release --bins" >&2; exit 1
fi
command -v docker-registry >/dev/null || { echo "docker-registry missing (hack/install-deps.sh bench)" >&2; exit 1; }
command -v unpigz >/dev/null || { echo "unpigz missing (hack/install-deps.sh bench installs pigz)" >&2; exit 1; }

# The containerd to compare with, built (or reused from the cache) before anything is measured.
# shellcheck source=hack/containerd-peer.sh
. hack/containerd-peer.sh
ctrd_pick

# BENCH_DIR: where both daemons keep their roots (default /tmp).
W=$(mktemp -d "${BENCH_DIR:-/tmp}/crust-bench-images.XXXXXX")
CACHE=${CRUST_BENCH_CACHE:-/var/cache/crust-bench}
RECORD=$W/medians.tsv
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
# A memory figure into the record of medians, for the table.
record_mb() { awk -v r="$1" -v w="$2" -v v="$3" 'BEGIN {printf "%s\t%s\t\t%.1f\tMB\n", r, w, v / 1024}' >> "$RECORD"; }
# Memory of a daemon: idle (before the runs), peak (VmHWM: during the pulls), and after (every
# image removed, then QUIET seconds without pulls). crust's idle and after must stay within
# BUDGET_KB; containerd's are printed beside for comparison.
BUDGET_KB=${BUDGET_KB:-15360}
QUIET=${QUIET:-7}
run_measured() { # name pid endpoint args...
  local name=$1 pid=$2 endpoint=$3; shift 3
  sleep 1
  local idle; idle=$(kb "$pid" VmRSS)
  "$BIN/crust-bench-images" run --endpoint "$endpoint" --host "$HOST" --name "$name" \
    --record "$RECORD" "$@"
  sleep "$QUIET"
  local peak after; peak=$(kb "$pid" VmHWM); after=$(kb "$pid" VmRSS)
  printf '%-18s %-28s idle=%s  peak=%s  after=%s\n' "$name" "memory (VmRSS)" \
    "$(mb "$idle")" "$(mb "$peak")" "$(mb "$after")"
  record_mb "$name" "memory idle" "$idle"
  record_mb "$name" "memory peak" "$peak"
  record_mb "$name" "memory after" "$after"
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
storage: {filesystem: {rootdirectory: $CACHE/registry}}
http: {addr: $REG}
YML
docker-registry serve "$W/registry.yml" >"$W/registry.log" 2>&1 & PIDS+=($!)
for _ in $(seq 100); do curl -fs "http://$REG/v2/" >/dev/null 2>&1 && break; sleep 0.1; done
mkdir -p "$CACHE"
# One run at a time builds into the kept registry.
flock "$CACHE/lock" "$BIN/crust-bench-images" push --registry "$REG"

load() { cut -d' ' -f1-3 /proc/loadavg; }
# What was measured: the commit, whether the tree differed from it, when the binary was built.
dirty=$(git status --porcelain -- src Cargo.toml Cargo.lock 2>/dev/null | wc -l)
echo "crust $(git log -1 --format=%h)$([ "$dirty" = 0 ] || echo " with $dirty uncommitted files under src/ or Cargo.*")," \
  "binary built $(date -r "$BIN/crust" '+%Y-%m-%d %H:%M:%S'); $(date '+%Y-%m-%d %H:%M:%S %Z'), load average $(load), $(nproc) cores"

echo "== crust"
mkdir -p "$W/crust"
printf '[registry.mirrors."%s"]\nendpoints = ["http://%s"]\n[nri]\nsocket_path = "%s"\nplugin_path = "%s"\n' \
  "$HOST" "$REG" "$W/crust/nri.sock" "$W/crust/nri-plugins" > "$W/crust/config.toml"
"$BIN/crust" serve --listen "$W/crust/crust.sock" --root "$W/crust/root" --state "$W/crust/state" \
  --config "$W/crust/config.toml" --log-level warn >"$W/crust/log" 2>&1 & PIDS+=($!)
CRUST_PID=$!
wait_for "$W/crust/crust.sock"
run_measured crust "$CRUST_PID" "unix://$W/crust/crust.sock" "${ARGS[@]}"

stop() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }
stop "$CRUST_PID"

# The pids and names of PID's unpigz and igzip children, every 50 ms until PID ends or the
# sampler is stopped.
sample_inflaters() {
  while kill -0 "$1" 2>/dev/null; do pgrep -l -P "$1" '^(unpigz|igzip)$' || true; sleep 0.05; done
}

# containerd_run NAME EXPECT VAR=value...: a containerd of its own (root, state, socket) with these
# variables in its environment, measured as NAME; EXPECT is "none" or "some" unpigz processes.
containerd_run() {
  local name=$1 expect=$2 C=$W/$1 kv
  shift 2
  for kv in "$@"; do local -x "$kv"; done
  echo "== $name: containerd $CTRD_DESC${*:+, $*}"
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
  sample_inflaters "$CTRD_PID" > "$C/inflaters" 2>&1 &
  local sampler=$!
  PIDS+=("$sampler")
  run_measured "$name" "$CTRD_PID" "unix://$C/containerd.sock" "${ARGS[@]}"
  stop "$sampler"
  stop "$CTRD_PID"
  local unpigz igzip
  unpigz=$(awk '$2 == "unpigz"' "$C/inflaters" | sort -u | wc -l)
  igzip=$(awk '$2 == "igzip"' "$C/inflaters" | sort -u | wc -l)
  printf '%-18s %-28s unpigz=%s  igzip=%s (distinct pids, sampled every 50 ms)\n' "$name" \
    "inflating processes" "$unpigz" "$igzip"
  if [ "$igzip" != 0 ] || { [ "$expect" = none ] && [ "$unpigz" != 0 ]; } ||
    { [ "$expect" = some ] && [ "$unpigz" = 0 ]; }; then
    echo "$name: expected $expect unpigz (and no igzip) processes" >&2
    return 1
  fi
}

containerd_run containerd none CONTAINERD_DISABLE_PIGZ=1 CONTAINERD_DISABLE_IGZIP=1
containerd_run containerd+unpigz some CONTAINERD_DISABLE_IGZIP=1

echo "== medians, $(date '+%Y-%m-%d %H:%M:%S %Z'), load average $(load); ratio: crust's time (or memory) over the other's"
"$BIN/crust-bench-images" table --record "$RECORD"
