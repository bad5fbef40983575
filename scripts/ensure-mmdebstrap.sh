#!/usr/bin/env bash
# Make sure mmdebstrap (builds environments: clawrig env build) is installed: Debian's package
# with apt-get when we are root. Without it the environment tests skip with the reason.
set -euo pipefail
if command -v mmdebstrap >/dev/null 2>&1; then exit 0; fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "mmdebstrap is missing: installing Debian's mmdebstrap with apt-get" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq mmdebstrap >/dev/null
  command -v mmdebstrap >/dev/null 2>&1 && exit 0
fi
echo "mmdebstrap is not installed (apt-get install mmdebstrap): clawrig env build and its tests need it" >&2
exit 0
