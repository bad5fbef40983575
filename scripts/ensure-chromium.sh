#!/usr/bin/env bash
# Make sure Debian's chromium is installed (the viewer's browser tests drive it headless with
# Playwright): install it with apt-get when we are root, else say what to do. Never fatal: the
# browser tests skip with the reason when no chromium is found.
set -uo pipefail
if command -v chromium >/dev/null 2>&1; then exit 0; fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "chromium is missing: installing Debian's chromium with apt-get (for the viewer's tests)" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
  command -v chromium >/dev/null 2>&1 && exit 0
fi
echo "chromium not found: the viewer's browser tests will be skipped (Debian/Ubuntu: sudo apt-get install chromium)" >&2
exit 0
