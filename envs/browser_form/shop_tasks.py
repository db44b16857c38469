"""The shop-v1 task set, made from templates over the shop's generated data.

`python -m sandgym.envs.browser_form.shop_tasks OUT` writes the set; the
bundled copy under task_specs/browser_form/shop-v1 is its output (a test
checks that they agree). Every task's facts (prices, counts, the order to
cancel) are queried from the same database the episodes start from, so the
goals, the checks and the scripted solutions cannot drift from the data.
Goals name what to achieve, never a selector; the oracles act through
roles and accessible names, as a person reads the page.
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

from sandgym.specs import TaskSet
from sandgym.specs.base import TaskSetMeta

from .app import shopdata
from .app_tasks import Maker, make_set

SHIP = ("Alice Liddell", "1 Rabbit Hole Lane", "Oxford", "OX1 4AU")
NEW_ORDER = shopdata.ORDERS + 1  # the id the first order placed in an episode gets


def money(cents: int) -> str:
    return f"${cents // 100:,}.{cents % 100:02d}"


def q(text: str) -> str:
    """A string literal of the action grammar."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def product_tasks(m: Maker) -> None:
    listed = "SELECT p.*, c.name AS category FROM products p JOIN categories c ON c.id = p.category_id "
    for p in m.pick(listed + "WHERE p.active = 1", 5):
        m.add(
            f"price-{p['sku']}",
            1,
            f"What does the {p['name']} cost? Reply with its price.",
            [f"send_msg_to_user({q(money(p['price_cents']))})"],
            start=f"/products/{p['sku']}",
            answer=[money(p["price_cents"])],
        )
    for p in m.pick(listed + "WHERE p.active = 1 AND p.stock BETWEEN 5 AND 200", 4):
        n = p["stock"] + 17
        m.add(
            f"restock-{p['sku']}",
            1,
            f"Set the stock of {p['name']} to {n} units.",
            [f'fill("textbox:Stock", "{n}")', 'click("button:Save product")', "done()"],
            start=f"/admin/products/{p['sku']}",
            login="admin",
            checks=[
                {
                    "name": "stock set",
                    "table": "products",
                    "where": {"sku": p["sku"]},
                    "count": 1,
                    "expect": {"stock": n, "price_cents": p["price_cents"], "active": 1},
                }
            ],
        )
    for p in m.pick(listed + "WHERE p.active = 1", 3):
        m.add(
            f"unlist-{p['sku']}",
            2,
            f"Take the product {p['name']} off sale in the shop (unlist it); change nothing else about it.",
            [
                'click("link:Back office")',
                'click("link:Catalogue")',
                f'fill("textbox:Name or SKU", {q(p["name"])})',
                'click("button:Filter catalogue")',
                f'click("link:{p["sku"]}")',
                'uncheck("checkbox:Listed in the shop")',
                'click("button:Save product")',
                "done()",
            ],
            start="/",
            login="admin",
            checks=[
                {
                    "name": "unlisted",
                    "table": "products",
                    "where": {"sku": p["sku"]},
                    "count": 1,
                    "expect": {"active": 0, "stock": p["stock"], "price_cents": p["price_cents"]},
                }
            ],
        )
    for code, pct, exp in (("AUTUMN15", 15, "2026-11-30"), ("VIP40", 40, "2027-01-31"), ("FLASH5", 5, "2026-10-01")):
        m.add(
            f"coupon-{code.lower()}",
            1,
            f"Create a coupon {code} for {pct}% off that expires on {exp}.",
            [
                f'fill("textbox:Code", "{code}")',
                f'fill("textbox:Percent off", "{pct}")',
                f'fill("textbox:Expires on", "{exp}")',
                'click("button:Create coupon")',
                "done()",
            ],
            start="/admin/coupons/new",
            login="admin",
            checks=[
                {
                    "name": "coupon made",
                    "table": "coupons",
                    "where": {"code": code},
                    "count": 1,
                    "expect": {"percent": pct, "expires": exp},
                },
                {"name": "no other coupon", "table": "coupons", "count": 3},
            ],
        )
    for cat in m.pick("SELECT * FROM categories", 3):
        best = m.rows(
            listed + "WHERE p.active = 1 AND p.category_id = ? AND p.price_cents <= 3000 "
            "ORDER BY p.rating DESC, p.name LIMIT 2",
            cat["id"],
        )
        if len(best) < 2 or best[0]["rating"] == best[1]["rating"]:
            continue
        b = best[0]
        m.add(
            f"best-rated-{cat['name'].lower()}",
            3,
            f"Which product in the {cat['name']} category, priced at most $30, has the highest rating? "
            "Reply with its name.",
            [
                'click("link:Products")',
                f'select("combobox:Category", "{cat["name"]}")',
                'fill("textbox:Maximum price", "30")',
                'select("combobox:Sort by", "Rating")',
                'click("button:Apply filters")',
                f"send_msg_to_user({q(b['name'])})",
            ],
            answer=[b["name"]],
        )
    for cat in m.pick("SELECT * FROM categories", 3):
        n = m.rows(
            "SELECT COUNT(*) AS n FROM products WHERE active = 1 AND category_id = ? AND price_cents <= 2000 "
            "AND stock > 0",
            cat["id"],
        )[0]["n"]
        m.add(
            f"count-cheap-{cat['name'].lower()}",
            2,
            f"How many products in the {cat['name']} category that are in stock cost $20 or less? "
            "Reply with the number.",
            [
                f'select("combobox:Category", "{cat["name"]}")',
                'fill("textbox:Maximum price", "20")',
                'check("checkbox:In stock only")',
                'click("button:Apply filters")',
                f'send_msg_to_user("{n}")',
            ],
            start="/products",
            answer=[str(n)],
        )
    for cat in m.pick("SELECT * FROM categories", 3):
        two = m.rows(listed + "WHERE p.category_id = ? ORDER BY p.price_cents, p.name LIMIT 2", cat["id"])
        if two[0]["price_cents"] == two[1]["price_cents"]:
            continue
        c = two[0]
        m.add(
            f"restock-cheapest-{cat['name'].lower()}",
            3,
            f"In the back office, find the cheapest product of the {cat['name']} category and set its stock to 100.",
            [
                'click("link:Back office")',
                'click("link:Catalogue")',
                f'select("combobox:Category", "{cat["name"]}")',
                'select("combobox:Sort by", "Price: low to high")',
                'click("button:Filter catalogue")',
                f'click("link:{c["sku"]}")',
                'fill("textbox:Stock", "100")',
                'click("button:Save product")',
                "done()",
            ],
            login="admin",
            checks=[
                {
                    "name": "cheapest restocked",
                    "table": "products",
                    "where": {"sku": c["sku"]},
                    "count": 1,
                    "expect": {"stock": 100},
                },
                {
                    "name": "no other stock at 100",
                    "table": "products",
                    "where": {"stock": 100},
                    "count": 1 + len(m.rows("SELECT 1 FROM products WHERE stock = 100 AND id != ?", c["id"])),
                },
            ],
        )


