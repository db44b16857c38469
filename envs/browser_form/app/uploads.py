"""File uploads for the bundled apps: a multipart/form-data body read with a size cap and
parsed by the standard library (the sandbox stages no multipart package).

Everything in an upload is the page's, so hostile: the body is read only up to the cap
(a longer one is refused before it is buffered whole), the parts are counted, a file's
name is kept as text only (never a path: nothing is written to disk), and an image's
kind comes from its first bytes, never from the type the browser declared.
"""

from __future__ import annotations

import email.parser
import email.policy
import hashlib
from dataclasses import dataclass

from starlette.requests import Request

MAX_UPLOAD_BYTES = 256 * 1024  # the whole request body
MAX_PARTS = 16
MAX_NAME_CHARS = 100
# Image kinds by their magic bytes.
IMAGE_MAGIC = {
    b"\x89PNG\r\n\x1a\n": "image/png",
    b"\xff\xd8\xff": "image/jpeg",
    b"GIF87a": "image/gif",
    b"GIF89a": "image/gif",
}


class UploadRefused(ValueError):
    """The upload cannot be taken; the message says why, for the page."""


@dataclass(frozen=True)
class Upload:
    field: str
    filename: str
    data: bytes

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


def image_kind(data: bytes) -> str | None:
    """The image type `data` starts like, or None."""
    return next((kind for magic, kind in IMAGE_MAGIC.items() if data.startswith(magic)), None)


def clean_name(raw: str) -> str:
    """A file name for display: its last path part, printable, cut to MAX_NAME_CHARS."""
    base = raw.replace("\\", "/").rsplit("/", 1)[-1]
    return "".join(c for c in base if c.isprintable())[:MAX_NAME_CHARS] or "unnamed"


async def read_capped(request: Request, cap: int = MAX_UPLOAD_BYTES) -> bytes:
    """The request body, or UploadRefused as soon as it passes `cap` bytes."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > cap:
        raise UploadRefused(f"The file is too large: at most {cap // 1024} KiB.")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > cap:
            raise UploadRefused(f"The file is too large: at most {cap // 1024} KiB.")
        chunks.append(chunk)
    return b"".join(chunks)


async def multipart_form(request: Request, cap: int = MAX_UPLOAD_BYTES) -> tuple[dict[str, str], list[Upload]]:
    """A multipart/form-data body's text fields and files (UploadRefused if it is not one,
    is over `cap`, or has too many parts)."""
    ctype = request.headers.get("content-type", "")
    if not ctype.lower().startswith("multipart/form-data") or "boundary=" not in ctype:
        raise UploadRefused("Send the form as multipart/form-data (the page's own upload form does).")
    if "\r" in ctype or "\n" in ctype:
        raise UploadRefused("The form's content type is malformed.")
    body = await read_capped(request, cap)
    head = f"Content-Type: {ctype}\r\nMIME-Version: 1.0\r\n\r\n".encode("latin-1", "replace")
    msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + body)
    if not msg.is_multipart():
        raise UploadRefused("The form's body is not multipart.")
    fields: dict[str, str] = {}
    files: list[Upload] = []
    for n, part in enumerate(msg.iter_parts()):
        if n >= MAX_PARTS:
            raise UploadRefused(f"The form has more than {MAX_PARTS} parts.")
        if part.get_content_disposition() != "form-data":
            continue
        name = part.get_param("name", header="content-disposition")
        if not isinstance(name, str):
            continue
        data = part.get_payload(decode=True)
        payload = data if isinstance(data, bytes) else b""
        filename = part.get_filename()
        if filename is None:
            fields[name] = payload.decode("utf-8", "replace")
        elif payload or filename:
            files.append(Upload(field=name, filename=clean_name(filename), data=payload))
    return fields, files
