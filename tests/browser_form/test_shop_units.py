"""The shop app without a browser: its generated data, its roles and routes
(Starlette's test client on a real database), the shop-v1 set, answer matching."""

from __future__ import annotations

import sqlite3

import pytest
from pydantic import ValidationError

from sandgym.envs.browser_form.app import shopdata
from sandgym.envs.browser_form.shop_tasks import make_task_set
from sandgym.specs import TaskSet
from sandgym.specs.base import bundled_dir, bundled_task_set
from sandgym.specs.browser_form import BrowserHidden, BrowserTask, BrowserTaskPair
from sandgym.verifiers.browser_form.host import judge, normalise_answer, read_state

from .apps import login, table_digest

# basic-v1's content hash before the shop's fields were added: older sets' hashes must not move.
BASIC_V1_HASH = "sha256:41e194fa8680dedcc8ad32df6869ee293ccba111cb58901cd772927f35b33fec"


def test_data_is_generated_from_the_seed_alone(template, tmp_path):
    again = tmp_path / "again.sqlite"
    shopdata.build_database(again)
    assert table_digest(again) == table_digest(template)
    other = tmp_path / "other.sqlite"
    shopdata.build_database(other, seed=7)
    assert table_digest(other) != table_digest(template)
    con = sqlite3.connect(template)
    counts = {t: con.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in ("products", "customers", "orders")}
    con.close()
    assert counts == {"products": shopdata.PRODUCTS, "customers": shopdata.CUSTOMERS, "orders": shopdata.ORDERS}


def test_the_bundled_set_is_the_generators_output():
    bundled = TaskSet.load(bundled_dir() / "browser_form" / "shop-v1")
    made = make_task_set()
    assert bundled.hash == made.hash
    assert 30 <= len(bundled) <= 60
    tasks = [BrowserTaskPair.of(t) for t in bundled.tasks]
    levels = {(t.visible.level, t.hidden.answer is None) for t in tasks}
    assert levels == {(lvl, state) for lvl in (1, 2, 3) for state in (True, False)}  # 3 levels x 2 kinds
    assert all(t.visible.app == "shop" for t in tasks)
    for t in tasks:  # goals name what to do, not how the page is built
        assert not any(s in t.visible.goal for s in ("button:", "textbox:", "#", "[ref", "e1")), t.id


def test_older_sets_keep_their_hash():
    basic = TaskSet.load(bundled_task_set("browser_form"))
    assert basic.hash == BASIC_V1_HASH
    assert all(BrowserTaskPair.of(t).visible.app is None for t in basic.tasks)


def test_a_task_is_judged_by_its_state_or_its_answer():
    with pytest.raises(ValidationError, match="give `checks`"):
        BrowserHidden(id="shop/x", oracle=["done()"])
    with pytest.raises(ValidationError, match="data_seed is for app 'shop'"):
        BrowserTask(id="forms/x", goal="g", data_seed=3)
    with pytest.raises(ValidationError, match="remove `seed`"):
        BrowserTask(id="shop/x", goal="g", app="shop", seed={"users": []})


@pytest.mark.parametrize(
    ("given", "ok"),
    [
        ("$1,234.50", True),
        ("1234.50", True),
        ("  $1,234.50. ", True),
        ('"$1234.50"', True),
        ("$1,234.5", False),
        ("1,234.51", False),
        ("", False),
    ],
)
def test_answers_match_after_normalisation(given, ok):
    hidden = BrowserHidden(id="shop/q", oracle=["done()"], answer=["$1,234.50"])
    attempt = judge(hidden, {}, messages=[given])
    assert (attempt.outcome.value == "passed") is ok
    assert normalise_answer("Porto") == normalise_answer(" porto ")


def test_only_the_last_message_counts():
    hidden = BrowserHidden(id="shop/q", oracle=["done()"], answer=["Oslo"])
    assert judge(hidden, {}, messages=["Oslo", "Lisbon"]).outcome.value == "failed"
    assert judge(hidden, {}, messages=[]).outcome.value == "failed"


def test_read_state_keeps_only_the_tables_asked_for(template):
    state = read_state(template, {"coupons", "no_such_table"})
    assert set(state) == {"coupons"} and len(state["coupons"]) == 2


# -- the app through Starlette's test client ------------------------------------------------------


def test_back_office_needs_a_staff_sign_in(client):
    for path in ("/admin", "/admin/orders", "/admin/orders/1", "/admin/customers/3", "/admin/coupons/new"):
        r = client.get(path, follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"].startswith("/login"), path
    r = client.post("/admin/products/KIT-00001", data={"price": "1", "stock": "0"}, follow_redirects=False)
    assert r.status_code == 303
    login(client, "alice", "wonderland")
    assert client.get("/admin/orders").status_code == 403
    before = table_digest(client.db)
    sku = sqlite3.connect(client.db).execute("SELECT sku FROM products LIMIT 1").fetchone()[0]
    assert client.post(f"/admin/products/{sku}", data={"price": "1", "stock": "0"}).status_code == 403
    assert client.post("/admin/orders/1", data={"action": "cancel", "reason": "mine now"}).status_code == 403
    login(client, "sam", "staff-pass-2")  # staff: may read, may not edit the catalogue or cancel
    assert client.get("/admin/orders").status_code == 200
    assert client.post(f"/admin/products/{sku}", data={"price": "1", "stock": "0"}).status_code == 403
    assert client.post("/admin/orders/1", data={"action": "cancel", "reason": "no"}).status_code == 403
    assert client.get("/admin/coupons/new").status_code == 403
    # Sign-ins added session rows; nothing else changed.
    assert table_digest(client.db) == before


def test_no_route_serves_the_database_or_files(client):
    for path in ("/app.sqlite", "/state/app.sqlite", "/../app.sqlite", "/static/app.sqlite", "/products/../../etc"):
        assert client.get(path).status_code == 404, path


def test_validation_errors_name_the_field(client):
    login(client, "admin", "back-office-1")
    r = client.post("/admin/coupons/new", data={"code": "bad code", "percent": "95", "expires": "soon"})
    assert r.status_code == 400
    for text in ("Code must be 4 to 12", "Percent off must be", "Expiry must be a date"):
        assert text in r.text
    r = client.get("/products", params={"min_price": "50", "max_price": "10"})
    assert r.status_code == 400 and "must not be below the minimum" in r.text


def test_search_filters_and_pagination(client):
    r = client.get("/products", params={"category": "1", "sort": "price_asc"})
    con = sqlite3.connect(client.db)
    n = con.execute("SELECT COUNT(*) FROM products WHERE category_id = 1 AND active = 1").fetchone()[0]
    first = con.execute(
        "SELECT name FROM products WHERE category_id = 1 AND active = 1 ORDER BY price_cents, name LIMIT 1"
    ).fetchone()[0]
    con.close()
    assert f"{n:,} results. Page 1 of {-(-n // 20)}." in r.text and first in r.text and "Next page" in r.text
    last = client.get("/products", params={"category": "1", "page": str(-(-n // 20))})
    assert "Next page" not in last.text and "Previous page" in last.text
