"""Money amounts in a currency, rounded to the currency's minor unit."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

# Digits after the decimal point, per ISO 4217. Currencies not listed use 2.
MINOR_UNITS = {"JPY": 0, "KRW": 0, "ISK": 0, "BHD": 3, "KWD": 3, "OMR": 3, "TND": 3}


def minor_units(currency: str) -> int:
    """How many decimal places amounts in `currency` have."""
    return MINOR_UNITS.get(currency.upper(), 2)


def round_amount(amount: Decimal, currency: str) -> Decimal:
    """Round half away from zero to the currency's minor unit (commercial rounding)."""
    quantum = Decimal(1).scaleb(-minor_units(currency))
    return Decimal(amount).quantize(quantum, rounding=ROUND_HALF_UP)


@dataclass(frozen=True)
class Money:
    amount: Decimal
    currency: str

    def __post_init__(self) -> None:
        if not isinstance(self.amount, Decimal):
            object.__setattr__(self, "amount", Decimal(str(self.amount)))
        object.__setattr__(self, "currency", self.currency.upper())

    @classmethod
    def zero(cls, currency: str) -> "Money":
        return cls(Decimal(0), currency)

    def rounded(self) -> "Money":
        return Money(round_amount(self.amount, self.currency), self.currency)

    def _check(self, other: "Money") -> None:
        if not isinstance(other, Money):
            raise TypeError(f"cannot combine Money with {type(other).__name__}")
        if other.currency != self.currency:
            raise ValueError(f"currency mismatch: {self.currency} and {other.currency}")

    def __add__(self, other: "Money") -> "Money":
        self._check(other)
        return Money(self.amount + other.amount, self.currency)

    def __sub__(self, other: "Money") -> "Money":
        self._check(other)
        return Money(self.amount - other.amount, self.currency)

    def __mul__(self, factor: Decimal | int) -> "Money":
        return Money(self.amount * Decimal(str(factor)), self.currency)

    __rmul__ = __mul__

    def __neg__(self) -> "Money":
        return Money(-self.amount, self.currency)

    def __lt__(self, other: "Money") -> bool:
        self._check(other)
        return self.amount < other.amount

    def __le__(self, other: "Money") -> bool:
        self._check(other)
        return self.amount <= other.amount

    def __str__(self) -> str:
        return f"{self.currency} {round_amount(self.amount, self.currency):,}"
