#!/bin/bash
# Image benchmark: cold/warm pull of a ~50 MB 5-layer image from a local registry, and
# ListImages/ImageStatus latency with 100 images stored, against crust and, when installed,
# containerd (Debian's 1.6, started here on temporary directories) in the same run.
# Needs root, docker-registry, and a release build (make bench builds it).
# Usage: hack/bench-images.sh [--cold N] [--warm N] [--queries N]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release}
[ -x "$BIN/crust" ] && [ -x "$BIN/crust-bench-images" ] || { echo "build first: cargo build --release --bins" >&2; exit 1; }
command -v docker-registry >/dev/null || { echo "docker-registry missing (hack/install-deps.sh bench)" >&2; exit 1; }

W=$(mktemp -d /tmp/crust-bench-images.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  # crust mounts a tmpfs on its state dir and its ns dir on itself; containerd may leave
  # snapshot mounts.
  grep -o " $W[^ ]*" /proc/self/mountinfo 2>/dev/null | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
  rm -rf "$W"
}
trap cleanup EXIT

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
printf '[registry.mirrors."%s"]\nendpoints = ["http://%s"]\n' "$HOST" "$REG" > "$W/crust/config.toml"
"$BIN/crust" serve --listen "$W/crust/crust.sock" --root "$W/crust/root" --state "$W/crust/state" \
  --config "$W/crust/config.toml" --log-level warn >"$W/crust/log" 2>&1 & PIDS+=($!)
wait_for "$W/crust/crust.sock"
"$BIN/crust-bench-images" run --endpoint "unix://$W/crust/crust.sock" --host "$HOST" --name crust "$@"

if command -v containerd >/dev/null; then
  echo "== containerd $(containerd --version | awk '{print $3}')"
  C=$W/ctrd
  mkdir -p "$C/certs.d/$HOST"
  cat > "$C/certs.d/$HOST/hosts.toml" <<TOML
server = "http://$REG"
[host."http://$REG"]
  capabilities = ["pull", "resolve"]
TOML
  cat > "$C/config.toml" <<TOML
version = 2
root = "$C/root"
state = "$C/state"
[grpc]
  address = "$C/containerd.sock"
[plugins."io.containerd.grpc.v1.cri".registry]
  config_path = "$C/certs.d"
TOML
  containerd --config "$C/config.toml" >"$C/log" 2>&1 & PIDS+=($!)
  wait_for "$C/containerd.sock"
  sleep 1
  "$BIN/crust-bench-images" run --endpoint "unix://$C/containerd.sock" --host "$HOST" --name containerd "$@"
else
  echo "== containerd not installed: skipped (apt-get install containerd to compare)"
fi
