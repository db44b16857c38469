"""billing: money, line items, discounts, tax and invoices."""

from .discounts import BulkDiscount, Discount, FixedOff, PercentOff
from .invoice import Invoice, LineItem
from .money import Money, minor_units, round_amount
from .tax import TAX_RATES, tax_rate

__all__ = ["BulkDiscount", "Discount", "FixedOff", "Invoice", "LineItem", "Money", "PercentOff",
           "TAX_RATES", "minor_units", "round_amount", "tax_rate"]
__version__ = "0.3.0"
