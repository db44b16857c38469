"""The issue tracker app: projects, issues, comments and per-project roles (Starlette, server-rendered
HTML, SQLite), run inside the browser sandbox like the shop (imported as `trackerapp`). Every request
opens the database afresh (the host swaps the file on reset); sessions and drafts live in it too.

Every page asks for a signed-in user. In a project, reporters file issues and comment; developers also
set status, priority, assignee and labels; managers also close and reopen issues and set members'
roles. No route serves the database or any file.
"""

from __future__ import annotations

import sqlite3
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

SITE = "Beacon Tracker"
PAGE_SIZE = 25
STATUSES = {"open": "Open", "in_progress": "In progress", "resolved": "Resolved", "closed": "Closed"}
PRIORITIES = {"low": "Low", "medium": "Medium", "high": "High", "critical": "Critical"}
RESOLUTIONS = {"fixed": "Fixed", "duplicate": "Duplicate", "won't fix": "Won't fix"}
ROLES = {"reporter": "Reporter", "developer": "Developer", "manager": "Manager"}
RANK = {"reporter": 1, "developer": 2, "manager": 3}
PRIO_SQL = "CASE i.priority WHEN 'critical' THEN 0 WHEN 'high' THEN 1 WHEN 'medium' THEN 2 ELSE 3 END"
SORTS = {
    "updated": ("Recently updated", "i.updated DESC, i.id DESC"),
    "newest": ("Newest first", "i.created DESC, i.id DESC"),
    "oldest": ("Oldest first", "i.created, i.id"),
    "priority": ("Highest priority", f"{PRIO_SQL}, i.updated DESC, i.id DESC"),
}
ISSUE_SQL = (
    "SELECT i.*, p.key, p.name AS project, a.display_name AS assignee, r.display_name AS reporter "
    "FROM issues i JOIN projects p ON p.id = i.project_id JOIN users r ON r.id = i.reporter_id "
    "LEFT JOIN users a ON a.id = i.assignee_id"
)


def page(title: str, body: str, user: sqlite3.Row | None = None, status: str = "", code: int = 200) -> HTMLResponse:
    links = '<a href="/">Projects</a> <a href="/issues">Issues</a>'
    if user is None:
        links += ' <a href="/login">Sign in</a>'
    else:
        links += ' <a href="/issues/new">New issue</a>' + signed_in_as(user)
    return frame(SITE, title, links, body, status, code)


def ref(row: sqlite3.Row) -> str:
    return f"{row['key']}-{row['number']}"


def role_in(con: sqlite3.Connection, user_id: int, project_id: int) -> str | None:
    row = con.execute("SELECT role FROM members WHERE project_id = ? AND user_id = ?", (project_id, user_id)).fetchone()
    return row["role"] if row else None


def may(role: str | None, needed: str) -> bool:
    return role is not None and RANK[role] >= RANK[needed]


def forbidden(user: sqlite3.Row, why: str) -> HTMLResponse:
    return page("Not allowed", f'<p role="alert">{e(why)}</p>', user, code=403)


def signed_user(con: sqlite3.Connection, request: Request) -> tuple[Any, Response | None]:
    """The signed-in user, or the redirect that asks for a sign-in."""
    user = current_user(con, request)
    return (user, None) if user is not None else (None, to_login(request))


def now() -> str:
    return datetime.now().strftime("%Y-%m-%d %H:%M")


def issue_rows(rows: list[sqlite3.Row]) -> list[list[str]]:
    return [
        [
            f'<a href="/issues/{ref(r)}">{ref(r)}</a>',
            e(r["title"]),
            STATUSES[r["status"]],
            PRIORITIES[r["priority"]],
            e(r["assignee"] or "Unassigned"),
            r["updated"],
        ]
        for r in rows
    ]


ISSUE_HEAD = ["Issue", "Title", "Status", "Priority", "Assignee", "Updated"]

# -- sign-in and projects -----------------------------------------------------------------------


