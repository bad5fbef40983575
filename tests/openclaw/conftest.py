"""Fixtures for the OpenClaw tests: a started model gateway factory."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from oc_helpers import FAST_RETRY

from clawrig.llm.gateway import Gateway


@pytest.fixture
def make_gateway() -> Iterator[Callable[..., Gateway]]:
    """``make_gateway(**kwargs)`` -> a started Gateway (test-sized retries), stopped after."""
    made: list[Gateway] = []

    def factory(**kwargs: Any) -> Gateway:
        kwargs.setdefault("retry", FAST_RETRY)
        gw = Gateway(**kwargs).start()
        made.append(gw)
        return gw

    yield factory
    for gw in made:
        gw.stop()
