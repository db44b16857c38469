"""The wiki app: spaces of pages with revisions, categories, tags, comments and per-space roles (Starlette,
server-rendered HTML, SQLite), run inside the browser sandbox like the shop and the tracker (imported as
`wikiapp`). Every request opens the database afresh (the host swaps the file on reset); sessions and the
editor's drafts live in it too.

Every page asks for a signed-in member of the space it belongs to (403 otherwise). Readers read, search and
comment; editors also write pages (an editor form, then a preview to publish), tag them and restore old
revisions; admins also protect and delete pages (each confirmed in a modal dialog), restore them from the
trash and set members' roles. A protected page is written by admins only. No route serves the database.
"""

from __future__ import annotations

import difflib
import sqlite3
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

if TYPE_CHECKING or __package__:  # imported from the sandgym package (the host, tests; mypy)
    from .appkit import (
        current_user,
        db,
        e,
        field,
        form_data,
        frame,
        login_route,
        logout,
        page_number,
        pager,
        select,
        signed_in_as,
        table,
        to_login,
    )
else:  # inside the sandbox, the staged app folder is the import root
    from appkit import (
        current_user,
        db,
        e,
        field,
        form_data,
        frame,
        login_route,
        logout,
        page_number,
        pager,
        select,
        signed_in_as,
        table,
        to_login,
    )

SITE = "Juniper Wiki"
PAGE_SIZE = 20
ROLES = {"reader": "Reader", "editor": "Editor", "admin": "Admin"}
RANK = {"reader": 1, "editor": 2, "admin": 3}
SORTS = {
    "updated": ("Recently updated", "p.updated DESC, p.id DESC"),
    "title": ("Title A to Z", "p.title, p.id"),
    "oldest": ("Oldest first", "p.created, p.id"),
    "revisions": ("Most revisions", "p.revision DESC, p.updated DESC, p.id DESC"),
}
PAGE_SQL = (
    "SELECT p.*, s.key, s.name AS space, c.name AS category, w.display_name AS editor, "
    "f.display_name AS creator FROM pages p JOIN spaces s ON s.id = p.space_id JOIN categories c ON "
    "c.id = p.category_id JOIN users w ON w.id = p.editor_id JOIN users f ON f.id = p.creator_id"
)
MEMBER_OF = "p.space_id IN (SELECT space_id FROM members WHERE user_id = ?)"


class Refused(Exception):
    """The signed-in user's role does not allow the request (answered 403 with the message)."""


class Missing(Exception):
    """What the request names does not exist (answered 404 with the message)."""


def page(title: str, body: str, user: sqlite3.Row | None = None, status: str = "", code: int = 200) -> HTMLResponse:
    links = '<a href="/">Spaces</a> <a href="/search">Search</a>'
    links += ' <a href="/login">Sign in</a>' if user is None else signed_in_as(user)
    return frame(SITE, title, links, body, status, code)


def now() -> str:
    return datetime.now().strftime("%Y-%m-%d %H:%M")


def role_in(con: sqlite3.Connection, user_id: int, space_id: int) -> str | None:
    row = con.execute("SELECT role FROM members WHERE space_id = ? AND user_id = ?", (space_id, user_id)).fetchone()
    return row["role"] if row else None


def require(role: str | None, needed: str, why: str) -> None:
    if role is None or RANK[role] < RANK[needed]:
        raise Refused(why)


def at_least(role: str | None, needed: str) -> bool:
    return role is not None and RANK[role] >= RANK[needed]


def href(p: sqlite3.Row, tail: str = "") -> str:
    return f"/wiki/{p['key']}/{p['slug']}{tail}"


def paragraphs(text: str) -> str:
    return "".join(f"<p>{e(line)}</p>" for line in text.split("\n") if line.strip())


def slugify(title: str) -> str:
    return "-".join("".join(c if c.isalnum() else " " for c in title.lower()).split())


def dialog(path: str, action: str, opener: str, heading: str, label: str, confirm: str, error: str) -> str:
    """A button opening a modal <dialog> whose form asks a reason for `action` (open at load with its error)."""
    js = f"document.getElementById('{action}-dialog')"
    return (
        f'<button type="button" onclick="{js}.showModal()">{e(opener)}</button>'
        f'<dialog id="{action}-dialog" aria-labelledby="{action}-title"><h2 id="{action}-title">{e(heading)}</h2>'
        f'<form method="post" action="{e(path)}"><input type="hidden" name="action" value="{action}">'
        + field(label, f"{action}_reason", error=error)
        + f'<button>{e(confirm)}</button> <button type="button" onclick="{js}.close()">Cancel</button></form>'
        f"</dialog>" + (f"<script>{js}.showModal()</script>" if error else "")
    )


