"""Fixtures of the generated apps' tests without a browser: each app's template
database, and Starlette's test client on a fresh copy of it (the shop's:
test_shop_units.py, test_uploads.py; the tracker's: test_tracker_units.py; the wiki's: test_wiki_units.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from sandgym.envs.browser_form.app import shopdata, trackerdata, wikidata


def build_template(tmp_path_factory, data: ModuleType, name: str) -> Path:
    path = tmp_path_factory.mktemp(name) / "template.sqlite"
    data.build_database(path)
    return path


def app_client(app_name: str, template: Path, tmp_path: Path, monkeypatch) -> Iterator:
    """Starlette's test client on `app_name`'s app (shopapp, trackerapp, wikiapp) over a copy of `template`."""
    import importlib

    from starlette.testclient import TestClient

    from sandgym.envs.browser_form.app import appkit

    app = importlib.import_module(f"sandgym.envs.browser_form.app.{app_name}").app
    db = tmp_path / "app.sqlite"
    db.write_bytes(template.read_bytes())
    monkeypatch.setattr(appkit, "DB_PATH", str(db))
    with TestClient(app, base_url="http://127.0.0.1:8000") as c:
        c.db = db  # type: ignore[attr-defined]
        yield c


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    return build_template(tmp_path_factory, shopdata, "shop")


@pytest.fixture
def client(template, tmp_path, monkeypatch):
    yield from app_client("shopapp", template, tmp_path, monkeypatch)


@pytest.fixture(scope="module")
def tracker_template(tmp_path_factory) -> Path:
    return build_template(tmp_path_factory, trackerdata, "tracker")


@pytest.fixture
def tracker(tracker_template, tmp_path, monkeypatch):
    yield from app_client("trackerapp", tracker_template, tmp_path, monkeypatch)


@pytest.fixture(scope="module")
def wiki_template(tmp_path_factory) -> Path:
    return build_template(tmp_path_factory, wikidata, "wiki")


@pytest.fixture
def wiki(wiki_template, tmp_path, monkeypatch):
    yield from app_client("wikiapp", wiki_template, tmp_path, monkeypatch)
