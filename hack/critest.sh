#!/bin/bash
# Runs the whole critest suite (cri-tools' conformance tests; its benchmarks run only with
# -benchmark, so not here) against a crust daemon of its own: temp root, state and socket, its
# own bridge network and cgroup parent, and critest-config/crust.toml, whose registry mirrors
# point at the offline registry ../shared/tools/offline-registry.sh serves on 127.0.0.1:5000.
# It builds a stand-in for every image critest v1.37.0 pulls but one (see skips.txt); stand-ins
# for images a later critest adds go in critest-config/offline-images.txt (the registry
# script's format), which is passed to it as OFFLINE_REGISTRY_EXTRA.
#
# Every spec must pass, except those critest-config/skips.txt lists (`<regex> | <reason>` per
# line), which are not run. A spec critest skips on its own (it does so when a runtime lacks a
# feature) counts as failed unless skips.txt lists it, and so does an entry of skips.txt that
# matches no spec. The summary line `critest: N passed, N failed, N skipped` and the list of
# skipped specs with their reasons are printed on every run.
#
# crictl and critest come from hack/build-tools.sh (pinned in hack/tools/go.mod, built once into
# a cache), or from $CRICTL and $CRITEST. Nothing is skipped for want of a tool: if one cannot
# be built, this fails.
#
# Usage: hack/critest.sh [critest flags...]
#   e.g. hack/critest.sh --ginkgo.focus='PodSandbox' --ginkgo.v   (specs outside a focus are
#   reported as not run; the skip list applies as always)
# Env: CRUST_BIN (default target/debug/crust), CRITEST, CRICTL, OFFLINE_REGISTRY (script, or
#      "running": a registry serving that script's storage already listens on 127.0.0.1:5000,
#      as in the cgroup v2 guest of hack/cgroupv2-tests.sh, which has no curl),
#      CRITEST_CGROUP_DRIVER (cgroupfs, the default, or systemd: the pods then go in a slice
#      of this run's own), CRITEST_SKIPS (default critest-config/skips.txt), CRITEST_KEEP=1
#      (keep the work dir), CRITEST_RUNTIME=<handler>=<binary> (every pod under a RuntimeClass
#      handler that OCI runtime binary runs, `[runtimes.<handler>]`: critest gets
#      --runtime-handler <handler>, and critest-config/skips-handler-<handler>.txt adds to the
#      skip list; e.g. CRITEST_RUNTIME=runc=/usr/sbin/runc).
set -euo pipefail
shopt -s inherit_errexit
top=$(cd "$(dirname "$0")/.." && pwd)

fail() { echo "critest: FAILED: $*" >&2; exit 1; }

registry=${OFFLINE_REGISTRY:-$top/../shared/tools/offline-registry.sh}
driver=${CRITEST_CGROUP_DRIVER:-cgroupfs}
case $driver in cgroupfs|systemd) ;; *) fail "CRITEST_CGROUP_DRIVER is cgroupfs or systemd, not $driver" ;; esac
needs=(jq ip)
# Only the registry script speaks HTTP here.
[ "$registry" = running ] || needs+=(curl)
[ "$driver" = cgroupfs ] || needs+=(systemctl)
for t in "${needs[@]}"; do
  command -v "$t" >/dev/null || fail "$t is missing (hack/install-deps.sh test installs it)"
done
if [ -z "${CRITEST:-}" ] || [ -z "${CRICTL:-}" ]; then
  tools=$("$top/hack/build-tools.sh" cri-tools) || fail "could not build crictl and critest"
  CRITEST=${CRITEST:-$tools/critest}
  CRICTL=${CRICTL:-$tools/crictl}
fi
[ -x "$CRITEST" ] || fail "critest not found at $CRITEST"
[ -x "$CRICTL" ] || fail "crictl not found at $CRICTL"
crust=${CRUST_BIN:-$top/target/debug/crust}
[ -x "$crust" ] || fail "crust not found at $crust (cargo build --bins)"

