"""The bundled form app: Starlette, server-rendered HTML, SQLite. Runs inside the browser sandbox.

Every request opens the database afresh (the host swaps the file on reset),
and every piece of state lives in it, sessions and carts included, so
nothing survives a reset in memory. Nothing here reaches any other system.
Inside the sandbox it is imported as `formapp`; what the apps share is in appkit.py.
"""

from __future__ import annotations

import json
import re
import sqlite3
from datetime import date
from typing import TYPE_CHECKING

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

if TYPE_CHECKING or __package__:  # imported from the sandgym package (the host, tests; mypy)
    from . import appkit
    from .appkit import (
        COOKIE,
        db,
        e,
        field,
        form_data,
        frame,
        login_form,
        logout,
        password_ok,
        safe_next,
        select,
        signed_in,
        signed_in_as,
        to_login,
    )
else:  # inside the sandbox, the staged app folder is the import root
    import appkit
    from appkit import (
        COOKIE,
        db,
        e,
        field,
        form_data,
        frame,
        login_form,
        logout,
        password_ok,
        safe_next,
        select,
        signed_in,
        signed_in_as,
        to_login,
    )

SITE = "Acme Portal"
EMAIL_RE = re.compile(r"^[^@\s]+@[^@\s]+\.[A-Za-z]{2,}$")
PHONE_RE = re.compile(r"^\+?[0-9][0-9 \-]{5,18}[0-9]$")
CARD_RE = re.compile(r"^[0-9]{16}$")
EXPIRY_RE = re.compile(r"^(0[1-9]|1[0-2])/[0-9]{2}$")
POSTAL_RE = re.compile(r"^[A-Za-z0-9 \-]{3,10}$")
SHIPPING = {"standard": ("Standard (5 days)", 0), "express": ("Express (1 day)", 900)}
THEMES = ("light", "dark", "system")


def current_user(con: sqlite3.Connection, request: Request) -> sqlite3.Row | None:
    return appkit.current_user(con, request, active="u.deleted = 0")


def page(title: str, body: str, user: sqlite3.Row | None = None, status: str = "", code: int = 200) -> HTMLResponse:
    if user is not None:
        nav = (
            '<a href="/">Home</a> <a href="/profile">Profile</a> <a href="/settings">Settings</a> '
            '<a href="/shop">Shop</a> <a href="/cart">Cart</a> <a href="/book">Book a room</a> '
            '<a href="/messages">Messages</a>' + signed_in_as(user)
        )
    else:
        nav = '<a href="/">Home</a> <a href="/login">Sign in</a>'
    return frame(SITE, title, nav, body, status, code)


def money(cents: int) -> str:
    return f"${cents // 100}.{cents % 100:02d}"


# -- home, sign in ---------------------------------------------------------------------------


async def home(request: Request) -> Response:
    with db() as con:
        user = current_user(con, request)
    if user is None:
        return page("Welcome", "<p>Sign in to manage your account, shop, book rooms and send messages.</p>")
    return page("Welcome", f"<p>Hello, {e(user['display_name'])}.</p>", user)


async def login(request: Request) -> Response:
    if request.method == "GET":
        return page("Sign in", login_form(safe_next(request.query_params.get("next", "/")), required=True))
    data = await form_data(request)
    username, password = data.get("username", "").strip(), data.get("password", "")
    with db() as con:
        user = con.execute("SELECT * FROM users WHERE username = ? AND deleted = 0", (username,)).fetchone()
        ok = password_ok(user, password)
        con.execute("INSERT INTO logins (username, ok) VALUES (?, ?)", (username, int(ok)))
        if user is None or not ok:
            body = login_form(safe_next(data.get("next", "/")), "Invalid username or password.", username, True)
            return page("Sign in", body, code=401)
        return signed_in(con, user["id"], data.get("next", "/"))


# -- profile and settings --------------------------------------------------------------------


def profile_errors(d: dict[str, str]) -> dict[str, str]:
    errors = {}
    if not 2 <= len(d["display_name"]) <= 40:
        errors["display_name"] = "Display name must be 2 to 40 characters."
    if not EMAIL_RE.match(d["email"]):
        errors["email"] = "Enter a valid email address, like name@example.com."
    if d["phone"] and not PHONE_RE.match(d["phone"]):
        errors["phone"] = "Phone may hold digits, spaces, dashes and a leading +."
    if len(d["bio"]) > 200:
        errors["bio"] = "Bio must be at most 200 characters."
    return errors