def purchase_oracle(name: str, qty: int) -> list[str]:
    return [
        f'fill("searchbox:Search products", {q(name)})',
        'click("button:Search")',
        f"click({q('link:' + name)})",
        f'fill("spinbutton:Quantity", "{qty}")',
        'click("button:Add to cart")',
        'click("link:Cart")',
        'click("link:Checkout")',
        f'fill("textbox:Full name", "{SHIP[0]}")',
        f'fill("textbox:Address", "{SHIP[1]}")',
        f'fill("textbox:City", "{SHIP[2]}")',
        f'fill("textbox:Postal code", "{SHIP[3]}")',
        'click("button:Continue to review")',
        'click("button:Place order")',
        "done()",
    ]


def order_checks(p: sqlite3.Row, qty: int) -> list[dict]:
    return [
        {
            "name": "order placed",
            "table": "orders",
            "where": {"id": NEW_ORDER},
            "count": 1,
            "expect": {
                "customer_id": 1,
                "status": "pending",
                "total_cents": qty * p["price_cents"],
                "ship_name": SHIP[0],
                "ship_address": SHIP[1],
                "ship_city": SHIP[2],
                "ship_postal": SHIP[3],
            },
        },
        {"name": "one order only", "table": "orders", "count": NEW_ORDER},
        {
            "name": "the item",
            "table": "order_items",
            "where": {"order_id": NEW_ORDER},
            "count": 1,
            "expect": {"product_id": p["id"], "qty": qty},
        },
        {
            "name": "stock went down",
            "table": "products",
            "where": {"id": p["id"]},
            "count": 1,
            "expect": {"stock": p["stock"] - qty},
        },
    ]


