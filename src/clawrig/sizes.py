"""Sizes in bytes as text: the one formatter every message, table and line uses."""

from __future__ import annotations

UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
"""Binary units, each 1024 times the one before."""


def format_bytes(size: int | float) -> str:
    """``size`` bytes as text in the largest binary unit it reaches (:data:`UNITS`).

    Whole bytes below 1 KiB (``"1000 B"``); an exact multiple of its unit without decimals
    (``"64 MiB"``, ``"16 GiB"``); anything else with one decimal (``"1.5 KiB"``,
    ``"117.7 MiB"``, ``"16.0 GiB"`` for a little under or over 16 GiB): within 0.05 of the
    unit. A value that rounds to 1024 of a unit is written in the next (never
    ``"1024.0 KiB"``). Negative sizes keep their sign."""
    if size < 0:
        return f"-{format_bytes(-size)}"
    value = float(size)
    if value < 1024:
        return f"{int(value)} B"
    for unit in UNITS[1:]:
        value /= 1024
        if round(value, 1) < 1024 or unit == UNITS[-1]:
            return f"{int(value)} {unit}" if value.is_integer() else f"{value:.1f} {unit}"
    raise AssertionError("unreachable")  # pragma: no cover
