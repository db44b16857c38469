from decimal import Decimal

import pytest

from billing import tax_rate


def test_known_rates():
    assert tax_rate("DE") == Decimal("0.19")
    assert tax_rate("us-ca") == Decimal("0.0725")


def test_zero_rate():
    assert tax_rate("US-OR") == 0


def test_unknown_region_names_known_ones():
    with pytest.raises(KeyError, match="known: DE"):
        tax_rate("XX")
