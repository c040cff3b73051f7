#!/usr/bin/env bash
# Make a Debian bookworm base image without pulling (no registry is reachable from the CI machine):
# debootstrap a minimal root file system and import it. Where the build network intercepts TLS,
# the host's CA bundle is added (at its own path, with PIP_CERT pointing at it) so pip inside the
# build can verify the package index. This is a property of the build machine, not of the product:
# the Dockerfile itself stays standard and takes any base image as a build ARG.
set -euo pipefail
NAME=${1:-detector-base:bookworm}
if docker image inspect "$NAME" >/dev/null 2>&1; then
  echo "base image $NAME exists"
  exit 0
fi
MIRROR=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
MIRROR=${MIRROR:-http://deb.debian.org/debian}
ROOT=$(mktemp -d /tmp/detector-rootfs.XXXXXX)
trap 'rm -rf "$ROOT"' EXIT
echo "debootstrap bookworm from $MIRROR"
debootstrap --variant=minbase bookworm "$ROOT" "$MIRROR" >/tmp/detector-debootstrap.log 2>&1 || {
  tail -20 /tmp/detector-debootstrap.log >&2; exit 1; }
CHANGES=()
if [ -s /etc/ssl/certs/ca-certificates.crt ]; then
  mkdir -p "$ROOT/etc/ssl/certs"
  cp /etc/ssl/certs/ca-certificates.crt "$ROOT/etc/ssl/certs/build-host-ca.crt"
  CHANGES=(--change "ENV PIP_CERT=/etc/ssl/certs/build-host-ca.crt")
fi
tar -C "$ROOT" -c . | docker import "${CHANGES[@]}" - "$NAME" >/dev/null
echo "made base image $NAME"
