#!/bin/sh
# Installs the Debian packages crust needs, for one purpose: run | test | bench.
# Idempotent and quiet when everything is present. Must run as root (apt).
set -eu
purpose=${1:-run}

# What `crust serve` needs: CNI plugins for the default network, iptables for the bridge
# plugin's masquerading and the portmap plugin.
pkgs="containernetworking-plugins iptables"
case $purpose in
  run) ;;
  # Sandbox tests: ping, nsenter (util-linux), jq for the fixture CNI plugins. Image tests: a real
  # registry (docker-registry), htpasswd for its basic auth (apache2-utils), openssl for the
  # token server's key; critest's offline registry: skopeo; the differential unpack test
  # (tests/unpack_differential.rs) pulls the same images into containerd: containerd, runc.
  test) pkgs="$pkgs docker-registry busybox-static iproute2 iputils-ping jq util-linux apache2-utils openssl skopeo containerd runc" ;;
  # Benchmarks compare with containerd (and build its pause image with gcc).
  bench) pkgs="$pkgs docker-registry busybox-static containerd runc gcc libc6-dev" ;;
  *) echo "usage: $0 run|test|bench" >&2; exit 2 ;;
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

# Rust toolchain: the machine's own (rustup); nothing to install here, but say so if absent.
command -v cargo >/dev/null || { echo "cargo not found: install Rust with rustup" >&2; exit 1; }
