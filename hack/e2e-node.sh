#!/bin/bash
# Runs Kubernetes' node conformance suite (k8s.io/kubernetes test/e2e_node, the version pinned
# in hack/tools/e2e-node/go.mod) against a crust of its own, as containerd's and CRI-O's CI run
# it: the [NodeConformance] specs without [Flaky], [Slow] and [Serial], 8 ginkgo processes.
# The suite's services mode starts etcd, an API server and the namespace controller in
# e2e_node.test itself, then the kubelet found beside it, which runs the suite's pods on crust.
#
# - e2e_node.test, ginkgo, agnhost and that kubelet come from hack/build-tools.sh e2e-node
#   (built once into the cache); the images from hack/e2e-node-images.sh (stand-ins on the
#   offline registry, never pulled from outside; image pre-pulling is off).
# - crust: e2e-node-config/crust.toml (registry mirrors, the runtime handler "test-handler" the
#   RuntimeClass specs use), its own socket, root and state (/run/crust-e2e,
#   /var/lib/crust-e2e), its own bridge (crust-e2e0, 10.100.0.0/24: the pod CIDR the suite
#   gives kubelet), in a cgroup of its own (/crust-e2e-runtime in every hierarchy, which
#   kubelet is told is the runtime's).
# - kubelet: the suite's own configuration plus, on crust, the PodAndContainerStatsFromCRI
#   gate the README asks of a crust node (kubelet's cAdvisor names the containers of
#   containerd and CRI-O only, so kubelet takes crust's statistics through CRI); for this
#   host, the cgroupfs driver and
#   --fail-cgroupv1=false (cgroup v1), none of the suite's system cgroup (it would move every
#   process of the machine into /system), and disk thresholds for a disk other builds share. The suite starts kubelet through systemd-run
#   when it finds one, and systemd is not PID 1 here: it runs with a PATH that has every
#   command of the host but systemd-run.
#
# Every selected spec must pass, except those e2e-node-config/skips.txt lists (`<regex> |
# <reason>`), which are not run. A selected spec the suite skips by itself counts as failed
# unless an entry names it, and so does an entry that matches no selected spec. It prints the
# passed specs, the skipped ones under their reasons, every failure with its message, and last
# `e2e-node: N passed, N failed, N skipped`.
#
# E2E_RUNTIME=containerd runs the same suite against containerd 2.4.2 (hack/containerd-peer.sh,
# as make bench builds it; Debian's runc), configured alike (mirrors as hosts.toml, the
# test-handler runtime, the same bridge and cgroup), with the same skip list: what it fails too
# on this host is a fact of the host.
#
# Usage: hack/e2e-node.sh [ginkgo flags...]   e.g. hack/e2e-node.sh --focus='Probing'
#   (selected specs outside that focus are reported as not run; the skip list applies as always)
# Env: E2E_FOCUS (conformance, the default, or features: containerd's pull-request gate,
#      [NodeConformance], [Feature:*] and [Feature] without its skips, with
#      e2e-node-config/features-skips.txt besides skips.txt),
#      E2E_RUNTIME (crust, the default, or containerd), CRUST_BIN (default target/debug/crust),
#      E2E_PROCS (ginkgo processes, default 8), E2E_SKIPS (default e2e-node-config/skips.txt),
#      E2E_TIMEOUT (ginkgo's, default 2h). The logs and the report stay until the next run
#      against the same runtime, in /var/lib/crust-e2e/run-<runtime>[-features].
set -euo pipefail
shopt -s inherit_errexit
top=$(cd "$(dirname "$0")/.." && pwd)
# The whole script is one block, read before it runs: a run takes half an hour, and bash reads
# a script as it goes, so an edit during a run would change what it does next.
{

fail() { echo "e2e-node: FAILED: $*" >&2; exit 1; }
log() { echo "e2e-node: $*" >&2; }

runtime=${E2E_RUNTIME:-crust}
suite_flags=()  # e2e_node.test flags for this runtime
case $runtime in crust|containerd) ;; *) fail "E2E_RUNTIME is crust or containerd, not $runtime" ;; esac
procs=${E2E_PROCS:-8}
for t in jq ip curl; do
  command -v "$t" >/dev/null || fail "$t is missing (hack/install-deps.sh test installs it)"