def profile_form(d: dict[str, str], errors: dict[str, str]) -> str:
    return (
        '<form method="post" action="/profile">'
        + field("Display name", "display_name", d["display_name"], error=errors.get("display_name", ""))
        + field("Email", "email", d["email"], error=errors.get("email", ""))
        + field("Phone", "phone", d["phone"], error=errors.get("phone", ""))
        + field("Bio", "bio", d["bio"], kind="textarea", error=errors.get("bio", ""))
        + "<button>Save profile</button></form>"
    )


async def profile(request: Request) -> Response:
    keys = ("display_name", "email", "phone", "bio")
    with db() as con:
        user = current_user(con, request)
        if user is None:
            return to_login(request)
        if request.method == "GET":
            return page("Profile", profile_form({k: user[k] for k in keys}, {}), user)
        raw = await form_data(request)
        d = {k: raw.get(k, "").strip() for k in keys}
        errors = profile_errors(d)
        if errors:
            return page(
                "Profile", '<p role="alert">Please fix the errors below.</p>' + profile_form(d, errors), user, code=400
            )
        con.execute(
            "UPDATE users SET display_name = ?, email = ?, phone = ?, bio = ? WHERE id = ?", (*d.values(), user["id"])
        )
        user = current_user(con, request)
        return page("Profile", profile_form(d, {}), user, status="Profile saved.")


def settings_form(user: sqlite3.Row) -> str:
    checked = " checked" if user["newsletter"] else ""
    radios = "".join(
        f'<label><input type="radio" name="theme" value="{t}"{" checked" if user["theme"] == t else ""}> '
        f"{t.capitalize()}</label> "
        for t in THEMES
    )
    return (
        '<form method="post" action="/settings">'
        f'<p><label><input type="checkbox" name="newsletter" value="1"{checked}> Email me the newsletter</label></p>'
        f"<fieldset><legend>Theme</legend>{radios}</fieldset><button>Save settings</button></form>"
        '<h2>Danger zone</h2><form method="post" action="/account/delete">'
        "<button>Delete my account</button></form>"
    )


async def settings(request: Request) -> Response:
    with db() as con:
        user = current_user(con, request)
        if user is None:
            return to_login(request)
        if request.method == "GET":
            return page("Settings", settings_form(user), user)
        d = await form_data(request)
        theme = d.get("theme", user["theme"])
        if theme not in THEMES:
            return page("Settings", '<p role="alert">Unknown theme.</p>' + settings_form(user), user, code=400)
        con.execute(
            "UPDATE users SET newsletter = ?, theme = ? WHERE id = ?",
            (int(d.get("newsletter") == "1"), theme, user["id"]),
        )
        user = current_user(con, request)
        assert user is not None  # the same session, read again after the update
        return page("Settings", settings_form(user), user, status="Settings saved.")


async def delete_account(request: Request) -> Response:
    with db() as con:
        user = current_user(con, request)
        if user is None:
            return to_login(request)
        con.execute("UPDATE users SET deleted = 1 WHERE id = ?", (user["id"],))
        con.execute("DELETE FROM sessions WHERE user_id = ?", (user["id"],))
    return page("Account deleted", "<p>Your account was deleted.</p>")


# -- shop and checkout -----------------------------------------------------------------------


def cart_rows(con: sqlite3.Connection, token: str) -> list[sqlite3.Row]:
    return con.execute(
        "SELECT c.sku, c.qty, p.name, p.price_cents, p.stock FROM cart_items c "
        "JOIN products p ON p.sku = c.sku WHERE c.session = ? ORDER BY p.name",
        (token,),
    ).fetchall()


async def shop(request: Request) -> Response:
    with db() as con:
        user = current_user(con, request)
        if user is None:
            return to_login(request)
        products = con.execute("SELECT * FROM products ORDER BY name").fetchall()
    rows = []
    for p in products:
        if p["stock"] > 0:
            action = (
                f'<form method="post" action="/cart/add"><input type="hidden" name="sku" value="{e(p["sku"])}">'
                f'<button aria-label="Add {e(p["name"])} to cart">Add to cart</button></form>'
            )
        else:
            action = "Out of stock"
        rows.append(f"<tr><td>{e(p['name'])}</td><td>{money(p['price_cents'])}</td><td>{action}</td></tr>")
    table = f"<table><tr><th>Product</th><th>Price</th><th></th></tr>{''.join(rows)}</table>"
    return page(
        "Shop",
        table + '<p><a href="/cart">View cart</a></p>',
        user,
        status=request.query_params.get("added", "") and "Added to cart.",
    )


