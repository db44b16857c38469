"""Sales tax / VAT rates by region."""

from __future__ import annotations

from decimal import Decimal

# Standard rates in percent.
TAX_RATES = {
    "DE": Decimal("19"),
    "FR": Decimal("20"),
    "GB": Decimal("20"),
    "JP": Decimal("10"),
    "US-CA": Decimal("7.25"),
    "US-OR": Decimal("0"),
}


def tax_rate(region: str) -> Decimal:
    """The rate for `region` as a fraction (19% -> 0.19)."""
    try:
        return TAX_RATES[region.upper()] / Decimal(100)
    except KeyError:
        raise KeyError(f"no tax rate for region {region!r}; known: {', '.join(sorted(TAX_RATES))}") from None