def customer_tasks(m: Maker) -> None:
    for i, p in enumerate(m.pick("SELECT * FROM products WHERE active = 1 AND stock >= 5", 5)):
        qty = 1 + i % 3
        m.add(
            f"buy-{p['sku']}",
            2,
            f"Buy {qty} of the {p['name']} and have the order shipped to {SHIP[0]}, {SHIP[1]}, {SHIP[2]}, "
            f"postal code {SHIP[3]}.",
            purchase_oracle(p["name"], qty),
            login="alice",
            checks=order_checks(p, qty),
        )
    cats = m.pick("SELECT * FROM categories", 2)
    for cat in cats:
        two = m.rows(
            "SELECT * FROM products WHERE active = 1 AND stock > 0 AND category_id = ? "
            "ORDER BY price_cents, name LIMIT 2",
            cat["id"],
        )
        if two[0]["price_cents"] == two[1]["price_cents"]:
            continue
        p = two[0]
        oracle = [
            'click("link:Products")',
            f'select("combobox:Category", "{cat["name"]}")',
            'check("checkbox:In stock only")',
            'select("combobox:Sort by", "Price: low to high")',
            'click("button:Apply filters")',
            f"click({q('link:' + p['name'])})",
        ] + purchase_oracle(p["name"], 1)[3:]
        m.add(
            f"buy-cheapest-{cat['name'].lower()}",
            3,
            f"Buy one of the cheapest in-stock product in the {cat['name']} category, shipped to {SHIP[0]}, "
            f"{SHIP[1]}, {SHIP[2]}, postal code {SHIP[3]}.",
            oracle,
            login="alice",
            checks=order_checks(p, 1),
        )


