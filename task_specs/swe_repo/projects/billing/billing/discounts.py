"""Discounts on a line item's gross amount (unit price x quantity)."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from .money import Money


class Discount:
    """How much comes off a line's gross amount. Never more than the gross."""

    def amount(self, gross: Money, quantity: int) -> Money:
        raise NotImplementedError


@dataclass(frozen=True)
class PercentOff(Discount):
    percent: Decimal

    def __post_init__(self) -> None:
        pct = Decimal(str(self.percent))
        if not Decimal(0) <= pct <= Decimal(100):
            raise ValueError(f"percent must be between 0 and 100, got {pct}")
        object.__setattr__(self, "percent", pct)

    def amount(self, gross: Money, quantity: int) -> Money:
        return gross * (self.percent / Decimal(100))


@dataclass(frozen=True)
class FixedOff(Discount):
    """A fixed amount off the whole line, capped at the line's gross amount."""

    value: Money

    def amount(self, gross: Money, quantity: int) -> Money:
        if self.value.currency != gross.currency:
            raise ValueError(f"discount in {self.value.currency} on a line in {gross.currency}")
        return self.value if self.value <= gross else gross


@dataclass(frozen=True)
class BulkDiscount(Discount):
    """`percent` off when at least `min_quantity` units are bought."""

    min_quantity: int
    percent: Decimal

    def amount(self, gross: Money, quantity: int) -> Money:
        if quantity >= self.min_quantity:
            return gross * (Decimal(str(self.percent)) / Decimal(100))
        return Money.zero(gross.currency)
