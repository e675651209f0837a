#!/bin/bash
# Runs critest's Image Manager specs against crust, offline: serves the stand-in images with
# /work/shared/tools/offline-registry.sh (or $OFFLINE_REGISTRY) on 127.0.0.1:5000, starts crust
# with critest-config/crust.toml (mirrors for every registry critest names) on temporary
# directories, and skips the specs listed in critest-config/image-skips.txt.
# Usage: hack/critest-images.sh [extra critest args]
set -euo pipefail
cd "$(dirname "$0")/.."
command -v critest >/dev/null || { echo "critest not found on PATH" >&2; exit 1; }
BIN=${BIN:-target/debug}
[ -x "$BIN/crust" ] || { echo "build first: cargo build --bins" >&2; exit 1; }
REGISTRY=${OFFLINE_REGISTRY:-/work/shared/tools/offline-registry.sh}
[ -x "$REGISTRY" ] || [ -f "$REGISTRY" ] || { echo "offline registry script $REGISTRY not found" >&2; exit 1; }
bash "$REGISTRY" start

W=$(mktemp -d /tmp/crust-critest-images.XXXXXX)
"$BIN/crust" serve --listen "$W/crust.sock" --root "$W/root" --state "$W/state" \
  --config critest-config/crust.toml --log-level info >"$W/crust.log" 2>&1 &
PID=$!
cleanup() {
  kill "$PID" 2>/dev/null || true
  wait "$PID" 2>/dev/null || true
  umount -l "$W/state/ns" 2>/dev/null || true
  rm -rf "$W"
}
trap cleanup EXIT
for _ in $(seq 100); do [ -S "$W/crust.sock" ] && break; sleep 0.1; done

SKIP=$(grep -v '^#' critest-config/image-skips.txt | grep -v '^$' | paste -sd'|')
critest --runtime-endpoint "unix://$W/crust.sock" --image-endpoint "unix://$W/crust.sock" \
  --ginkgo.focus='Image Manager' ${SKIP:+--ginkgo.skip="$SKIP"} "$@"
