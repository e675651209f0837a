#!/bin/bash
# Builds the crust of the previous release (the commit tests/fixtures/upgrade/previous names) for
# tests/upgrade.rs, into $CRUST_TOOLS_CACHE/crust-<commit>/crust (default /var/cache/crust-tools),
# reused while it is there. The source comes from this repository's own history (git archive), so
# a clone must hold that commit: it is tagged, and a full clone has it. Built into a temporary
# directory and renamed under a lock, so an interrupted or concurrent build leaves nothing half
# made; its target directory is removed afterwards (the binary is all the test needs).
#
# Usage: hack/build-previous.sh          build (or reuse) and print the binary's path
# Fails, naming the reason, when the commit is missing or the build fails: nothing is skipped.
set -euo pipefail
shopt -s inherit_errexit
top=$(cd "$(dirname "$0")/.." && pwd)
cache=${CRUST_TOOLS_CACHE:-/var/cache/crust-tools}
die() { echo "build-previous: $*" >&2; exit 1; }

read -r commit tag < "$top/tests/fixtures/upgrade/previous"
[ -n "$commit" ] || die "tests/fixtures/upgrade/previous names no commit"
dir=$cache/crust-$commit
if [ -x "$dir/crust" ]; then echo "$dir/crust"; exit 0; fi

mkdir -p "$cache"
exec 9>"$cache/.crust-previous.lock"
flock 9
if [ -x "$dir/crust" ]; then echo "$dir/crust"; exit 0; fi
git -C "$top" cat-file -e "$commit^{commit}" 2>/dev/null ||
  die "this clone lacks $commit ($tag): fetch the tag, or clone without --depth"
tmp=$(mktemp -d "$cache/.crust-$commit.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
git -C "$top" archive "$commit" | tar -x -C "$tmp" || die "cannot unpack $commit"
echo "build-previous: building crust $tag ($commit), once per machine" >&2
(cd "$tmp" && CARGO_TARGET_DIR="$tmp/target" cargo build --quiet --bin crust) ||
  die "building crust $tag ($commit) failed"
mkdir -p "$tmp/out"
cp "$tmp/target/debug/crust" "$tmp/out/crust"
echo "$commit $tag" > "$tmp/out/.stamp"
rm -rf "$dir"
mv "$tmp/out" "$dir"
echo "$dir/crust"
