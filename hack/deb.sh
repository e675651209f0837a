#!/bin/bash
# Builds crust's Debian package, crust_<version>_amd64.deb, with plain dpkg-deb (no debhelper:
# the package is one binary, a unit, a conffile and three short maintainer scripts, all under
# packaging/): /usr/bin/crust, /lib/systemd/system/crust.service, /etc/crust/config.toml (the
# output of `crust config default`, a conffile), /etc/crust/config.d, the default CNI network in
# /usr/share/crust (postinst installs it only when /etc/cni/net.d has no configuration), a
# tmpfiles.d entry for /run/crust, /var/lib/crust, and the README. Depends on the shared
# libraries the binary links (read from its ELF header) and on the Debian packages crust runs:
# containernetworking-plugins and iptables.
#
# Usage: hack/deb.sh [--binary PATH] [--version VERSION] [--out DIR]
#   --binary   the crust binary to package (default target/release/crust; `make deb` builds it)
#   --version  the package version (default Cargo.toml's; a test builds a second, higher one)
#   --out      where the .deb goes (default target/deb)
# Prints the path of the package it wrote.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
binary=$top/target/release/crust
version=
out=$top/target/deb
while [ $# -gt 0 ]; do
  case $1 in
    --binary) binary=$2; shift 2 ;;
    --version) version=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "usage: $0 [--binary PATH] [--version VERSION] [--out DIR]" >&2; exit 2 ;;
  esac
done
fail() { echo "deb: $*" >&2; exit 1; }
[ -x "$binary" ] || fail "no crust binary at $binary (cargo build --release --bins)"
if [ -z "$version" ]; then
  version=$(awk -F'"' '/^version = / { print $2; exit }' "$top/Cargo.toml")
fi
[ -n "$version" ] || fail "no version in Cargo.toml"
for t in dpkg-deb readelf objdump sha256sum; do
  command -v "$t" >/dev/null || fail "$t is missing (dpkg, binutils)"
done

# The libraries the binary needs, as Debian package dependencies; one this script does not
# know fails the build rather than ship a package that cannot run.
shlibs() {
  local glibc lib deps=()
  glibc=$(objdump -T "$binary" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -n 1)
  for lib in $(readelf -d "$binary" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p'); do
    case $lib in
      libc.so.6|libm.so.6|libpthread.so.0|libdl.so.2|librt.so.1|ld-linux-x86-64.so.2)
        deps+=("libc6 (>= ${glibc:-2.36})") ;;
      libgcc_s.so.1) deps+=("libgcc-s1") ;;
      libseccomp.so.2) deps+=("libseccomp2 (>= 2.5)") ;;
      *) fail "the binary links $lib, which this script cannot map to a Debian package" ;;
    esac
  done
  printf '%s\n' "${deps[@]}" | sort -u | paste -sd, | sed 's/,/, /g'
}

stage=$(mktemp -d "${TMPDIR:-/tmp}/crust-deb.XXXXXX")
trap 'rm -rf -- "$stage"' EXIT
root=$stage/root
[ -n "$root" ] && [ "$root" != / ] || fail "bad staging directory"
install -d -m 0755 "$root/DEBIAN" "$root/usr/bin" "$root/lib/systemd/system" \
  "$root/etc/crust/config.d" "$root/usr/share/crust" "$root/usr/lib/tmpfiles.d" \
  "$root/usr/share/doc/crust"
install -d -m 0711 "$root/var/lib/crust"
# Stripped: the symbols stay in the build tree; a node needs the program.
objcopy --strip-debug "$binary" "$root/usr/bin/crust"
chmod 0755 "$root/usr/bin/crust"
install -m 0644 "$top/packaging/crust.service" "$root/lib/systemd/system/crust.service"
"$root/usr/bin/crust" config default >"$root/etc/crust/config.toml"
chmod 0644 "$root/etc/crust/config.toml"
install -m 0644 "$top/cni/10-crust.conflist" "$root/usr/share/crust/10-crust.conflist"
install -m 0644 "$top/packaging/crust.tmpfiles" "$root/usr/lib/tmpfiles.d/crust.conf"
install -m 0644 "$top/README.md" "$root/usr/share/doc/crust/README.md"
printf '%s\n' "crust: a Kubernetes container runtime (CRI v1)" "License: Apache-2.0" \
  >"$root/usr/share/doc/crust/copyright"
for s in postinst prerm postrm; do
  install -m 0755 "$top/packaging/debian/$s" "$root/DEBIAN/$s"
done
install -m 0644 "$top/packaging/debian/conffiles" "$root/DEBIAN/conffiles"
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
deps=$(shlibs)
sed -e "s/@VERSION@/$version/" -e "s/@INSTALLED_SIZE@/$size/" -e "s/@SHLIBS@/$deps/" \
  "$top/packaging/debian/control.in" >"$root/DEBIAN/control"
( cd "$root" && find . -type f ! -path './DEBIAN/*' -printf '%P\0' | sort -z |
    xargs -0 md5sum >DEBIAN/md5sums )
mkdir -p "$out"
deb=$out/crust_${version}_amd64.deb
# Owned by root whoever builds it; xz at a low level: a few seconds, not a minute.
dpkg-deb --root-owner-group -Zxz -z1 --build "$root" "$deb" >/dev/null
echo "$deb"
