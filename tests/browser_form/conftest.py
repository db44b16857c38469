"""Fixtures of the shop's tests without a browser: its template database, and Starlette's
test client on a fresh copy of it (test_shop_units.py, test_uploads.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandgym.envs.browser_form.app import shopdata


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("shop") / "template.sqlite"
    shopdata.build_database(path)
    return path


@pytest.fixture
def client(template, tmp_path, monkeypatch):
    from starlette.testclient import TestClient

    from sandgym.envs.browser_form.app import appkit, shopapp

    db = tmp_path / "app.sqlite"
    db.write_bytes(template.read_bytes())
    monkeypatch.setattr(appkit, "DB_PATH", str(db))
    with TestClient(shopapp.app, base_url="http://127.0.0.1:8000") as c:
        c.db = db  # type: ignore[attr-defined]
        yield c
