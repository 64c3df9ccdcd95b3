#!/usr/bin/env bash
# Install the Debian packages sbx needs to build, test and benchmark.
# Idempotent: packages already present are not reinstalled, and apt's lists
# are refreshed only when something is missing.
set -euo pipefail

packages=(
  # build
  gcc meson ninja-build pkg-config libc6-dev
  musl-tools                # sbx-init, static and small (glibc static is the fallback)
  libseccomp-dev            # seccomp filter is compiled at build time
  libarchive-dev            # image archives (OCI, docker save, rootfs tarballs) to templates
  mmdebstrap zstd           # the python template's Debian root file system (templates/python/build.sh)
  libhttp-parser-dev        # the egress proxy reads HTTP proxy requests with it
  slirp4netns libnftables-dev libmnl-dev   # network mode open: user-space network stack, deny list in nftables, its log
  curl git openssl          # network tests: clients in the sandbox (base shows the host's /usr), a TLS server
  # tests
  libcmocka-dev libmicrohttpd-dev libjansson-dev libsqlite3-dev libsodium-dev libcurl4-openssl-dev libwslay-dev libssl-dev python3-requests python3 python3-pytest
  python3-pip               # network tests: pip download through the egress proxy (base shows the host's /usr)
  qemu-system-x86 busybox-static file   # the pure cgroup v2 test runs in a qemu guest
  strace                    # durability tests: what is synced to disk before it is recorded
  # (the MCP tests also need node and npm, checked below: machines may carry a newer Node)
  # benchmarks (peers run side by side)
  bubblewrap hyperfine util-linux
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "bootstrap: need root to install: ${missing[*]}" >&2
    exit 1
  fi
  echo "bootstrap: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The MCP tests run the official MCP clients (tests/mcp/, from the npm registry).  Node may
# come from elsewhere than Debian (a newer release): only install Debian's when none is there.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  [[ $(id -u) -eq 0 ]] || { echo "bootstrap: need root to install nodejs and npm" >&2; exit 1; }
  echo "bootstrap: installing nodejs npm"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
echo "bootstrap: all packages present"