done
[ -f "$top/../shared/tools/offline-registry.sh" ] || [ -n "${OFFLINE_REGISTRY:-}" ] ||
  fail "../shared/tools/offline-registry.sh not found (set OFFLINE_REGISTRY)"

tools=$("$top/hack/build-tools.sh" e2e-node | tail -1) || fail "could not build the suite"
crictl=$("$top/hack/build-tools.sh" cri-tools | tail -1)/crictl || fail "could not build crictl"
# CRIU for the checkpoint spec: crust is given its path; containerd's runc finds it on its PATH.
criu=$("$top/hack/install-criu.sh") || fail "no usable CRIU (hack/install-criu.sh)"
if [ "$runtime" = crust ]; then
  crust=${CRUST_BIN:-$top/target/debug/crust}
  [ -x "$crust" ] || fail "crust not found at $crust (cargo build --bins)"
else
  # shellcheck source=hack/containerd-peer.sh
  . "$top/hack/containerd-peer.sh"
  ctrd_pick || fail "no containerd to run the suite against"
fi

# --- the skip list: `<regex> | <reason>`, comments (#) and blank lines ignored
# (the features selection holds the conformance one: its skips are skips.txt's and
# features-skips.txt's)
selection=${E2E_FOCUS:-conformance}
case $selection in
  conformance) default_skips=$top/e2e-node-config/skips.txt ;;
  features) default_skips="$top/e2e-node-config/skips.txt $top/e2e-node-config/features-skips.txt" ;;
  *) fail "E2E_FOCUS is conformance or features, not $selection" ;;
esac
skips_files=${E2E_SKIPS:-$default_skips}
for f in $skips_files; do [ -f "$f" ] || fail "$f is missing"; done
skips_file=${skips_files//"$top"\//}
# shellcheck disable=SC2086 # a list of files
skips_json=$({ cat $skips_files | grep -vE '^[[:space:]]*(#|$)' || true; } | jq -R -s '
  split("\n") | map(select(length > 0)) | map(
    (index(" | ")) as $i
    | if $i == null then error("no \" | \" separating regex and reason: " + .) else . end
    | {regex: (.[:$i] | sub("\\s+$"; "")), reason: (.[$i + 3:] | sub("^\\s+"; ""))}
    | if .regex == "" or .reason == "" then error("empty regex or reason: " + .regex) else . end
    | if (.reason | test("^(not built yet|host|configuration): .")) then . else
        error("the reason is \"not built yet: ...\", \"host: ...\" or \"configuration: ...\": "
          + .reason) end)
') || fail "$skips_file: malformed line (each is '<regex> | <reason>')"
# The selection, by the specs' labels (which their texts repeat in brackets, as the verdict
# below reads them), so that a --focus given on the command line narrows it:
# - conformance: as containerd's and CRI-O's node conformance jobs make it;
# - features: containerd's pull-request gate (its .github/workflows/node-e2e.yml): focus
#   `\[NodeConformance\]|\[Feature:.+\]|\[Feature\]`, and its skips.
case $selection in
  conformance)
    labels='NodeConformance && !Flaky && !Slow && !Serial'
    focus='\[NodeConformance\]'
    unselected='\[Flaky\]|\[Slow\]|\[Serial\]' ;;
  features)
    ctrd_skipped='UserNamespacesSupport|PodLifecycleSleepActionAllowZero|UserNamespacesPodSecurityStandards|KubeletCredentialProviders|LockContention|SCTPConnectivity|ResourceMetrics'
    labels="(NodeConformance || /^Feature:.+\$/ || Feature) && !Flaky && !Slow && !Serial && !Alpha && !/^Feature:($ctrd_skipped)\$/"
    focus='\[NodeConformance\]|\[Feature:.+\]|\[Feature\]'
    unselected="\\[Flaky\\]|\\[Slow\\]|\\[Serial\\]|\\[Alpha\\]|\\[Feature:($ctrd_skipped)\\]" ;;
esac
skip_args=()
while IFS= read -r re; do skip_args+=("--skip=$re"); done < <(jq -r '.[].regex' <<<"$skips_json")

# --- one run at a time on this machine: the suite's kubelet has fixed ports and /var/lib/kubelet
state=/run/crust-e2e
base=/var/lib/crust-e2e
mkdir -p "$state" "$base"
exec 8>"$state/lock"
flock -n 8 || fail "another hack/e2e-node.sh runs on this machine ($state/lock)"
# (what this script starts gets no copy of the lock: a process left behind would hold it)

