from decimal import Decimal

import pytest

from billing import BulkDiscount, FixedOff, Money, PercentOff


def eur(x):
    return Money(Decimal(x), "EUR")


def test_percent_off():
    assert PercentOff(Decimal(10)).amount(eur("50.00"), 1) == eur("5.00")


def test_percent_off_rejects_out_of_range():
    with pytest.raises(ValueError):
        PercentOff(Decimal(120))
    with pytest.raises(ValueError):
        PercentOff(Decimal(-5))


def test_fixed_off_below_gross():
    assert FixedOff(eur("3.00")).amount(eur("10.00"), 2) == eur("3.00")


def test_fixed_off_is_capped_at_gross():
    assert FixedOff(eur("15.00")).amount(eur("10.00"), 1) == eur("10.00")


def test_fixed_off_currency_mismatch():
    with pytest.raises(ValueError):
        FixedOff(Money(Decimal(1), "USD")).amount(eur("10.00"), 1)


def test_bulk_discount_below_threshold():
    assert BulkDiscount(10, Decimal(5)).amount(eur("90.00"), 9) == eur("0")


def test_bulk_discount_at_threshold():
    assert BulkDiscount(10, Decimal(5)).amount(eur("100.00"), 10) == eur("5.00")


def test_bulk_discount_above_threshold():
    assert BulkDiscount(10, Decimal(5)).amount(eur("200.00"), 20) == eur("10.00")