async def cart_add(request: Request) -> Response:
    d = await form_data(request)
    with db() as con:
        user = current_user(con, request)
        if user is None:
            return to_login(request)
        token = request.cookies[COOKIE]
        p = con.execute("SELECT * FROM products WHERE sku = ? AND stock > 0", (d.get("sku", ""),)).fetchone()
        if p is not None:
            con.execute(
                "INSERT INTO cart_items (session, sku, qty) VALUES (?, ?, 1) "
                "ON CONFLICT (session, sku) DO UPDATE SET qty = qty + 1",
                (token, p["sku"]),
            )
    return RedirectResponse("/shop?added=1", status_code=303)


async def cart(request: Request) -> Response:
    with db() as con:
        user = current_user(con, request)
        if user is None:
            return to_login(request)
        token = request.cookies[COOKIE]
        error = ""
        if request.method == "POST":
            d = await form_data(request)
            for row in cart_rows(con, token):
                raw = d.get(f"qty-{row['sku']}", str(row["qty"])).strip()
                if not raw.isdigit() or int(raw) > row["stock"]:
                    error = f"Quantity of {row['name']} must be a whole number from 0 to {row['stock']}."
                    break
            if not error:
                for row in cart_rows(con, token):
                    qty = int(d.get(f"qty-{row['sku']}", row["qty"]))
                    if qty == 0:
                        con.execute("DELETE FROM cart_items WHERE session = ? AND sku = ?", (token, row["sku"]))
                    else:
                        con.execute(
                            "UPDATE cart_items SET qty = ? WHERE session = ? AND sku = ?", (qty, token, row["sku"])
                        )
        rows = cart_rows(con, token)
    if not rows:
        return page("Cart", '<p>Your cart is empty.</p><p><a href="/shop">Go to the shop</a></p>', user)
    lines = "".join(
        f'<tr><td>{e(r["name"])}</td><td><label for="qty-{e(r["sku"])}">Quantity of {e(r["name"])}</label> '
        f'<input id="qty-{e(r["sku"])}" name="qty-{e(r["sku"])}" type="number" min="0" value="{r["qty"]}"></td>'
        f"<td>{money(r['price_cents'] * r['qty'])}</td></tr>"
        for r in rows
    )
    total = sum(r["price_cents"] * r["qty"] for r in rows)
    err = f'<p role="alert">{e(error)}</p>' if error else ""
    body = (
        f'{err}<form method="post" action="/cart"><table>{lines}</table><p>Subtotal: {money(total)}</p>'
        '<button>Update cart</button></form><p><a href="/checkout/shipping">Proceed to checkout</a></p>'
    )
    return page(
        "Cart",
        body,
        user,
        status="Cart updated." if request.method == "POST" and not error else "",
        code=400 if error else 200,
    )


def checkout_state(con: sqlite3.Connection, token: str) -> dict:
    row = con.execute("SELECT * FROM checkouts WHERE session = ?", (token,)).fetchone()
    return dict(row) if row else {}


async def checkout_shipping(request: Request) -> Response:
    keys = ("full_name", "address", "city", "postal_code", "shipping")
    with db() as con:
        user = current_user(con, request)
        if user is None:
            return to_login(request)
        token = request.cookies[COOKIE]
        if not cart_rows(con, token):
            return RedirectResponse("/cart", status_code=303)
        state = checkout_state(con, token)
        d = {k: state.get(k) or "" for k in keys}
        errors: dict[str, str] = {}
        if request.method == "POST":
            raw = await form_data(request)
            d = {k: raw.get(k, "").strip() for k in keys}
            for k, label in (("full_name", "Full name"), ("address", "Address"), ("city", "City")):
                if not d[k]:
                    errors[k] = f"{label} is required."
            if not POSTAL_RE.match(d["postal_code"]):
                errors["postal_code"] = "Postal code must be 3 to 10 letters, digits, spaces or dashes."
            if d["shipping"] not in SHIPPING:
                errors["shipping"] = "Choose a shipping method."
            if not errors:
                con.execute(
                    "INSERT INTO checkouts (session, full_name, address, city, postal_code, shipping) "
                    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (session) DO UPDATE SET full_name = excluded.full_name, "
                    "address = excluded.address, city = excluded.city, postal_code = excluded.postal_code, "
                    "shipping = excluded.shipping",
                    (token, *d.values()),
                )
                return RedirectResponse("/checkout/payment", status_code=303)
    body = (
        '<p>Step 1 of 3: shipping</p><form method="post" action="/checkout/shipping">'
        + field("Full name", "full_name", d["full_name"], error=errors.get("full_name", ""))
        + field("Address", "address", d["address"], error=errors.get("address", ""))
        + field("City", "city", d["city"], error=errors.get("city", ""))
        + field("Postal code", "postal_code", d["postal_code"], error=errors.get("postal_code", ""))
        + select(
            "Shipping method",
            "shipping",
            [("", "Choose...")] + [(k, v[0]) for k, v in SHIPPING.items()],
            d["shipping"],
            errors.get("shipping", ""),
        )
        + "<button>Continue to payment</button></form>"
    )
    return page("Checkout", body, user, code=400 if errors else 200)


