from decimal import Decimal

import pytest

from billing import BulkDiscount, FixedOff, Invoice, LineItem, Money, PercentOff


def eur(x):
    return Money(Decimal(x), "EUR")


def test_empty_invoice_totals_zero():
    inv = Invoice("EUR", "DE")
    assert inv.total() == eur("0")


def test_line_rejects_bad_quantity():
    with pytest.raises(ValueError):
        LineItem("x", Decimal("1.00"), quantity=0)


def test_subtotal_and_tax():
    inv = Invoice("EUR", "DE").add(LineItem("Widget", Decimal("10.00"), quantity=2))
    assert inv.subtotal() == eur("20.00")
    assert inv.tax() == eur("3.80")
    assert inv.total() == eur("23.80")


def test_tax_is_charged_on_discounted_amount():
    inv = Invoice("EUR", "DE").add(LineItem("Widget", Decimal("100.00"), discount=PercentOff(Decimal(10))))
    assert inv.subtotal() == eur("90.00")
    assert inv.tax() == eur("17.10")
    assert inv.total() == eur("107.10")


def test_tax_exempt_line():
    inv = Invoice("EUR", "FR")
    inv.add(LineItem("Book", Decimal("12.00"), tax_exempt=True))
    inv.add(LineItem("Pen", Decimal("2.00")))
    assert inv.tax() == eur("0.40")
    assert inv.total() == eur("14.40")


def test_fixed_discount_never_makes_a_line_negative():
    inv = Invoice("EUR", "DE").add(LineItem("Gift card", Decimal("5.00"), discount=FixedOff(eur("8.00"))))
    assert inv.subtotal() == eur("0.00")
    assert inv.total() == eur("0.00")


def test_bulk_discount_on_invoice():
    inv = Invoice("EUR", "US-OR").add(LineItem("Bolt", Decimal("0.50"), quantity=100,
                                               discount=BulkDiscount(100, Decimal(10))))
    assert inv.discount_total() == eur("5.00")
    assert inv.total() == eur("45.00")


def test_rounding_per_line():
    inv = Invoice("EUR", "DE")
    inv.add(LineItem("A", Decimal("0.05")))
    inv.add(LineItem("B", Decimal("0.05")))
    # 19% of 0.05 is 0.0095 -> 0.01 per line
    assert inv.tax() == eur("0.02")


def test_zero_decimal_currency_invoice():
    inv = Invoice("JPY", "JP").add(LineItem("Tea", Decimal("1280"), quantity=3))
    assert inv.subtotal() == Money(Decimal("3840"), "JPY")
    assert inv.tax() == Money(Decimal("384"), "JPY")
    assert str(inv.total()) == "JPY 4,224"


def test_summary_strings():
    inv = Invoice("USD", "US-CA").add(LineItem("Lamp", Decimal("39.99"), discount=FixedOff(Money(Decimal("5"), "USD"))))
    assert inv.summary() == {"subtotal": "USD 34.99", "discount": "USD 5.00", "tax": "USD 2.54",
                             "total": "USD 37.53"}