# --- images (before the clock starts)
"$top/hack/e2e-node-images.sh" "$tools/agnhost" 8>&- ||
  fail "the stand-in images could not be built"

work=$base/run-$runtime
[ "$selection" = conformance ] || work=$work-$selection
sock=$state/$runtime.sock
# containerd at its default socket: kubelet's cAdvisor finds containerd's containers (their pod
# and container names) only there, as it does on the nodes containerd's CI runs this suite on.
[ "$runtime" = crust ] || sock=/run/containerd/containerd.sock
[ ! -S "$sock" ] || ! "$crictl" --runtime-endpoint "unix://$sock" version >/dev/null 2>&1 ||
  fail "a runtime already serves $sock (not ours: this run needs that socket for its own)"
bridge=crust-e2e0
subnet=10.100.0.0/24
runtime_cgroup=/crust-e2e-runtime
cgroup_roots() { find /sys/fs/cgroup -mindepth 1 -maxdepth 1 -type d; }

kill_tree_of() { # pid: the process and what it left in our cgroup
  kill "$1" 2>/dev/null || true
  local i
  for i in $(seq 100); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
  kill -9 "$1" 2>/dev/null || true
}
cleanup() {
  set +e
  # The suite's processes, if it left any (its services, kubelet: only ever this script's, run
  # from this cache directory).
  for p in $(pgrep -x e2e_node.test) $(pgrep -x kubelet); do
    case $(readlink "/proc/$p/exe") in "$tools/e2e_node.test"|"$tools/kubelet") kill_tree_of "$p" ;; esac
  done
  if [ -n "${rt_pid:-}" ]; then
    "$crictl" --runtime-endpoint "unix://$sock" rmp -fa >/dev/null 2>&1
    kill_tree_of "$rt_pid"
  fi
  # What the runtime left: monitors or shims in our cgroups, mounts under our directories.
  for h in $(cgroup_roots); do
    for d in "$h$runtime_cgroup" "$h/kubepods" "$h/kubelet"; do
      [ -d "$d" ] || continue
      find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null | xargs -r kill -9 2>/dev/null
    done
  done
  grep -E " ($base|$state|/var/lib/kubelet)[/ ]" /proc/self/mountinfo | awk '{print $5}' |
    sort -r | xargs -r -n1 umount -l
  for h in $(cgroup_roots); do
    for d in "$h$runtime_cgroup" "$h/kubepods" "$h/kubelet"; do
      [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
    done
  done
  ip link del "$bridge" 2>/dev/null
  rm -f "$sock"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- a clean work dir (the last run's logs stay there until this one)
cleanup
rm -rf "$work" "$base/$runtime" "$state/$runtime"
mkdir -p "$work/run" "$work/report" "$work/net.d" "$work/bin"
cat > "$work/net.d/10-crust-e2e.conflist" <<JSON
{"cniVersion":"1.0.0","name":"crust-e2e","plugins":[
 {"type":"bridge","bridge":"$bridge","isGateway":true,"ipMasq":false,"hairpinMode":true,
  "ipam":{"type":"host-local","dataDir":"$work/ipam","ranges":[[{"subnet":"$subnet"}]],
          "routes":[{"dst":"0.0.0.0/0"}]}},
 {"type":"portmap","capabilities":{"portMappings":true}}]}
JSON
# A PATH with every command of the host but systemd-run (see the header), and the CRIU above.
ln -s "$criu" "$work/bin/criu"
IFS=: read -r -a path_dirs <<<"$PATH"
for d in "${path_dirs[@]}"; do
  [ -d "$d" ] || continue
  for f in "$d"/*; do
    n=${f##*/}
    [ "$n" = systemd-run ] || [ -e "$work/bin/$n" ] || [ ! -x "$f" ] || ln -s "$f" "$work/bin/$n"
  done
done

# --- the runtime, in a cgroup of its own
for h in $(cgroup_roots); do mkdir -p "$h$runtime_cgroup"; done
if [ "$runtime" = crust ]; then
  {
    printf 'cgroup_driver = "cgroupfs"\ndefault_cgroup_parent = "/crust-e2e-pods"\n'
    # The checkpoint spec (E2E_FOCUS=features) checkpoints through kubelet with this CRIU.
    printf 'criu_path = "%s"\n' "$criu"
    cat "$top/e2e-node-config/crust.toml"
    printf '\n[network]\nconf_dir = "%s"\nmasquerade_subnets = []\n' "$work/net.d"
  } > "$work/crust.toml"
  desc="crust $("$crust" version | awk '{print $2}') ($crust)"
  suite_flags=(--feature-gates=PodAndContainerStatsFromCRI=true)
  # A copy of its own: crust starts its monitors from its own executable, which a cargo build
  # during the run would replace.
  install -m 755 "$crust" "$work/crust"
  (
    for h in $(cgroup_roots); do echo "$BASHPID" > "$h$runtime_cgroup/cgroup.procs"; done
    exec "$work/crust" serve --config "$work/crust.toml" --listen "$sock" --root "$base/crust" \
      --state "$state/crust" --log-level info
  ) > "$work/crust.log" 2>&1 8>&- &
  rt_pid=$!
  rt_log=$work/crust.log
else
  mkdir -p "$work/certs.d"
  for host in registry.k8s.io docker.io gcr.io; do
    mkdir -p "$work/certs.d/$host"
    printf 'server = "https://%s"\n[host."http://127.0.0.1:5000"]\n  capabilities = ["pull", "resolve"]\n' \
      "$host" > "$work/certs.d/$host/hosts.toml"
  done
  ctrd_config "$work/containerd.toml" "$base/containerd" "$state/containerd" "$sock" \
    cni_conf_dir="$work/net.d" sandbox_image=registry.k8s.io/pause:3.10.2 \
    registry_config_path="$work/certs.d"
  cat >> "$work/containerd.toml" <<'TOML'
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.test-handler]
  runtime_type = "io.containerd.runc.v2"