async def checkout_payment(request: Request) -> Response:
    with db() as con:
        user = current_user(con, request)
        if user is None:
            return to_login(request)
        token = request.cookies[COOKIE]
        state = checkout_state(con, token)
        if not cart_rows(con, token) or not state.get("shipping"):
            return RedirectResponse("/checkout/shipping", status_code=303)
        errors: dict[str, str] = {}
        if request.method == "POST":
            raw = await form_data(request)
            card = raw.get("card_number", "").replace(" ", "")
            if not CARD_RE.match(card):
                errors["card_number"] = "Card number must be 16 digits."
            if not EXPIRY_RE.match(raw.get("expiry", "").strip()):
                errors["expiry"] = "Expiry must be MM/YY."
            if not re.fullmatch(r"[0-9]{3}", raw.get("cvc", "").strip()):
                errors["cvc"] = "CVC must be 3 digits."
            if not errors:
                # Only the last four digits are ever stored.
                con.execute("UPDATE checkouts SET card_last4 = ? WHERE session = ?", (card[-4:], token))
                return RedirectResponse("/checkout/review", status_code=303)
    body = (
        '<p>Step 2 of 3: payment</p><form method="post" action="/checkout/payment">'
        + field("Card number", "card_number", error=errors.get("card_number", ""))
        + field("Expiry (MM/YY)", "expiry", error=errors.get("expiry", ""))
        + field("CVC", "cvc", error=errors.get("cvc", ""))
        + "<button>Review order</button></form>"
    )
    return page("Checkout", body, user, code=400 if errors else 200)


async def checkout_review(request: Request) -> Response:
    with db() as con:
        user = current_user(con, request)
        if user is None:
            return to_login(request)
        token = request.cookies[COOKIE]
        state, rows = checkout_state(con, token), cart_rows(con, token)
        if not rows or not state.get("card_last4"):
            return RedirectResponse("/checkout/payment", status_code=303)
    ship_label, ship_cents = SHIPPING[state["shipping"]]
    total = sum(r["price_cents"] * r["qty"] for r in rows) + ship_cents
    items = "".join(f"<li>{r['qty']} x {e(r['name'])}</li>" for r in rows)
    body = (
        f"<p>Step 3 of 3: review</p><ul>{items}</ul><p>Ship to {e(state['full_name'])}, {e(state['address'])}, "
        f"{e(state['city'])} {e(state['postal_code'])} by {e(ship_label)}.</p>"
        f"<p>Card ending {e(state['card_last4'])}.</p>"
        f'<p>Total: {money(total)}</p><form method="post" action="/checkout/place"><button>Place order</button></form>'
    )
    return page("Checkout", body, user)


async def checkout_place(request: Request) -> Response:
    with db() as con:
        user = current_user(con, request)
        if user is None:
            return to_login(request)
        token = request.cookies[COOKIE]
        state, rows = checkout_state(con, token), cart_rows(con, token)
        if not rows or not state.get("card_last4"):
            return page("Checkout", '<p role="alert">There is no order to place.</p>', user, code=400)
        items = {r["sku"]: r["qty"] for r in rows}
        total = sum(r["price_cents"] * r["qty"] for r in rows) + SHIPPING[state["shipping"]][1]
        cur = con.execute(
            "INSERT INTO orders (user_id, items, total_cents, full_name, address, city, postal_code, shipping, "
            "card_last4) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                user["id"],
                json.dumps(items, sort_keys=True),
                total,
                state["full_name"],
                state["address"],
                state["city"],
                state["postal_code"],
                state["shipping"],
                state["card_last4"],
            ),
        )
        for sku, qty in items.items():
            con.execute("UPDATE products SET stock = stock - ? WHERE sku = ?", (qty, sku))
        con.execute("DELETE FROM cart_items WHERE session = ?", (token,))
        con.execute("DELETE FROM checkouts WHERE session = ?", (token,))
    return RedirectResponse(f"/orders/{cur.lastrowid}", status_code=303)


