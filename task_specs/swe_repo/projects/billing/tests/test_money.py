from decimal import Decimal

import pytest

from billing import Money, minor_units, round_amount


def test_minor_units_defaults_to_two():
    assert minor_units("EUR") == 2
    assert minor_units("usd") == 2


def test_minor_units_zero_decimal_currencies():
    assert minor_units("JPY") == 0
    assert minor_units("KRW") == 0


def test_minor_units_three_decimal_currencies():
    assert minor_units("BHD") == 3
    assert minor_units("KWD") == 3


def test_round_amount_half_up():
    assert round_amount(Decimal("0.125"), "EUR") == Decimal("0.13")
    assert round_amount(Decimal("2.675"), "USD") == Decimal("2.68")


def test_round_amount_half_away_from_zero_for_negatives():
    assert round_amount(Decimal("-0.125"), "EUR") == Decimal("-0.13")


def test_round_amount_below_half():
    assert round_amount(Decimal("1.004"), "EUR") == Decimal("1.00")


def test_round_amount_zero_decimals():
    assert round_amount(Decimal("1234.5"), "JPY") == Decimal("1235")


def test_money_addition_and_currency_check():
    assert Money(Decimal("1.10"), "EUR") + Money(Decimal("2.20"), "eur") == Money(Decimal("3.30"), "EUR")
    with pytest.raises(ValueError, match="currency mismatch"):
        Money(Decimal(1), "EUR") + Money(Decimal(1), "USD")


def test_money_str_rounds_and_groups():
    assert str(Money(Decimal("1234.565"), "USD")) == "USD 1,234.57"
    assert str(Money(Decimal("1500"), "JPY")) == "JPY 1,500"


def test_money_multiplication():
    assert Money(Decimal("1.50"), "EUR") * 3 == Money(Decimal("4.50"), "EUR")
    assert 2 * Money(Decimal("1.25"), "EUR") == Money(Decimal("2.50"), "EUR")
