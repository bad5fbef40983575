#!/usr/bin/env bash
# Make sure a C compiler is there: clawrig compiles its small sandbox launcher and init
# (src/clawrig/sandbox/sandbox_launch.c) on first use, ~5 ms of CPU less per trial than perl.
# Install Debian's gcc with apt-get when we are root. Never fatal: without one perl does the
# same work, and the program's tests skip with the reason.
set -uo pipefail
if command -v cc >/dev/null 2>&1 || command -v gcc >/dev/null 2>&1; then exit 0; fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "no C compiler: installing Debian's gcc with apt-get (clawrig's sandbox launcher)" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends gcc libc6-dev >/dev/null
  command -v cc >/dev/null 2>&1 && exit 0
fi
echo "no C compiler found: sandboxes start with perl instead (Debian/Ubuntu: sudo apt-get install gcc)" >&2
exit 0
