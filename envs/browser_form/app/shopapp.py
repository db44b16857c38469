"""The shop app: a storefront and its admin back office (Starlette, server-rendered HTML, SQLite),
run inside the browser sandbox like the form app (imported as `shopapp`). Every request opens the
database afresh (the host swaps the file on reset); all state, sessions and carts included, lives in
it. Roles: customers shop; staff read the back office and set order statuses; admins also edit
products, cancel orders, create coupons. No route serves the database or any file.
"""

from __future__ import annotations

import re
import sqlite3
from datetime import date
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

if TYPE_CHECKING or __package__:  # imported from the sandgym package (the host, tests; mypy)
    from .appkit import (
        current_user,
        db,
        e,
        field,
        form_data,
        frame,
        login_route,
        logout,
        page_number,
        pager,
        select,
        signed_in_as,
        table,
        to_login,
    )
    from .uploads import UploadRefused, image_kind, multipart_form
else:  # inside the sandbox, the staged app folder is the import root
    from appkit import (
        current_user,
        db,
        e,
        field,
        form_data,
        frame,
        login_route,
        logout,
        page_number,
        pager,
        select,
        signed_in_as,
        table,
        to_login,
    )
    from uploads import UploadRefused, image_kind, multipart_form

SITE = "Harbour Goods"
PAGE_SIZE = 20
STATUSES = ("pending", "paid", "shipped", "delivered", "cancelled")
SORTS = {"name": "Name", "price_asc": "Price: low to high", "price_desc": "Price: high to low", "rating": "Rating"}
SORT_SQL = dict(name="p.name", price_asc="p.price_cents, p.name", price_desc="p.price_cents DESC, p.name")
SORT_SQL["rating"] = "p.rating DESC, p.name"
PRICE_RE = re.compile(r"^[0-9]{1,6}(\.[0-9]{1,2})?$")
CODE_RE = re.compile(r"^[A-Z0-9]{4,12}$")
POSTAL_RE = re.compile(r"^[A-Za-z0-9 \-]{3,10}$")


def money(cents: int) -> str:
    return f"${cents // 100:,}.{cents % 100:02d}"


def page(title: str, body: str, user: sqlite3.Row | None = None, status: str = "", code: int = 200) -> HTMLResponse:
    links = '<a href="/">Home</a> <a href="/products">Products</a>'
    if user is None:
        links += ' <a href="/login">Sign in</a>'
    else:
        if user["role"] == "customer":
            links += ' <a href="/cart">Cart</a> <a href="/account/orders">My orders</a>'
        else:
            links += ' <a href="/admin">Back office</a>'
        links += signed_in_as(user)
    return frame(SITE, title, links, body, status, code)


def page_of(con: sqlite3.Connection, cols: str, sql: str, args: list, order: str, page_no: int) -> tuple[int, list]:
    """The total count of `sql`'s rows and the rows of page `page_no`."""
    total = con.execute("SELECT COUNT(*)" + sql, args).fetchone()[0]
    limit = f" ORDER BY {order} LIMIT ? OFFSET ?"
    return total, con.execute(f"SELECT {cols}{sql}{limit}", [*args, PAGE_SIZE, (page_no - 1) * PAGE_SIZE]).fetchall()


def forbidden(user: sqlite3.Row) -> HTMLResponse:
    return page("Not allowed", '<p role="alert">Your account may not open this page.</p>', user, code=403)


# -- storefront ---------------------------------------------------------------------------------


async def home(request: Request) -> Response:
    with db() as con:
        user = current_user(con, request)
        cats = con.execute("SELECT id, name FROM categories ORDER BY name").fetchall()
    links = "".join(f'<li><a href="/products?category={c["id"]}">{e(c["name"])}</a></li>' for c in cats)
    search = (
        '<form method="get" action="/products" role="search"><label for="q">Search products</label> '
        '<input id="q" name="q" type="search"> <button>Search</button></form>'
    )
    return page("Harbour Goods", f"{search}<h2>Categories</h2><ul>{links}</ul>", user)


def price_cents(text: str) -> int | None:
    text = text.strip().lstrip("$")
    return round(float(text) * 100) if PRICE_RE.match(text) else None


