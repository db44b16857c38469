"""What every bundled app shares: the per-request database, the request's form and user,
sign-in and sign-out, the page frame and its form controls (imported by formapp and shopapp;
inside the sandbox as `appkit`, the staged app folder being the import root).

Every request opens the database afresh and commits and closes it at its end: the host
swaps the file between episodes, and nothing may hold the old one. All state, sessions
included, lives in that file, so nothing survives a reset in memory.
"""

from __future__ import annotations

import html
import os
import secrets
import sqlite3
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from urllib.parse import parse_qs, quote, urlencode

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

DB_PATH = os.path.join(os.environ.get("SANDGYM_APP_STATE", "."), "app.sqlite")
COOKIE = "sid"

e = html.escape


@contextmanager
def db() -> Iterator[sqlite3.Connection]:
    """One connection per request, committed and closed at its end (see the module docstring)."""
    con = sqlite3.connect(DB_PATH, timeout=5.0)
    con.row_factory = sqlite3.Row
    try:
        with con:
            yield con
    finally:
        con.close()


async def form_data(request: Request) -> dict[str, str]:
    """An url-encoded form body as name -> last value."""
    body = (await request.body()).decode("utf-8", "replace")
    return {k: v[-1] for k, v in parse_qs(body, keep_blank_values=True).items()}


def current_user(con: sqlite3.Connection, request: Request, active: str = "") -> sqlite3.Row | None:
    """The signed-in user of the request's session cookie, or None. `active`: the app's own
    extra condition on `u` (a constant of the app, e.g. "u.deleted = 0"), never request data."""
    token = request.cookies.get(COOKIE)
    if not token:
        return None
    sql = "SELECT u.* FROM sessions s JOIN users u ON u.id = s.user_id WHERE s.token = ?"
    return con.execute(sql + (f" AND {active}" if active else ""), (token,)).fetchone()


def frame(site: str, title: str, nav: str, body: str, status: str = "", code: int = 200) -> HTMLResponse:
    """A whole page: `nav` (HTML) in the main navigation, `title` as its heading, a status line if any."""
    note = f'<p role="status">{e(status)}</p>' if status else ""
    doc = (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{e(title)} - {e(site)}</title>'
        f'</head><body><nav aria-label="Main">{nav}</nav><main><h1>{e(title)}</h1>{note}{body}</main></body></html>'
    )
    return HTMLResponse(doc, status_code=code)


SIGN_OUT = '<form method="post" action="/logout" style="display:inline"><button>Sign out</button></form>'


def signed_in_as(user: sqlite3.Row) -> str:
    """The navigation's tail for a signed-in user: the sign-out button and who it is."""
    return f" {SIGN_OUT} <span>Signed in as {e(user['username'])}</span>"


def field(label: str, name: str, value: str = "", kind: str = "text", error: str = "", required: bool = False) -> str:
    """A labelled input (or textarea), its error announced and tied to it."""
    err = f'<span id="{name}-error" role="alert">{e(error)}</span>' if error else ""
    described = f' aria-describedby="{name}-error" aria-invalid="true"' if error else ""
    req = " required" if required else ""
    if kind == "textarea":
        control = f'<textarea id="{name}" name="{name}"{described}{req}>{e(value)}</textarea>'
    else:
        control = f'<input id="{name}" name="{name}" type="{kind}" value="{e(value)}"{described}{req}>'
    return f'<p><label for="{name}">{e(label)}</label> {control} {err}</p>'


def select(label: str, name: str, options: list[tuple[str, str]], chosen: str = "", error: str = "") -> str:
    """A labelled drop-down of (value, text) options."""
    opts = "".join(f'<option value="{e(v)}"{" selected" if v == chosen else ""}>{e(t)}</option>' for v, t in options)
    err = f' <span id="{name}-error" role="alert">{e(error)}</span>' if error else ""
    return f'<p><label for="{name}">{e(label)}</label> <select id="{name}" name="{name}">{opts}</select>{err}</p>'


def safe_next(path: str) -> str:
    """A redirect target inside the app: a path, never another origin ('//host')."""
    return path if path.startswith("/") and not path.startswith("//") else "/"


def to_login(request: Request) -> RedirectResponse:
    return RedirectResponse(f"/login?next={quote(request.url.path)}", status_code=303)


def login_form(next_path: str, error: str = "", username: str = "", required: bool = False) -> str:
    err = f'<p role="alert">{e(error)}</p>' if error else ""
    return (
        f'{err}<form method="post" action="/login"><input type="hidden" name="next" value="{e(next_path)}">'
        + field("Username", "username", username, required=required)
        + field("Password", "password", kind="password", required=required)
        + "<button>Sign in</button></form>"
    )


def password_ok(user: sqlite3.Row | None, password: str) -> bool:
    return user is not None and secrets.compare_digest(user["password"].encode(), password.encode())


def signed_in(con: sqlite3.Connection, user_id: int, next_path: str) -> Response:
    """A new session for `user_id` and the redirect that sets its cookie."""
    token = secrets.token_urlsafe(24)
    con.execute("INSERT INTO sessions (token, user_id) VALUES (?, ?)", (token, user_id))
    resp = RedirectResponse(safe_next(next_path), status_code=303)
    resp.set_cookie(COOKIE, token, httponly=True, samesite="lax")
    return resp


def login_route(page: Callable[..., Response]) -> Callable[[Request], Awaitable[Response]]:
    """The sign-in endpoint of an app whose frame is `page(title, body, code=...)`: the form on GET;
    on POST a session and the redirect to `next`, or the form again with the error (401)."""

    async def login(request: Request) -> Response:
        if request.method == "GET":
            return page("Sign in", login_form(safe_next(request.query_params.get("next", "/"))))
        data = await form_data(request)
        username, password = data.get("username", "").strip(), data.get("password", "")
        with db() as con:
            user = con.execute("SELECT * FROM users WHERE username = ?", (username,)).fetchone()
            if user is None or not password_ok(user, password):
                body = login_form(safe_next(data.get("next", "/")), "Invalid username or password.", username)
                return page("Sign in", body, code=401)
            return signed_in(con, user["id"], data.get("next", "/"))

    return login


async def logout(request: Request) -> Response:
    with db() as con:
        con.execute("DELETE FROM sessions WHERE token = ?", (request.cookies.get(COOKIE, ""),))
    resp = RedirectResponse("/", status_code=303)
    resp.delete_cookie(COOKIE)
    return resp


def table(caption: str, head: list[str], rows: list[list[str]]) -> str:
    """A data table; cells are HTML already escaped by the caller."""
    th = "".join(f'<th scope="col">{e(h)}</th>' for h in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><caption>{e(caption)}</caption><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def page_number(request: Request) -> int:
    """The list page a request asks for (`?page=`), 1 if none or nonsense."""
    raw = request.query_params.get("page", "1")
    return int(raw) if raw.isdigit() and 0 < int(raw) < 100_000 else 1


def pager(path: str, params: dict[str, str], page_no: int, total: int, size: int, noun: str) -> str:
    """A list's count ("1,234 `noun`. Page 2 of 62.") and its previous and next links, filters kept."""
    pages = max(1, -(-total // size))
    out = [f'<p>{total:,} {noun}. Page {page_no} of {pages}.</p><nav aria-label="Pagination">']
    if page_no > 1:
        out.append(f'<a href="{path}?{e(urlencode({**params, "page": page_no - 1}))}">Previous page</a> ')
    if page_no < pages:
        out.append(f'<a href="{path}?{e(urlencode({**params, "page": page_no + 1}))}">Next page</a>')
    return "".join(out) + "</nav>"
