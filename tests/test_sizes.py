"""The one size formatter (clawrig.sizes.format_bytes): values written out by hand."""

from __future__ import annotations

import pytest

from clawrig.sizes import format_bytes

GiB, MiB, KiB = 1 << 30, 1 << 20, 1 << 10


@pytest.mark.parametrize(
    ("size", "text"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1 KiB"),
        (1536, "1.5 KiB"),
        (1002, "1002 B"),
        (MiB - 10, "1.0 MiB"),  # 1023.99 KiB would read "1024.0 KiB"
        (64 * MiB, "64 MiB"),  # a cap: exact, no decimals
        (123_456_789, "117.7 MiB"),
        (16 * GiB, "16 GiB"),
        (16 * GiB - 128 * MiB, "15.9 GiB"),  # not "16 GiB": the disk check's case
        (16 * GiB + 128 * MiB, "16.1 GiB"),
        (3 * 1024 * GiB, "3 TiB"),
        (-5 * KiB, "-5 KiB"),
    ],
)
def test_format_bytes(size, text):
    assert format_bytes(size) == text