async def products(request: Request) -> Response:
    qp = request.query_params
    q, cat, sort = qp.get("q", "").strip(), qp.get("category", ""), qp.get("sort", "name")
    lo_text, hi_text, in_stock = qp.get("min_price", ""), qp.get("max_price", ""), qp.get("in_stock") == "1"
    sort = sort if sort in SORTS else "name"
    errors: dict[str, str] = {}
    lo, hi = price_cents(lo_text) if lo_text else 0, price_cents(hi_text) if hi_text else None
    if lo is None:
        errors["min_price"] = "Minimum price must be a number like 12.50."
    if hi_text and hi is None:
        errors["max_price"] = "Maximum price must be a number like 12.50."
    if lo is not None and hi is not None and lo > hi:
        errors["max_price"] = "Maximum price must not be below the minimum price."
    where, args = ["p.active = 1"], list[Any]()
    if q:
        where.append("p.name LIKE ? ESCAPE '\\'")
        args.append("%" + q.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%")
    if cat.isdigit():
        where.append("p.category_id = ?")
        args.append(int(cat))
    if not errors:
        if lo:
            where.append("p.price_cents >= ?")
            args.append(lo)
        if hi is not None:
            where.append("p.price_cents <= ?")
            args.append(hi)
    if in_stock:
        where.append("p.stock > 0")
    page_no = page_number(request)
    with db() as con:
        user = current_user(con, request)
        cats = con.execute("SELECT id, name FROM categories ORDER BY name").fetchall()
        sql = " FROM products p JOIN categories c ON c.id = p.category_id WHERE " + " AND ".join(where)
        total, rows = page_of(con, "p.*, c.name AS category", sql, args, SORT_SQL[sort], page_no)
    filters = (
        '<form method="get" action="/products" role="search" aria-label="Filters">'
        '<p><label for="q">Search products</label> '
        f'<input id="q" name="q" type="search" value="{e(q)}"></p>'
        + select("Category", "category", [("", "All categories")] + [(str(c["id"]), c["name"]) for c in cats], cat)
        + field("Minimum price", "min_price", lo_text, error=errors.get("min_price", ""))
        + field("Maximum price", "max_price", hi_text, error=errors.get("max_price", ""))
        + f'<p><label><input type="checkbox" name="in_stock" value="1"{" checked" if in_stock else ""}> '
        "In stock only</label></p>"
        + select("Sort by", "sort", list(SORTS.items()), sort)
        + "<button>Apply filters</button></form>"
    )
    cells = [
        [
            f'<a href="/products/{e(r["sku"])}">{e(r["name"])}</a>',
            e(r["category"]),
            money(r["price_cents"]),
            "In stock" if r["stock"] else "Out of stock",
            f"{r['rating']:.1f}",
        ]
        for r in rows
    ]
    params = {k: v for k, v in qp.items() if k != "page"}
    body = filters + table("Products", ["Product", "Category", "Price", "Availability", "Rating"], cells)
    return page(
        "Products",
        body + pager("/products", params, page_no, total, PAGE_SIZE, "results"),
        user,
        code=400 if errors else 200,
    )


async def product(request: Request) -> Response:
    sku = request.path_params["sku"]
    with db() as con:
        user = current_user(con, request)
        p = con.execute(
            "SELECT p.*, c.name AS category FROM products p JOIN categories c ON c.id = p.category_id "
            "WHERE p.sku = ? AND p.active = 1",
            (sku,),
        ).fetchone()
        if p is None:
            return page("Not found", "<p>No such product.</p>", user, code=404)
        error, status = "", ""
        if request.method == "POST":
            if user is None:
                return to_login(request)
            raw = (await form_data(request)).get("qty", "").strip()
            qty = int(raw) if raw.isdigit() else 0
            if not 1 <= qty <= min(p["stock"], 20):
                error = f"Quantity must be between 1 and {min(p['stock'], 20)}." if p["stock"] else "Out of stock."
            else:
                con.execute(
                    "INSERT INTO cart_items (user_id, product_id, qty) VALUES (?, ?, ?) "
                    "ON CONFLICT (user_id, product_id) DO UPDATE SET qty = qty + excluded.qty",
                    (user["id"], p["id"], qty),
                )
                status = f"Added {qty} x {p['name']} to your cart."
    facts = (
        f"<dl><dt>Price</dt><dd>{money(p['price_cents'])}</dd><dt>Category</dt><dd>{e(p['category'])}</dd>"
        f"<dt>In stock</dt><dd>{p['stock']}</dd><dt>Rating</dt><dd>{p['rating']:.1f}</dd>"
        f"<dt>SKU</dt><dd>{e(p['sku'])}</dd></dl>"
    )
    buy = (
        f'<form method="post" action="/products/{e(sku)}">'
        + field("Quantity", "qty", "1", kind="number", error=error)
        + "<button>Add to cart</button></form>"
        if user is not None and user["role"] == "customer"
        else ""
    )
    return page(p["name"], facts + buy, user, status=status, code=400 if error else 200)


def cart_lines(con: sqlite3.Connection, user_id: int) -> list[sqlite3.Row]:
    return con.execute(
        "SELECT p.id, p.sku, p.name, p.price_cents, p.stock, ci.qty FROM cart_items ci "
        "JOIN products p ON p.id = ci.product_id WHERE ci.user_id = ? ORDER BY p.name",
        (user_id,),
    ).fetchall()


async def cart(request: Request) -> Response:
    with db() as con:
        user = current_user(con, request)
        if user is None:
            return to_login(request)
        if request.method == "POST":
            pid = (await form_data(request)).get("remove", "")
            con.execute("DELETE FROM cart_items WHERE user_id = ? AND product_id = ?", (user["id"], pid))
        lines = cart_lines(con, user["id"])
    if not lines:
        return page("Your cart", "<p>Your cart is empty.</p>", user)
    cells = [
        [
            e(r["name"]),
            str(r["qty"]),
            money(r["qty"] * r["price_cents"]),
            f'<form method="post" action="/cart"><button name="remove" value="{r["id"]}">Remove {e(r["name"])}</button>'
            "</form>",
        ]
        for r in lines
    ]
    total = sum(r["qty"] * r["price_cents"] for r in lines)
    body = table("Cart", ["Product", "Quantity", "Subtotal", ""], cells)
    return page("Your cart", body + f'<p>Total: {money(total)}</p><a href="/checkout">Checkout</a>', user)


async def checkout(request: Request) -> Response:
    keys = {"ship_name": "Full name", "ship_address": "Address", "ship_city": "City", "ship_postal": "Postal code"}
    with db() as con:
        user = current_user(con, request)
        if user is None:
            return to_login(request)
        if not cart_lines(con, user["id"]):
            return page("Checkout", "<p>Your cart is empty.</p>", user)
        d = {k: "" for k in keys}
        errors: dict[str, str] = {}
        if request.method == "POST":
            raw = await form_data(request)
            d = {k: raw.get(k, "").strip() for k in keys}
            errors = {k: f"{label} is required." for k, label in keys.items() if not d[k]}
            if d["ship_postal"] and not POSTAL_RE.match(d["ship_postal"]):
                errors["ship_postal"] = "Postal code must be 3 to 10 letters, digits, spaces or dashes."
            if not errors:
                con.execute("INSERT OR REPLACE INTO checkouts VALUES (?, ?, ?, ?, ?)", (user["id"], *d.values()))
                return RedirectResponse("/checkout/review", status_code=303)
    form = (
        '<form method="post" action="/checkout"><p>Step 1 of 2: shipping address</p>'
        + "".join(field(label, k, d[k], error=errors.get(k, "")) for k, label in keys.items())
        + "<button>Continue to review</button></form>"
    )
    alert = '<p role="alert">Please fix the errors below.</p>' if errors else ""
    return page("Checkout", alert + form, user, code=400 if errors else 200)


async def review(request: Request) -> Response:
    with db() as con:
        user = current_user(con, request)
        if user is None:
            return to_login(request)
        lines = cart_lines(con, user["id"])
        ship = con.execute("SELECT * FROM checkouts WHERE user_id = ?", (user["id"],)).fetchone()
        if not lines or ship is None:
            return RedirectResponse("/checkout", status_code=303)
        total = sum(r["qty"] * r["price_cents"] for r in lines)
        short = [r["name"] for r in lines if r["qty"] > r["stock"]]
        if request.method == "POST" and not short and user["customer_id"] is not None:
            cur = con.execute(
                "INSERT INTO orders (customer_id, placed, status, total_cents, ship_name, ship_address, ship_city, "
                "ship_postal) VALUES (?, ?, 'pending', ?, ?, ?, ?, ?)",
                (
                    user["customer_id"],
                    date.today().isoformat(),
                    total,
                    ship["ship_name"],
                    ship["ship_address"],
                    ship["ship_city"],
                    ship["ship_postal"],
                ),
            )
            for r in lines:
                con.execute(
                    "INSERT INTO order_items VALUES (?, ?, ?, ?)", (cur.lastrowid, r["id"], r["qty"], r["price_cents"])
                )
                con.execute("UPDATE products SET stock = stock - ? WHERE id = ?", (r["qty"], r["id"]))
            con.execute("DELETE FROM cart_items WHERE user_id = ?", (user["id"],))
            con.execute("DELETE FROM checkouts WHERE user_id = ?", (user["id"],))
            return RedirectResponse(f"/account/orders/{cur.lastrowid}?placed=1", status_code=303)
    cells = [[e(r["name"]), str(r["qty"]), money(r["qty"] * r["price_cents"])] for r in lines]
    alert = f'<p role="alert">Not enough stock for: {e(", ".join(short))}.</p>' if short else ""
    body = (
        alert
        + "<p>Step 2 of 2: review</p>"
        + table("Order summary", ["Product", "Quantity", "Subtotal"], cells)
        + f"<p>Ship to {e(ship['ship_name'])}, {e(ship['ship_address'])}, {e(ship['ship_city'])} "
        f"{e(ship['ship_postal'])}</p><p>Total: {money(total)}</p>"
        '<form method="post" action="/checkout/review"><button>Place order</button></form>'
    )
    return page("Review your order", body, user)


async def my_orders(request: Request) -> Response:
    with db() as con:
        user = current_user(con, request)
        if user is None:
            return to_login(request)
        rows = con.execute(
            "SELECT * FROM orders WHERE customer_id = ? ORDER BY placed DESC, id DESC", (user["customer_id"],)
        ).fetchall()
    cells = [
        [f'<a href="/account/orders/{r["id"]}">Order {r["id"]}</a>', r["placed"], r["status"], money(r["total_cents"])]
        for r in rows
    ]
    return page("My orders", table("My orders", ["Order", "Placed", "Status", "Total"], cells), user)


def order_items_table(con: sqlite3.Connection, order_id: int) -> str:
    items = con.execute(
        "SELECT p.name, oi.qty, oi.price_cents FROM order_items oi JOIN products p ON p.id = oi.product_id "
        "WHERE oi.order_id = ? ORDER BY p.name",
        (order_id,),
    ).fetchall()
    cells = [[e(i["name"]), str(i["qty"]), money(i["price_cents"])] for i in items]
    return table("Items", ["Product", "Quantity", "Unit price"], cells)


async def my_order(request: Request) -> Response:
    with db() as con:
        user = current_user(con, request)
        if user is None:
            return to_login(request)
        o = con.execute(
            "SELECT * FROM orders WHERE id = ? AND customer_id = ?", (request.path_params["oid"], user["customer_id"])
        ).fetchone()
        if o is None:
            return page("Not found", "<p>No such order.</p>", user, code=404)
        items = order_items_table(con, o["id"])
    status = f"Order {o['id']} placed." if request.query_params.get("placed") else ""
    facts = f"<p>Status: {e(o['status'])}. Placed {o['placed']}. Total: {money(o['total_cents'])}.</p>"
    return page(f"Order {o['id']}", facts + items, user, status=status)


# -- back office ----------------------------------------------------------------------------------


def staff_only(con: sqlite3.Connection, request: Request) -> tuple[Any, Response | None]:
    """The signed-in staff or admin user, or the response that refuses the request."""
    user = current_user(con, request)
    if user is None:
        return None, to_login(request)
    if user["role"] not in ("admin", "staff"):
        return None, forbidden(user)
    return user, None


async def admin_home(request: Request) -> Response:
    with db() as con:
        user, refused = staff_only(con, request)
        if refused:
            return refused
        counts = {s: n for s, n in con.execute("SELECT status, COUNT(*) FROM orders GROUP BY status")}
    links = (
        '<ul><li><a href="/admin/orders">Orders</a></li><li><a href="/admin/products">Catalogue</a></li>'
        '<li><a href="/admin/customers">Customers</a></li><li><a href="/admin/coupons">Coupons</a></li></ul>'
    )
    cells = [[s, f"{counts.get(s, 0):,}"] for s in STATUSES]
    return page("Back office", links + table("Orders by status", ["Status", "Orders"], cells), user)


async def admin_orders(request: Request) -> Response:
    qp = request.query_params
    status, customer = qp.get("status", ""), qp.get("customer", "").strip()
    where, args = ["1 = 1"], list[Any]()
    if status in STATUSES:
        where.append("o.status = ?")
        args.append(status)
    if customer:
        where.append("c.name LIKE ?")
        args.append(f"%{customer}%")
    page_no = page_number(request)
    with db() as con:
        user, refused = staff_only(con, request)
        if refused:
            return refused
        sql = " FROM orders o JOIN customers c ON c.id = o.customer_id WHERE " + " AND ".join(where)
        total, rows = page_of(con, "o.*, c.name AS customer", sql, args, "o.placed DESC, o.id DESC", page_no)
    filters = (
        '<form method="get" action="/admin/orders" role="search" aria-label="Order filters">'
        + select("Status", "status", [("", "Any status")] + [(s, s.capitalize()) for s in STATUSES], status)
        + field("Customer name", "customer", customer)
        + "<button>Filter orders</button></form>"
    )
    cells = [
        [
            f'<a href="/admin/orders/{r["id"]}">Order {r["id"]}</a>',
            r["placed"],
            e(r["customer"]),
            r["status"],
            money(r["total_cents"]),
        ]
        for r in rows
    ]
    params = {k: v for k, v in qp.items() if k != "page"}
    body = filters + table("Orders", ["Order", "Placed", "Customer", "Status", "Total"], cells)
    return page("Orders", body + pager("/admin/orders", params, page_no, total, PAGE_SIZE, "results"), user)


async def admin_order(request: Request) -> Response:
    oid = request.path_params["oid"]
    with db() as con:
        user, refused = staff_only(con, request)
        if refused:
            return refused
        o = con.execute(
            "SELECT o.*, c.name AS customer FROM orders o JOIN customers c ON c.id = o.customer_id WHERE o.id = ?",
            (oid,),
        ).fetchone()
        if o is None:
            return page("Not found", "<p>No such order.</p>", user, code=404)
        error, status = "", ""
        if request.method == "POST":
            d = await form_data(request)
            if d.get("action") == "cancel":
                reason = d.get("reason", "").strip()
                if user["role"] != "admin":
                    return forbidden(user)
                if o["status"] in ("shipped", "delivered", "cancelled"):
                    error = f"A {o['status']} order cannot be cancelled."
                elif not 3 <= len(reason) <= 200:
                    error = "Give a reason of 3 to 200 characters."
                else:
                    con.execute("UPDATE orders SET status = 'cancelled', cancel_reason = ? WHERE id = ?", (reason, oid))
                    con.execute(
                        "UPDATE products SET stock = stock + (SELECT qty FROM order_items "
                        "WHERE order_id = ? AND product_id = products.id) "
                        "WHERE id IN (SELECT product_id FROM order_items WHERE order_id = ?)",
                        (oid, oid),
                    )
                    status = f"Order {oid} cancelled."
            else:
                new = d.get("status", "")
                if new not in STATUSES or new == "cancelled":
                    error = "Choose pending, paid, shipped or delivered; cancel an order with Cancel order."
                elif o["status"] == "cancelled":
                    error = "A cancelled order cannot change status."
                else:
                    con.execute("UPDATE orders SET status = ? WHERE id = ?", (new, oid))
                    status = f"Order {oid} is now {new}."
            o = con.execute(
                "SELECT o.*, c.name AS customer FROM orders o JOIN customers c ON c.id = o.customer_id WHERE o.id = ?",
                (oid,),
            ).fetchone()
        items = order_items_table(con, o["id"])
    facts = (
        f'<p>Customer: <a href="/admin/customers/{o["customer_id"]}">{e(o["customer"])}</a>. Placed {o["placed"]}. '
        f"Status: {e(o['status'])}. Total: {money(o['total_cents'])}.</p>"
        f"<p>Ship to {e(o['ship_name'])}, {e(o['ship_address'])}, {e(o['ship_city'])} {e(o['ship_postal'])}</p>"
        + (f"<p>Cancelled: {e(o['cancel_reason'])}</p>" if o["cancel_reason"] else "")
    )
    alert = f'<p role="alert">{e(error)}</p>' if error else ""
    change = (
        f'<form method="post" action="/admin/orders/{oid}">'
        + select("New status", "status", [(s, s.capitalize()) for s in STATUSES if s != "cancelled"], o["status"])
        + "<button>Save status</button></form>"
    )
    # A modal dialog (the platform's <dialog>): the reason is asked for before anything changes.
    cancel = (
        '<button type="button" onclick="document.getElementById(\'cancel-dialog\').showModal()">Cancel order</button>'
        '<dialog id="cancel-dialog" aria-labelledby="cancel-title"><h2 id="cancel-title">Cancel this order?</h2>'
        f'<form method="post" action="/admin/orders/{oid}"><input type="hidden" name="action" value="cancel">'
        + field("Reason", "reason")
        + '<button>Confirm cancellation</button> <button type="button" '
        "onclick=\"document.getElementById('cancel-dialog').close()\">Keep order</button></form></dialog>"
        if user["role"] == "admin"
        else ""
    )
    body = alert + facts + items + change + cancel
    return page(f"Order {o['id']}", body, user, status=status, code=400 if error else 200)


async def admin_products(request: Request) -> Response:
    qp = request.query_params
    q, cat, low = qp.get("q", "").strip(), qp.get("category", ""), qp.get("low_stock") == "1"
    sort = qp.get("sort", "name")
    sort = sort if sort in SORTS else "name"
    where, args = ["1 = 1"], list[Any]()
    if q:
        where.append("(p.name LIKE ? OR p.sku = ?)")
        args += [f"%{q}%", q]
    if cat.isdigit():
        where.append("p.category_id = ?")
        args.append(int(cat))
    if low:
        where.append("p.stock < 5")
    page_no = page_number(request)
    with db() as con:
        user, refused = staff_only(con, request)
        if refused:
            return refused
        cats = con.execute("SELECT id, name FROM categories ORDER BY name").fetchall()
        sql = " FROM products p JOIN categories c ON c.id = p.category_id WHERE " + " AND ".join(where)
        total, rows = page_of(con, "p.*, c.name AS category", sql, args, SORT_SQL[sort], page_no)
    filters = (
        '<form method="get" action="/admin/products" role="search" aria-label="Catalogue filters">'
        + field("Name or SKU", "q", q)
        + select("Category", "category", [("", "All categories")] + [(str(c["id"]), c["name"]) for c in cats], cat)
        + f'<p><label><input type="checkbox" name="low_stock" value="1"{" checked" if low else ""}> '
        "Low stock only</label></p>"
        + select("Sort by", "sort", list(SORTS.items()), sort)
        + "<button>Filter catalogue</button></form>"
    )
    cells = [
        [
            f'<a href="/admin/products/{e(r["sku"])}">{e(r["sku"])}</a>',
            e(r["name"]),
            e(r["category"]),
            money(r["price_cents"]),
            str(r["stock"]),
            "yes" if r["active"] else "no",
        ]
        for r in rows
    ]
    params = {k: v for k, v in qp.items() if k != "page"}
    body = filters + table("Catalogue", ["SKU", "Name", "Category", "Price", "Stock", "Listed"], cells)
    return page("Catalogue", body + pager("/admin/products", params, page_no, total, PAGE_SIZE, "results"), user)


async def admin_product(request: Request) -> Response:
    sku = request.path_params["sku"]
    with db() as con:
        user, refused = staff_only(con, request)
        if refused:
            return refused
        p = con.execute("SELECT * FROM products WHERE sku = ?", (sku,)).fetchone()
        if p is None:
            return page("Not found", "<p>No such product.</p>", user, code=404)
        d = {"price": f"{p['price_cents'] / 100:.2f}", "stock": str(p["stock"]), "active": str(p["active"])}
        image = con.execute("SELECT filename, size FROM product_images WHERE sku = ?", (sku,)).fetchone()
        errors: dict[str, str] = {}
        status = "Image uploaded." if request.query_params.get("saved") == "image" else ""
        if request.method == "POST":
            if user["role"] != "admin":
                return forbidden(user)
            raw = await form_data(request)
            d = {
                "price": raw.get("price", "").strip(),
                "stock": raw.get("stock", "").strip(),
                "active": "1" if raw.get("active") == "1" else "0",
            }
            cents = price_cents(d["price"])
            if cents is None or cents <= 0:
                errors["price"] = "Price must be a positive amount like 19.99."
            if not d["stock"].isdigit() or int(d["stock"]) > 100_000:
                errors["stock"] = "Stock must be a whole number from 0 to 100000."
            if not errors:
                con.execute(
                    "UPDATE products SET price_cents = ?, stock = ?, active = ? WHERE id = ?",
                    (cents, int(d["stock"]), int(d["active"]), p["id"]),
                )
                status = "Product saved."
    checked = " checked" if d["active"] == "1" else ""
    form = (
        f'<form method="post" action="/admin/products/{e(sku)}"><p>{e(p["name"])} ({e(sku)})</p>'
        + field("Price", "price", d["price"], error=errors.get("price", ""))
        + field("Stock", "stock", d["stock"], error=errors.get("stock", ""))
        + f'<p><label><input type="checkbox" name="active" value="1"{checked}> Listed in the shop</label></p>'
        + "<button>Save product</button></form>"
    )
    alert = '<p role="alert">Please fix the errors below.</p>' if errors else ""
    body = alert + form + image_form(sku, image)
    return page("Edit product", body, user, status=status, code=400 if errors else 200)


def image_form(sku: str, image: sqlite3.Row | None, error: str = "") -> str:
    """The product image's upload form and what is there now."""
    now = f"Current image: {e(image['filename'])} ({image['size']:,} bytes)." if image else "No image yet."
    err = f'<span id="image-error" role="alert">{e(error)}</span>' if error else ""
    described = ' aria-describedby="image-error" aria-invalid="true"' if error else ""
    return (
        f'<h2>Product image</h2><p>{now}</p><form method="post" action="/admin/products/{e(sku)}/image" '
        'enctype="multipart/form-data"><p><label for="image">Image file (PNG, JPEG or GIF)</label> '
        f'<input id="image" name="image" type="file" accept="image/png,image/jpeg,image/gif"{described}> {err}</p>'
        "<button>Upload image</button></form>"
    )


async def admin_product_image(request: Request) -> Response:
    """An admin replaces a product's image: one PNG, JPEG or GIF, judged by its bytes, kept in the database."""
    sku = request.path_params["sku"]
    with db() as con:
        user, refused = staff_only(con, request)
        if refused:
            return refused
        if user["role"] != "admin":
            return forbidden(user)
        if con.execute("SELECT 1 FROM products WHERE sku = ?", (sku,)).fetchone() is None:
            return page("Not found", "<p>No such product.</p>", user, code=404)
        try:
            _, files = await multipart_form(request)
            image = next((f for f in files if f.field == "image"), None)
            if image is None or not image.data:
                raise UploadRefused("Choose an image file to upload.")
            kind = image_kind(image.data)
            if kind is None:
                raise UploadRefused("The file is not a PNG, JPEG or GIF image.")
        except UploadRefused as err:
            current = con.execute("SELECT * FROM product_images WHERE sku = ?", (sku,)).fetchone()
            return page("Product image", image_form(sku, current, str(err)), user, code=400)
        # The bytes by their hash in a table of their own: the checked table holds no BLOB.
        con.execute("INSERT OR IGNORE INTO blobs (sha256, data) VALUES (?, ?)", (image.sha256, image.data))
        con.execute(
            "INSERT OR REPLACE INTO product_images (sku, filename, kind, size, sha256) VALUES (?, ?, ?, ?, ?)",
            (sku, image.filename, kind, len(image.data), image.sha256),
        )
    return RedirectResponse(f"/admin/products/{quote(sku)}?saved=image", status_code=303)


async def admin_customers(request: Request) -> Response:
    q = request.query_params.get("q", "").strip()
    where, args = "1 = 1", []
    if q:
        where, args = "(name LIKE ? OR email LIKE ?)", [f"%{q}%", f"%{q}%"]
    page_no = page_number(request)
    with db() as con:
        user, refused = staff_only(con, request)
        if refused:
            return refused
        total, rows = page_of(con, "*", f" FROM customers WHERE {where}", args, "name, id", page_no)
    filters = (
        '<form method="get" action="/admin/customers" role="search" aria-label="Customer search">'
        + field("Name or email", "q", q)
        + "<button>Find customers</button></form>"
    )
    cells = [
        [f'<a href="/admin/customers/{r["id"]}">{e(r["name"])}</a>', e(r["email"]), e(r["city"]), r["joined"]]
        for r in rows
    ]
    body = filters + table("Customers", ["Name", "Email", "City", "Joined"], cells)
    return page(
        "Customers", body + pager("/admin/customers", {"q": q} if q else {}, page_no, total, PAGE_SIZE, "results"), user
    )


async def admin_customer(request: Request) -> Response:
    with db() as con:
        user, refused = staff_only(con, request)
        if refused:
            return refused
        c = con.execute("SELECT * FROM customers WHERE id = ?", (request.path_params["cid"],)).fetchone()
        if c is None:
            return page("Not found", "<p>No such customer.</p>", user, code=404)
        rows = con.execute(
            "SELECT * FROM orders WHERE customer_id = ? ORDER BY placed DESC, id DESC", (c["id"],)
        ).fetchall()
    spent = sum(r["total_cents"] for r in rows if r["status"] != "cancelled")
    facts = (
        f"<dl><dt>Email</dt><dd>{e(c['email'])}</dd><dt>City</dt><dd>{e(c['city'])}</dd>"
        f"<dt>Joined</dt><dd>{c['joined']}</dd><dt>Orders</dt><dd>{len(rows)}</dd>"
        f"<dt>Total spent</dt><dd>{money(spent)}</dd></dl>"
    )
    cells = [
        [f'<a href="/admin/orders/{r["id"]}">Order {r["id"]}</a>', r["placed"], r["status"], money(r["total_cents"])]
        for r in rows
    ]
    return page(c["name"], facts + table("Orders", ["Order", "Placed", "Status", "Total"], cells), user)


async def admin_coupons(request: Request) -> Response:
    with db() as con:
        user, refused = staff_only(con, request)
        if refused:
            return refused
        rows = con.execute("SELECT * FROM coupons ORDER BY code").fetchall()
    cells = [[e(r["code"]), f"{r['percent']}%", r["expires"]] for r in rows]
    new = '<a href="/admin/coupons/new">New coupon</a>' if user is not None and user["role"] == "admin" else ""
    return page("Coupons", table("Coupons", ["Code", "Discount", "Expires"], cells) + new, user)


async def admin_coupon_new(request: Request) -> Response:
    keys = {"code": "Code", "percent": "Percent off", "expires": "Expires on"}
    with db() as con:
        user, refused = staff_only(con, request)
        if refused:
            return refused
        if user["role"] != "admin":
            return forbidden(user)
        d = {k: "" for k in keys}
        errors: dict[str, str] = {}
        if request.method == "POST":
            raw = await form_data(request)
            d = {k: raw.get(k, "").strip() for k in keys}
            if not CODE_RE.match(d["code"]):
                errors["code"] = "Code must be 4 to 12 capital letters or digits."
            elif con.execute("SELECT 1 FROM coupons WHERE code = ?", (d["code"],)).fetchone():
                errors["code"] = "A coupon with this code exists."
            if not d["percent"].isdigit() or not 1 <= int(d["percent"]) <= 90:
                errors["percent"] = "Percent off must be a whole number from 1 to 90."
            try:
                date.fromisoformat(d["expires"])
            except ValueError:
                errors["expires"] = "Expiry must be a date like 2026-12-31."
            if not errors:
                con.execute("INSERT INTO coupons VALUES (?, ?, ?)", (d["code"], int(d["percent"]), d["expires"]))
                return RedirectResponse("/admin/coupons", status_code=303)
    form = (
        '<form method="post" action="/admin/coupons/new">'
        + "".join(field(label, k, d[k], error=errors.get(k, "")) for k, label in keys.items())
        + "<button>Create coupon</button></form>"
    )
    alert = '<p role="alert">Please fix the errors below.</p>' if errors else ""
    return page("New coupon", alert + form, user, code=400 if errors else 200)


login = login_route(page)
RW = ["GET", "POST"]
PAGES = {
    "/": home,
    "/products": products,
    "/account/orders": my_orders,
    "/account/orders/{oid:int}": my_order,
    "/admin": admin_home,
    "/admin/orders": admin_orders,
    "/admin/products": admin_products,
    "/admin/customers": admin_customers,
    "/admin/customers/{cid:int}": admin_customer,
    "/admin/coupons": admin_coupons,
}
FORMS = {
    "/login": login,
    "/products/{sku}": product,
    "/cart": cart,
    "/checkout": checkout,
    "/checkout/review": review,
    "/admin/orders/{oid:int}": admin_order,
    "/admin/products/{sku}": admin_product,
    "/admin/coupons/new": admin_coupon_new,
}
app = Starlette(
    routes=[Route(path, fn) for path, fn in PAGES.items()]
    + [Route(path, fn, methods=RW) for path, fn in FORMS.items()]
    + [Route("/logout", logout, methods=["POST"])]
    + [Route("/admin/products/{sku}/image", admin_product_image, methods=["POST"])]
)