handler_args=()
runtime_toml=""
if [ -n "${CRITEST_RUNTIME:-}" ]; then
  handler=${CRITEST_RUNTIME%%=*} binary=${CRITEST_RUNTIME#*=}
  [ -x "$binary" ] || fail "CRITEST_RUNTIME: $binary is not an executable (hack/install-deps.sh test)"
  handler_args=(--runtime-handler "$handler")
  runtime_toml=$(printf '\n[runtimes.%s]\nruntime_path = "%s"\n' "$handler" "$binary")
fi

# --- the skip list: `<regex> | <reason>`, comments (#) and blank lines ignored
skips_file=${CRITEST_SKIPS:-$top/critest-config/skips.txt}
[ -f "$skips_file" ] || fail "$skips_file is missing"
# Under a handler's binary, what that binary lacks too (critest-config/skips-handler-<name>.txt).
handler_skips=/dev/null
if [ -n "${CRITEST_RUNTIME:-}" ] && [ -f "$top/critest-config/skips-handler-$handler.txt" ]; then
  handler_skips=$top/critest-config/skips-handler-$handler.txt
fi
skips_json=$({ grep -hvE '^[[:space:]]*(#|$)' "$skips_file" "$handler_skips" || true; } | jq -R -s '
  split("\n") | map(select(length > 0)) | map(
    (index(" | ")) as $i
    | if $i == null then error("no \" | \" separating regex and reason: " + .) else . end
    | {regex: (.[:$i] | sub("\\s+$"; "")), reason: (.[$i + 3:] | sub("^\\s+"; ""))}
    | if .regex == "" or .reason == "" then error("empty regex or reason: " + .regex) else . end)
') || fail "$skips_file: malformed line (each is '<regex> | <reason>')"
# Where the kernel enforces AppArmor, critest runs its AppArmor specs: an entry skipping them
# for want of it does not apply.
if [ "$(cat /sys/module/apparmor/parameters/enabled 2>/dev/null)" = Y ]; then
  skips_json=$(jq '[.[] | select(.reason != "host: AppArmor absent")]' <<<"$skips_json")
fi
skip_args=()
while IFS= read -r re; do skip_args+=("--ginkgo.skip=$re"); done \
  < <(jq -r '.[].regex' <<<"$skips_json")

# --- the offline registry (../shared beside this repo, as laid out for every session and CI)
if [ "$registry" = running ]; then
  (exec 3<>/dev/tcp/127.0.0.1/5000) 2>/dev/null ||
    fail "OFFLINE_REGISTRY=running, but nothing listens on 127.0.0.1:5000"
else
  [ -f "$registry" ] || fail "offline registry script not found at $registry (set OFFLINE_REGISTRY)"
  # Stand-ins for images critest pulls that the registry script does not build, if any (its
  # format).
  extra=$top/critest-config/offline-images.txt
  if [ -f "$extra" ] && grep -qvE '^[[:space:]]*(#|$)' "$extra"; then
    export OFFLINE_REGISTRY_EXTRA=$extra
  fi
  bash "$registry" start || fail "the offline registry did not start ($registry)"
fi

# --- a crust of our own
work=$(mktemp -d "${TMPDIR:-/tmp}/crust-critest.XXXXXX")
# Searchable by others, as a node's /var/lib and /run are: the processes of a pod with a user
# namespace are nobody on the node and pass through it to their files (crust's probe says so).
chmod 0711 "$work"
sock=$work/crust.sock
# A bridge and subnet of this run's own, so runs from two work trees at once do not collide.
for _ in 1 2 3 4 5 6 7 8; do
  n=$(( $(od -An -N2 -tu2 /dev/urandom) % 250 ))
  bridge=crustcri$n
  ip link show "$bridge" >/dev/null 2>&1 || break
done
subnet=10.89.$n.0/24
# This daemon's pods go in a cgroup parent of their own, so what a failed spec leaves is easy
# to find and remove: a directory for the cgroupfs driver, a slice for the systemd driver.
tag=$(basename "$work" | tr -dc 'A-Za-z0-9')
if [ "$driver" = systemd ]; then
  cgroup_parent=crustcritest$tag.slice
else
  cgroup_parent=/crust-critest-$tag
fi

cleanup() {
  # critest removes its pods, but a failed spec can leave some: remove them through the daemon
  # (CNI DEL, IPAM), then kill any monitor still holding our state.
  if [ -n "${pid:-}" ]; then
    "$CRICTL" --runtime-endpoint "unix://$sock" rmp -fa >/dev/null 2>&1 || true
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  for m in $(pgrep -f "crust monitor --sandbox" || true); do
    if find "/proc/$m/fd" -lname "$work/*" 2>/dev/null | grep -q . ||
      grep -qs "$cgroup_parent/" "/proc/$m/cgroup"; then
      kill -9 "$m" 2>/dev/null || true
    fi
  done
  grep " $work" /proc/self/mountinfo | awk '{print $5}' | sort -r | xargs -r -n1 umount -l || true
  if [ "$driver" = systemd ]; then
    systemctl stop "$cgroup_parent" 2>/dev/null || true
  else
    for h in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
      [ -d "$h${cgroup_parent#/}" ] || continue
      find "$h${cgroup_parent#/}" -depth -type d -exec rmdir {} + 2>/dev/null || true
    done
  fi
  ip link del "$bridge" 2>/dev/null || true
  if [ -n "${CRITEST_KEEP:-}" ]; then echo "critest: work dir kept: $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p "$work/net.d"
cat > "$work/net.d/10-critest.conflist" <<JSON
{"cniVersion":"1.0.0","name":"crust-critest","plugins":[
 {"type":"bridge","bridge":"$bridge","isGateway":true,"ipMasq":false,"hairpinMode":true,
  "ipam":{"type":"host-local","dataDir":"$work/ipam","ranges":[[{"subnet":"$subnet"}]],
          "routes":[{"dst":"0.0.0.0/0"}]}},
 {"type":"portmap","capabilities":{"portMappings":true}}]}
JSON
printf 'cgroup_driver = "%s"\ndefault_cgroup_parent = "%s"\n' "$driver" "$cgroup_parent" \
  > "$work/config.toml"
cat "$top/critest-config/crust.toml" >> "$work/config.toml"
printf '\n[network]\nconf_dir = "%s"\nmasquerade_subnets = []\n' "$work/net.d" >> "$work/config.toml"
# No free-space reserve: the machine's disk may be shared with other work and nearly full; the
# reserve is tested by the integration tests that set it.
printf '\n[image]\nmin_free_percent = 0\n' >> "$work/config.toml"
printf '%s\n' "$runtime_toml" >> "$work/config.toml"
# NRI on a socket of this run's own (critest's NRI specs connect their plugins there), no
# pre-installed plugins. critest's synchronization specs hold a plugin's Synchronize open for
# 2 s on purpose, NRI's default request timeout: a longer one keeps that plugin from being
# dropped as hung.
printf '\n[nri]\nsocket_path = "%s"\nplugin_path = "%s"\nplugin_config_path = "%s"\nrequest_timeout = "10s"\n' \
  "$work/nri.sock" "$work/nri-plugins" "$work/nri-conf.d" >> "$work/config.toml"

"$crust" serve --config "$work/config.toml" --listen "$sock" --root "$work/root" \
  --state "$work/state" --log-level info > "$work/crust.log" 2>&1 &
pid=$!
i=0
until [ -S "$sock" ]; do
  i=$((i+1))
  if [ $i -gt 100 ] || ! kill -0 "$pid" 2>/dev/null; then
    cat "$work/crust.log" >&2
    fail "crust did not start (log above)"
  fi
  sleep 0.1
done

# --- the suite
echo "critest: $("$CRITEST" --version 2>/dev/null | grep -m1 version) against crust" \
  "$("$crust" version | awk '{print $2}'), ${#skip_args[@]} skip entries from ${skips_file#"$top"/}" \
  "${CRITEST_RUNTIME:+, runtime handler $CRITEST_RUNTIME}"
start=$(date +%s)
set +e
"$CRITEST" --runtime-endpoint "unix://$sock" --image-endpoint "unix://$sock" \
  --nri-socket "$work/nri.sock" "${handler_args[@]}" \
  --ginkgo.no-color --ginkgo.timeout=20m --ginkgo.json-report="$work/report.json" \
  "${skip_args[@]}" "$@" \
  > "$work/critest.log" 2>&1
rc=$?
set -e
elapsed=$(( $(date +%s) - start ))
if [ ! -s "$work/report.json" ]; then
  tail -50 "$work/critest.log" >&2
  fail "critest exited with $rc and wrote no report (its output above)"
fi

# --- the verdict, from the JSON report: each spec is
#   excluded  a benchmark (critest runs those only with -benchmark)
#   skipped   matched by skips.txt (not run)
#   not run   outside a focus given on the command line
#   passed    passed
#   failed    anything else: failed, panicked, timed out, or skipped by critest itself
verdict=$(jq --argjson skips "$skips_json" '
  [.[0].SpecReports[] | select(.LeafNodeType == "It")
   | ((.ContainerHierarchyTexts // []) + [.LeafNodeText] | join(" ")) as $name
   | (first($skips[] | select(. as $s | $name | test($s.regex))) // null) as $skip
   | {name: $name, state: .State, message: (.Failure.Message // ""),
      location: ((.Failure.Location.FileName // "" | sub(".*/cri-tools@[^/]*/"; ""))
                 + ":" + (.Failure.Location.LineNumber // 0 | tostring)),
      skip: $skip}
   | .class = (if (.name | test("benchmark")) and .state == "skipped" and .message == "" then "excluded"
               elif .skip != null and .state == "skipped" and .message == "" then "skipped"
               elif .state == "skipped" and .message == "" then "notrun"
               elif .state == "passed" then "passed"
               else "failed" end)]
  | . as $specs
  | {specs: $specs,
     stale: [$skips[] | . as $s | select(all($specs[]; .name | test($s.regex) | not)) | .regex]}
' "$work/report.json")
count() { jq --arg c "$1" '[.specs[] | select(.class == $c)] | length' <<<"$verdict"; }
passed=$(count passed) failed=$(count failed) skipped=$(count skipped) notrun=$(count notrun)
stale=$(jq '.stale | length' <<<"$verdict")

if [ "$passed" -gt 0 ]; then
  echo "critest: passed:"
  jq -r '[.specs[] | select(.class == "passed") | .name] | sort | .[] | "      \(.)"' <<<"$verdict"
fi
if [ "$skipped" -gt 0 ]; then
  echo "critest: skipped, by reason (${skips_file#"$top"/}):"
  jq -r '[.specs[] | select(.class == "skipped")] | group_by(.skip.reason)
    | sort_by(-length) | .[]
    | "  \(.[0].skip.reason) (\(length)):", (sort_by(.name) | .[] | "      \(.name)")' <<<"$verdict"
fi
if [ "$failed" -gt 0 ]; then
  echo "critest: failed:"
  jq -r '.specs[] | select(.class == "failed")
    | (.message | split("\n")) as $m
    | "  \(.name)\n      \(.state) at \(.location): \($m[:6] | join("\n      "))"
      + (if ($m | length) > 6 then "\n      ..." else "" end)' <<<"$verdict"
  echo "--- last lines of the crust log ($work/crust.log) ---"
  tail -40 "$work/crust.log" | sed 's/\x1b\[[0-9;]*m//g'   # without colours
  # A monitor that failed to start says why in its own log, which the error names: show the
  # logs the failures name, as the work dir goes with the run (and the guest's with its disk).
  for log in $(jq -r '.specs[] | select(.class == "failed") | .message' <<<"$verdict" |
    grep -o "$work/[^ )]*monitor\.log" | sort -u | head -5); do
    echo "--- $log ---"
    tail -20 "$log" 2>&1 || true
  done
  echo "--- critest's own output is $work/critest.log, kept when CRITEST_KEEP=1 ---"
fi
if [ "$stale" -gt 0 ]; then
  echo "critest: skips.txt entries matching no spec (remove or fix them):"
  jq -r '.stale[] | "  \(.)"' <<<"$verdict"
fi
[ "$notrun" -eq 0 ] || echo "critest: $notrun specs not run (outside the focus given)"
echo "critest: $(count excluded) benchmark specs not run (critest runs them with -benchmark only)"
echo "critest: ran in ${elapsed}s"
echo "critest: $passed passed, $failed failed, $skipped skipped"

# --- the Streaming specs once more over WebSocket (the suite above spoke SPDY), as kubectl
# 1.31+ and crictl --transport websocket do.
ws_failed=0
if [ $# -eq 0 ]; then
  set +e
  "$CRITEST" --runtime-endpoint "unix://$sock" --image-endpoint "unix://$sock" \
    --ginkgo.no-color --ginkgo.timeout=10m --ginkgo.focus=Streaming "${skip_args[@]}" \
    "${handler_args[@]}" \
    --websocket-exec --websocket-attach --websocket-portforward \
    --ginkgo.json-report="$work/report-ws.json" > "$work/critest-ws.log" 2>&1
  set -e
  [ -s "$work/report-ws.json" ] || fail "critest over WebSocket wrote no report (see $work/critest-ws.log)"
  ws=$(jq '[.[0].SpecReports[] | select(.LeafNodeType == "It" and .State != "skipped")]' \
    "$work/report-ws.json")
  ws_passed=$(jq '[.[] | select(.State == "passed")] | length' <<<"$ws")
  ws_failed=$(jq '[.[] | select(.State != "passed")] | length' <<<"$ws")
  jq -r '.[] | select(.State != "passed") | "  \(.LeafNodeText): \(.State) \(.Failure.Message // "" | split("\n")[0])"' <<<"$ws"
  echo "critest: Streaming over WebSocket: $ws_passed passed, $ws_failed failed"
  [ "$ws_passed" -gt 0 ] || ws_failed=1
fi
if [ "$failed" -gt 0 ] || [ "$stale" -gt 0 ] || [ "$passed" -eq 0 ] || [ "$ws_failed" -gt 0 ]; then
  echo "critest: FAILED"
  exit 1
fi
if [ "$rc" -ne 0 ]; then
  tail -30 "$work/critest.log"
  fail "critest exited with $rc although every spec passed or was skipped (its output above)"
fi
echo "critest: PASSED"
