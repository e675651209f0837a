#!/bin/bash
# Builds and serves, offline, a stand-in for every image the node conformance suite
# (hack/e2e-node.sh) pulls, under its upstream path on the registry that
# ../shared/tools/offline-registry.sh serves on 127.0.0.1:5000 (host dropped, path kept: a
# runtime mirrors each upstream host to it).
#
# - The plainer ones (nginx, nonewprivs, nonroot, ipc-utils, pause) are rows of
#   e2e-node-config/offline-images.txt, built by the registry script (OFFLINE_REGISTRY_EXTRA).
# - busybox is built here: the registry's busybox base with the shell layer below (a /bin/sh
#   that passes every environment variable on, nmeter); glibc-dns-testing is that with
#   Debian's hostname, whose -f asks glibc's resolver (/etc/hosts first).
# - agnhost is built here from its source in the pinned k8s.io/kubernetes module (the binary
#   comes from hack/build-tools.sh e2e-node), laid out as its Dockerfile has it: /agnhost as
#   the entrypoint (CMD pause), the /agnhost-2 link, /uploads, porter's localhost.crt and .key,
#   the user user-defined-in-image (uid 1000) in group-defined-in-image (gid 50000), on a
#   busybox base with the tools the suite runs inside it: sh, bash, Debian's curl and
#   netcat-openbsd's nc (with the libraries they link), ipcs.
#   The images built on agnhost (kitten, nautilus: CMD test-webserver, with the picture and
#   data.json their Dockerfiles copy; the previous agnhost, 2.55, which the cluster suite uses)
#   get a marker file each. agnhost's /etc/os-release says Alpine, its real base.
# Every layer is a reproducible tar (fixed mtimes, sorted, numeric owners, gzip -n), pushed with
# skopeo as a single-platform OCI index, like the registry script's own. A tag is pushed again
# only when what it is built from changed (a stamp per tag under $E2E_IMAGES_WORK).
#
# Usage: hack/e2e-node-images.sh [AGNHOST_BINARY]   (default: from hack/build-tools.sh e2e-node)
# Env: OFFLINE_REGISTRY (the registry script), E2E_IMAGES_WORK (default /var/lib/crust-e2e/images)
set -euo pipefail
shopt -s inherit_errexit
top=$(cd "$(dirname "$0")/.." && pwd)

fail() { echo "e2e-node-images: FAILED: $*" >&2; exit 1; }
log() { echo "e2e-node-images: $*" >&2; }

registry=${OFFLINE_REGISTRY:-$top/../shared/tools/offline-registry.sh}
[ -f "$registry" ] || fail "offline registry script not found at $registry (set OFFLINE_REGISTRY)"
for t in skopeo curl jq ldd apt-get dpkg tar gzip sha256sum dig nslookup getent; do
  command -v "$t" >/dev/null || fail "$t is missing (hack/install-deps.sh test installs it)"
done
addr=127.0.0.1:5000
work=${E2E_IMAGES_WORK:-/var/lib/crust-e2e/images}
mtime=1704067200
created=2024-01-01T00:00:00Z

# --- the registry and the rows it builds
OFFLINE_REGISTRY_EXTRA=$top/e2e-node-config/offline-images.txt bash "$registry" start ||
  fail "the offline registry did not start ($registry)"

# --- agnhost: its binary, and its version and files from the module it was built from
agnhost_bin=${1:-}
if [ -z "$agnhost_bin" ]; then
  agnhost_bin=$("$top/hack/build-tools.sh" e2e-node | tail -1)/agnhost ||
    fail "could not build agnhost (hack/build-tools.sh e2e-node)"
fi
[ -x "$agnhost_bin" ] || fail "agnhost not found at $agnhost_bin"
k8s_dir=$(cd "$top/hack/tools/e2e-node" && go list -m -f '{{.Dir}}' k8s.io/kubernetes) ||
  fail "the k8s.io/kubernetes module of hack/tools/e2e-node is not in the Go module cache"
