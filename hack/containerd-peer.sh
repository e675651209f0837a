# shellcheck shell=bash disable=SC2034  # the CTRD_* variables are for the scripts sourcing this
# Sourced by hack/bench.sh and hack/bench-images.sh: the containerd crust is measured against.
#
# ctrd_pick sets CTRD_DIR (containerd, ctr and containerd-shim-runc-v2 in one directory),
# CTRD_VERSION, CTRD_CONFIG_VERSION and CTRD_DESC (which one, for the report): containerd 2.x
# built from its Go module by hack/build-tools.sh (pinned in hack/tools/containerd/go.mod,
# cached), or, only when that build fails, Debian's containerd 1.6. runc is Debian's either way.
#
# ctrd_config FILE ROOT STATE SOCKET [cni_conf_dir=DIR] [sandbox_image=REF]
#   [registry_config_path=DIR] writes a configuration in the format of the chosen version
#   (version 3 with the io.containerd.cri.v1.runtime / images sections for 2.x, version 2 with
#   io.containerd.grpc.v1.cri for 1.6).
#
# ctrd_start CONFIG LOG starts the daemon in the background (CTRD_PID), with CTRD_DIR first on
# its PATH, so it runs the shim of its own version rather than another one installed.

ctrd_pick() {
  local top dir how
  top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  if dir=$("$top/hack/build-tools.sh" containerd); then
    CTRD_DIR=$dir
    how="built from its Go module"
  else
    echo "containerd: building it from hack/tools/containerd failed (above);" \
      "falling back to Debian's containerd" >&2
    if ! command -v containerd >/dev/null; then
      echo "containerd: not built and not installed (hack/install-deps.sh bench installs it)" >&2
      return 1
    fi
    CTRD_DIR=$(dirname "$(command -v containerd)")
    how="Debian's, as the build from its Go module failed"
  fi
  CTRD_VERSION=$("$CTRD_DIR/containerd" --version | awk '{print $3}')
  case $CTRD_VERSION in
    v1.*|1.*) CTRD_CONFIG_VERSION=2 ;;
    *) CTRD_CONFIG_VERSION=3 ;;
  esac
  command -v runc >/dev/null || { echo "containerd: runc is missing (hack/install-deps.sh bench)" >&2; return 1; }
  CTRD_DESC="$CTRD_VERSION ($how: $CTRD_DIR; runc $(runc --version | awk 'NR==1 {print $3}'))"
}

ctrd_config() {
  local file=$1 root=$2 state=$3 sock=$4 cni="" pause="" certs="" kv
  shift 4
  for kv in "$@"; do
    case $kv in
      cni_conf_dir=*) cni=${kv#*=} ;;
      sandbox_image=*) pause=${kv#*=} ;;
      registry_config_path=*) certs=${kv#*=} ;;
      *) echo "ctrd_config: unknown setting $kv" >&2; return 1 ;;
    esac
  done
  # This VM lacks CAP_SYS_RESOURCE: the pause container's negative oom_score_adj must be clamped
  # to containerd's own, or runc fails to start it.
  if [ "$CTRD_CONFIG_VERSION" = 3 ]; then
    local rt='plugins."io.containerd.cri.v1.runtime"' im='plugins."io.containerd.cri.v1.images"'
    {
      echo "version = 3"
      echo "root = \"$root\""
      echo "state = \"$state\""
      # NRI would serve /var/run/nri/nri.sock, shared by every containerd on the machine.
      echo 'disabled_plugins = ["io.containerd.nri.v1.nri"]'
      echo "[grpc]"
      echo "  address = \"$sock\""
      echo '[plugins."io.containerd.internal.v1.opt"]'
      echo "  path = \"$root/opt\""
      echo "[$rt]"
      echo "  restrict_oom_score_adj = true"
      if [ -n "$cni" ]; then
        echo "[$rt.cni]"
        echo '  bin_dirs = ["/usr/lib/cni"]'
        echo "  conf_dir = \"$cni\""
      fi
      if [ -n "$pause" ]; then
        echo "[$im.pinned_images]"
        echo "  sandbox = \"$pause\""
      fi
      if [ -n "$certs" ]; then
        echo "[$im.registry]"
        echo "  config_path = \"$certs\""
      fi
    } > "$file"
  else
    local cri='plugins."io.containerd.grpc.v1.cri"'
    {
      echo "version = 2"
      echo "root = \"$root\""
      echo "state = \"$state\""
      echo "[grpc]"
      echo "  address = \"$sock\""
      echo "[$cri]"
      echo "  restrict_oom_score_adj = true"
      [ -z "$pause" ] || echo "  sandbox_image = \"$pause\""
      if [ -n "$cni" ]; then
        echo "[$cri.cni]"
        echo '  bin_dir = "/usr/lib/cni"'
        echo "  conf_dir = \"$cni\""
      fi
      if [ -n "$certs" ]; then
        echo "[$cri.registry]"
        echo "  config_path = \"$certs\""
      fi
    } > "$file"
  fi
}

ctrd_start() {
  PATH="$CTRD_DIR:$PATH" "$CTRD_DIR/containerd" --config "$1" >"$2" 2>&1 &
  CTRD_PID=$!
}
