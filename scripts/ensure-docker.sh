#!/usr/bin/env bash
# Make sure a Docker engine answers: install Debian's docker.io when we are root and it is missing,
# start dockerd (overlay2 storage, logs in /var/log/clawrig-dockerd.log) when none runs, and wait
# for its socket. Without root, say what to do; the Docker tests then skip with the reason.
set -euo pipefail
SOCK=/var/run/docker.sock
answers() { docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }
if answers; then exit 0; fi
if [ "$(id -u)" != "0" ]; then
  echo "no Docker engine answers and we are not root: start dockerd (or install docker.io) to run the Docker tests" >&2
  exit 0
fi
if ! command -v dockerd >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  echo "dockerd is missing: installing Debian's docker.io with apt-get" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq docker.io >/dev/null
fi
if ! command -v dockerd >/dev/null 2>&1; then
  echo "dockerd is not installed and could not be: the Docker tests will be skipped" >&2
  exit 0
fi
if ! pgrep -x dockerd >/dev/null 2>&1; then
  echo "starting dockerd (overlay2)" >&2
  # setsid: the daemon outlives make; its own process group so no test run's signals reach it
  setsid dockerd --storage-driver overlay2 >>/var/log/clawrig-dockerd.log 2>&1 < /dev/null &
fi
for _ in $(seq 1 120); do
  if [ -S "$SOCK" ] && answers; then exit 0; fi
  sleep 0.5
done
echo "dockerd did not answer within 60 s: see /var/log/clawrig-dockerd.log; the Docker tests will be skipped" >&2
exit 0
