"""Invoices: line items with discounts, tax on the discounted amount, rounding per line."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from .discounts import Discount
from .money import Money
from .tax import tax_rate


@dataclass
class LineItem:
    description: str
    unit_price: Decimal
    quantity: int = 1
    discount: Discount | None = None
    tax_exempt: bool = False

    def __post_init__(self) -> None:
        self.unit_price = Decimal(str(self.unit_price))
        if self.quantity < 1:
            raise ValueError(f"quantity must be at least 1, got {self.quantity}")
        if self.unit_price < 0:
            raise ValueError(f"unit_price must not be negative, got {self.unit_price}")

    def gross(self, currency: str) -> Money:
        return Money(self.unit_price * self.quantity, currency)

    def discount_amount(self, currency: str) -> Money:
        if self.discount is None:
            return Money.zero(currency)
        return self.discount.amount(self.gross(currency), self.quantity).rounded()

    def net(self, currency: str) -> Money:
        """Gross minus discount, rounded to the currency's minor unit."""
        return (self.gross(currency) - self.discount_amount(currency)).rounded()


@dataclass
class Invoice:
    currency: str
    tax_region: str
    lines: list[LineItem] = field(default_factory=list)

    def add(self, line: LineItem) -> "Invoice":
        self.lines.append(line)
        return self

    def subtotal(self) -> Money:
        """Sum of the lines' net amounts (after discounts, before tax)."""
        total = Money.zero(self.currency)
        for line in self.lines:
            total = total + line.net(self.currency)
        return total

    def discount_total(self) -> Money:
        total = Money.zero(self.currency)
        for line in self.lines:
            total = total + line.discount_amount(self.currency)
        return total

    def tax(self) -> Money:
        """Tax on each taxable line's net amount, rounded per line."""
        rate = tax_rate(self.tax_region)
        total = Money.zero(self.currency)
        for line in self.lines:
            if not line.tax_exempt:
                total = total + (line.net(self.currency) * rate).rounded()
        return total

    def total(self) -> Money:
        return (self.subtotal() + self.tax()).rounded()

    def summary(self) -> dict[str, str]:
        return {"subtotal": str(self.subtotal()), "discount": str(self.discount_total()),
                "tax": str(self.tax()), "total": str(self.total())}