async def order_page(request: Request) -> Response:
    with db() as con:
        user = current_user(con, request)
        if user is None:
            return to_login(request)
        order = con.execute(
            "SELECT * FROM orders WHERE id = ? AND user_id = ?", (request.path_params["order_id"], user["id"])
        ).fetchone()
    if order is None:
        return page("Order not found", "<p>No such order.</p>", user, code=404)
    return page(
        f"Order {order['id']}",
        f"<p>Thank you! Total charged: {money(order['total_cents'])}.</p>",
        user,
        status="Order placed.",
    )


# -- booking ----------------------------------------------------------------------------------


def booking_form(rooms: list[sqlite3.Row], d: dict[str, str], errors: dict[str, str]) -> str:
    return (
        '<form method="post" action="/book">'
        + select(
            "Room",
            "room",
            [("", "Choose a room...")] + [(str(r["id"]), f"{r['name']} (up to {r['capacity']})") for r in rooms],
            d["room"],
            errors.get("room", ""),
        )
        + field("Check-in", "check_in", d["check_in"], kind="date", error=errors.get("check_in", ""))
        + field("Check-out", "check_out", d["check_out"], kind="date", error=errors.get("check_out", ""))
        + select("Guests", "guests", [(str(n), str(n)) for n in range(1, 5)], d["guests"], errors.get("guests", ""))
        + field("Guest name", "guest_name", d["guest_name"], error=errors.get("guest_name", ""))
        + field("Notes", "notes", d["notes"], kind="textarea")
        + "<button>Book room</button></form>"
    )


def booking_errors(con: sqlite3.Connection, d: dict[str, str]) -> dict[str, str]:
    errors: dict[str, str] = {}
    room = con.execute("SELECT * FROM rooms WHERE id = ?", (d["room"],)).fetchone() if d["room"].isdigit() else None
    if room is None:
        errors["room"] = "Choose a room."
    try:
        check_in, check_out = date.fromisoformat(d["check_in"]), date.fromisoformat(d["check_out"])
    except ValueError:
        errors["check_in"] = "Enter both dates as YYYY-MM-DD."
        return errors
    if check_out <= check_in:
        errors["check_out"] = "Check-out must be after check-in."
    guests = int(d["guests"]) if d["guests"].isdigit() else 0
    if room is not None and not 1 <= guests <= room["capacity"]:
        errors["guests"] = f"{room['name']} holds at most {room['capacity']} guests."
    if not d["guest_name"]:
        errors["guest_name"] = "Guest name is required."
    if room is not None and not errors:
        clash = con.execute(
            "SELECT 1 FROM bookings WHERE room_id = ? AND check_in < ? AND check_out > ?",
            (room["id"], d["check_out"], d["check_in"]),
        ).fetchone()
        if clash:
            errors["room"] = f"{room['name']} is already booked for some of those nights."
    return errors


async def book(request: Request) -> Response:
    keys = ("room", "check_in", "check_out", "guests", "guest_name", "notes")
    with db() as con:
        user = current_user(con, request)
        if user is None:
            return to_login(request)
        rooms = con.execute("SELECT * FROM rooms ORDER BY id").fetchall()
        if request.method == "GET":
            d = dict.fromkeys(keys, "") | {"guests": "1"}
            return page("Book a room", booking_form(rooms, d, {}), user)
        raw = await form_data(request)
        d = {k: raw.get(k, "").strip() for k in keys}
        errors = booking_errors(con, d)
        if errors:
            return page(
                "Book a room",
                '<p role="alert">Please fix the errors below.</p>' + booking_form(rooms, d, errors),
                user,
                code=400,
            )
        con.execute(
            "INSERT INTO bookings (user_id, room_id, check_in, check_out, guests, guest_name, notes) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (user["id"], int(d["room"]), d["check_in"], d["check_out"], int(d["guests"]), d["guest_name"], d["notes"]),
        )
    return RedirectResponse("/bookings?booked=1", status_code=303)


