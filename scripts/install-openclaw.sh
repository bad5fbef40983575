#!/usr/bin/env bash
# Install the pinned OpenClaw (default 2026.3.24) and its Node 24 runtime into clawrig's cache
# (~/.cache/clawrig/openclaw/<version>/, or $CLAWRIG_CACHE_DIR/openclaw/<version>/), from the npm
# registry with the lock file shipped in src/clawrig/agents/openclaw_lock/. Idempotent: a filled
# cache is left as it is. Installs Debian's npm first when npm is missing and we are root.
# Usage: scripts/install-openclaw.sh [VERSION]     (exit 2 with one line when impossible)
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
py="${PYTHON:-$here/.venv/bin/python}"
[ -x "$py" ] || py=python3
if ! command -v npm >/dev/null 2>&1 && [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "npm is missing: installing Debian's npm with apt-get" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null && apt-get install -y -qq npm >/dev/null || true
fi
exec "$py" -m clawrig.agents.openclaw install "${1:-2026.3.24}"
