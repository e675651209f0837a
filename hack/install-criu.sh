#!/bin/bash
# Provides CRIU >= 4.2 for checkpoint/restore (docs/checkpoint.md) and prints the path of a
# `criu` that runs on this machine.
#
# A `criu` on PATH that reports 4.2 or later is used as it is. Otherwise Debian testing's criu
# package is downloaded with apt into a scratch apt state of its own (the system's sources, lists
# and packages are not touched), unpacked with dpkg-deb beside that release's libc (and the two
# libraries whose sonames bookworm lacks), and run through that libc's loader by a wrapper:
#   $CRUST_TOOLS_CACHE/criu-<version>/criu
# Why 4.2: Debian 12's 3.17.1 fails on kernels 6.13 and later ("vdso: Unexpected rt vDSO area
# bounds", fixed in 4.1), and 4.1 cannot dump a TCP socket on kernels 6.16 and later ("Can't get
# 1:34 opt: Operation not supported": SO_PASSSEC became unix-only; fixed in 4.2).
# The mirror is the one the system's own apt sources name; nothing is installed system-wide.
# The directory is made in a temporary directory and renamed, under a lock, so an interrupted
# or concurrent run never leaves half of it. Fails, saying why, when no CRIU can be had.
set -euo pipefail
shopt -s inherit_errexit
cache=${CRUST_TOOLS_CACHE:-/var/cache/crust-tools}
suite=forky
version=4.2.1-1
dir=$cache/criu-$version
pkgs="criu=$version libc6 libnet9 libnl-3-200"

die() { echo "install-criu: $*" >&2; exit 1; }

# CRIU's version as a number (4.2.1 -> 40201), as crust compares it.
numeric_version() { # criu
  "$1" --version 2>/dev/null | awk '/^Version:/ {split($2, v, "."); print v[1]*10000 + v[2]*100 + v[3]}'
}

if system=$(command -v criu) && [ "$(numeric_version "$system")" -ge 40200 ] 2>/dev/null; then
  echo "$system"
  exit 0
fi
if [ -x "$dir/criu" ] && [ "$(numeric_version "$dir/criu")" -ge 40200 ] 2>/dev/null; then
  echo "$dir/criu"
  exit 0
fi

# The first URI of the system's Debian sources (deb822 or one-line format).
mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
[ -n "$mirror" ] || mirror=$(awk '$1 == "deb" {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
[ -n "$mirror" ] || die "no Debian mirror in /etc/apt/sources.list.d/*.sources or /etc/apt/sources.list"

mkdir -p "$cache"
exec 9>"$cache/.lock-criu"
flock 9
if [ "$(numeric_version "$dir/criu")" -ge 40200 ] 2>/dev/null; then echo "$dir/criu"; exit 0; fi
rm -rf "$cache/.build-criu".*
tmp=$(mktemp -d "$cache/.build-criu.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
apt_state=$tmp/apt
mkdir -p "$apt_state/lists/partial" "$apt_state/archives/partial" "$apt_state/parts" "$tmp/debs"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror $suite main" \
  > "$apt_state/sources.list"
apt_opts=(-o "Dir::Etc::sourcelist=$apt_state/sources.list" -o "Dir::Etc::sourceparts=$apt_state/parts"
  -o "Dir::State::Lists=$apt_state/lists" -o "Dir::Cache=$apt_state" -o "Debug::NoLocking=1"
  -o "APT::Get::List-Cleanup=0" -o "APT::Sandbox::User=root")
apt-get "${apt_opts[@]}" -qq update >&2 || die "apt-get update of Debian $suite from $mirror failed"
# shellcheck disable=SC2086
(cd "$tmp/debs" && apt-get "${apt_opts[@]}" -qq download $pkgs >&2) ||
  die "apt-get download $pkgs from Debian $suite failed (has $suite moved past criu $version? set version)"
for deb in "$tmp"/debs/*.deb; do dpkg-deb -x "$deb" "$tmp/root"; done
loader=$(find "$tmp/root" -name 'ld-linux-x86-64.so.2' | head -1)
[ -n "$loader" ] || die "Debian $suite's libc6 holds no ld-linux-x86-64.so.2"
[ -x "$tmp/root/usr/sbin/criu" ] || die "Debian $suite's criu package holds no usr/sbin/criu"
mkdir -p "$tmp/out"
mv "$tmp/root" "$tmp/out/root"
loader=${loader#"$tmp/root/"}
libdir=$(dirname "$loader")
# The loader is Debian $suite's; its libraries come first, the system's (gnutls, nftables,
# protobuf-c, ...) after them, as their sonames match.
cat > "$tmp/out/criu" <<EOF
#!/bin/sh
# CRIU $version from Debian $suite, run through that release's libc (written by hack/install-criu.sh).
here=\$(dirname "\$(readlink -f "\$0")")/root
exec "\$here/$loader" --library-path "\$here/$libdir:\$here/usr/lib/x86_64-linux-gnu:/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu" "\$here/usr/sbin/criu" "\$@"
EOF
chmod 755 "$tmp/out/criu" "$tmp/out"
"$tmp/out/criu" check >&2 || die "CRIU $version: criu check failed on this kernel ($(uname -r))"
rm -rf "$dir"
mv "$tmp/out" "$dir"
echo "$dir/criu"
