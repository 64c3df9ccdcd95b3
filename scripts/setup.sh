#!/usr/bin/env bash
# One command for a fresh machine: install what sbx needs (Debian packages),
# build it, and run a first sandbox with the embedded defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
scripts/build.sh build
echo "sbx: running a first sandbox: python3 inside, no network, 1 GiB memory, 512 MiB disk"
exec ./build/sbx run -- python3 -c 'import os, socket; print(f"hello from {socket.gethostname()}: uid {os.getuid()}, cwd {os.getcwd()}")'
