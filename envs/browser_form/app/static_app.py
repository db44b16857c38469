"""A static-file app (the MiniWoB++ pages), served inside the browser sandbox like the form app.

A bare ASGI app: each file is read once and then served from memory in one
body (a page load fetches several scripts at once from this one process;
Starlette's StaticFiles streamed each in chunks through a thread pool).
Standard library only; the root is a read-only mount.
"""

from __future__ import annotations

import mimetypes
import os
from typing import Any
from urllib.parse import unquote

ROOT = os.path.realpath(os.environ["SANDGYM_STATIC_ROOT"])
# Real path -> (content type, body). Bounded by the read-only tree; misses are not kept.
_cache: dict[str, tuple[bytes, bytes]] = {}


def _find(path: str) -> str | None:
    """The file a URL path names under ROOT (a folder: its index.html), or None."""
    full = os.path.realpath(os.path.join(ROOT, unquote(path).lstrip("/")))
    if full != ROOT and not full.startswith(ROOT + os.sep):
        return None
    if os.path.isdir(full):
        full = os.path.join(full, "index.html")
    return full if os.path.isfile(full) else None


def _load(full: str) -> tuple[bytes, bytes] | None:
    try:
        with open(full, "rb") as f:
            body = f.read()
    except OSError:
        return None
    kind = mimetypes.guess_type(full)[0] or "application/octet-stream"
    if kind.startswith("text/") or kind in ("application/javascript", "application/json"):
        kind += "; charset=utf-8"
    return kind.encode(), body


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    found = None
    full = _find(scope["path"]) if scope["method"] in ("GET", "HEAD") else None
    if full is not None:
        found = _cache.get(full) or _load(full)
        if found is not None:
            _cache[full] = found
    status, kind, body = (200, *found) if found else (404, b"text/plain; charset=utf-8", b"Not Found")
    headers = [(b"content-type", kind), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else body})