async def bookings(request: Request) -> Response:
    with db() as con:
        user = current_user(con, request)
        if user is None:
            return to_login(request)
        rows = con.execute(
            "SELECT b.*, r.name AS room_name FROM bookings b JOIN rooms r ON r.id = b.room_id "
            "WHERE b.user_id = ? ORDER BY b.id",
            (user["id"],),
        ).fetchall()
    items = (
        "".join(
            f"<li>{e(r['room_name'])}: {r['check_in']} to {r['check_out']}, {r['guests']} guest(s)</li>" for r in rows
        )
        or "<li>No bookings yet.</li>"
    )
    return page(
        "Your bookings", f"<ul>{items}</ul>", user, status="Room booked." if request.query_params.get("booked") else ""
    )


# -- messages ---------------------------------------------------------------------------------


async def messages(request: Request) -> Response:
    with db() as con:
        user = current_user(con, request)
        if user is None:
            return to_login(request)
        rows = con.execute("SELECT * FROM outbox WHERE user_id = ? ORDER BY id", (user["id"],)).fetchall()
    items = "".join(f"<li>To {e(r['recipient'])}: {e(r['subject'])}</li>" for r in rows) or "<li>Nothing sent yet.</li>"
    return page(
        "Messages",
        f'<p><a href="/messages/new">New message</a></p><h2>Sent</h2><ul>{items}</ul>',
        user,
        status="Message sent." if request.query_params.get("sent") else "",
    )


async def message_new(request: Request) -> Response:
    keys = ("to", "subject", "body")
    with db() as con:
        user = current_user(con, request)
        if user is None:
            return to_login(request)
        contacts = con.execute("SELECT * FROM contacts WHERE user_id = ? ORDER BY name", (user["id"],)).fetchall()
        d = dict.fromkeys(keys, "")
        errors: dict[str, str] = {}
        if request.method == "POST":
            raw = await form_data(request)
            d = {k: raw.get(k, "").strip() for k in keys}
            if d["to"] not in {c["email"] for c in contacts}:
                errors["to"] = "Choose a recipient from your contacts."
            if not d["subject"]:
                errors["subject"] = "Subject is required."
            if not d["body"]:
                errors["body"] = "Message is required."
            if not errors:
                con.execute(
                    "INSERT INTO outbox (user_id, recipient, subject, body) VALUES (?, ?, ?, ?)",
                    (user["id"], d["to"], d["subject"], d["body"]),
                )
                return RedirectResponse("/messages?sent=1", status_code=303)
    body = (
        '<form method="post" action="/messages/new">'
        + select(
            "To",
            "to",
            [("", "Choose a contact...")] + [(c["email"], f"{c['name']} <{c['email']}>") for c in contacts],
            d["to"],
            errors.get("to", ""),
        )
        + field("Subject", "subject", d["subject"], error=errors.get("subject", ""))
        + field("Message", "body", d["body"], kind="textarea", error=errors.get("body", ""))
        + "<button>Send message</button></form>"
    )
    return page("New message", body, user, code=400 if errors else 200)


async def not_found(request: Request, exc: Exception) -> Response:
    return page("Not found", "<p>There is no such page.</p>", code=404)


routes = [
    Route("/", home),
    Route("/login", login, methods=["GET", "POST"]),
    Route("/logout", logout, methods=["POST"]),
    Route("/profile", profile, methods=["GET", "POST"]),
    Route("/settings", settings, methods=["GET", "POST"]),
    Route("/account/delete", delete_account, methods=["POST"]),
    Route("/shop", shop),
    Route("/cart/add", cart_add, methods=["POST"]),
    Route("/cart", cart, methods=["GET", "POST"]),
    Route("/checkout/shipping", checkout_shipping, methods=["GET", "POST"]),
    Route("/checkout/payment", checkout_payment, methods=["GET", "POST"]),
    Route("/checkout/review", checkout_review),
    Route("/checkout/place", checkout_place, methods=["POST"]),
    Route("/orders/{order_id:int}", order_page),
    Route("/book", book, methods=["GET", "POST"]),
    Route("/bookings", bookings),
    Route("/messages", messages),
    Route("/messages/new", message_new, methods=["GET", "POST"]),
]

app = Starlette(routes=routes, exception_handlers={404: not_found})
