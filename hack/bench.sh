#!/bin/bash
# Pod sandbox benchmark: RunPodSandbox, Stop+Remove, status/list latency and memory (daemon RSS
# idle and with pods; RSS of each pod's own processes), for crust and, when installed, for
# containerd (Debian's 1.6, started here on temporary directories) in the same run, both on the
# same CNI network config (bridge + host-local + portmap, no per-pod masquerade).
# Needs root and a release build (make bench builds it). Usage: hack/bench.sh [--pods N]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release}
[ -x "$BIN/crust" ] && [ -x "$BIN/crust-bench" ] || { echo "build first: cargo build --release --bins" >&2; exit 1; }

W=$(mktemp -d /tmp/crust-bench.XXXXXX)
PIDS=()
BRIDGE=crustbench0
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  pkill -f "containerd-shim-runc-v2 -namespace k8s.io -address $W" 2>/dev/null || true
  grep -o " $W[^ ]*" /proc/self/mountinfo 2>/dev/null | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
  ip link del "$BRIDGE" 2>/dev/null || true
  rm -rf "$W"
}
trap cleanup EXIT
[ -n "${KEEP:-}" ] && trap - EXIT
wait_for() { for _ in $(seq 200); do [ -S "$1" ] && return 0; sleep 0.1; done; echo "timed out waiting for $1" >&2; return 1; }

mkdir -p "$W/net.d"
cat > "$W/net.d/10-bench.conflist" <<JSON
{"cniVersion":"1.0.0","name":"crust-bench","plugins":[
 {"type":"bridge","bridge":"$BRIDGE","isGateway":true,"ipMasq":false,"hairpinMode":true,
  "ipam":{"type":"host-local","dataDir":"$W/ipam","ranges":[[{"subnet":"10.90.0.0/16"}]],
          "routes":[{"dst":"0.0.0.0/0"}]}},
 {"type":"portmap","capabilities":{"portMappings":true}}]}
JSON

echo "== crust $("$BIN/crust" version | awk '{print $2}')"
mkdir -p "$W/crust"
printf '[network]\nconf_dir = "%s"\nmasquerade_subnets = []\n' "$W/net.d" > "$W/crust/config.toml"
"$BIN/crust" serve --listen "$W/crust/crust.sock" --root "$W/crust/root" --state "$W/crust/state" \
  --config "$W/crust/config.toml" --log-level warn >"$W/crust/log" 2>&1 & PIDS+=($!)
CRUST_PID=$!
wait_for "$W/crust/crust.sock"
sleep 1
"$BIN/crust-bench" --endpoint "unix://$W/crust/crust.sock" --label crust --daemon-pid "$CRUST_PID" "$@"
kill "$CRUST_PID"; wait "$CRUST_PID" 2>/dev/null || true

if ! command -v containerd >/dev/null; then
  echo "== containerd not installed: skipped (apt-get install containerd runc to compare)"
  exit 0
fi
echo "== containerd $(containerd --version | awk '{print $3}')"
C=$W/ctrd
mkdir -p "$C/pause/rootfs"
# containerd needs a pause image: a static one built here, imported as a docker archive.
printf '#include <signal.h>\n#include <unistd.h>\nstatic void down(int s){(void)s;_exit(0);}\nint main(void){signal(SIGTERM,down);signal(SIGINT,down);for(;;)pause();}\n' > "$C/pause/pause.c"
gcc -static -O2 -s -o "$C/pause/rootfs/pause" "$C/pause/pause.c"
tar -C "$C/pause/rootfs" -cf "$C/pause/layer.tar" pause
diff=$(sha256sum "$C/pause/layer.tar" | cut -d' ' -f1)
printf '{"architecture":"amd64","os":"linux","config":{"Entrypoint":["/pause"]},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' "$diff" > "$C/pause/config.json"
printf '[{"Config":"config.json","RepoTags":["crust.bench/pause:1"],"Layers":["layer.tar"]}]' > "$C/pause/manifest.json"
tar -C "$C/pause" -cf "$C/pause.tar" manifest.json config.json layer.tar
cat > "$C/config.toml" <<TOML
version = 2
root = "$C/root"
state = "$C/state"
[grpc]
  address = "$C/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "crust.bench/pause:1"
  # This VM lacks CAP_SYS_RESOURCE: the pause container's negative oom_score_adj must be
  # clamped to containerd's own, or runc fails to start it.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$W/net.d"
TOML
containerd --config "$C/config.toml" >"$C/log" 2>&1 & PIDS+=($!)
CTRD_PID=$!
wait_for "$C/containerd.sock"
ctr --address "$C/containerd.sock" -n k8s.io images import "$C/pause.tar" >/dev/null
sleep 1
"$BIN/crust-bench" --endpoint "unix://$C/containerd.sock" --label containerd --daemon-pid "$CTRD_PID" "$@"