async def home(request: Request) -> Response:
    with db() as con:
        user, refused = signed_user(con, request)
        if refused:
            return refused
        rows = con.execute(
            "SELECT p.*, (SELECT COUNT(*) FROM issues WHERE project_id = p.id AND status IN ('open', 'in_progress')) "
            "AS active, m.role FROM projects p LEFT JOIN members m ON m.project_id = p.id AND m.user_id = ? "
            "ORDER BY p.name",
            (user["id"],),
        ).fetchall()
    search = (
        '<form method="get" action="/issues" role="search"><label for="q">Search issues</label> '
        '<input id="q" name="q" type="search"> <button>Search</button></form>'
    )
    cells = [
        [f'<a href="/projects/{r["key"]}">{e(r["name"])}</a>', r["key"], str(r["active"]), ROLES.get(r["role"], "-")]
        for r in rows
    ]
    return page(SITE, search + table("Projects", ["Project", "Key", "Open issues", "Your role"], cells), user)


def project_by_key(con: sqlite3.Connection, key: str) -> sqlite3.Row | None:
    return con.execute("SELECT * FROM projects WHERE key = ?", (key,)).fetchone()


async def project(request: Request) -> Response:
    with db() as con:
        user, refused = signed_user(con, request)
        if refused:
            return refused
        p = project_by_key(con, request.path_params["key"])
        if p is None:
            return page("Not found", "<p>No such project.</p>", user, code=404)
        counts = dict(
            con.execute("SELECT status, COUNT(*) FROM issues WHERE project_id = ? GROUP BY status", (p["id"],))
        )
        recent = con.execute(ISSUE_SQL + " WHERE i.project_id = ? ORDER BY i.updated DESC LIMIT 10", (p["id"],))
        recent_rows = recent.fetchall()
    facts = "".join(f"<dt>{label}</dt><dd>{counts.get(s, 0)}</dd>" for s, label in STATUSES.items())
    links = (
        f'<p><a href="/issues?{urlencode({"project": p["key"]})}">All issues of {e(p["name"])}</a> '
        f'<a href="/projects/{p["key"]}/members">Members</a></p>'
    )
    body = f"<p>{e(p['description'])}</p>{links}<h2>Issues by status</h2><dl>{facts}</dl>" + table(
        "Recently updated", ISSUE_HEAD, issue_rows(recent_rows)
    )
    return page(p["name"], body, user)


async def members(request: Request) -> Response:
    with db() as con:
        user, refused = signed_user(con, request)
        if refused:
            return refused
        p = project_by_key(con, request.path_params["key"])
        if p is None:
            return page("Not found", "<p>No such project.</p>", user, code=404)
        mine = role_in(con, user["id"], p["id"])
        error, status = "", ""
        if request.method == "POST":
            if not may(mine, "manager"):
                return forbidden(user, "Only the project's managers may change roles.")
            d = await form_data(request)
            person = con.execute("SELECT * FROM users WHERE id = ?", (d.get("person", ""),)).fetchone()
            role = d.get("role", "")
            if person is None:
                error = "Choose a person."
            elif role not in ROLES:
                error = "Choose a role: reporter, developer or manager."
            elif person["id"] == user["id"]:
                error = "You cannot change your own role."
            else:
                con.execute(
                    "INSERT INTO members VALUES (?, ?, ?) ON CONFLICT (project_id, user_id) DO UPDATE SET role = "
                    "excluded.role",
                    (p["id"], person["id"], role),
                )
                status = f"{person['display_name']} is now a {role} in {p['name']}."
        rows = con.execute(
            "SELECT u.display_name, u.username, m.role FROM members m JOIN users u ON u.id = m.user_id "
            "WHERE m.project_id = ? ORDER BY u.display_name",
            (p["id"],),
        ).fetchall()
        people = con.execute("SELECT id, display_name FROM users ORDER BY display_name").fetchall()
    cells = [[e(r["display_name"]), e(r["username"]), ROLES[r["role"]]] for r in rows]
    form = (
        f'<h2>Set a role</h2><form method="post" action="/projects/{p["key"]}/members">'
        + select("Person", "person", [("", "Choose a person")] + [(str(u["id"]), u["display_name"]) for u in people])
        + select("Role", "role", list(ROLES.items()), "developer", error=error)
        + "<button>Save role</button></form>"
        if may(mine, "manager")
        else ""
    )
    body = table("Members", ["Name", "Username", "Role"], cells) + form
    return page(f"Members of {p['name']}", body, user, status=status, code=400 if error else 200)


