#!/bin/sh
# Runs critest's specs for what crust implements (pod sandboxes, runtime info, idempotence,
# images) against a crust daemon of its own: temp root, state and socket, its own bridge
# network, and critest-config/crust.toml, whose registry mirrors point at the offline registry
# (../shared/tools/offline-registry.sh, or $OFFLINE_REGISTRY) on 127.0.0.1:5000. Specs listed in
# critest-config/skips.txt are skipped; every other spec in the focus must pass.
# Pods a failed spec leaves are removed afterwards (through crictl when it is on PATH, else
# by killing their monitors), and their cgroup parent (/crust-critest-*) with them.
# critest must be on PATH (build it from kubernetes-sigs/cri-tools); without it this prints
# SKIPPED and runs nothing.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
focus=${CRITEST_FOCUS:-'PodSandbox|Runtime info|Idempotence|Image Manager'}
if ! command -v critest >/dev/null 2>&1; then
  echo "critest: SKIPPED (critest is not on PATH; nothing was run)"
  exit 0
fi
registry=${OFFLINE_REGISTRY:-$top/../shared/tools/offline-registry.sh}
[ -f "$registry" ] || registry=/work/shared/tools/offline-registry.sh
if [ ! -f "$registry" ]; then
  echo "critest: FAILED (offline registry script not found; set OFFLINE_REGISTRY)" >&2
  exit 1
fi
bash "$registry" start

crust=${CRUST_BIN:-$top/target/debug/crust}
work=$(mktemp -d /tmp/crust-critest.XXXXXX)
sock=$work/crust.sock
bridge=crustcri0

# This daemon's pods go in a cgroup parent of their own, so what a failed spec leaves is easy
# to find and remove.
cgroup_parent=/crust-critest-$(basename "$work" | tr -dc 'A-Za-z0-9')

cleanup() {
  # critest removes its pods, but a failed spec can leave some: remove them through the daemon
  # (CNI DEL, IPAM) when crictl is at hand, then kill any monitor still holding our state.
  if [ -n "${pid:-}" ] && command -v crictl >/dev/null 2>&1; then
    crictl --runtime-endpoint "unix://$sock" rmp -fa >/dev/null 2>&1 || true
  fi
  if [ -n "${pid:-}" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  for m in $(pgrep -f "crust monitor --sandbox" || true); do
    if ls -l "/proc/$m/fd" 2>/dev/null | grep -q "$work" ||
      grep -qs "$cgroup_parent/" "/proc/$m/cgroup"; then
      kill -9 "$m" 2>/dev/null || true
    fi
  done
  grep " $work" /proc/self/mountinfo | awk '{print $5}' | sort -r | xargs -r -n1 umount -l
  for h in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
    [ -d "$h${cgroup_parent#/}" ] || continue
    find "$h${cgroup_parent#/}" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
  ip link del "$bridge" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

mkdir -p "$work/net.d"
cat > "$work/net.d/10-critest.conflist" <<JSON
{"cniVersion":"1.0.0","name":"crust-critest","plugins":[
 {"type":"bridge","bridge":"$bridge","isGateway":true,"ipMasq":false,"hairpinMode":true,
  "ipam":{"type":"host-local","dataDir":"$work/ipam","ranges":[[{"subnet":"10.89.0.0/16"}]],
          "routes":[{"dst":"0.0.0.0/0"}]}},
 {"type":"portmap","capabilities":{"portMappings":true}}]}
JSON
printf 'default_cgroup_parent = "%s"\n' "$cgroup_parent" > "$work/config.toml"
cat "$top/critest-config/crust.toml" >> "$work/config.toml"
printf '\n[network]\nconf_dir = "%s"\nmasquerade_subnets = []\n' "$work/net.d" >> "$work/config.toml"

"$crust" serve --config "$work/config.toml" --listen "$sock" --root "$work/root" \
  --state "$work/state" --log-level info > "$work/crust.log" 2>&1 &
pid=$!
i=0
until [ -S "$sock" ]; do
  i=$((i+1)); [ $i -gt 100 ] && { cat "$work/crust.log"; echo "crust did not start" >&2; exit 1; }
  sleep 0.1
done

skip=$(grep -v '^#' "$top/critest-config/skips.txt" | grep -v '^$' | paste -sd'|' -)
echo "critest: focus '$focus', skipping known gaps from critest-config/skips.txt"
set +e
critest --runtime-endpoint "unix://$sock" --image-endpoint "unix://$sock" \
  --ginkgo.focus="$focus" ${skip:+--ginkgo.skip="$skip"} --ginkgo.no-color \
  > "$work/critest.log" 2>&1
rc=$?
set -e
grep -E '^\s+\[FAIL\]|^Ran |Passed \|' "$work/critest.log" || true
if [ $rc -ne 0 ]; then
  tail -100 "$work/critest.log"
  echo "--- crust log ---"; tail -50 "$work/crust.log"
  echo "critest: FAILED"
  exit 1
fi
echo "critest: PASSED"
