"""The form app's database: schema, default seed data, and the snapshot builder.

The host builds one snapshot per task from this module (the app itself only
opens the file); a reset puts a fresh copy of the snapshot in place.
"""

from __future__ import annotations

import random
import re
import sqlite3
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE users (id INTEGER PRIMARY KEY, username TEXT UNIQUE NOT NULL, password TEXT NOT NULL,
    display_name TEXT NOT NULL, email TEXT NOT NULL, phone TEXT NOT NULL DEFAULT '', bio TEXT NOT NULL DEFAULT '',
    newsletter INTEGER NOT NULL DEFAULT 0, theme TEXT NOT NULL DEFAULT 'system', deleted INTEGER NOT NULL DEFAULT 0);
CREATE TABLE sessions (token TEXT PRIMARY KEY, user_id INTEGER NOT NULL);
CREATE TABLE logins (id INTEGER PRIMARY KEY, username TEXT NOT NULL, ok INTEGER NOT NULL);
CREATE TABLE products (sku TEXT PRIMARY KEY, name TEXT NOT NULL, price_cents INTEGER NOT NULL,
    stock INTEGER NOT NULL);
CREATE TABLE cart_items (session TEXT NOT NULL, sku TEXT NOT NULL, qty INTEGER NOT NULL,
    PRIMARY KEY (session, sku));
CREATE TABLE checkouts (session TEXT PRIMARY KEY, full_name TEXT, address TEXT, city TEXT, postal_code TEXT,
    shipping TEXT, card_last4 TEXT);
CREATE TABLE orders (id INTEGER PRIMARY KEY, user_id INTEGER NOT NULL, items TEXT NOT NULL,
    total_cents INTEGER NOT NULL, full_name TEXT NOT NULL, address TEXT NOT NULL, city TEXT NOT NULL,
    postal_code TEXT NOT NULL, shipping TEXT NOT NULL, card_last4 TEXT NOT NULL);
CREATE TABLE rooms (id INTEGER PRIMARY KEY, name TEXT NOT NULL, capacity INTEGER NOT NULL);
CREATE TABLE bookings (id INTEGER PRIMARY KEY, user_id INTEGER NOT NULL, room_id INTEGER NOT NULL,
    check_in TEXT NOT NULL, check_out TEXT NOT NULL, guests INTEGER NOT NULL, guest_name TEXT NOT NULL,
    notes TEXT NOT NULL DEFAULT '');
CREATE TABLE contacts (id INTEGER PRIMARY KEY, user_id INTEGER NOT NULL, name TEXT NOT NULL, email TEXT NOT NULL);
CREATE TABLE outbox (id INTEGER PRIMARY KEY, user_id INTEGER NOT NULL, recipient TEXT NOT NULL,
    subject TEXT NOT NULL, body TEXT NOT NULL);
"""

# Seed rows each task starts from; a task's `seed` replaces whole tables.
DEFAULT_SEED: dict[str, list[dict[str, Any]]] = {
    "users": [
        {
            "id": 1,
            "username": "alice",
            "password": "wonderland",
            "display_name": "Alice Liddell",
            "email": "alice@example.test",
            "phone": "+44 20 7946 0001",
            "bio": "Curious.",
        },
        {"id": 2, "username": "bob", "password": "builder42", "display_name": "Bob Stone", "email": "bob@example.test"},
    ],
    "products": [
        {"sku": "MUG-01", "name": "Blue Mug", "price_cents": 1200, "stock": 10},
        {"sku": "TEE-02", "name": "Grey T-shirt", "price_cents": 2500, "stock": 5},
        {"sku": "PEN-03", "name": "Fountain Pen", "price_cents": 4800, "stock": 2},
        {"sku": "BAG-04", "name": "Canvas Bag", "price_cents": 1800, "stock": 0},
    ],
    "rooms": [
        {"id": 1, "name": "Garden Room", "capacity": 2},
        {"id": 2, "name": "Harbour Suite", "capacity": 4},
        {"id": 3, "name": "Attic Single", "capacity": 1},
    ],
    "bookings": [
        {
            "id": 1,
            "user_id": 2,
            "room_id": 2,
            "check_in": "2027-03-10",
            "check_out": "2027-03-14",
            "guests": 3,
            "guest_name": "Bob Stone",
        },
    ],
    "contacts": [
        {"id": 1, "user_id": 1, "name": "Bob Stone", "email": "bob@example.test"},
        {"id": 2, "user_id": 1, "name": "Carol Reed", "email": "carol@example.test"},
        {"id": 3, "user_id": 1, "name": "Dan Brook", "email": "dan@example.test"},
    ],
}

IDENT = re.compile(r"^[a-z_][a-z0-9_]*$")
TABLES = (
    "users",
    "sessions",
    "logins",
    "products",
    "cart_items",
    "checkouts",
    "orders",
    "rooms",
    "bookings",
    "contacts",
    "outbox",
)


def build_database(path: str | Path, seed: dict[str, list[dict[str, Any]]] | None = None) -> None:
    """Create a database at `path` with the schema and the seed (task rows over the defaults)."""
    rows = {**DEFAULT_SEED, **(seed or {})}
    unknown = set(rows) - set(TABLES)
    if unknown:
        raise ValueError(f"seed names unknown table(s) {sorted(unknown)}; tables: {', '.join(TABLES)}")
    con = sqlite3.connect(path)
    try:
        # A new file, put in place by rename once whole: no fsync per statement
        # (neither setting is stored in the file, so the database is the same).
        con.execute("PRAGMA synchronous = OFF")
        con.execute("PRAGMA journal_mode = MEMORY")
        con.executescript(SCHEMA)
        for table, items in rows.items():
            for item in items:
                bad = [c for c in item if not IDENT.match(c)]
                if bad:
                    raise ValueError(f"seed table {table!r}: column names {bad} are not identifiers")
                cols = ", ".join(item)
                marks = ", ".join("?" for _ in item)
                try:
                    con.execute(f"INSERT INTO {table} ({cols}) VALUES ({marks})", list(item.values()))
                except sqlite3.Error as e:
                    raise ValueError(f"seed row {item!r} of table {table!r}: {e}") from None
        con.commit()
    finally:
        con.close()


def write_generated(path: str | Path, schema: str, tables: dict[str, list[tuple[Any, ...]]]) -> None:
    """Create a generated app's database (shopdata, trackerdata) at `path`: `schema`, then
    each table's rows in column order. A new file the caller renames into place."""
    con = sqlite3.connect(path)
    try:
        con.execute("PRAGMA synchronous = OFF")  # a new file put in place whole: no fsync per statement
        con.execute("PRAGMA journal_mode = MEMORY")
        con.executescript(schema)
        for table, rows in tables.items():
            marks = ", ".join("?" for _ in rows[0])
            con.executemany(f"INSERT INTO {table} VALUES ({marks})", rows)
        con.commit()
        con.execute("VACUUM")
    finally:
        con.close()


def people(
    rng: random.Random, accounts: tuple[tuple, ...], total: int, first: list[str], last: list[str]
) -> list[tuple]:
    """Users rows (id, username, password, display_name) of a generated app (trackerdata, wikidata): its
    named `accounts` (id, username, password, display name, ...) first, then people of unique made-up
    names drawn from `rng` up to `total`."""
    users = [tuple(a[:4]) for a in accounts]
    names = {u[3] for u in users}
    while len(users) < total:
        display = f"{rng.choice(first)} {rng.choice(last)}"
        if display not in names:
            names.add(display)
            users.append((len(users) + 1, display.lower().replace(" ", "."), f"pw-{rng.randrange(10**8):08d}", display))
    return users
