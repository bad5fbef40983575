"""Fixtures for ``clawrig pull`` tests: ``hub``, a loopback Hugging Face Hub (hf_helpers.py)
serving ``jindidi/eigendata-demo-data`` (what ``eigendata/wildclaw`` pulls): two samples of
the bundled demo four-folder set under ``wildclaw/``, an unrelated ``other/`` folder and a
large (LFS-style) file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hf_helpers import COMMIT, DEMO, Dataset, Hub, build_hub_app, demo_files

from clawrig.serving import ThreadedServer, tcp_listener


@pytest.fixture
def hub(monkeypatch) -> Iterator[Hub]:
    files = {
        **demo_files(),
        "wildclaw/big.bin": bytes(range(256)) * 40,  # 10,240 bytes: served the LFS way
        "other/readme.txt": b"another benchmark's slice\n",
        "README.md": b"# claw data\n",
    }
    state = Hub(
        datasets={"jindidi/eigendata-demo-data": Dataset(files, COMMIT, tags={"v1": COMMIT})}
    )
    sock = tcp_listener()
    state.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = ThreadedServer(build_hub_app(state), [sock], name="test-hub", lifespan="off").start()
    monkeypatch.setenv("HF_ENDPOINT", state.url)
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    try:
        yield state
    finally:
        server.stop()


@pytest.fixture
def demo_dir() -> Path:
    return DEMO
