"""Money arithmetic on integer cents (no floats anywhere)."""


def apply_discount(amount_cents: int, percent: int) -> int:
    """Return the amount after a percent discount, rounded half up to a whole cent."""
    if not 0 <= percent <= 100:
        raise ValueError("percent must be between 0 and 100")
    return (amount_cents * (100 - percent) + 50) // 100


def split_evenly(amount_cents: int, parts: int) -> list[int]:
    """Split an amount into `parts` shares that differ by at most one cent.

    The shares always add up to the amount exactly; the larger shares come first,
    so split_evenly(1000, 3) == [334, 333, 333].
    """
    if parts <= 0:
        raise ValueError("parts must be positive")
    share = amount_cents // parts
    return [share] * parts