TOML
  desc="containerd $CTRD_DESC"
  (
    for h in $(cgroup_roots); do echo "$BASHPID" > "$h$runtime_cgroup/cgroup.procs"; done
    PATH="$CTRD_DIR:$(dirname "$criu"):$PATH" exec "$CTRD_DIR/containerd" --config "$work/containerd.toml"
  ) > "$work/containerd.log" 2>&1 8>&- &
  rt_pid=$!
  rt_log=$work/containerd.log
fi
for i in $(seq 300); do
  [ -S "$sock" ] && "$crictl" --runtime-endpoint "unix://$sock" version >/dev/null 2>&1 && break
  kill -0 "$rt_pid" 2>/dev/null || { tail -30 "$rt_log" >&2; fail "$runtime did not start (log above)"; }
  [ "$i" -lt 300 ] || { tail -30 "$rt_log" >&2; fail "$runtime did not answer in 30 s"; }
  sleep 0.1
done

# --- the suite
# The disk is shared with other builds (often over 90% full): disk pressure in absolute terms
# (2 GiB), not the suite's 10%, which would evict the suite's pods, and no image garbage
# collection, which would remove the images the specs are about to use.
kubelet_flags=(--cgroup-driver=cgroupfs --fail-cgroupv1=false --fail-swap-on=false
  --system-cgroups= "--runtime-cgroups=$runtime_cgroup"
  "--eviction-hard=memory.available<250Mi,nodefs.available<2Gi,nodefs.inodesFree<5%,imagefs.available<2Gi"
  --image-gc-high-threshold=100 --image-gc-low-threshold=99)
log "e2e_node.test ${tools##*/e2e-node-} against $desc, $procs processes, $(jq length <<<"$skips_json") skip entries from" \
  "${skips_file#"$top"/}"
start=$(date +%s)
set +e
# ginkgo runs a compiled suite in the suite's directory, where the suite writes its kubeconfig,
# kubelet configuration and static pods, and the suite runs the kubelet beside it: links in the
# work dir keep those files out of the cache.
ln -s "$tools/e2e_node.test" "$work/run/e2e_node.test"
ln -s "$tools/kubelet" "$work/run/kubelet"
(
  cd "$work/run"
  PATH=$work/bin "$tools/ginkgo" --nodes="$procs" --no-color --timeout="${E2E_TIMEOUT:-2h}" \
    --label-filter="$labels" "${skip_args[@]}" --json-report=report.json --output-dir="$work/report" \
    "$@" "$work/run/e2e_node.test" -- \
    --container-runtime-endpoint="unix://$sock" --image-service-endpoint="unix://$sock" \
    --prepull-images=false --report-dir="$work/report" "${suite_flags[@]}" \
    --kubelet-flags="${kubelet_flags[*]}"
) > "$work/suite.log" 2>&1 8>&-
rc=$?
set -e
elapsed=$(( $(date +%s) - start ))
report=$work/report/report.json
if ! jq -e '.[0].SpecReports | length > 0' "$report" >/dev/null 2>&1; then
  tail -60 "$work/suite.log" >&2
  fail "the suite exited with $rc and wrote no report (its output above; all of it in $work/suite.log)"
