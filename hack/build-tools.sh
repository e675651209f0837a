#!/bin/bash
# Builds the real clients and peers crust is tested and measured with, from Go modules pinned in
# this repo (go.mod + go.sum under hack/tools), into a cache keyed by version that later runs
# reuse:
#   cri-tools   crictl, critest                           hack/tools/go.mod
#   kubelet     kubelet                                   hack/tools/kubelet/go.mod
#   containerd  containerd, ctr, containerd-shim-runc-v2  hack/tools/containerd/go.mod
#   e2e-node    e2e_node.test, ginkgo, agnhost, kubelet     hack/tools/e2e-node/go.mod
#               (Kubernetes' node conformance suite; its kubelet beside it, as the suite's
#               services mode looks for it there)
#   cluster     kube-apiserver, kube-controller-manager,     hack/tools/cluster/go.mod
#               kube-scheduler, kube-proxy, kubelet, kubectl,
#               e2e.test, ginkgo, agnhost, etcd, sample-apiserver (the test
#               cluster of hack/cluster.sh and its
#               conformance suite)
#   coredns     coredns (the cluster's DNS addon, only the   hack/tools/coredns/go.mod
#               plugins its Corefile uses)
#   checkpointctl  checkpointctl (shows and inspects      hack/tools/checkpointctl/go.mod
#               checkpoint archives)
#   runsc       runsc (gVisor: a sandbox per pod, run     hack/tools/runsc/go.mod
#               as a crust handler)
# The binaries land in $CRUST_TOOLS_CACHE/<name>-<version>/ (default /var/cache/crust-tools).
# A directory is reused while it holds every binary and was built from the same go.mod and
# go.sum; otherwise it is built again (into a temporary directory, then renamed, under a lock,
# so an interrupted or concurrent build never leaves half a tool behind).
#
# Usage: hack/build-tools.sh NAME...        build (or reuse) and print where each one is
#        hack/build-tools.sh --dir NAME     print the directory NAME's binaries are in, only
# Fails, naming the tool and the reason, when Go is missing or a build fails: nothing is skipped.
set -euo pipefail
shopt -s inherit_errexit
top=$(cd "$(dirname "$0")/.." && pwd)
cache=${CRUST_TOOLS_CACHE:-/var/cache/crust-tools}

die() { echo "build-tools: $*" >&2; exit 1; }

# tool -> module directory, the module whose version names the cache, the binaries.
module_dir() {
  case $1 in
    cri-tools) echo "$top/hack/tools" ;;
    kubelet) echo "$top/hack/tools/kubelet" ;;
    containerd) echo "$top/hack/tools/containerd" ;;
    e2e-node) echo "$top/hack/tools/e2e-node" ;;
    cluster) echo "$top/hack/tools/cluster" ;;
    coredns) echo "$top/hack/tools/coredns" ;;
    checkpointctl) echo "$top/hack/tools/checkpointctl" ;;
    runsc) echo "$top/hack/tools/runsc" ;;
    *) die "unknown tool '$1' (cri-tools, kubelet, containerd, e2e-node, cluster, coredns, checkpointctl or runsc)" ;;
  esac
}
main_module() {
  case $1 in
    cri-tools) echo sigs.k8s.io/cri-tools ;;
    kubelet|e2e-node|cluster) echo k8s.io/kubernetes ;;
    coredns) echo github.com/coredns/coredns ;;
    checkpointctl) echo github.com/checkpoint-restore/checkpointctl ;;
    runsc) echo gvisor.dev/gvisor ;;
    containerd) echo github.com/containerd/containerd/v2 ;;
  esac
}
binaries() {
  case $1 in
    cri-tools) echo crictl critest ;;
    kubelet) echo kubelet ;;
    containerd) echo containerd ctr containerd-shim-runc-v2 ;;
    e2e-node) echo e2e_node.test ginkgo agnhost kubelet ;;
    cluster) echo kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubelet kubectl \
      etcd ginkgo agnhost sample-apiserver e2e.test ;;
    coredns) echo coredns ;;
    checkpointctl) echo checkpointctl ;;
    runsc) echo runsc ;;
  esac
}

# The version go.mod requires of the tool's main module (a `require` line or a block entry).
version_of() {
  local dir mod v
  dir=$(module_dir "$1")
  mod=$(main_module "$1")
  [ -f "$dir/go.mod" ] || die "$dir/go.mod is missing"
  v=$(awk -v m="$mod" '($1 == m) {print $2; exit} ($1 == "require" && $2 == m) {print $3; exit}' \
    "$dir/go.mod")
  [ -n "$v" ] || die "$dir/go.mod does not require $mod"
  echo "$v"
}
dir_of() { local v; v=$(version_of "$1"); echo "$cache/$1-$v"; }
stamp_of() { cat "$(module_dir "$1")/go.mod" "$(module_dir "$1")/go.sum" | sha256sum | cut -d' ' -f1; }

is_built() { # name dir
  local b
  [ -f "$2/.stamp" ] && [ "$(cat "$2/.stamp")" = "$(stamp_of "$1")" ] || return 1
  for b in $(binaries "$1"); do [ -x "$2/$b" ] || return 1; done
}

