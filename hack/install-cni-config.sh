#!/bin/sh
# Installs crust's default CNI network config when the CNI conf dir has no configuration, so a
# fresh node can run pods. An existing configuration is never touched.
set -eu
conf_dir=${1:-/etc/cni/net.d}
src=$(dirname "$0")/../cni/10-crust.conflist
mkdir -p "$conf_dir"
if ls "$conf_dir"/*.conflist "$conf_dir"/*.conf "$conf_dir"/*.json >/dev/null 2>&1; then
  exit 0
fi
install -m 0644 "$src" "$conf_dir/10-crust.conflist"
echo "installed the default CNI config: $conf_dir/10-crust.conflist"