# -- the issue list: search, filters, sorting, pagination ----------------------------------------


async def issues(request: Request) -> Response:
    qp = request.query_params
    q, proj, status, prio = qp.get("q", "").strip(), qp.get("project", ""), qp.get("status", ""), qp.get("priority", "")
    assignee, label, sort = qp.get("assignee", ""), qp.get("label", ""), qp.get("sort", "updated")
    sort = sort if sort in SORTS else "updated"
    where, args = ["1 = 1"], list[Any]()
    if q:
        key, _, num = q.upper().partition("-")
        if num.isdigit():  # an issue key finds that issue
            where.append("(p.key = ? AND i.number = ?)")
            args += [key, int(num)]
        else:
            where.append("i.title LIKE ? ESCAPE '\\'")
            args.append("%" + q.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%")
    if proj:
        where.append("p.key = ?")
        args.append(proj)
    if status == "active":
        where.append("i.status IN ('open', 'in_progress')")
    elif status in STATUSES:
        where.append("i.status = ?")
        args.append(status)
    if prio in PRIORITIES:
        where.append("i.priority = ?")
        args.append(prio)
    if assignee == "none":
        where.append("i.assignee_id IS NULL")
    elif assignee.isdigit():
        where.append("i.assignee_id = ?")
        args.append(int(assignee))
    if label.isdigit():
        where.append("i.id IN (SELECT issue_id FROM issue_labels WHERE label_id = ?)")
        args.append(int(label))
    page_no = page_number(request)
    with db() as con:
        user, refused = signed_user(con, request)
        if refused:
            return refused
        projects = con.execute("SELECT key, name FROM projects ORDER BY name").fetchall()
        people = con.execute(
            "SELECT id, display_name FROM users WHERE id IN (SELECT user_id FROM members WHERE role != 'reporter') "
            "ORDER BY display_name"
        ).fetchall()
        labels = con.execute("SELECT id, name FROM labels ORDER BY name").fetchall()
        sql = (
            " FROM issues i JOIN projects p ON p.id = i.project_id LEFT JOIN users a ON a.id = i.assignee_id WHERE "
            + " AND ".join(where)
        )
        total = con.execute("SELECT COUNT(*)" + sql, args).fetchone()[0]
        rows = con.execute(
            f"SELECT i.*, p.key, a.display_name AS assignee{sql} ORDER BY {SORTS[sort][1]} LIMIT ? OFFSET ?",
            [*args, PAGE_SIZE, (page_no - 1) * PAGE_SIZE],
        ).fetchall()
    filters = (
        '<form method="get" action="/issues" role="search" aria-label="Issue filters">'
        f'<p><label for="q">Search issues</label> <input id="q" name="q" type="search" value="{e(q)}"></p>'
        + select("Project", "project", [("", "All projects")] + [(r["key"], r["name"]) for r in projects], proj)
        + select("Status", "status", [("", "Any status"), ("active", "Open or in progress"), *STATUSES.items()], status)
        + select("Priority", "priority", [("", "Any priority"), *PRIORITIES.items()], prio)
        + select(
            "Assignee",
            "assignee",
            [("", "Anyone"), ("none", "Unassigned")] + [(str(u["id"]), u["display_name"]) for u in people],
            assignee,
        )
        + select("Label", "label", [("", "Any label")] + [(str(r["id"]), r["name"]) for r in labels], label)
        + select("Sort by", "sort", [(k, v[0]) for k, v in SORTS.items()], sort)
        + "<button>Apply filters</button></form>"
    )
    params = {k: v for k, v in qp.items() if k != "page"}
    body = (
        filters
        + table("Issues", ISSUE_HEAD, issue_rows(rows))
        + pager("/issues", params, page_no, total, PAGE_SIZE, "issues")
    )
    return page("Issues", body, user)


# -- one issue: details, comments, changes, the close dialog --------------------------------------


def issue_by_ref(con: sqlite3.Connection, text: str) -> sqlite3.Row | None:
    key, _, num = text.partition("-")
    if not num.isdigit():
        return None
    return con.execute(ISSUE_SQL + " WHERE p.key = ? AND i.number = ?", (key, int(num))).fetchone()


def change_issue(con: sqlite3.Connection, i: sqlite3.Row, user: sqlite3.Row, d: dict[str, str]) -> str:
    """Apply one form of the issue page; returns an error or '' (raises PermissionError when not allowed)."""
    mine = role_in(con, user["id"], i["project_id"])
    action = d.get("action", "")
    stamp = now()
    if action == "comment":
        if mine is None:
            raise PermissionError("Only the project's members may comment.")
        text = d.get("body", "").strip()
        if not text or len(text) > 2000:
            return "A comment must have 1 to 2000 characters."
        con.execute(
            "INSERT INTO comments (issue_id, author_id, created, body) VALUES (?, ?, ?, ?)",
            (i["id"], user["id"], stamp, text),
        )
    elif action == "edit":
        if not may(mine, "developer"):
            raise PermissionError("Only developers and managers may change an issue.")
        status, prio, assignee = d.get("status", ""), d.get("priority", ""), d.get("assignee", "")
        if status not in ("open", "in_progress", "resolved"):
            return "Status must be open, in progress or resolved; managers close issues with Close issue."
        if i["status"] == "closed":
            return "A closed issue must be reopened first."
        if prio not in PRIORITIES:
            return "Choose a priority."
        assignee_id = None
        if assignee:
            if not assignee.isdigit() or not may(role_in(con, int(assignee), i["project_id"]), "developer"):
                return "The assignee must be a developer or manager of the project."
            assignee_id = int(assignee)
        if assignee_id != i["assignee_id"] and assignee_id not in (None, user["id"]) and not may(mine, "manager"):
            return "Developers may assign issues to themselves only; ask a manager."
        con.execute(
            "UPDATE issues SET status = ?, priority = ?, assignee_id = ?, updated = ? WHERE id = ?",
            (status, prio, assignee_id, stamp, i["id"]),
        )
    elif action in ("add_label", "remove_label"):
        if not may(mine, "developer"):
            raise PermissionError("Only developers and managers may change labels.")
        label = con.execute("SELECT id FROM labels WHERE id = ?", (d.get("label", ""),)).fetchone()
        if label is None:
            return "Choose a label."
        if action == "add_label":
            con.execute("INSERT OR IGNORE INTO issue_labels VALUES (?, ?)", (i["id"], label["id"]))
        else:
            con.execute("DELETE FROM issue_labels WHERE issue_id = ? AND label_id = ?", (i["id"], label["id"]))
        con.execute("UPDATE issues SET updated = ? WHERE id = ?", (stamp, i["id"]))
    elif action in ("close", "reopen"):
        if not may(mine, "manager"):
            raise PermissionError("Only the project's managers may close or reopen issues.")
        if action == "reopen":
            con.execute(
                "UPDATE issues SET status = 'open', resolution = '', updated = ? WHERE id = ?", (stamp, i["id"])
            )
        elif d.get("resolution", "") not in RESOLUTIONS:
            return "Choose a resolution: fixed, duplicate or won't fix."
        elif i["status"] == "closed":
            return "The issue is closed already."
        else:
            con.execute(
                "UPDATE issues SET status = 'closed', resolution = ?, updated = ? WHERE id = ?",
                (d["resolution"], stamp, i["id"]),
            )
    else:
        return "Unknown action."
    return ""


def issue_forms(con: sqlite3.Connection, i: sqlite3.Row, role: str | None) -> str:
    """The forms the user's role allows on this issue."""
    path = f"/issues/{ref(i)}"
    out = ""
    if role is not None:
        out += (
            f'<h2>Add a comment</h2><form method="post" action="{path}"><input type="hidden" name="action" '
            'value="comment">' + field("Comment", "body", kind="textarea") + "<button>Add comment</button></form>"
        )
    if may(role, "developer") and i["status"] != "closed":
        people = con.execute(
            "SELECT u.id, u.display_name FROM members m JOIN users u ON u.id = m.user_id WHERE m.project_id = ? "
            "AND m.role != 'reporter' ORDER BY u.display_name",
            (i["project_id"],),
        ).fetchall()
        editable = [(k, v) for k, v in STATUSES.items() if k != "closed"]
        out += (
            f'<h2>Change the issue</h2><form method="post" action="{path}"><input type="hidden" name="action" '
            'value="edit">'
            + select("Status", "status", editable, i["status"])
            + select("Priority", "priority", list(PRIORITIES.items()), i["priority"])
            + select(
                "Assignee",
                "assignee",
                [("", "Unassigned")] + [(str(u["id"]), u["display_name"]) for u in people],
                str(i["assignee_id"] or ""),
            )
            + "<button>Save changes</button></form>"
        )
    if may(role, "developer"):
        labels = con.execute("SELECT id, name FROM labels ORDER BY name").fetchall()
        out += (
            f'<form method="post" action="{path}"><input type="hidden" name="action" value="add_label">'
            + select("Label to add", "label", [(str(r["id"]), r["name"]) for r in labels])
            + "<button>Add label</button></form>"
        )
    if may(role, "manager"):
        if i["status"] == "closed":
            out += (
                f'<form method="post" action="{path}"><input type="hidden" name="action" value="reopen">'
                "<button>Reopen issue</button></form>"
            )
        else:
            # A modal dialog (the platform's <dialog>): the resolution is asked for before anything changes.
            out += (
                '<button type="button" onclick="document.getElementById(\'close-dialog\').showModal()">'
                'Close issue</button><dialog id="close-dialog" aria-labelledby="close-title">'
                f'<h2 id="close-title">Close {ref(i)}?</h2><form method="post" action="{path}">'
                '<input type="hidden" name="action" value="close">'
                + select("Resolution", "resolution", list(RESOLUTIONS.items()), "fixed")
                + '<button>Confirm close</button> <button type="button" '
                "onclick=\"document.getElementById('close-dialog').close()\">Keep open</button></form></dialog>"
            )
    return out


async def issue(request: Request) -> Response:
    with db() as con:
        user, refused = signed_user(con, request)
        if refused:
            return refused
        i = issue_by_ref(con, request.path_params["ref"])
        if i is None:
            return page("Not found", "<p>No such issue.</p>", user, code=404)
        error, status = "", ""
        if request.method == "POST":
            try:
                error = change_issue(con, i, user, await form_data(request))
            except PermissionError as why:
                return forbidden(user, str(why))
            if not error:
                return RedirectResponse(f"/issues/{ref(i)}?saved=1", status_code=303)
        elif request.query_params.get("saved") == "1":
            status = "Saved."
        role = role_in(con, user["id"], i["project_id"])
        labels = con.execute(
            "SELECT l.id, l.name FROM issue_labels il JOIN labels l ON l.id = il.label_id WHERE il.issue_id = ? "
            "ORDER BY l.name",
            (i["id"],),
        ).fetchall()
        notes = con.execute(
            "SELECT c.*, u.display_name FROM comments c JOIN users u ON u.id = c.author_id WHERE c.issue_id = ? "
            "ORDER BY c.created, c.id",
            (i["id"],),
        ).fetchall()
        forms = issue_forms(con, i, role)
    path = f"/issues/{ref(i)}"
    if may(role, "developer"):
        tags = "".join(
            f'<li>{e(r["name"])} <form method="post" action="{path}" style="display:inline"><input type="hidden" '
            f'name="action" value="remove_label"><button name="label" value="{r["id"]}">Remove label {e(r["name"])}'
            "</button></form></li>"
            for r in labels
        )
    else:
        tags = "".join(f"<li>{e(r['name'])}</li>" for r in labels)
    facts = (
        f'<dl><dt>Project</dt><dd><a href="/projects/{i["key"]}">{e(i["project"])}</a></dd>'
        f"<dt>Status</dt><dd>{STATUSES[i['status']]}</dd>"
        + (f"<dt>Resolution</dt><dd>{RESOLUTIONS[i['resolution']]}</dd>" if i["resolution"] else "")
        + f"<dt>Priority</dt><dd>{PRIORITIES[i['priority']]}</dd>"
        f"<dt>Assignee</dt><dd>{e(i['assignee'] or 'Unassigned')}</dd><dt>Reporter</dt><dd>{e(i['reporter'])}</dd>"
        f"<dt>Created</dt><dd>{i['created']}</dd><dt>Updated</dt><dd>{i['updated']}</dd></dl>"
        f'<h2>Labels</h2><ul aria-label="Labels">{tags or "<li>No labels</li>"}</ul>'
        f"<h2>Description</h2><p>{e(i['body'])}</p>"
    )
    thread = "".join(
        f"<article><h3>{e(c['display_name'])} on {c['created']}</h3><p>{e(c['body'])}</p></article>" for c in notes
    )
    alert = f'<p role="alert">{e(error)}</p>' if error else ""
    body = alert + facts + f"<h2>Comments ({len(notes)})</h2>" + (thread or "<p>No comments yet.</p>") + forms
    return page(f"{ref(i)}: {i['title']}", body, user, status=status, code=400 if error else 200)


# -- the new-issue form: three steps, the draft kept in the database ------------------------------


async def new_issue(request: Request) -> Response:
    """Step 1: project, title, description."""
    with db() as con:
        user, refused = signed_user(con, request)
        if refused:
            return refused
        mine = con.execute(
            "SELECT p.id, p.key, p.name FROM projects p JOIN members m ON m.project_id = p.id AND m.user_id = ? "
            "ORDER BY p.name",
            (user["id"],),
        ).fetchall()
        draft = con.execute("SELECT * FROM drafts WHERE user_id = ?", (user["id"],)).fetchone()
        d = {"project": "", "title": "", "body": ""}
        if draft is not None:
            d = {"project": str(draft["project_id"]), "title": draft["title"], "body": draft["body"]}
        errors: dict[str, str] = {}
        if request.method == "POST":
            raw = await form_data(request)
            d = {k: raw.get(k, "").strip() for k in d}
            if d["project"] not in {str(p["id"]) for p in mine}:
                errors["project"] = "Choose a project you are a member of."
            if not 8 <= len(d["title"]) <= 120:
                errors["title"] = "Title must be 8 to 120 characters."
            if not d["body"]:
                errors["body"] = "Description is required."
            elif len(d["body"]) > 4000:
                errors["body"] = "Description must be at most 4000 characters."
            if not errors:
                con.execute(
                    "INSERT INTO drafts (user_id, project_id, title, body) VALUES (?, ?, ?, ?) ON CONFLICT (user_id) "
                    "DO UPDATE SET project_id = excluded.project_id, title = excluded.title, body = excluded.body",
                    (user["id"], int(d["project"]), d["title"], d["body"]),
                )
                return RedirectResponse("/issues/new/details", status_code=303)
    form = (
        '<form method="post" action="/issues/new"><p>Step 1 of 3: what happened</p>'
        + select(
            "Project",
            "project",
            [("", "Choose a project")] + [(str(p["id"]), p["name"]) for p in mine],
            d["project"],
            errors.get("project", ""),
        )
        + field("Title", "title", d["title"], error=errors.get("title", ""))
        + field("Description", "body", d["body"], kind="textarea", error=errors.get("body", ""))
        + "<button>Continue</button></form>"
    )
    alert = '<p role="alert">Please fix the errors below.</p>' if errors else ""
    return page("New issue", alert + form, user, code=400 if errors else 200)


async def new_issue_details(request: Request) -> Response:
    """Step 2: priority and a label."""
    with db() as con:
        user, refused = signed_user(con, request)
        if refused:
            return refused
        draft = con.execute("SELECT * FROM drafts WHERE user_id = ?", (user["id"],)).fetchone()
        if draft is None:
            return RedirectResponse("/issues/new", status_code=303)
        labels = con.execute("SELECT id, name FROM labels ORDER BY name").fetchall()
        d = {"priority": draft["priority"], "label": str(draft["label_id"] or "")}
        errors: dict[str, str] = {}
        if request.method == "POST":
            raw = await form_data(request)
            d = {k: raw.get(k, "").strip() for k in d}
            if d["priority"] not in PRIORITIES:
                errors["priority"] = "Choose a priority."
            if d["label"] and d["label"] not in {str(r["id"]) for r in labels}:
                errors["label"] = "Choose a label from the list."
            if not errors:
                con.execute(
                    "UPDATE drafts SET priority = ?, label_id = ? WHERE user_id = ?",
                    (d["priority"], int(d["label"]) if d["label"] else None, user["id"]),
                )
                return RedirectResponse("/issues/new/review", status_code=303)
    form = (
        '<form method="post" action="/issues/new/details"><p>Step 2 of 3: how urgent</p>'
        + select("Priority", "priority", list(PRIORITIES.items()), d["priority"], errors.get("priority", ""))
        + select(
            "Label",
            "label",
            [("", "No label")] + [(str(r["id"]), r["name"]) for r in labels],
            d["label"],
            errors.get("label", ""),
        )
        + '<button>Continue to review</button></form><p><a href="/issues/new">Back to step 1</a></p>'
    )
    return page("New issue", form, user, code=400 if errors else 200)


async def new_issue_review(request: Request) -> Response:
    """Step 3: the draft as it will be filed; creating it files the issue."""
    with db() as con:
        user, refused = signed_user(con, request)
        if refused:
            return refused
        draft = con.execute(
            "SELECT d.*, p.key, p.name AS project, l.name AS label FROM drafts d JOIN projects p ON p.id = "
            "d.project_id LEFT JOIN labels l ON l.id = d.label_id WHERE d.user_id = ?",
            (user["id"],),
        ).fetchone()
        if draft is None:
            return RedirectResponse("/issues/new", status_code=303)
        if request.method == "POST":
            if role_in(con, user["id"], draft["project_id"]) is None:
                return forbidden(user, "You are not a member of that project.")
            number = con.execute(
                "SELECT COALESCE(MAX(number), 0) + 1 FROM issues WHERE project_id = ?", (draft["project_id"],)
            ).fetchone()[0]
            stamp = now()
            cur = con.execute(
                "INSERT INTO issues (project_id, number, title, body, status, priority, reporter_id, assignee_id, "
                "created, updated) VALUES (?, ?, ?, ?, 'open', ?, ?, NULL, ?, ?)",
                (
                    draft["project_id"],
                    number,
                    draft["title"],
                    draft["body"],
                    draft["priority"],
                    user["id"],
                    stamp,
                    stamp,
                ),
            )
            if draft["label_id"] is not None:
                con.execute("INSERT INTO issue_labels VALUES (?, ?)", (cur.lastrowid, draft["label_id"]))
            con.execute("DELETE FROM drafts WHERE user_id = ?", (user["id"],))
            return RedirectResponse(f"/issues/{draft['key']}-{number}?saved=1", status_code=303)
    facts = (
        f"<dl><dt>Project</dt><dd>{e(draft['project'])}</dd><dt>Title</dt><dd>{e(draft['title'])}</dd>"
        f"<dt>Description</dt><dd>{e(draft['body'])}</dd><dt>Priority</dt><dd>{PRIORITIES[draft['priority']]}</dd>"
        f"<dt>Label</dt><dd>{e(draft['label'] or 'No label')}</dd></dl>"
    )
    form = (
        "<p>Step 3 of 3: review</p>" + facts + '<form method="post" action="/issues/new/review">'
        '<button>Create issue</button></form><p><a href="/issues/new/details">Back to step 2</a></p>'
    )
    return page("New issue", form, user)


login = login_route(page)
RW = ["GET", "POST"]
PAGES = {"/": home, "/issues": issues, "/projects/{key}": project}
FORMS = {
    "/login": login,
    "/projects/{key}/members": members,
    "/issues/new": new_issue,
    "/issues/new/details": new_issue_details,
    "/issues/new/review": new_issue_review,
    "/issues/{ref}": issue,
}
app = Starlette(
    routes=[Route(path, fn) for path, fn in PAGES.items()]
    + [Route(path, fn, methods=RW) for path, fn in FORMS.items()]
    + [Route("/logout", logout, methods=["POST"])]
)
