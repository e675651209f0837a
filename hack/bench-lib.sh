# shellcheck shell=bash
# Sourced by hack/bench.sh and hack/bench-kubelet.sh: what both runtimes are given alike.
#
# bench_network DIR BRIDGE SUBNET writes DIR/10-bench.conflist: bridge + host-local + portmap,
#   no per-pod masquerade.
# bench_images W builds, as docker archives, static busybox as $BENCH_IMAGE into W/busybox.tar
#   and a static pause (exits on SIGTERM) as crust.bench/pause:1 into W/pause.tar, the
#   sandbox image containerd needs.

BENCH_IMAGE=crust.bench/busybox:1

bench_network() {
  mkdir -p "$1"
  cat > "$1/10-bench.conflist" <<JSON
{"cniVersion":"1.0.0","name":"crust-bench","plugins":[
 {"type":"bridge","bridge":"$2","isGateway":true,"ipMasq":false,"hairpinMode":true,
  "ipam":{"type":"host-local","dataDir":"$1/../ipam","ranges":[[{"subnet":"$3"}]],
          "routes":[{"dst":"0.0.0.0/0"}]}},
 {"type":"portmap","capabilities":{"portMappings":true}}]}
JSON
}

# docker_archive DIR TAG [ENTRYPOINT]: archives DIR/rootfs as image TAG into DIR.tar.
docker_archive() {
  local d=$1 tag=$2 entry=${3:-} diff config
  tar -C "$d/rootfs" -cf "$d/layer.tar" .
  diff=$(sha256sum "$d/layer.tar" | cut -d' ' -f1)
  config='"Env":["PATH=/bin"],"Cmd":["sh"]'
  [ -z "$entry" ] || config="\"Entrypoint\":[\"$entry\"]"
  printf '{"architecture":"amd64","os":"linux","config":{%s},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' "$config" "$diff" > "$d/config.json"
  printf '[{"Config":"config.json","RepoTags":["%s"],"Layers":["layer.tar"]}]' "$tag" > "$d/manifest.json"
  tar -C "$d" -cf "$d.tar" manifest.json config.json layer.tar
}

bench_images() {
  local w=$1 a
  mkdir -p "$w/busybox/rootfs/bin" "$w/busybox/rootfs/tmp" "$w/pause/rootfs"
  cp /bin/busybox "$w/busybox/rootfs/bin/"
  for a in sh sleep true; do ln -s busybox "$w/busybox/rootfs/bin/$a"; done
  docker_archive "$w/busybox" "$BENCH_IMAGE"
  printf '#include <signal.h>\n#include <unistd.h>\nstatic void down(int s){(void)s;_exit(0);}\nint main(void){signal(SIGTERM,down);signal(SIGINT,down);for(;;)pause();}\n' > "$w/pause/pause.c"
  gcc -static -O2 -s -o "$w/pause/rootfs/pause" "$w/pause/pause.c"
  docker_archive "$w/pause" crust.bench/pause:1 /pause
}
