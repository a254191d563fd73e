#!/usr/bin/env bash
# Build a local base image for the node (minimal Debian with python3 and venv support) with debootstrap and
# `docker import`, for machines that cannot pull images from a registry. Needs root, debootstrap, docker and a
# reachable Debian mirror. Then build the node image on it:
#
#   node_image/build-base-image.sh [-s SUITE] [-m MIRROR] [-t TAG]
#   docker build --build-arg BASE_IMAGE=TAG -t gossip-testbed/node node_image
#
# Defaults: SUITE bookworm (Python 3.11), MIRROR http://deb.debian.org/debian, TAG gossip-testbed/base:SUITE.
set -euo pipefail

suite=bookworm
mirror=http://deb.debian.org/debian
tag=""

usage() {
  echo "usage: $0 [-s suite] [-m mirror] [-t tag]" >&2
  exit 2
}

while getopts "s:m:t:h" opt; do
  case "$opt" in
    s) suite=$OPTARG ;;
    m) mirror=$OPTARG ;;
    t) tag=$OPTARG ;;
    *) usage ;;
  esac
done
shift $((OPTIND - 1))
[ "$#" -eq 0 ] || usage
tag=${tag:-gossip-testbed/base:$suite}

if [ "$(id -u)" -ne 0 ]; then
  echo "$0: needs root (debootstrap builds a root filesystem)" >&2
  exit 1
fi
for tool in debootstrap docker tar; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "$0: $tool not found (apt-get install debootstrap docker.io)" >&2
    exit 1
  fi
done

rootfs=$(mktemp -d /tmp/gossip-base.XXXXXX)
cleanup() {
  # --one-file-system: never follow a mount debootstrap may have left behind into the host.
  rm -rf --one-file-system "$rootfs"
}
trap cleanup EXIT

debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates,iputils-ping,iproute2 "$suite" "$rootfs" "$mirror"

# A container needs no package lists, caches, documentation or man pages.
chroot "$rootfs" apt-get clean
rm -rf "${rootfs:?}"/var/lib/apt/lists/* "${rootfs:?}"/usr/share/doc/* "${rootfs:?}"/usr/share/man/*

tar --numeric-owner -C "$rootfs" -c . |
  docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["/bin/bash"]' \
    - "$tag"
echo "built $tag"
