"""Money helpers for invoices. All amounts are integer cents."""

from .money import apply_discount, split_evenly

__all__ = ["apply_discount", "split_evenly"]
