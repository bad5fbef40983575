#!/usr/bin/env bash
# Make sure bubblewrap is on PATH: install Debian's package when we are root, else say what to do.
set -euo pipefail
if command -v bwrap >/dev/null 2>&1; then exit 0; fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "bubblewrap is missing: installing Debian's bubblewrap with apt-get" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq bubblewrap >/dev/null
  command -v bwrap >/dev/null 2>&1 && exit 0
fi
echo "clawrig needs bubblewrap: install it (Debian/Ubuntu: sudo apt-get install bubblewrap), or run with --sandbox local" >&2
exit 1
