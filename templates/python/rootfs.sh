#!/usr/bin/env bash
# The python template's root file system: Debian 12 (minbase) with python3,
# numpy, pandas and matplotlib from Debian packages, made by mmdebstrap
# from the Debian mirror as one zstd tarball.  Prints its path.  Made only
# when missing: written aside and renamed, so an interrupted run leaves no
# half tarball behind.
#
#   SBX_TEMPLATE_CACHE   where it goes (default /var/cache/sbx/templates)
#   SBX_DEBIAN_MIRROR    default http://deb.debian.org/debian
set -euo pipefail
cache=${SBX_TEMPLATE_CACHE:-/var/cache/sbx/templates}
mirror=${SBX_DEBIAN_MIRROR:-http://deb.debian.org/debian}
tarball=$cache/debian-bookworm-python.tar.zst
if [[ ! -s $tarball ]]; then
  command -v mmdebstrap >/dev/null || { echo "rootfs.sh: needs mmdebstrap (scripts/bootstrap.sh installs it)" >&2; exit 1; }
  mkdir -p "$cache"
  echo "python template: making a Debian 12 root file system with mmdebstrap (~150 MB download, a few minutes)" >&2
  rm -f "$tarball".tmp.*
  mmdebstrap --quiet --variant=minbase --include=python3,python3-numpy,python3-pandas,python3-matplotlib \
    bookworm "$tarball.tmp.tar.zst" "$mirror" >&2
  mv "$tarball.tmp.tar.zst" "$tarball"
fi
echo "$tarball"
