# clawrig: `make demo` runs the bundled demo suite offline; `make test` runs the tests.
# Both create or refresh .venv with the project and its extras, and install Debian's
# bubblewrap, gcc and musl-tools (clawrig's sandbox launcher) with apt-get when they are missing and we are
# root; `make test` also installs Debian's docker.io and mmdebstrap and starts dockerd when none
# runs (the Docker and environment tests).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo demo-model test lint format bench setup bwrap cc docker mmdebstrap openclaw trainers chromium harbor clean

$(STAMP): pyproject.toml
	@$(PY) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "clawrig needs Python >= 3.11 (found " + sys.version.split()[0] + ")")'
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	@$(BIN)/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
	$(BIN)/python -m pip install -q -e '.[dev]'
	@touch $(STAMP)

setup: $(STAMP) bwrap cc

bwrap:
	@scripts/ensure-bwrap.sh

cc:
	@scripts/ensure-cc.sh

docker:
	@scripts/ensure-docker.sh

mmdebstrap:
	@scripts/ensure-mmdebstrap.sh

demo: setup
	@scripts/set-aside-output.sh output/demo
	$(BIN)/clawrig run suites/demo --agent oracle --output output/demo

# the scripted server on a free port (its first line names the URL): a server left on a fixed
# port by an earlier run would answer instead, its script used up
demo-model: setup
	@log=$$(mktemp); \
	$(BIN)/python -m clawrig.testing.scripted_server --script examples/scripted-000015.json --port 0 > $$log 2>&1 & \
	pid=$$!; for _ in $$(seq 100); do grep -q "http://" $$log && break; sleep 0.1; done; \
	url=$$(grep -o "http://[^ ]*" $$log | head -1); \
	if [ -z "$$url" ]; then echo "the scripted server did not start:" >&2; cat $$log >&2; kill $$pid 2>/dev/null; rm -f $$log; exit 1; fi; \
	scripts/set-aside-output.sh output/demo-model; SCRIPTED_BASE_URL=$$url $(BIN)/clawrig run suites/demo --suite 000015 -m scripted/demo --output output/demo-model; \
	rc=$$?; kill $$pid; rm -f $$log; exit $$rc

openclaw: $(STAMP)
	-@scripts/install-openclaw.sh || echo "OpenClaw not installed: its tests will be skipped"

# the RL trainers' own packages (OpenPipe ART, SkyRL's skyrl-gym) for the adapter tests
$(VENV)/.trainers: $(STAMP)
	-@$(BIN)/python -m pip install -q -e '.[trainers]' && touch $@ || echo "trainer packages not installed: their adapter tests will be skipped"

trainers: $(VENV)/.trainers

chromium:
	@scripts/ensure-chromium.sh

harbor:
	-@scripts/install-harbor.sh || echo "Harbor not installed: the Harbor run test will be skipped"

# Test workers: 4 on the 2-core CI machine (many tests wait on sandboxes, timeouts and
# servers: the suite took 14-16 min with 2, 11 min with 3 here; on a slower day 15:32-15:45
# with 3, when the CPUs stood ~35% idle through its second half, and 14:42 with 4)
TEST_WORKERS ?= 4

# Bytecode: the tests start `clawrig` hundreds of times; where the environment sets
# PYTHONDONTWRITEBYTECODE (this machine's does) each start compiled clawrig's own source again
# (~0.5 s of CPU: 1.1 s against 0.6 s for a `clawrig run` refusing its --suite; the whole
# suite's CPU, a cpuacct cgroup per worker, 1,443 s against 1,332 s). The tests get a bytecode
# cache in the venv instead (PYTHONPYCACHEPREFIX: no file written in the source tree or the
# suites), as the benchmarks do.
TEST_PYCACHE = $(CURDIR)/.venv/pycache

test: setup docker mmdebstrap openclaw trainers chromium harbor
	env -u PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX=$(TEST_PYCACHE) \
	  $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --durations=30 tests

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy

format: $(STAMP)
	$(BIN)/ruff format src tests benchmarks
	$(BIN)/ruff check --fix src tests benchmarks

bench: setup docker mmdebstrap
	$(BIN)/python benchmarks/sandbox.py
	$(BIN)/python benchmarks/warm.py
	$(BIN)/python benchmarks/throughput.py
	$(BIN)/python benchmarks/view.py

clean:
	rm -rf $(VENV) output .pytest_cache
