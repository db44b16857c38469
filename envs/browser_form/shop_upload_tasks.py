"""The shop-files-v1 task set: uploading the file an episode provides, judged on the server's state.

`python -m sandgym.envs.browser_form.shop_upload_tasks OUT` writes the set; the bundled
copy under task_specs/browser_form/shop-files-v1 is its output (a test checks that they
agree). Each task gives the agent one or two small images (made here, deterministically)
and asks it to set one as a product's image in the back office; the verdict reads the
stored image's SHA-256 from the app's database, so the right file, on the right product,
is what passes. Level 1 starts on the product's page; level 2 finds the product first.
"""

from __future__ import annotations

import base64
import hashlib
import random
import sqlite3
import struct
import sys
import tempfile
import zlib
from pathlib import Path

from sandgym.specs import TaskSet
from sandgym.specs.base import TaskSetMeta
from sandgym.specs.browser_form import BrowserHidden, BrowserTask, BrowserTaskPair, TaskFile

from .app import shopdata
from .shop_tasks import q

SEED = 3838


def png(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    """A solid-colour RGB PNG (the standard library's zlib and the format's chunks)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    raw = (b"\x00" + bytes(rgb) * width) * height
    assert len(raw) < 65_536, "one stored deflate block"
    # A stored (uncompressed) deflate block, written out: the bytes do not depend on the zlib build.
    stream = (
        b"\x78\x01\x01" + struct.pack("<HH", len(raw), len(raw) ^ 0xFFFF) + raw + struct.pack(">I", zlib.adler32(raw))
    )
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", stream) + chunk(b"IEND", b"")


def task_file(name: str, data: bytes) -> TaskFile:
    return TaskFile(name=name, base64=base64.b64encode(data).decode())


# The file input as Playwright's roles name it (an <input type=file> is a button there).
IMAGE_INPUT = "button:Image file (PNG, JPEG or GIF)"


def upload_oracle(name: str) -> list[str]:
    return [
        f"upload_file({q(IMAGE_INPUT)}, {q(name)})",
        'click("button:Upload image")',
        "done()",
    ]


def make_task_set() -> TaskSet:
    rng = random.Random(SEED)
    with tempfile.TemporaryDirectory(prefix="shop-upload-tasks-") as tmp:
        path = Path(tmp) / "shop.sqlite"
        shopdata.build_database(path)
        con = sqlite3.connect(path)
        con.row_factory = sqlite3.Row
        try:
            products = con.execute("SELECT sku, name FROM products WHERE active = 1 ORDER BY sku").fetchall()
        finally:
            con.close()
    pairs: list[BrowserTaskPair] = []
    for i, p in enumerate(rng.sample(products, 6)):
        sku, name = p["sku"], p["name"]
        photo = png(16 + i, 12, (rng.randrange(256), rng.randrange(256), rng.randrange(256)))
        decoy = png(16 + i, 12, (rng.randrange(256), rng.randrange(256), rng.randrange(256)))
        slug = sku.lower()
        files = [task_file(f"{slug}-front.png", photo)]
        level = 1 if i < 3 else 2
        goal = f"Upload the photo {slug}-front.png as the product image of {name}."
        oracle = upload_oracle(f"{slug}-front.png")
        if i % 2:  # two files: the goal says which one
            files.append(task_file(f"{slug}-back.png", decoy))
            goal += f" Leave {slug}-back.png out."
        start = f"/admin/products/{sku}"
        if level == 2:
            start = "/admin"
            oracle = [
                f"goto({q('/admin/products?q=' + sku)})",
                f"click({q('link:' + sku)})",
                *oracle,
            ]
        tid = f"shop/image-{sku}"
        visible = BrowserTask(
            id=tid,
            title=goal[:60],
            goal=goal,
            start_path=start,
            login_as="admin",
            app="shop",
            level=level,
            max_steps=20,
            files=files,
        )
        check = {
            "name": "image stored",
            "table": "product_images",
            "where": {"sku": sku},
            "count": 1,
            "expect": {"sha256": hashlib.sha256(photo).hexdigest(), "kind": "image/png", "size": len(photo)},
        }
        only = {"name": "no other image stored", "table": "product_images", "count": 1}
        hidden = BrowserHidden(id=tid, checks=[check, only], oracle=oracle)
        pairs.append(BrowserTaskPair(visible=visible, hidden=hidden))
    meta = TaskSetMeta(
        name="shop-files-v1",
        family="browser_form",
        description="The shop's back office with files to upload: set a product's image from the file the "
        "episode provides (one or two PNGs); judged on the stored image's SHA-256; two levels.",
    )
    return TaskSet(meta, pairs)


if __name__ == "__main__":  # pragma: no cover - the bundled set's maker
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "task_specs/browser_form/shop-files-v1")
    task_set = make_task_set()
    task_set.write(out)
    print(f"{len(task_set)} tasks written to {out}")