fi

# --- the verdict, from the JSON report: each spec is
#   unselected  not [NodeConformance], or [Flaky], [Slow] or [Serial]
#   skipped     selected, named by skips.txt (not run)
#   notrun      selected, outside a focus given on the command line
#   passed      passed
#   failed      anything else: failed, panicked, timed out, or skipped by the suite itself
verdict=$(jq --argjson skips "$skips_json" --arg focus "$focus" --arg unsel "$unselected" '
  [.[0].SpecReports[] | select(.LeafNodeType == "It")
   | ((.ContainerHierarchyTexts // []) + [.LeafNodeText] | join(" ")) as $name
   | (first($skips[] | select(. as $s | $name | test($s.regex))) // null) as $skip
   | {name: $name, state: .State, message: (.Failure.Message // ""),
      location: ((.Failure.Location.FileName // "" | sub(".*/kubernetes@[^/]*/"; ""))
                 + ":" + (.Failure.Location.LineNumber // 0 | tostring)),
      skip: $skip}
   | .class = (if (.name | test($focus) | not) or (.name | test($unsel)) then "unselected"
               elif .skip != null and .state == "skipped" and .message == "" then "skipped"
               elif .state == "skipped" and .message == "" then "notrun"
               elif .state == "passed" then "passed"
               else "failed" end)]
  | . as $specs
  | [$specs[] | select(.class != "unselected")] as $sel
  | {specs: $specs,
     stale: [$skips[] | . as $s | select(all($sel[]; .name | test($s.regex) | not)) | .regex]}
' "$report")
count() { jq --arg c "$1" '[.specs[] | select(.class == $c)] | length' <<<"$verdict"; }
passed=$(count passed) failed=$(count failed) skipped=$(count skipped) notrun=$(count notrun)
stale=$(jq '.stale | length' <<<"$verdict")

if [ "$passed" -gt 0 ]; then
  echo "e2e-node: passed:"
  jq -r '[.specs[] | select(.class == "passed") | .name] | sort | .[] | "      \(.)"' <<<"$verdict"
fi
if [ "$skipped" -gt 0 ]; then
  echo "e2e-node: skipped, by reason (${skips_file#"$top"/}):"
  jq -r '[.specs[] | select(.class == "skipped")] | group_by(.skip.reason)
    | sort_by(-length) | .[]
    | "  \(.[0].skip.reason) (\(length)):", (sort_by(.name) | .[] | "      \(.name)")' <<<"$verdict"
fi
if [ "$failed" -gt 0 ]; then
  echo "e2e-node: failed:"
  jq -r '.specs[] | select(.class == "failed")
    | (.message | split("\n")) as $m
    | "  \(.name)\n      \(.state) at \(.location): \($m[:6] | join("\n      "))"
      + (if ($m | length) > 6 then "\n      ..." else "" end)' <<<"$verdict"
  echo "--- the suite's output: $work/suite.log; kubelet's: $work/report/kubelet.log;" \
    "the runtime's: $rt_log ---"
fi
if [ "$stale" -gt 0 ]; then
  echo "e2e-node: skips.txt entries matching no selected spec (remove or fix them):"
  jq -r '.stale[] | "  \(.)"' <<<"$verdict"
fi
[ "$notrun" -eq 0 ] || echo "e2e-node: $notrun selected specs not run (outside the focus given)"
echo "e2e-node: $(count unselected) specs outside the selection ($focus without $unselected)"
echo "e2e-node: $runtime, ran in ${elapsed}s"
echo "e2e-node: $passed passed, $failed failed, $skipped skipped"
if [ "$failed" -gt 0 ] || [ "$stale" -gt 0 ] || [ "$passed" -eq 0 ]; then
  echo "e2e-node: FAILED"
  exit 1
fi
if [ "$rc" -ne 0 ]; then
  tail -40 "$work/suite.log"
  fail "the suite exited with $rc although every spec passed or was skipped (its output above)"
fi
echo "e2e-node: PASSED"
exit 0
}
