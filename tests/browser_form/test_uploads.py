"""File uploads as a task capability: the task's files (spec), upload_file (parser), the shop's
image upload (Starlette's test client on a real database: the cap, hostile bodies and names),
and the shop-files-v1 set; the browser runs are in test_shop.py."""

from __future__ import annotations

import base64
import hashlib
import sqlite3
from pathlib import Path

import pytest
from pydantic import ValidationError

from sandgym.envs.browser_form.actions import ActionError, parse_action
from sandgym.envs.browser_form.app.uploads import MAX_UPLOAD_BYTES, clean_name, image_kind
from sandgym.envs.browser_form.env import episode_files, render_goal
from sandgym.envs.browser_form.shop_upload_tasks import make_task_set, png
from sandgym.specs import TaskSet
from sandgym.specs.base import bundled_dir
from sandgym.specs.browser_form import BrowserTask, BrowserTaskPair, TaskFile

from .apps import login

SKU = "BAT-00001"  # the first generated product
PHOTO = png(4, 4, (10, 200, 30))


def images(db: Path) -> list[tuple]:
    con = sqlite3.connect(db)
    try:
        return con.execute("SELECT sku, filename, kind, size, sha256 FROM product_images").fetchall()
    finally:
        con.close()


def test_an_admin_uploads_a_product_image_and_the_page_shows_it(client):
    login(client, "admin", "back-office-1")
    r = client.post(f"/admin/products/{SKU}/image", files={"image": ("../../etc/passwd.png", PHOTO, "text/html")})
    assert r.status_code == 200 and "Image uploaded." in r.text
    # The name is text only (its last part, printable); the kind comes from the bytes, not the declared type.
    assert images(client.db) == [(SKU, "passwd.png", "image/png", len(PHOTO), hashlib.sha256(PHOTO).hexdigest())]
    assert "Current image: passwd.png" in client.get(f"/admin/products/{SKU}").text


def test_uploads_that_are_not_images_too_large_or_malformed_are_refused(client):
    login(client, "admin", "back-office-1")
    url = f"/admin/products/{SKU}/image"
    r = client.post(url, files={"image": ("x.png", b"<script>alert(1)</script>", "image/png")})
    assert r.status_code == 400 and "not a PNG, JPEG or GIF" in r.text
    big = PHOTO + b"\x00" * MAX_UPLOAD_BYTES
    r = client.post(url, files={"image": ("big.png", big, "image/png")})
    assert r.status_code == 400 and "too large" in r.text
    r = client.post(url, data={"image": "not a file"})  # url-encoded, not multipart
    assert r.status_code == 400 and "multipart/form-data" in r.text
    r = client.post(url, files={"other": ("x.png", PHOTO, "image/png")})
    assert r.status_code == 400 and "Choose an image file" in r.text
    many = {f"f{i}": (f"{i}.png", PHOTO, "image/png") for i in range(20)}
    r = client.post(url, files=many)
    assert r.status_code == 400 and "more than 16 parts" in r.text
    r = client.post(
        url, content=b"--x\r\nnonsense", headers={"content-type": "multipart/form-data; boundary=x\r\nX-Evil: 1"}
    )
    assert r.status_code in (400, 422)
    assert client.post("/admin/products/NOPE-1/image", files={"image": ("x.png", PHOTO)}).status_code == 404
    assert images(client.db) == []


def test_only_an_admin_may_upload(client):
    url = f"/admin/products/{SKU}/image"
    r = client.post(url, files={"image": ("x.png", PHOTO, "image/png")}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].startswith("/login")
    login(client, "alice", "wonderland")
    assert client.post(url, files={"image": ("x.png", PHOTO, "image/png")}).status_code == 403
    login(client, "sam", "staff-pass-2")
    assert client.post(url, files={"image": ("x.png", PHOTO, "image/png")}).status_code == 403
    assert images(client.db) == []


def test_helpers_judge_bytes_and_names():
    assert image_kind(PHOTO) == "image/png" and image_kind(b"\xff\xd8\xff\xe0") == "image/jpeg"
    assert image_kind(b"GIF89a...") == "image/gif" and image_kind(b"%PDF-1.4") is None
    assert clean_name("C:\\Users\\x\\photo.png") == "photo.png" and clean_name("a\nb\x1b.png") == "ab.png"
    assert clean_name("/") == "unnamed" and len(clean_name("x" * 500)) == 100


def test_task_files_are_plain_names_and_bounded():
    data = base64.b64encode(b"hi").decode()
    for bad in ("../x.png", "/etc/passwd", "a b.png", ".hidden", "x" * 65):
        with pytest.raises(ValidationError, match="not a plain name"):
            TaskFile(name=bad, base64=data)
    with pytest.raises(ValidationError, match="not valid base64"):
        TaskFile(name="x.png", base64="***")
    with pytest.raises(ValidationError, match="at most 65536"):
        TaskFile(name="x.png", base64=base64.b64encode(b"0" * 70_000).decode())
    f = TaskFile(name="x.png", base64=data)
    with pytest.raises(ValidationError, match="share a name"):
        BrowserTask(id="t/x", goal="g", files=[f, f])
    # A task without files dumps as before (older sets' hashes stay).
    assert "files" not in BrowserTask(id="t/x", goal="g").model_dump()


def test_upload_file_parses_and_the_goal_lists_the_files():
    a = parse_action("upload_file('e6', 'photo.png')")
    assert a.kind == "upload_file" and a.args["file"] == "photo.png" and str(a.target) == "e6"
    assert parse_action("upload_file('e6', ['a.png', 'b.png'])").args["file"] == ["a.png", "b.png"]
    with pytest.raises(ActionError, match="not offered"):
        parse_action("mouse_upload_file(1, 2, 'x.png')")
    task = BrowserTaskPair.of(make_task_set().tasks[1])
    files = episode_files(task)
    assert len(files) == 2 and all(mime == "image/png" for mime, _ in files.values())
    goal = render_goal(task, 20)
    assert all(name in goal for name in files) and "upload_file(ref, 'name')" in goal


def test_the_bundled_set_is_the_generators_output():
    bundled = TaskSet.load(bundled_dir() / "browser_form" / "shop-files-v1")
    assert bundled.hash == make_task_set().hash
    tasks = [BrowserTaskPair.of(t) for t in bundled.tasks]
    assert len(tasks) == 6 and {t.visible.level for t in tasks} == {1, 2}
    for t in tasks:
        want = t.hidden.checks[0].expect["sha256"]
        assert want in {hashlib.sha256(f.data()).hexdigest() for f in t.visible.files or []}


def test_the_stored_bytes_are_the_uploaded_bytes(client):
    """Binary content through the multipart parser unchanged: lone CRs and LFs, a CR at the end."""
    login(client, "admin", "back-office-1")
    data = PHOTO + bytes(range(256)) + b"a\rb\nc\r\n\r\n--x\r"
    r = client.post(f"/admin/products/{SKU}/image", files={"image": ("x.png", data, "image/png")})
    assert r.status_code == 200
    assert images(client.db)[0][3:] == (len(data), hashlib.sha256(data).hexdigest())
    con = sqlite3.connect(client.db)
    assert con.execute("SELECT data FROM blobs").fetchall() == [(data,)]
    con.close()