manifest=$k8s_dir/test/utils/image/manifest.go
version_of() { # the tag test/utils/image/manifest.go gives the image constant $1
  sed -n "s/^\s*configs\[$1\] = Config{list\.[A-Za-z0-9]*, \"[^\"]*\", \"\([^\"]*\)\"}.*/\1/p" \
    "$manifest"
}
agnhost_version=$(version_of Agnhost)
[ -n "$agnhost_version" ] || fail "no Agnhost version in $manifest"

mkdir -p "$work/cache"
rm -rf "$work/build"
mkdir -p "$work/build"
L=$work/build/layers OCI=$work/build/oci
mkdir -p "$L" "$OCI/blobs/sha256"
echo '{"imageLayoutVersion":"1.0.0"}' > "$OCI/oci-layout"

# --- layer directories
deb() { # package: extracts Debian's .deb (downloaded once into the cache) and prints where
  local p=$1
  if ! ls "$work/cache/${p}_"*.deb >/dev/null 2>&1; then
    (cd "$work/cache" && apt-get download "$p" >/dev/null 2>&1) || fail "apt-get download $p"
  fi
  rm -rf "$work/build/deb-$p"
  dpkg -x "$(ls "$work/cache/${p}_"*.deb | tail -1)" "$work/build/deb-$p"
  echo "$work/build/deb-$p"
}
copy_with_libs() { # binary dest-root dest-path: the binary and every library it links
  local bin=$1 root=$2 dest=$3 lib
  install -D -m 755 "$bin" "$root$dest"
  for lib in $(ldd "$bin" | awk '/=> \// {print $3} /^[ \t]*\// {print $1}'); do
    # (a library the base layer already has is not copied again)
    [ -e "$root$lib" ] || [ -e "$L/base$lib" ] || install -D -m 755 "$(readlink -f "$lib")" "$root$lib"
  done
}

make_base() { # busybox (Debian's dynamic build) and glibc, passwd and group, ipcs
  local B=$L/base bb app
  bb=$(deb busybox)/bin/busybox
  mkdir -p "$B"/{bin,dev,etc,home,proc,root,sys,tmp,usr/bin,usr/sbin,usr/local/bin,var/run}
  chmod 1777 "$B/tmp"
  chmod 700 "$B/root"
  copy_with_libs "$bb" "$B" /bin/busybox
  for app in $("$bb" --list); do
    [ "$app" = busybox ] || [ -e "$B/bin/$app" ] || ln "$B/bin/busybox" "$B/bin/$app"
  done
  # busybox's own image's users and groups
  cat > "$B/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
daemon:x:1:1:daemon:/usr/sbin:/bin/false
bin:x:2:2:bin:/bin:/bin/false
sys:x:3:3:sys:/dev:/bin/false
sync:x:4:100:sync:/bin:/bin/sync
mail:x:8:8:mail:/var/spool/mail:/bin/false
www-data:x:33:33:www-data:/var/www:/bin/false
operator:x:37:37:Operator:/var:/bin/false
nobody:x:65534:65534:nobody:/home:/bin/false
EOF
  cat > "$B/etc/group" <<'EOF'
root:x:0:
daemon:x:1:
bin:x:2:
sys:x:3:
adm:x:4:
tty:x:5:
disk:x:6:
wheel:x:10:root
mail:x:8:
www-data:x:33:
operator:x:37:
users:x:100:
nogroup:x:65534:
EOF
  cat > "$B/bin/ipcs" <<'EOF'
#!/bin/sh
# minimal ipcs stand-in reading /proc/sysvipc (-m: shared memory segments)
printf '\n------ Shared Memory Segments --------\nkey        shmid      owner      perms      bytes      nattch     status\n'
awk 'NR>1 {printf "0x%08x %-10s %-10s %-10s %-10s %-10s\n",$1,$2,$8,$3,$4,$7}' /proc/sysvipc/shm
EOF
  chmod 755 "$B/bin/ipcs"
}

