#!/bin/sh
# Statistics budget: ListContainerStats of 100 running containers (25 pods of 4), median of 100
# calls with the client's time included, at most 5 ms. Runs the ignored benchmark test of
# tests/container_stats.rs against a release build of crust (its own registry, daemon and
# network, as every integration test). As root.
set -eu
cd "$(dirname "$0")/.."
cargo test --release --test container_stats -- --ignored --nocapture \
  list_container_stats_of_100_containers 2>&1 | grep -E 'ListContainerStats|test result|panicked'
