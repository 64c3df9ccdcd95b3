#!/usr/bin/env bash
# Build the `python` template: Debian 12's python3 with numpy, pandas and
# matplotlib, all from Debian packages.
#
#   templates/python/build.sh [NAME]     # sbxd running; SBX_URL, SBX_API_KEY set
#
# sbx's `base` template shows the host's /usr, so a template with packages
# of its own starts from a root file system of its own: rootfs.sh makes one
# with mmdebstrap (cached), and the spec next to this script imports it
# ("from": "archive:...") and adds a user, envs and defaults.  sbxd caches
# each step's layer: building an unchanged spec again is quick.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
sbx=${SBX:-$here/../../build/sbx}
tarball=$("$here/rootfs.sh")
exec "$sbx" template build -f "$here/sbx-template.json" -C "$(dirname "$tarball")" --name "${1:-python}"