# The shell of the busybox stand-ins, and what Debian's busybox lacks that the suite runs:
# - sh: Debian's busybox ash drops environment variables whose names are no shell identifier
#   (data-1=value-1, from a ConfigMap or Secret through envFrom) before it runs a command, where
#   the upstream images' shells pass them on (the specs run `sh -c env`). /bin/sh is a small
#   program that runs busybox's ash (so its messages are ash's, which a spec compares), or, when
#   the environment holds such a name, bash as sh, which passes it on.
# - nmeter, of which the sidecar lifecycle specs use `nmeter -d0 '%3t'` for a timestamp in
#   milliseconds: a stand-in printing the time of day as HH:MM:SS.mmm, one line per -dN ms.
make_shell() {
  local S=$L/shell
  copy_with_libs /bin/bash "$S" /usr/libexec/stand-in/bash
  mkdir -p "$work/build/src"
  cat > "$work/build/src/sh.c" <<'EOF2'
/* /bin/sh: busybox ash, or bash (as sh) when the environment has a name ash would drop. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>
extern char **environ;
static int identifier(const char *e) {
  const char *p = e;
  if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || *p == '_')) return 0;
  for (p++; *p && *p != '='; p++)
    if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_')) return 0;
  return 1;
}
int main(int argc, char **argv) {
  const char *shell = "/bin/busybox";
  (void)argc;
  for (char **e = environ; *e; e++)
    if (strchr(*e, '=') && !identifier(*e)) { shell = "/usr/libexec/stand-in/bash"; break; }
  execv(shell, argv); /* argv[0] as given: busybox picks its applet and ash its name by it */
  perror(shell);
  return 127;
}
EOF2
  cat > "$work/build/src/nmeter.c" <<'EOF2'
