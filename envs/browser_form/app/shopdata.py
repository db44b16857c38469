"""The shop app's database: schema and realistic data generated from a seed.

The same seed gives the same bytes-for-rows database on every machine
(random.Random, no clock): thousands of products, customers and orders.
The host builds the template once per env and copies it per episode; the
app itself only opens the file. Standalone (stdlib only): the task
generator and the tests import it too.
"""

from __future__ import annotations

import random
from datetime import date, timedelta
from pathlib import Path

from .schema import write_generated

SCHEMA = """
CREATE TABLE users (id INTEGER PRIMARY KEY, username TEXT UNIQUE NOT NULL, password TEXT NOT NULL,
    role TEXT NOT NULL CHECK (role IN ('admin', 'staff', 'customer')), display_name TEXT NOT NULL,
    customer_id INTEGER);
CREATE TABLE sessions (token TEXT PRIMARY KEY, user_id INTEGER NOT NULL);
CREATE TABLE categories (id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL);
CREATE TABLE products (id INTEGER PRIMARY KEY, sku TEXT UNIQUE NOT NULL, name TEXT UNIQUE NOT NULL,
    category_id INTEGER NOT NULL, price_cents INTEGER NOT NULL, stock INTEGER NOT NULL,
    active INTEGER NOT NULL DEFAULT 1, rating REAL NOT NULL);
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, email TEXT UNIQUE NOT NULL,
    city TEXT NOT NULL, joined TEXT NOT NULL);
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL, placed TEXT NOT NULL,
    status TEXT NOT NULL, total_cents INTEGER NOT NULL, ship_name TEXT NOT NULL, ship_address TEXT NOT NULL,
    ship_city TEXT NOT NULL, ship_postal TEXT NOT NULL, cancel_reason TEXT NOT NULL DEFAULT '');
CREATE TABLE order_items (order_id INTEGER NOT NULL, product_id INTEGER NOT NULL, qty INTEGER NOT NULL,
    price_cents INTEGER NOT NULL, PRIMARY KEY (order_id, product_id));
CREATE TABLE cart_items (user_id INTEGER NOT NULL, product_id INTEGER NOT NULL, qty INTEGER NOT NULL,
    PRIMARY KEY (user_id, product_id));
CREATE TABLE checkouts (user_id INTEGER PRIMARY KEY, ship_name TEXT NOT NULL, ship_address TEXT NOT NULL,
    ship_city TEXT NOT NULL, ship_postal TEXT NOT NULL);
CREATE TABLE coupons (code TEXT PRIMARY KEY, percent INTEGER NOT NULL, expires TEXT NOT NULL);
CREATE TABLE product_images (sku TEXT PRIMARY KEY, filename TEXT NOT NULL, kind TEXT NOT NULL,
    size INTEGER NOT NULL, sha256 TEXT NOT NULL);
CREATE TABLE blobs (sha256 TEXT PRIMARY KEY, data BLOB NOT NULL);
CREATE INDEX orders_customer ON orders (customer_id);
CREATE INDEX products_category ON products (category_id);
"""

STATUSES = ("pending", "paid", "shipped", "delivered", "cancelled")
DEFAULT_SEED = 38
PRODUCTS, CUSTOMERS, ORDERS = 1500, 2000, 5000
# The accounts tasks sign in with; shoppers are customers 1 and 2.
ACCOUNTS = (
    (1, "admin", "back-office-1", "admin", "Ada Admin", None),
    (2, "sam", "staff-pass-2", "staff", "Sam Staff", None),
    (3, "alice", "wonderland", "customer", "Alice Liddell", 1),
    (4, "bob", "builder42", "customer", "Bob Stone", 2),
)

