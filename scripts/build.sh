#!/usr/bin/env bash
# Configure (once) and build sbx into build/ (or $1), with extra meson options after it.
#   scripts/build.sh                      release-ish build in build/
#   scripts/build.sh build-asan -Db_sanitize=address,undefined -Db_lundef=false
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
if [[ ! -f $dir/build.ninja ]]; then
  meson setup "$dir" "$@" >/dev/null
elif (($#)); then
  meson configure "$dir" "$@" >/dev/null
fi
ninja -C "$dir" >/dev/null
echo "build: $dir ok"
