#!/bin/sh
# Port-forward throughput: 100 MiB into a pod through crictl 1.37's port-forward over SPDY
# and over WebSocket (crust's stream server in between), against a plain loopback copy inside
# the pod. As root; release build. This mostly measures crictl's own client: crust's data path
# is measured by PORTFORWARD_ONLY=1 hack/bench.sh (crust's SPDY client, against containerd).
set -eu
cd "$(dirname "$0")/.."
cargo test --release --test stream_portforward -- --ignored --nocapture \
  port_forward_throughput_100mib 2>&1 | grep -E 'MiB/s|test result|panicked'