def page_rows(rows: list[sqlite3.Row]) -> list[list[str]]:
    cols = ("space", "category", "editor", "updated", "revision")
    return [[f'<a href="{e(href(r))}">{e(r["title"])}</a>', *(e(str(r[k])) for k in cols)] for r in rows]


PAGE_HEAD = ["Page", "Space", "Category", "Last edited by", "Updated", "Revisions"]


class Ctx:
    """One request's connection and signed-in user, with the lookups every route makes."""

    def __init__(self, con: sqlite3.Connection, user: sqlite3.Row):
        self.con, self.user = con, user

    def one(self, sql: str, *args: Any) -> Any:
        return self.con.execute(sql, args).fetchone()

    def all(self, sql: str, *args: Any) -> list[Any]:
        return self.con.execute(sql, args).fetchall()

    def space(self, key: str) -> tuple[sqlite3.Row, str]:
        """The space and the user's role in it; Missing or Refused when there is none."""
        s = self.one("SELECT * FROM spaces WHERE key = ?", key)
        if s is None:
            raise Missing("No such space.")
        role = role_in(self.con, self.user["id"], s["id"])
        require(role, "reader", f"You are not a member of the {s['name']} space.")
        assert role is not None
        return s, role

    def wiki_page(self, key: str, slug: str) -> tuple[sqlite3.Row, str]:
        s, role = self.space(key)
        p = self.one(PAGE_SQL + " WHERE p.space_id = ? AND p.slug = ? AND p.deleted = 0", s["id"], slug)
        if p is None:
            raise Missing("No such page.")
        return p, role

    def options(self, table_name: str) -> list[tuple[str, str]]:
        return [(str(r["id"]), r["name"]) for r in self.all(f"SELECT id, name FROM {table_name} ORDER BY name")]