/* nmeter stand-in: `nmeter [-dMSEC] FORMAT`, FORMAT's %[N]t the time of day with N decimals. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
int main(int argc, char **argv) {
  long delay = 1000; const char *fmt = "%t";
  for (int i = 1; i < argc; i++) {
    if (strncmp(argv[i], "-d", 2) == 0) delay = atol(argv[i][2] ? argv[i] + 2 : (i + 1 < argc ? argv[++i] : "1000"));
    else fmt = argv[i];
  }
  for (;;) {
    struct timeval tv; gettimeofday(&tv, NULL);
    struct tm tm; localtime_r(&tv.tv_sec, &tm);
    for (const char *p = fmt; *p; p++) {
      if (*p == '%' && p[1] >= '0' && p[1] <= '9' && p[2] == 't') {
        int n = p[1] - '0'; long frac = tv.tv_usec;
        for (int k = n; k < 6; k++) frac /= 10;
        printf("%02d:%02d:%02d", tm.tm_hour, tm.tm_min, tm.tm_sec);
        if (n > 0) printf(".%0*ld", n > 6 ? 6 : n, frac);
        p += 2;
      } else if (*p == '%' && p[1] == 't') {
        printf("%02d:%02d:%02d", tm.tm_hour, tm.tm_min, tm.tm_sec); p++;
      } else putchar(*p);
    }
    putchar('\n');
    if (fflush(stdout) != 0) return 0;
    if (delay > 0) usleep(delay * 1000);
  }
}
EOF2
  mkdir -p "$S/bin"
  gcc -static -O2 -s -Wall -o "$S/bin/nmeter" "$work/build/src/nmeter.c" || fail "building nmeter"
  gcc -static -O2 -s -Wall -o "$S/bin/sh" "$work/build/src/sh.c" || fail "building sh"
}

make_tools() { # curl, nc, bash and the DNS tools, as agnhost's image installs them
  local T=$L/tools nc
  copy_with_libs "$(command -v curl)" "$T" /usr/bin/curl
  copy_with_libs /bin/bash "$T" /bin/bash
  nc=$(deb netcat-openbsd)/bin/nc.openbsd
  copy_with_libs "$nc" "$T" /usr/bin/nc
  dns_tools "$T"
}

# dig and nslookup (bind-tools in agnhost's Alpine, dnsutils in glibc-dns-testing's Debian) and
# glibc's getent: the cluster suite's DNS specs query every record with `dig +search` and the
# pod's /etc/hosts with `getent hosts`. In /usr/bin, ahead of busybox's nslookup (/bin) on PATH.
dns_tools() { # layer root
  copy_with_libs "$(command -v dig)" "$1" /usr/bin/dig
  copy_with_libs "$(command -v nslookup)" "$1" /usr/bin/nslookup
  copy_with_libs "$(command -v getent)" "$1" /usr/bin/getent
  mkdir -p "$1/etc"
  printf 'passwd: files\ngroup: files\nhosts: files dns\n' > "$1/etc/nsswitch.conf"
}

make_glibc_dns() { # glibc-dns-testing: Debian's hostname (hostname -f through glibc's resolver)
  local G=$L/glibc-dns
  copy_with_libs "$(command -v hostname)" "$G" /bin/hostname
  dns_tools "$G"
}

make_agnhost() {
  local A=$L/agnhost
  mkdir -p "$A/uploads" "$A/etc" "$A/home/user-defined-in-image"
  # adduser -u 1000 user-defined-in-image; addgroup -g 50000 group-defined-in-image; and the
  # one in the other
  cp "$L/base/etc/passwd" "$L/base/etc/group" "$A/etc/"
  echo 'user-defined-in-image:x:1000:1000:Linux User,,,:/home/user-defined-in-image:/bin/sh' \
    >> "$A/etc/passwd"
  printf 'user-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n' \
    >> "$A/etc/group"
  chown 1000:1000 "$A/home/user-defined-in-image"
  install -m 755 "$agnhost_bin" "$A/agnhost"
  ln -s agnhost "$A/agnhost-2"
  install -m 644 "$k8s_dir/test/images/agnhost/porter/localhost.crt" "$A/localhost.crt"
  install -m 600 "$k8s_dir/test/images/agnhost/porter/localhost.key" "$A/localhost.key"
  # agnhost's image is built on Alpine (its BASEIMAGE), and the ImageVolume spec reads the
  # os-release of the kitten image built on it.
  printf 'NAME="Alpine Linux"\nID=alpine\nVERSION_ID=3.21\nPRETTY_NAME="Alpine Linux v3.21 (stand-in: Debian busybox and libraries)"\n' \
    > "$A/etc/os-release"
}

make_web_images() { # kitten, nautilus: the picture and data.json their Dockerfiles copy to /
  local n
  for n in kitten nautilus; do
    mkdir -p "$L/f-$n"
    : > "$L/f-$n/$n"
    install -m 644 "$k8s_dir/test/images/$n/html/$n.jpg" "$k8s_dir/test/images/$n/html/data.json" \
      "$L/f-$n/"
  done
}

# --- OCI layout
put_blob() { # file -> moves it into the layout, prints "sha256:<hex> <size>"
  local h s
  h=$(sha256sum "$1" | cut -d' ' -f1)
  s=$(stat -c %s "$1")
  mv -f "$1" "$OCI/blobs/sha256/$h"
  echo "sha256:$h $s"
}
declare -A LDIGEST LSIZE LDIFF
layer_blob() { # layer directory name -> LDIGEST, LSIZE, LDIFF
  local n=$1 d=$L/$1 t=$work/build/tmp.tar
  [ -n "${LDIGEST[$n]:-}" ] && return 0
  [ -d "$d" ] || { mkdir -p "$d"; : > "$d/${n#f-}"; }   # f-<name>: one marker file
  find "$d" -mindepth 1 -exec touch -h -d "@$mtime" {} +
  (cd "$d" && tar --sort=name --mtime="@$mtime" --numeric-owner --format=gnu -cf "$t" \
    $(ls -A | sort))
  LDIFF[$n]=sha256:$(sha256sum "$t" | cut -d' ' -f1)
  gzip -n -9 -c "$t" > "$t.gz"
  rm -f "$t"
  read -r LDIGEST[$n] LSIZE[$n] < <(put_blob "$t.gz")
}
json_blob() { printf '%s' "$1" > "$work/build/tmp.json"; put_blob "$work/build/tmp.json"; }

# image ref layers entrypoint-json cmd-json [exposed-ports-json]: builds it into the layout and
# pushes it (if changed)
image() {
  local ref=$1 layers=$2 ep=$3 cmd=$4 ports=${5:-"{}"} l diffs=() lyrs=() cfg cd cs md ms xd xs
  for l in $layers; do
    layer_blob "$l"
    diffs+=("\"${LDIFF[$l]}\"")
    lyrs+=("{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar+gzip\",\"digest\":\"${LDIGEST[$l]}\",\"size\":${LSIZE[$l]}}")
  done
  cfg=$(jq -cn --arg c "$created" --argjson ep "$ep" --argjson cmd "$cmd" --argjson ports "$ports" \
    --argjson diffs "[$(IFS=,; echo "${diffs[*]}")]" '{created: $c, architecture: "amd64",
    os: "linux", config: {Env: ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
    Entrypoint: $ep, Cmd: $cmd, WorkingDir: "/", ExposedPorts: $ports},
    rootfs: {type: "layers", diff_ids: $diffs}}')
  read -r cd cs < <(json_blob "$cfg")
  read -r md ms < <(json_blob "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"config\":{\"mediaType\":\"application/vnd.oci.image.config.v1+json\",\"digest\":\"$cd\",\"size\":$cs},\"layers\":[$(IFS=,; echo "${lyrs[*]}")]}")
  read -r xd xs < <(json_blob "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.index.v1+json\",\"manifests\":[{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"digest\":\"$md\",\"size\":$ms,\"platform\":{\"architecture\":\"amd64\",\"os\":\"linux\"}}]}")
  local stamp=$work/stamps/${ref//[\/:]/_}
  mkdir -p "$work/stamps"
  if [ "$(cat "$stamp" 2>/dev/null)" = "$xd" ] &&
    curl -fsS -o /dev/null -I --max-time 5 -H 'Accept: application/vnd.oci.image.index.v1+json' \
      "http://$addr/v2/${ref%:*}/manifests/${ref##*:}" 2>/dev/null; then
    log "$ref: present ($xd)"
    return 0
  fi
  jq -n --arg d "$xd" --argjson s "$xs" \
    '{schemaVersion: 2, manifests: [{mediaType: "application/vnd.oci.image.index.v1+json",
      digest: $d, size: $s, annotations: {"org.opencontainers.image.ref.name": "img"}}]}' \
    > "$OCI/index.json"
  skopeo copy -q --all --preserve-digests --dest-tls-verify=false \
    "oci:$OCI:img" "docker://$addr/$ref" >/dev/null || fail "pushing $ref"
  echo "$xd" > "$stamp"
  log "$ref: pushed ($xd)"
}

make_base
make_shell
make_tools
make_glibc_dns
make_agnhost
make_web_images
busybox_version=$(version_of BusyBox)
[ -n "$busybox_version" ] || fail "no BusyBox version in $manifest"
image "e2e-test-images/busybox:$busybox_version" "base shell" null '["sh"]'
glibc_dns_version=$(version_of GlibcDnsTesting)
[ -n "$glibc_dns_version" ] || fail "no GlibcDnsTesting version in $manifest"
image "e2e-test-images/glibc-dns-testing:$glibc_dns_version" "base shell glibc-dns" null '["sh"]'
# The ports agnhost's Dockerfile exposes.
agnhost_ports='{"80/tcp": {}, "8080/tcp": {}, "8081/tcp": {}, "9376/tcp": {}, "5000/tcp": {}}'
image "e2e-test-images/agnhost:$agnhost_version" "base shell tools agnhost" '["/agnhost"]' \
  '["pause"]' "$agnhost_ports"
# The previous agnhost, which the cluster suite's specs switch a workload to or from
# (deployments, StatefulSets, kubectl diff): the same binary, and a marker file of its own so
# that it is another image.
agnhost_prev_version=$(version_of AgnhostPrev)
[ -n "$agnhost_prev_version" ] || fail "no AgnhostPrev version in $manifest"
image "e2e-test-images/agnhost:$agnhost_prev_version" "base shell tools agnhost f-agnhost-prev" \
  '["/agnhost"]' '["pause"]' "$agnhost_ports"
for i in Kitten Nautilus; do
  v=$(version_of "$i")
  [ -n "$v" ] || fail "no $i version in $manifest"
  n=$(echo "$i" | tr 'A-Z' 'a-z')
  image "e2e-test-images/$n:$v" "base shell tools agnhost f-$n" '["/agnhost"]' \
    '["test-webserver"]' "$agnhost_ports"
done
rm -rf "$work/build"
log "ready on $addr"
