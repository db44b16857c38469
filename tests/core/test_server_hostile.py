"""The server under hostile HTTP: bodies over the cap are a 413 with a
one-line detail, and memory stays flat over stateless resets (issue 37).
Both serve real envs (sandboxes): marked `sandbox`; the soak sample is `slow`."""

from __future__ import annotations

import sys

import pytest

pytestmark = pytest.mark.sandbox


@pytest.fixture(scope="module")
def client():
    sys.modules.setdefault("gradio", None)  # type: ignore[arg-type]
    from fastapi.testclient import TestClient

    from sandgym.server import build_app

    app = build_app("sandgym/CodeFunction-v0", {"runtime": "local"}, warm=False, max_body_bytes=1000)
    with TestClient(app) as c:
        yield c


def test_a_body_over_the_cap_is_413_by_its_length(client):
    r = client.post("/reset", content=b"{" + b" " * 5000 + b"}", headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.json() == {
        "detail": "the request body is 5,002 bytes; this server takes at most 1,000"
    }
    assert client.post("/reset", json={"seed": 1}).status_code == 200  # the server goes on


def test_a_chunked_body_over_the_cap_is_413_as_it_arrives(client):
    def chunks():
        for _ in range(50):
            yield b" " * 300

    r = client.post("/step", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413 and "at most 1,000" in r.json()["detail"]


def test_a_bad_content_length_is_413(client):
    r = client.post("/reset", content=b"{}", headers={"content-type": "application/json", "content-length": "1e9"})
    assert r.status_code in (400, 413)


@pytest.mark.slow
@pytest.mark.chromium
def test_stateless_browser_resets_share_one_driver_and_memory_stays_flat():
    """The cause of 175 -> 332 MB over 900 resets: each stateless reset (a
    fresh env) started and stopped a Playwright driver. Now the driver
    lingers: one pid across resets, and RSS flat over a bounded sample
    (benchmarks/soak_serve_resets.py runs the 10,000)."""
    from fastapi.testclient import TestClient

    from sandgym.runtimes.browser import PlaywrightHost
    from sandgym.server import build_app

    def rss_mb() -> float:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024

    app = build_app("sandgym/BrowserForm-v0", {"runtime": "local"}, warm=False)
    with TestClient(app) as c:
        for _ in range(3):
            assert c.post("/reset", json={}).status_code == 200
        host = PlaywrightHost._shared
        assert host is not None and host.users == 0  # every env closed; the driver lingers
        pid, before = host.driver_pid, rss_mb()
        for _ in range(25):
            assert c.post("/reset", json={}).status_code == 200
        assert PlaywrightHost._shared is host and host.driver_pid == pid
        # Before the fix: +120-270 KB per reset (3-7 MB here).
        assert rss_mb() - before < 3.0
    PlaywrightHost.stop_lingering()
    assert PlaywrightHost._shared is None