def order_tasks(m: Maker) -> None:
    for o in m.pick("SELECT * FROM orders WHERE status = 'paid'", 3):
        m.add(
            f"ship-{o['id']}",
            1,
            f"Mark order {o['id']} as shipped.",
            ['select("combobox:New status", "Shipped")', 'click("button:Save status")', "done()"],
            start=f"/admin/orders/{o['id']}",
            login="sam",
            checks=[
                {
                    "name": "shipped",
                    "table": "orders",
                    "where": {"id": o["id"]},
                    "count": 1,
                    "expect": {"status": "shipped"},
                }
            ],
        )
    reasons = ("Damaged in the warehouse", "Payment flagged", "Duplicate order", "Address unreachable")
    for o, reason in zip(
        m.pick(
            "SELECT o.*, c.name AS customer, c.email FROM orders o JOIN customers c "
            "ON c.id = o.customer_id WHERE o.status IN ('pending', 'paid')",
            4,
        ),
        reasons,
        strict=False,
    ):
        m.add(
            f"cancel-{o['id']}",
            2,
            f'Cancel order {o["id"]} of {o["customer"]} with the reason "{reason}".',
            [
                'click("link:Back office")',
                'click("link:Orders")',
                f'fill("textbox:Customer name", {q(o["customer"])})',
                'click("button:Filter orders")',
                f'click("link:Order {o["id"]}")',
                'click("button:Cancel order")',
                f'fill("textbox:Reason", {q(reason)})',
                'click("button:Confirm cancellation")',
                "done()",
            ],
            login="admin",
            checks=[
                {
                    "name": "cancelled",
                    "table": "orders",
                    "where": {"id": o["id"]},
                    "count": 1,
                    "expect": {"status": "cancelled", "cancel_reason": reason},
                },
                {
                    "name": "no other order cancelled",
                    "table": "orders",
                    "where": {"status": "cancelled"},
                    "count": 1 + len(m.rows("SELECT 1 FROM orders WHERE status = 'cancelled'")),
                },
            ],
        )
    # Customers whose latest order can still be cancelled: find it first, then cancel it.
    latest = (
        "SELECT c.id, c.name, c.email, o.id AS oid, o.status FROM customers c JOIN orders o ON o.id = "
        "(SELECT id FROM orders WHERE customer_id = c.id ORDER BY placed DESC, id DESC LIMIT 1) "
        "WHERE o.status IN ('pending', 'paid') AND c.id > 2"
    )
    for c in m.pick(latest, 4):
        m.add(
            f"cancel-latest-{c['id']}",
            3,
            f"The customer with email {c['email']} asked to cancel their most recent order. Cancel it with the "
            'reason "Customer request".',
            [
                'click("link:Back office")',
                'click("link:Customers")',
                f'fill("textbox:Name or email", "{c["email"]}")',
                'click("button:Find customers")',
                f"click({q('link:' + c['name'])})",
                f'click("link:Order {c["oid"]}")',
                'click("button:Cancel order")',
                'fill("textbox:Reason", "Customer request")',
                'click("button:Confirm cancellation")',
                "done()",
            ],
            login="admin",
            checks=[
                {
                    "name": "latest cancelled",
                    "table": "orders",
                    "where": {"id": c["oid"]},
                    "count": 1,
                    "expect": {"status": "cancelled", "cancel_reason": "Customer request"},
                },
                {
                    "name": "no other order cancelled",
                    "table": "orders",
                    "where": {"status": "cancelled"},
                    "count": 1 + len(m.rows("SELECT 1 FROM orders WHERE status = 'cancelled'")),
                },
            ],
        )
    for c in m.pick("SELECT * FROM customers WHERE id > 2", 4):
        n = len(m.rows("SELECT 1 FROM orders WHERE customer_id = ?", c["id"]))
        m.add(
            f"count-orders-{c['id']}",
            2,
            f"How many orders has the customer with email {c['email']} placed? Reply with the number.",
            [
                'click("link:Back office")',
                'click("link:Customers")',
                f'fill("textbox:Name or email", "{c["email"]}")',
                'click("button:Find customers")',
                f"click({q('link:' + c['name'])})",
                f'send_msg_to_user("{n}")',
            ],
            login="sam",
            answer=[str(n)],
        )
    for c in m.pick("SELECT * FROM customers WHERE id > 2 AND id IN (SELECT customer_id FROM orders)", 3):
        top = m.rows("SELECT MAX(total_cents) AS t FROM orders WHERE customer_id = ?", c["id"])[0]["t"]
        m.add(
            f"largest-order-{c['id']}",
            3,
            f"What is the total of the largest order ever placed by the customer with email {c['email']}?",
            [
                'click("link:Back office")',
                'click("link:Customers")',
                f'fill("textbox:Name or email", "{c["email"]}")',
                'click("button:Find customers")',
                f"click({q('link:' + c['name'])})",
                f"send_msg_to_user({q(money(top))})",
            ],
            login="sam",
            answer=[money(top)],
        )
    for c in m.pick("SELECT * FROM customers WHERE id > 2", 3):
        m.add(
            f"city-{c['id']}",
            1,
            f"Which city does the customer {c['name']} ({c['email']}) live in?",
            [f"send_msg_to_user({q(c['city'])})"],
            start=f"/admin/customers/{c['id']}",
            login="sam",
            answer=[c["city"]],
        )


def make_task_set(seed: int = shopdata.DEFAULT_SEED) -> TaskSet:
    meta = TaskSetMeta(
        name="shop-v1",
        family="browser_form",
        description="An online shop and its admin back office (generated data: 1,500 products, 2,000 customers, "
        "5,000 orders): searching, filtering, buying, restocking, cancelling, answering questions; three levels.",
    )
    return make_set(shopdata, meta, seed, 1, [product_tasks, customer_tasks, order_tasks])


if __name__ == "__main__":  # pragma: no cover - the bundled set's maker
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "task_specs/browser_form/shop-v1")
    task_set = make_task_set()
    task_set.write(out)
    print(f"{len(task_set)} tasks written to {out}")