def member_route(handler: Callable[[Request, Ctx], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
    """The endpoint running `handler(request, ctx)` for a signed-in user: 404 for what does not exist,
    403 for what the user's role refuses (nothing it wrote is kept)."""

    async def endpoint(request: Request) -> Response:
        with db() as con:
            user = current_user(con, request)
            if user is None:
                return to_login(request)
            try:
                return await handler(request, Ctx(con, user))
            except Missing as why:
                con.rollback()
                return page("Not found", f"<p>{e(str(why))}</p>", user, code=404)
            except Refused as why:
                con.rollback()
                return page("Not allowed", f'<p role="alert">{e(str(why))}</p>', user, code=403)

    return endpoint


# -- sign-in, spaces, members, trash --------------------------------------------------------------


SEARCH_BOX = (
    '<form method="get" action="/search" role="search"><label for="q">Search pages</label> '
    '<input id="q" name="q" type="search"> <button>Search</button></form>'
)


@member_route
async def home(request: Request, c: Ctx) -> Response:
    rows = c.all(
        "SELECT s.*, m.role, (SELECT COUNT(*) FROM pages WHERE space_id = s.id AND deleted = 0) AS n FROM spaces s "
        "LEFT JOIN members m ON m.space_id = s.id AND m.user_id = ? ORDER BY s.name",
        c.user["id"],
    )
    cells = [
        [f'<a href="/spaces/{r["key"]}">{e(r["name"])}</a>', r["key"], f"{r['n']:,}", ROLES.get(r["role"], "-")]
        for r in rows
    ]
    return page(SITE, SEARCH_BOX + table("Spaces", ["Space", "Key", "Pages", "Your role"], cells), c.user)


@member_route
async def space_home(request: Request, c: Ctx) -> Response:
    s, role = c.space(request.path_params["key"])
    cats = c.all(
        "SELECT c.id, c.name, COUNT(p.id) AS n FROM categories c LEFT JOIN pages p ON p.category_id = c.id "
        "AND p.space_id = ? AND p.deleted = 0 GROUP BY c.id ORDER BY c.name",
        s["id"],
    )
    recent = c.all(PAGE_SQL + " WHERE p.space_id = ? AND p.deleted = 0 ORDER BY p.updated DESC LIMIT 10", s["id"])
    links = [f'<a href="/search?{urlencode({"space": s["key"]})}">All pages in {e(s["name"])}</a>']
    links.append(f'<a href="/spaces/{s["key"]}/members">Members</a>')
    if at_least(role, "editor"):
        links.append(f'<a href="/spaces/{s["key"]}/new">New page</a>')
    if role == "admin":
        links.append(f'<a href="/spaces/{s["key"]}/trash">Trash</a>')
    by_cat = "".join(
        f'<li><a href="/search?{e(urlencode({"space": s["key"], "category": r["id"]}))}">{e(r["name"])}</a> '
        f"({r['n']})</li>"
        for r in cats
    )
    body = (
        f"<p>{e(s['description'])}</p><p>Your role: {ROLES[role]}</p><p>{' '.join(links)}</p>"
        f'<h2>Categories</h2><ul aria-label="Categories">{by_cat}</ul>'
        + table("Recently updated", PAGE_HEAD, page_rows(recent))
    )
    return page(s["name"], body, c.user, status=request.query_params.get("note", "")[:200])


@member_route
async def members(request: Request, c: Ctx) -> Response:
    s, role = c.space(request.path_params["key"])
    error, status = "", ""
    if request.method == "POST":
        require(role, "admin", "Only the space's admins may change roles.")
        d = await form_data(request)
        person = c.one("SELECT * FROM users WHERE id = ?", d.get("person", ""))
        if person is None:
            error = "Choose a person."
        elif d.get("role", "") not in ROLES:
            error = "Choose a role: reader, editor or admin."
        elif person["id"] == c.user["id"]:
            error = "You cannot change your own role."
        else:
            c.con.execute(
                "INSERT INTO members VALUES (?, ?, ?) ON CONFLICT (space_id, user_id) DO UPDATE SET role = "
                "excluded.role",
                (s["id"], person["id"], d["role"]),
            )
            status = f"{person['display_name']} is now {ROLES[d['role']].lower()} in {s['name']}."
    rows = c.all(
        "SELECT u.display_name, m.role FROM members m JOIN users u ON u.id = m.user_id WHERE m.space_id = ? "
        "ORDER BY u.display_name",
        s["id"],
    )
    body = table("Members", ["Name", "Role"], [[e(r["display_name"]), ROLES[r["role"]]] for r in rows])
    if role == "admin":
        people = [(str(u["id"]), u["display_name"]) for u in c.all("SELECT * FROM users ORDER BY display_name")]
        body += (
            f'<h2>Set a role</h2><form method="post" action="/spaces/{s["key"]}/members">'
            + select("Person", "person", [("", "Choose a person"), *people])
            + select("Role", "role", list(ROLES.items()), "editor", error=error)
            + "<button>Save role</button></form>"
        )
    return page(f"Members of {s['name']}", body, c.user, status=status, code=400 if error else 200)


@member_route
async def trash(request: Request, c: Ctx) -> Response:
    s, role = c.space(request.path_params["key"])
    require(role, "admin", "Only the space's admins may open its trash.")
    if request.method == "POST":
        d = await form_data(request)
        p = c.one(PAGE_SQL + " WHERE p.id = ? AND p.space_id = ? AND p.deleted = 1", d.get("page", ""), s["id"])
        if p is None:
            raise Missing("No such page in the trash.")
        c.con.execute("UPDATE pages SET deleted = 0, delete_reason = '', deleted_at = '' WHERE id = ?", (p["id"],))
        return RedirectResponse(href(p, "?saved=restored"), status_code=303)
    rows = c.all(PAGE_SQL + " WHERE p.space_id = ? AND p.deleted = 1 ORDER BY p.deleted_at DESC", s["id"])
    form = f'<form method="post" action="/spaces/{s["key"]}/trash">'
    cells = [
        [*(e(r[k]) for k in ("title", "category", "deleted_at", "delete_reason"))]
        + [f'{form}<button name="page" value="{r["id"]}">Restore {e(r["title"])}</button></form>']
        for r in rows
    ]
    body = table("Deleted pages", ["Page", "Category", "Deleted", "Reason", ""], cells)
    return page(f"Trash of {s['name']}", body, c.user)


# -- search: text, filters, sorting, pagination ----------------------------------------------------


@member_route
async def search(request: Request, c: Ctx) -> Response:
    qp = request.query_params
    q, space, cat, tag = qp.get("q", "").strip(), qp.get("space", ""), qp.get("category", ""), qp.get("tag", "")
    editor, sort = qp.get("editor", ""), qp.get("sort", "updated")
    sort = sort if sort in SORTS else "updated"

    where, args = ["p.deleted = 0", MEMBER_OF], [c.user["id"]]
    if q:
        like = "%" + q.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        where.append("(p.title LIKE ? ESCAPE '\\' OR p.body LIKE ? ESCAPE '\\')")
        args += [like, like]
    for value, cond in ((space, "s.key = ?"), (cat, "p.category_id = ?"), (editor, "p.editor_id = ?")):
        if value:
            where.append(cond)
            args.append(value)
    if tag:
        where.append("p.id IN (SELECT page_id FROM page_tags WHERE tag_id = ?)")
        args.append(tag)
    sql = PAGE_SQL + " WHERE " + " AND ".join(where)
    page_no = page_number(request)
    total = c.one(f"SELECT COUNT(*) FROM ({sql})", *args)[0]
    rows = c.all(f"{sql} ORDER BY {SORTS[sort][1]} LIMIT ? OFFSET ?", *args, PAGE_SIZE, (page_no - 1) * PAGE_SIZE)
    spaces = c.all(
        "SELECT key, name FROM spaces s JOIN members m ON m.space_id = s.id AND m.user_id = ? ORDER BY name",
        c.user["id"],
    )
    people = c.all(
        "SELECT id, display_name FROM users WHERE id IN (SELECT user_id FROM members WHERE role != "
        "'reader') ORDER BY display_name"
    )
    form = (
        '<form method="get" action="/search" role="search" aria-label="Page filters">'
        f'<p><label for="q">Search pages</label> <input id="q" name="q" type="search" value="{e(q)}"></p>'
        + select("Space", "space", [("", "All spaces")] + [(r["key"], r["name"]) for r in spaces], space)
        + select("Category", "category", [("", "Any category"), *c.options("categories")], cat)
        + select("Tag", "tag", [("", "Any tag"), *c.options("tags")], tag)
        + select("Last edited by", "editor", [("", "Anyone"), *((str(u[0]), u[1]) for u in people)], editor)
        + select("Sort by", "sort", [(k, v[0]) for k, v in SORTS.items()], sort)
        + "<button>Apply filters</button></form>"
    )
    params = {k: v for k, v in qp.items() if k != "page"}
    body = (
        form + table("Pages", PAGE_HEAD, page_rows(rows)) + pager("/search", params, page_no, total, PAGE_SIZE, "pages")
    )
    return page("Search", body, c.user)


# -- one page: content, tags, comments, protection and deletion ----------------------------------------


async def page_action(c: Ctx, p: sqlite3.Row, role: str, d: dict[str, str]) -> tuple[str, str]:
    """Apply one form of a page; returns (the field in error, its message) or ('', '') when done."""
    action, stamp = d.get("action", ""), now()
    if action == "comment":
        text = d.get("body", "").strip()
        if not text or len(text) > 1000:
            return "body", "A comment must be 1 to 1000 characters."
        c.con.execute(
            "INSERT INTO comments (page_id, author_id, created, body) VALUES (?, ?, ?, ?)",
            (p["id"], c.user["id"], stamp, text),
        )
    elif action in ("add_tag", "remove_tag"):
        require(role, "editor", "Only editors and admins may change tags.")
        tag = c.one("SELECT id FROM tags WHERE id = ?", d.get("tag", ""))
        if tag is None:
            return "tag", "Choose a tag."
        if action == "add_tag":
            c.con.execute("INSERT OR IGNORE INTO page_tags VALUES (?, ?)", (p["id"], tag["id"]))
        else:
            c.con.execute("DELETE FROM page_tags WHERE page_id = ? AND tag_id = ?", (p["id"], tag["id"]))
    elif action in ("protect", "unprotect", "delete"):
        require(role, "admin", "Only the space's admins may protect or delete pages.")
        reason = d.get(f"{action}_reason", "").strip()
        if action != "unprotect" and not 3 <= len(reason) <= 200:
            return action, "Give a reason of 3 to 200 characters."
        if action == "delete":
            c.con.execute(
                "UPDATE pages SET deleted = 1, delete_reason = ?, deleted_at = ? WHERE id = ?", (reason, stamp, p["id"])
            )
        else:
            c.con.execute(
                "UPDATE pages SET protected = ?, protect_reason = ? WHERE id = ?",
                (int(action == "protect"), reason, p["id"]),
            )
    else:
        return "action", "Unknown action."
    return "", ""


def page_forms(c: Ctx, p: sqlite3.Row, role: str, tags: list[sqlite3.Row], err: tuple[str, str]) -> str:
    """The forms the user's role allows on this page (the one in error shows its message)."""
    path, (where, msg) = href(p), err
    out = (
        f'<h2>Add a comment</h2><form method="post" action="{e(path)}"><input type="hidden" name="action" '
        'value="comment">'
        + field("Comment", "body", kind="textarea", error=msg if where == "body" else "")
        + "<button>Add comment</button></form>"
    )
    if at_least(role, "editor"):
        have = {t["id"] for t in tags}
        choices = [o for o in c.options("tags") if int(o[0]) not in have]
        out += (
            f'<form method="post" action="{e(path)}"><input type="hidden" name="action" value="add_tag">'
            + select("Tag to add", "tag", choices, error=msg if where == "tag" else "")
            + "<button>Add tag</button></form>"
        )
    if role == "admin":
        out += "<h2>Admin</h2>"
        if p["protected"]:
            out += (
                f'<form method="post" action="{e(path)}"><input type="hidden" name="action" value="unprotect">'
                "<button>Remove protection</button></form>"
            )
        else:
            out += dialog(
                path,
                "protect",
                "Protect page",
                f"Protect {p['title']}?",
                "Reason for protection",
                "Confirm protection",
                msg if where == "protect" else "",
            )
        out += dialog(
            path,
            "delete",
            "Delete page",
            f"Delete {p['title']}?",
            "Reason for deletion",
            "Confirm delete",
            msg if where == "delete" else "",
        )
    return out


SAVED = {"1": "Saved.", "published": "Published.", "restored": "Restored from the trash."}


@member_route
async def wiki_page(request: Request, c: Ctx) -> Response:
    p, role = c.wiki_page(request.path_params["key"], request.path_params["slug"])
    err = ("", "")
    if request.method == "POST":
        d = await form_data(request)
        err = await page_action(c, p, role, d)
        if not err[0] and d.get("action") == "delete":  # the page is gone: back to its space
            note = urlencode({"note": f"Moved {p['title']} to the trash."})
            return RedirectResponse(f"/spaces/{p['key']}?{note}", status_code=303)
        if not err[0]:
            return RedirectResponse(href(p, "?saved=1"), status_code=303)
    tags = c.all(
        "SELECT t.id, t.name FROM page_tags pt JOIN tags t ON t.id = pt.tag_id WHERE pt.page_id = ? ORDER BY t.name",
        p["id"],
    )
    notes = c.all(
        "SELECT c.*, u.display_name FROM comments c JOIN users u ON u.id = c.author_id WHERE c.page_id = ? "
        "ORDER BY c.created, c.id",
        p["id"],
    )
    path = href(p)
    if at_least(role, "editor"):
        tag_items = "".join(
            f'<li>{e(t["name"])} <form method="post" action="{e(path)}" style="display:inline"><input '
            f'type="hidden" name="action" value="remove_tag"><button name="tag" value="{t["id"]}">Remove tag '
            f"{e(t['name'])}</button></form></li>"
            for t in tags
        )
    else:
        tag_items = "".join(f"<li>{e(t['name'])}</li>" for t in tags)
    writable = at_least(role, "admin" if p["protected"] else "editor")
    links = f'<a href="{e(path)}/edit">Edit page</a> ' if writable else ""
    links += f'<a href="{e(path)}/history">Page history</a>'
    facts = (
        f'<p><a href="/spaces/{p["key"]}">{e(p["space"])}</a> / {e(p["title"])}</p><p>{links}</p>'
        f"<dl><dt>Category</dt><dd>{e(p['category'])}</dd><dt>Revisions</dt><dd>{p['revision']}</dd>"
        f"<dt>Created by</dt><dd>{e(p['creator'])}</dd><dt>Created</dt><dd>{p['created']}</dd>"
        f"<dt>Last edited by</dt><dd>{e(p['editor'])}</dd><dt>Last edited</dt><dd>{p['updated']}</dd>"
        f"<dt>Protected</dt><dd>{'Yes' if p['protected'] else 'No'}</dd></dl>"
        f'<h2>Tags</h2><ul aria-label="Tags">{tag_items or "<li>No tags</li>"}</ul>'
        f'<h2>Content</h2><div aria-label="Content">{paragraphs(p["body"])}</div>'
    )
    thread = "".join(
        f"<article><h3>{e(n['display_name'])} on {n['created']}</h3><p>{e(n['body'])}</p></article>" for n in notes
    )
    alert = '<p role="alert">Please fix the error below.</p>' if err[0] else ""
    body = alert + facts + f"<h2>Comments ({len(notes)})</h2>" + (thread or "<p>No comments yet.</p>")
    body += page_forms(c, p, role, tags, err)
    status = SAVED.get(request.query_params.get("saved", ""), "")
    return page(p["title"], body, c.user, status=status, code=400 if err[0] else 200)


# -- the editor: a form, then a preview that publishes; the draft is kept in the database ----------------


def check_draft(c: Ctx, space_id: int, page_id: int | None, d: dict[str, str], editing: bool) -> dict[str, str]:
    """Errors per field of the editor's form."""
    errors: dict[str, str] = {}
    if not 3 <= len(d["title"]) <= 100:
        errors["title"] = "Title must be 3 to 100 characters."
    elif not slugify(d["title"]):
        errors["title"] = "Title needs a letter or a digit."
    else:
        clash = c.one("SELECT id FROM pages WHERE space_id = ? AND slug = ?", space_id, slugify(d["title"]))
        if clash is not None and clash["id"] != page_id:
            errors["title"] = "Another page of this space has that title."
    if not c.one("SELECT 1 FROM categories WHERE id = ?", d["category"]):
        errors["category"] = "Choose a category."
    if not d["body"]:
        errors["body"] = "Content is required."
    elif len(d["body"]) > 5000:
        errors["body"] = "Content must be at most 5000 characters."
    if editing and not 3 <= len(d["summary"]) <= 120:
        errors["summary"] = "Edit summary must be 3 to 120 characters."
    return errors


async def editor_form(request: Request, c: Ctx, s: sqlite3.Row, p: sqlite3.Row | None) -> Response:
    """The editor of page `p` (None: a new page of space `s`); a valid post keeps the draft and goes to preview."""
    page_id = None if p is None else p["id"]
    sql = "SELECT * FROM drafts WHERE user_id = ? AND space_id = ? AND page_id IS ?"
    draft = c.one(sql, c.user["id"], s["id"], page_id)
    d = {"title": "", "category": "", "body": "", "summary": ""}
    if draft is not None:
        d = {k: str(draft["category_id" if k == "category" else k]) for k in d}
    elif p is not None:
        d.update(title=p["title"], category=str(p["category_id"]), body=p["body"])
    errors: dict[str, str] = {}
    if request.method == "POST":
        raw = await form_data(request)
        d = {k: raw.get(k, "").replace("\r\n", "\n").strip() for k in d}
        errors = check_draft(c, s["id"], page_id, d, p is not None)
        if (
            p is not None
            and not errors
            and (d["title"], d["category"], d["body"]) == (p["title"], str(p["category_id"]), p["body"])
        ):
            errors["body"] = "Nothing changed: edit the title, category or content."
        if not errors:
            c.con.execute("DELETE FROM drafts WHERE user_id = ?", (c.user["id"],))
            c.con.execute(
                "INSERT INTO drafts VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    c.user["id"],
                    s["id"],
                    page_id,
                    d["title"],
                    int(d["category"]),
                    d["body"],
                    d["summary"] if p is not None else "Created the page",
                ),
            )
            return RedirectResponse("/editor/preview", status_code=303)
    action = f"/spaces/{s['key']}/new" if p is None else href(p, "/edit")
    form = (
        f'<form method="post" action="{e(action)}"><p>Step 1 of 2: write</p>'
        + field("Title", "title", d["title"], error=errors.get("title", ""))
        + select(
            "Category",
            "category",
            [("", "Choose a category"), *c.options("categories")],
            d["category"],
            errors.get("category", ""),
        )
        + field("Content", "body", d["body"], kind="textarea", error=errors.get("body", ""))
        + (field("Edit summary", "summary", d["summary"], error=errors.get("summary", "")) if p is not None else "")
        + "<button>Preview</button></form>"
    )
    alert = '<p role="alert">Please fix the errors below.</p>' if errors else ""
    title = f"New page in {s['name']}" if p is None else f"Editing {p['title']}"
    return page(title, alert + form, c.user, code=400 if errors else 200)


@member_route
async def edit(request: Request, c: Ctx) -> Response:
    p, role = c.wiki_page(request.path_params["key"], request.path_params["slug"])
    require(role, "admin" if p["protected"] else "editor", "Only editors may edit pages; admins only, if protected.")
    s = c.one("SELECT * FROM spaces WHERE id = ?", p["space_id"])
    return await editor_form(request, c, s, p)


@member_route
async def new_page(request: Request, c: Ctx) -> Response:
    s, role = c.space(request.path_params["key"])
    require(role, "editor", "Only editors and admins may write pages.")
    return await editor_form(request, c, s, None)


def write_revision(c: Ctx, page_id: int, title: str, category: int, body: str, summary: str) -> None:
    """The page's next revision, and the page as it now reads."""
    stamp = now()
    number = c.one("SELECT COALESCE(MAX(number), 0) + 1 FROM revisions WHERE page_id = ?", page_id)[0]
    c.con.execute(
        "INSERT INTO revisions (page_id, number, author_id, created, summary, title, category_id, body) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (page_id, number, c.user["id"], stamp, summary, title, category, body),
    )
    c.con.execute(
        "UPDATE pages SET title = ?, slug = ?, category_id = ?, body = ?, revision = ?, editor_id = ?, updated = ? "
        "WHERE id = ?",
        (title, slugify(title), category, body, number, c.user["id"], stamp, page_id),
    )


@member_route
async def preview(request: Request, c: Ctx) -> Response:
    d = c.one(
        "SELECT d.*, s.key, s.name AS space, c.name AS category FROM drafts d JOIN spaces s ON s.id = d.space_id "
        "JOIN categories c ON c.id = d.category_id WHERE d.user_id = ?",
        c.user["id"],
    )
    if d is None:
        return RedirectResponse("/", status_code=303)
    role = role_in(c.con, c.user["id"], d["space_id"])
    p = None if d["page_id"] is None else c.one(PAGE_SQL + " WHERE p.id = ? AND p.deleted = 0", d["page_id"])
    if d["page_id"] is not None and p is None:
        raise Missing("The page of this draft is gone.")
    back = f"/spaces/{d['key']}/new" if p is None else href(p, "/edit")
    if request.method == "POST":
        require(role, "admin" if p is not None and p["protected"] else "editor", "You may not publish this page.")
        if check_draft(c, d["space_id"], d["page_id"], dict(d) | {"category": str(d["category_id"])}, False):
            return RedirectResponse(back, status_code=303)
        page_id = d["page_id"]
        if page_id is None:
            page_id = c.con.execute(
                "INSERT INTO pages (space_id, slug, title, category_id, body, revision, creator_id, editor_id, "
                "created, updated) VALUES (?, ?, ?, ?, ?, 0, ?, ?, ?, ?)",
                (
                    d["space_id"],
                    slugify(d["title"]),
                    d["title"],
                    d["category_id"],
                    d["body"],
                    c.user["id"],
                    c.user["id"],
                    now(),
                    now(),
                ),
            ).lastrowid
        assert page_id is not None
        write_revision(c, page_id, d["title"], d["category_id"], d["body"], d["summary"])
        c.con.execute("DELETE FROM drafts WHERE user_id = ?", (c.user["id"],))
        return RedirectResponse(f"/wiki/{d['key']}/{slugify(d['title'])}?saved=published", status_code=303)
    facts = (
        f"<dl><dt>Space</dt><dd>{e(d['space'])}</dd><dt>Title</dt><dd>{e(d['title'])}</dd>"
        f"<dt>Category</dt><dd>{e(d['category'])}</dd><dt>Edit summary</dt><dd>{e(d['summary'])}</dd></dl>"
    )
    body = (
        "<p>Step 2 of 2: preview</p>" + facts + f'<h2>Content</h2><div aria-label="Content">'
        f"{paragraphs(d['body'])}</div>"
        '<form method="post" action="/editor/preview"><button>Publish</button></form>'
        f'<p><a href="{e(back)}">Back to editing</a></p>'
    )
    return page(f"Preview of {d['title']}", body, c.user)


# -- history: revisions, a revision, the changes of one, restoring one ---------------------------------


@member_route
async def history(request: Request, c: Ctx) -> Response:
    p, role = c.wiki_page(request.path_params["key"], request.path_params["slug"])
    writable = at_least(role, "admin" if p["protected"] else "editor")
    if request.method == "POST":
        require(role, "admin" if p["protected"] else "editor", "You may not restore revisions of this page.")
        old = c.one(
            "SELECT * FROM revisions WHERE page_id = ? AND number = ?",
            p["id"],
            (await form_data(request)).get("revision", ""),
        )
        if old is None or old["number"] == p["revision"]:
            raise Missing("No such earlier revision.")
        clash = c.one(
            "SELECT id FROM pages WHERE space_id = ? AND slug = ? AND id != ?",
            p["space_id"],
            slugify(old["title"]),
            p["id"],
        )
        if clash is not None:
            raise Refused("Another page of this space has that revision's title now.")
        write_revision(c, p["id"], old["title"], old["category_id"], old["body"], f"Restored revision {old['number']}")
        return RedirectResponse(f"/wiki/{p['key']}/{slugify(old['title'])}?saved=1", status_code=303)
    revs = c.all(
        "SELECT r.*, u.display_name FROM revisions r JOIN users u ON u.id = r.author_id WHERE r.page_id = ? "
        "ORDER BY r.number DESC",
        p["id"],
    )
    path = href(p)
    cells = []
    for r in revs:
        n = r["number"]
        changes = f'<a href="{e(path)}/diff/{n}">Changes in revision {n}</a>' if n > 1 else "First version"
        restore = (
            f'<form method="post" action="{e(path)}/history"><button name="revision" value="{n}">Restore '
            f"revision {n}</button></form>"
            if writable and n != p["revision"]
            else ""
        )
        cells.append(
            [
                f'<a href="{e(path)}/revisions/{n}">Revision {n}</a>',
                e(r["display_name"]),
                r["created"],
                e(r["summary"]),
                changes,
                restore,
            ]
        )
    body = f'<p><a href="{e(path)}">Back to the page</a></p>' + table(
        "Revisions", ["Revision", "Author", "Date", "Summary", "Changes", ""], cells
    )
    return page(f"History of {p['title']}", body, c.user)


def revision_of(c: Ctx, p: sqlite3.Row, raw: str) -> sqlite3.Row:
    r = c.one(
        "SELECT r.*, u.display_name, c.name AS category FROM revisions r JOIN users u ON u.id = r.author_id "
        "JOIN categories c ON c.id = r.category_id WHERE r.page_id = ? AND r.number = ?",
        p["id"],
        raw,
    )
    if r is None:
        raise Missing("No such revision.")
    return r


@member_route
async def revision(request: Request, c: Ctx) -> Response:
    p, _ = c.wiki_page(request.path_params["key"], request.path_params["slug"])
    r = revision_of(c, p, request.path_params["n"])
    body = (
        f'<p><a href="{e(href(p))}/history">Back to the history</a></p>'
        f"<dl><dt>Title</dt><dd>{e(r['title'])}</dd><dt>Category</dt><dd>{e(r['category'])}</dd>"
        f"<dt>Author</dt><dd>{e(r['display_name'])}</dd><dt>Date</dt><dd>{r['created']}</dd>"
        f"<dt>Summary</dt><dd>{e(r['summary'])}</dd></dl>"
        f'<h2>Content</h2><div aria-label="Content">{paragraphs(r["body"])}</div>'
    )
    return page(f"{p['title']}, revision {r['number']}", body, c.user)


@member_route
async def diff(request: Request, c: Ctx) -> Response:
    p, _ = c.wiki_page(request.path_params["key"], request.path_params["slug"])
    new = revision_of(c, p, request.path_params["n"])
    old = revision_of(c, p, str(new["number"] - 1))
    items = []
    for a, b, what in ((old["title"], new["title"], "Title"), (old["category"], new["category"], "Category")):
        if a != b:
            items.append(f"<li>{what}: <del>{e(a)}</del> to <ins>{e(b)}</ins></li>")
    for line in difflib.ndiff(old["body"].split("\n"), new["body"].split("\n")):
        if line[:2] == "- ":
            items.append(f"<li>Removed: <del>{e(line[2:])}</del></li>")
        elif line[:2] == "+ ":
            items.append(f"<li>Added: <ins>{e(line[2:])}</ins></li>")
    body = (
        f'<p><a href="{e(href(p))}/history">Back to the history</a></p><p>Revision {old["number"]} by '
        f"{e(old['display_name'])} to revision {new['number']} by {e(new['display_name'])}: "
        f"{e(new['summary'])}</p>"
        f'<ul aria-label="Changes">{"".join(items) or "<li>No changes</li>"}</ul>'
    )
    return page(f"Changes in revision {new['number']} of {p['title']}", body, c.user)


login = login_route(page)
RW = ["GET", "POST"]
PAGES = {
    "/": home,
    "/search": search,
    "/spaces/{key}": space_home,
    "/wiki/{key}/{slug}/revisions/{n:int}": revision,
    "/wiki/{key}/{slug}/diff/{n:int}": diff,
}
FORMS = {
    "/login": login,
    "/spaces/{key}/members": members,
    "/spaces/{key}/trash": trash,
    "/spaces/{key}/new": new_page,
    "/editor/preview": preview,
    "/wiki/{key}/{slug}/edit": edit,
    "/wiki/{key}/{slug}/history": history,
    "/wiki/{key}/{slug}": wiki_page,
}
app = Starlette(
    routes=[Route(path, fn) for path, fn in PAGES.items()]
    + [Route(path, fn, methods=RW) for path, fn in FORMS.items()]
    + [Route("/logout", logout, methods=["POST"])]
)
