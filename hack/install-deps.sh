#!/bin/sh
# Installs the Debian packages crust needs, for one purpose: build | run | test | bench.
# Idempotent and quiet when everything is present. Must run as root (apt).
set -eu
purpose=${1:-run}

# What building crust needs (it links libseccomp, found through pkg-config; binutils is the
# linker's, and hack/deb.sh reads and strips the binary with it).
pkgs="libseccomp-dev pkg-config binutils"
# What `crust serve` needs: CNI plugins for the default network, iptables for the bridge
# plugin's masquerading and the portmap plugin.
serve="containernetworking-plugins iptables"
# The shared libraries of the CRIU that hack/install-criu.sh unpacks from Debian testing
# (checkpoint and restore) whose sonames bookworm has (it brings libc, libnet and libnl itself).
criu="libnftables1 libprotobuf-c1 libbsd0 libgnutls30 libuuid1"
case $purpose in
  build) ;;
  run) pkgs="$pkgs $serve" ;;
  # Sandbox tests: ping, nsenter (util-linux), jq for the fixture CNI plugins. Image tests: a real
  # registry (docker-registry), htpasswd for its basic auth (apache2-utils), openssl for the
  # token server's key; the differential unpack test (tests/unpack_differential.rs) pulls the
  # same images into Debian's containerd 1.6: containerd, runc. critest's offline registry:
  # skopeo, curl, gcc and libc6-dev (its static stand-ins); hack/critest.sh reads critest's
  # report with jq; flock (util-linux) guards the tool cache. The fuzz targets (hack/fuzz.sh) build
  # libFuzzer: g++. RuntimeClass handlers run by an OCI runtime binary
  # (tests/runtime_handlers.rs): crun and runc. The e2e suites' stand-in images carry dig and
  # nslookup, as the upstream agnhost and glibc-dns-testing do (the DNS specs query with them):
  # bind9-dnsutils, whose binaries and libraries hack/e2e-node-images.sh copies. Checkpoint and
  # restore (tests/checkpoint.rs): CRIU's libraries.
  test) pkgs="$pkgs $serve $criu docker-registry busybox-static iproute2 iputils-ping jq util-linux apache2-utils openssl skopeo curl gcc libc6-dev procps containerd runc crun g++ bind9-dnsutils" ;;
  # Benchmarks compare with containerd: built from its Go module (hack/build-tools.sh), with
  # Debian's containerd as the fallback, runc from Debian either way; gcc builds the pause image;
  # the kubelet benchmark reads kubelet's /pods with jq; the image benchmark's second containerd
  # inflates layers through pigz's unpigz, as containerd does when it finds it.
  bench) pkgs="$pkgs $serve $criu docker-registry busybox-static containerd runc crun gcc libc6-dev curl python3 util-linux procps jq pigz" ;;
  *) echo "usage: $0 build|run|test|bench" >&2; exit 2 ;;
esac

missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "installing:$missing"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq || true
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

# Toolchains: the machine's own; nothing to install here, but say so if one is absent.
command -v cargo >/dev/null || { echo "cargo not found: install Rust with rustup" >&2; exit 1; }
case $purpose in
  test|bench)
    # crictl, critest (and containerd for bench) are built from their Go modules.
    command -v go >/dev/null || { echo "go not found: install Go (1.26 or newer) to build crictl, critest and containerd" >&2; exit 1; }
    ;;
esac
