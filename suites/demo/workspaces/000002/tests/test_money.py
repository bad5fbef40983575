import unittest

from billing import apply_discount, split_evenly


class ApplyDiscountTest(unittest.TestCase):
    def test_rounds_half_up(self):
        self.assertEqual(apply_discount(999, 15), 849)
        self.assertEqual(apply_discount(1, 50), 1)

    def test_rejects_bad_percent(self):
        with self.assertRaises(ValueError):
            apply_discount(100, 101)


class SplitEvenlyTest(unittest.TestCase):
    def test_exact_division(self):
        self.assertEqual(split_evenly(900, 3), [300, 300, 300])

    def test_shares_add_up(self):
        shares = split_evenly(1000, 3)
        self.assertEqual(sum(shares), 1000)
        self.assertEqual(shares, [334, 333, 333])

    def test_rejects_zero_parts(self):
        with self.assertRaises(ValueError):
            split_evenly(100, 0)