CATEGORIES = {
    "Kitchen": ["Mug", "Teapot", "Skillet", "Cutting Board", "Whisk", "Colander", "Kettle", "Ladle"],
    "Office": ["Desk Lamp", "Notebook", "Stapler", "Pen Set", "Monitor Stand", "Desk Organizer", "Chair Mat"],
    "Garden": ["Trowel", "Watering Can", "Planter", "Hose Reel", "Pruner", "Bird Feeder", "Seed Tray"],
    "Outdoor": ["Tent", "Sleeping Bag", "Lantern", "Camp Stool", "Water Bottle", "Daypack", "Hammock"],
    "Audio": ["Headphones", "Speaker", "Turntable", "Earbuds", "Soundbar", "Radio", "Microphone"],
    "Toys": ["Puzzle", "Kite", "Yo-Yo", "Building Set", "Plush Bear", "Marble Run", "Spinning Top"],
    "Bath": ["Towel", "Bath Mat", "Soap Dish", "Shower Caddy", "Robe", "Toothbrush Holder"],
    "Pets": ["Dog Bowl", "Cat Tree", "Leash", "Pet Bed", "Chew Toy", "Litter Scoop", "Collar"],
}
ADJECTIVES = [
    "Classic",
    "Compact",
    "Deluxe",
    "Rustic",
    "Modern",
    "Sturdy",
    "Nordic",
    "Vintage",
    "Urban",
    "Coastal",
    "Alpine",
    "Golden",
    "Silver",
    "Midnight",
    "Sunny",
    "Quiet",
    "Swift",
    "Bright",
    "Cozy",
    "Bold",
]
MATERIALS = [
    "Oak",
    "Bamboo",
    "Steel",
    "Ceramic",
    "Linen",
    "Copper",
    "Walnut",
    "Glass",
    "Wool",
    "Cotton",
    "Slate",
    "Cedar",
    "Marble",
    "Enamel",
    "Canvas",
]
FIRST = [
    "Ava",
    "Ben",
    "Chloe",
    "Dev",
    "Elena",
    "Farid",
    "Grace",
    "Hugo",
    "Iris",
    "Jonas",
    "Kira",
    "Liam",
    "Maya",
    "Noah",
    "Olga",
    "Pablo",
    "Quinn",
    "Rosa",
    "Sven",
    "Tara",
    "Umar",
    "Vera",
    "Wen",
    "Ximena",
    "Yusuf",
    "Zoe",
]
LAST = [
    "Archer",
    "Baker",
    "Castro",
    "Dubois",
    "Evans",
    "Fischer",
    "Garcia",
    "Haddad",
    "Ibsen",
    "Jensen",
    "Kowalski",
    "Lopez",
    "Moreau",
    "Nakamura",
    "Okafor",
    "Petrov",
    "Quiroga",
    "Rossi",
    "Silva",
    "Tanaka",
    "Ueda",
    "Varga",
    "Weber",
    "Xu",
    "Yilmaz",
    "Zhang",
]
CITIES = ["Lisbon", "Oslo", "Dublin", "Porto", "Lyon", "Leeds", "Ghent", "Turin", "Malmo", "Graz", "Krakow", "Bergen"]
STREETS = ["High Street", "Mill Lane", "Station Road", "Church Way", "Park Avenue", "Harbour Row", "Elm Close"]
EPOCH = date(2026, 1, 1)


def generate(seed: int = DEFAULT_SEED) -> dict[str, list[tuple]]:
    """Every table's rows (as tuples in schema order) for `seed`."""
    rng = random.Random(seed)
    categories = [(i + 1, name) for i, name in enumerate(CATEGORIES)]
    products: list[tuple] = []
    names: set[str] = set()
    for pid in range(1, PRODUCTS + 1):
        cat_id, cat = rng.choice(categories)
        while True:
            name = f"{rng.choice(ADJECTIVES)} {rng.choice(MATERIALS)} {rng.choice(CATEGORIES[cat])}"
            if name not in names:
                break
            name = f"{name} {rng.choice('ABCDEFGHJKLMNPRSTUVWXYZ')}{rng.randint(2, 99)}"
            if name not in names:
                break
        names.add(name)
        price = rng.randint(3, 400) * 100 + rng.choice((0, 49, 95, 99))
        stock = rng.choice((0, 1, 2, 3, 4)) if rng.random() < 0.15 else rng.randint(5, 250)
        rating = round(rng.uniform(2.0, 5.0), 1)
        active = 0 if rng.random() < 0.04 else 1
        products.append((pid, f"{cat[:3].upper()}-{pid:05d}", name, cat_id, price, stock, active, rating))
    customers: list[tuple] = [
        (1, "Alice Liddell", "alice@example.test", "Oxford", "2025-03-14"),
        (2, "Bob Stone", "bob@example.test", "Leeds", "2025-06-02"),
    ]
    emails = {c[2] for c in customers}
    for cid in range(3, CUSTOMERS + 1):
        first, last = rng.choice(FIRST), rng.choice(LAST)
        email = f"{first}.{last}{cid}@example.test".lower()
        emails.add(email)
        joined = EPOCH - timedelta(days=rng.randint(30, 1500))
        customers.append((cid, f"{first} {last}", email, rng.choice(CITIES), joined.isoformat()))
    orders: list[tuple] = []
    items: list[tuple] = []
    for oid in range(1, ORDERS + 1):
        cid = rng.randint(1, CUSTOMERS)
        placed = EPOCH + timedelta(days=rng.randint(0, 330))
        status = rng.choices(STATUSES, weights=(10, 15, 20, 50, 5))[0]
        lines = rng.sample(products, rng.randint(1, 4))
        total = 0
        for p in lines:
            qty = rng.randint(1, 3)
            items.append((oid, p[0], qty, p[4]))
            total += qty * p[4]
        name, city = customers[cid - 1][1], customers[cid - 1][3]
        addr = f"{rng.randint(1, 199)} {rng.choice(STREETS)}"
        postal = f"{rng.choice('ABCDEFGH')}{rng.randint(1, 9)} {rng.randint(1, 9)}{rng.choice('JKLMNP')}Q"
        reason = "Customer request" if status == "cancelled" else ""
        orders.append((oid, cid, placed.isoformat(), status, total, name, addr, city, postal, reason))
    coupons = [("WELCOME10", 10, "2026-12-31"), ("SPRING25", 25, "2026-05-31")]
    users = [tuple(a) for a in ACCOUNTS]
    return {
        "users": users,
        "categories": categories,
        "products": products,
        "customers": customers,
        "orders": orders,
        "order_items": items,
        "coupons": coupons,
    }


def build_database(path: str | Path, seed: int = DEFAULT_SEED) -> None:
    """Create the shop's database at `path` from `seed` (a new file; the caller renames it into place)."""
    write_generated(path, SCHEMA, generate(seed))