# kubelet (and the suite built with it) report the version they were built as, as Kubernetes' own
# release process stamps it.
k8s_ldflags() { # version
  local mm=${1#v} pkg=k8s.io/component-base/version minor
  minor=$(echo "$mm" | cut -d. -f2)
  echo "-X $pkg.gitVersion=$1 -X $pkg.gitMajor=${mm%%.*} -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
}

# Builds one tool's binaries into $2 (run inside the tool's module directory; it runs where
# errexit is off, so each step returns its failure).
build_into() { # name outdir version
  local out=$2 v=$3
  case $1 in
    cri-tools)
      local ld="-X sigs.k8s.io/cri-tools/pkg/version.Version=${v#v}"
      go build -trimpath -ldflags "$ld" -o "$out/crictl" sigs.k8s.io/cri-tools/cmd/crictl || return
      go test -c -trimpath -ldflags "$ld" -o "$out/critest" sigs.k8s.io/cri-tools/cmd/critest
      ;;
    kubelet)
      go build -trimpath -ldflags "$(k8s_ldflags "$v")" -o "$out/kubelet" k8s.io/kubernetes/cmd/kubelet
      ;;
    e2e-node)
      # The suite and its kubelet carry the same version stamp; ginkgo and agnhost as their own
      # builds make them (agnhost is made static, as its image's Dockerfile needs no libc).
      local ld
      ld=$(k8s_ldflags "$v")
      go test -c -trimpath -ldflags "$ld" -o "$out/e2e_node.test" k8s.io/kubernetes/test/e2e_node ||
        return
      go build -trimpath -ldflags "$ld" -o "$out/kubelet" k8s.io/kubernetes/cmd/kubelet || return
      go build -trimpath -o "$out/ginkgo" github.com/onsi/ginkgo/v2/ginkgo || return
      CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/agnhost" \
        k8s.io/kubernetes/test/images/agnhost
      ;;
    cluster)
      # Every Kubernetes binary carries the same version stamp (kubectl version, the nodes'
      # kubeletVersion and the suite's header show it); the suite last, as it takes longest.
      # etcd is the release its own go.mod names (its version is a constant of its api module);
      # agnhost and sample-apiserver static, as their images have no libc of their own.
      local ld cmd
      ld=$(k8s_ldflags "$v")
      for cmd in kubelet kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubectl; do
        go build -trimpath -ldflags "$ld" -o "$out/$cmd" "k8s.io/kubernetes/cmd/$cmd" || return
      done
      go build -trimpath -o "$out/etcd" go.etcd.io/etcd/server/v3 || return
      go build -trimpath -o "$out/ginkgo" github.com/onsi/ginkgo/v2/ginkgo || return
      CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/agnhost" \
        k8s.io/kubernetes/test/images/agnhost || return
      CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/sample-apiserver" \
        k8s.io/sample-apiserver || return
      go test -c -trimpath -ldflags "$ld" -o "$out/e2e.test" k8s.io/kubernetes/test/e2e
      ;;
    coredns)
      # Static, as the image that carries it has no libc.
      CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/coredns" .
      ;;
    checkpointctl)
      go build -trimpath -o "$out/checkpointctl" github.com/checkpoint-restore/checkpointctl
      ;;
    runsc)
      # Static, as gVisor's own build makes it (about 8 minutes here, cold).
      CGO_ENABLED=0 go build -trimpath -o "$out/runsc" gvisor.dev/gvisor/runsc
      ;;
    containerd)
      # As containerd's own Makefile builds them: no btrfs snapshotter (it needs btrfs headers),
      # and a static shim without cgo or the gRPC server.
      local mod=github.com/containerd/containerd/v2
      local ld="-X $mod/version.Version=$v"
      go build -trimpath -tags "urfave_cli_no_docs no_btrfs" -ldflags "$ld" \
        -o "$out/containerd" "$mod/cmd/containerd" || return
      go build -trimpath -tags "urfave_cli_no_docs no_btrfs" -ldflags "$ld" \
        -o "$out/ctr" "$mod/cmd/ctr" || return
      CGO_ENABLED=0 go build -trimpath -tags "urfave_cli_no_docs no_grpc" -ldflags "$ld" \
        -o "$out/containerd-shim-runc-v2" "$mod/cmd/containerd-shim-runc-v2"
      ;;
  esac
}

build() { # name
  local name=$1 dir v mdir tmp start b
  dir=$(dir_of "$name")
  v=$(version_of "$name")
  mdir=$(module_dir "$name")
  if is_built "$name" "$dir"; then
    echo "build-tools: $name $v: cached in $dir" >&2
    return 0
  fi
  command -v go >/dev/null || die "go is not installed (needed to build $name $v from $mdir)"
  mkdir -p "$cache"
  exec 9>"$cache/.lock-$name"
  flock 9
  if is_built "$name" "$dir"; then   # built by a concurrent run while we waited
    exec 9>&-
    echo "build-tools: $name $v: cached in $dir" >&2
    return 0
  fi
  echo "build-tools: building $name $v from $mdir ($(go version | awk '{print $3}')) into $dir" >&2
  start=$(date +%s)
  rm -rf "$cache/.build-$name".*   # left by an interrupted build (we hold the lock)
  tmp=$(mktemp -d "$cache/.build-$name.XXXXXX")
  if ! (cd "$mdir" && build_into "$name" "$tmp" "$v"); then
    rm -rf "$tmp"
    die "building $name $v failed (see the go output above)"
  fi
  for b in $(binaries "$name"); do
    [ -x "$tmp/$b" ] || { rm -rf "$tmp"; die "building $name $v produced no $b"; }
  done
  stamp_of "$name" > "$tmp/.stamp"
  chmod 755 "$tmp"
  rm -rf "$dir"
  mv "$tmp" "$dir"
  exec 9>&-
  echo "build-tools: $name $v built in $(( $(date +%s) - start ))s" >&2
}

usage="cri-tools|kubelet|containerd|e2e-node|cluster|coredns|checkpointctl|runsc"
[ $# -gt 0 ] || die "usage: $0 [--dir] $usage..."
if [ "$1" = --dir ]; then
  [ $# -eq 2 ] || die "usage: $0 --dir $usage"
  dir_of "$2"
  exit 0
fi
for t in "$@"; do build "$t"; done
for t in "$@"; do dir_of "$t"; done
