"""The issue tracker's database: schema and realistic data generated from a seed.

As with the shop (shopdata.py): random.Random and no clock, so a seed gives
the same rows everywhere; thousands of issues and comments over a few
projects whose members hold per-project roles. Standalone (stdlib only):
the host, the task generator and the tests import it too.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from pathlib import Path

from .schema import people, write_generated

SCHEMA = """
CREATE TABLE users (id INTEGER PRIMARY KEY, username TEXT UNIQUE NOT NULL, password TEXT NOT NULL,
    display_name TEXT UNIQUE NOT NULL);
CREATE TABLE sessions (token TEXT PRIMARY KEY, user_id INTEGER NOT NULL);
CREATE TABLE projects (id INTEGER PRIMARY KEY, key TEXT UNIQUE NOT NULL, name TEXT UNIQUE NOT NULL,
    description TEXT NOT NULL);
CREATE TABLE members (project_id INTEGER NOT NULL, user_id INTEGER NOT NULL,
    role TEXT NOT NULL CHECK (role IN ('reporter', 'developer', 'manager')), PRIMARY KEY (project_id, user_id));
CREATE TABLE labels (id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL);
CREATE TABLE issues (id INTEGER PRIMARY KEY, project_id INTEGER NOT NULL, number INTEGER NOT NULL,
    title TEXT NOT NULL, body TEXT NOT NULL, status TEXT NOT NULL, priority TEXT NOT NULL,
    reporter_id INTEGER NOT NULL, assignee_id INTEGER, created TEXT NOT NULL, updated TEXT NOT NULL,
    resolution TEXT NOT NULL DEFAULT '', UNIQUE (project_id, number));
CREATE TABLE issue_labels (issue_id INTEGER NOT NULL, label_id INTEGER NOT NULL, PRIMARY KEY (issue_id, label_id));
CREATE TABLE comments (id INTEGER PRIMARY KEY, issue_id INTEGER NOT NULL, author_id INTEGER NOT NULL,
    created TEXT NOT NULL, body TEXT NOT NULL);
CREATE TABLE drafts (user_id INTEGER PRIMARY KEY, project_id INTEGER NOT NULL, title TEXT NOT NULL,
    body TEXT NOT NULL, priority TEXT NOT NULL DEFAULT 'medium', label_id INTEGER);
CREATE INDEX issues_project ON issues (project_id, status);
CREATE INDEX issues_assignee ON issues (assignee_id);
CREATE INDEX comments_issue ON comments (issue_id);
"""

STATUSES = ("open", "in_progress", "resolved", "closed")
PRIORITIES = ("low", "medium", "high", "critical")
RESOLUTIONS = ("fixed", "duplicate", "won't fix")
ROLES = ("reporter", "developer", "manager")
DEFAULT_SEED = 38
ISSUES, USERS = 4000, 48
# The accounts tasks sign in with; each holds its role in every project.
ACCOUNTS = (
    (1, "morgan", "tracker-lead-1", "Morgan Reyes", "manager"),
    (2, "devon", "fix-it-2", "Devon Price", "developer"),
    (3, "riley", "report-it-3", "Riley Shaw", "reporter"),
)
PROJECTS = (
    ("WEB", "Web Portal", "The customer-facing website and its sign-in."),
    ("API", "Public API", "The REST API partners integrate with."),
    ("MOB", "Mobile App", "The iOS and Android apps."),
    ("PAY", "Payments", "Billing, invoices and card processing."),
    ("OPS", "Operations", "Deployments, monitoring and on-call."),
    ("DOC", "Documentation", "Guides, references and the help centre."),
)
LABELS = ("bug", "feature", "regression", "security", "performance", "ux", "docs", "flaky-test")
COMPONENTS = [
    "Login page",
    "Search results",
    "Checkout form",
    "Settings screen",
    "Invoice export",
    "Password reset",
    "Dashboard chart",
    "Upload dialog",
    "Notification email",
    "Profile editor",
    "Audit log",
    "Report builder",
    "Rate limiter",
    "Webhook sender",
    "Session cache",
    "Date picker",
    "Language menu",
    "Sidebar",
    "Help article",
    "Status page",
]
SYMPTOMS = [
    "times out",
    "shows a blank screen",
    "loses unsaved changes",
    "renders the wrong currency",
    "crashes",
    "is slow",
    "ignores the time zone",
    "repeats entries",
    "returns a server error",
    "cuts off long names",
    "breaks the layout",
    "skips the first item",
    "sends duplicates",
    "logs users out",
]
CONTEXTS = [
    "on Safari",
    "after an update",
    "for new accounts",
    "with large files",
    "on slow networks",
    "in dark mode",
    "for admins",
    "on small screens",
    "in Firefox",
    "after midnight",
    "with two tabs open",
    "in German",
    "on Android",
    "under load",
]
FIRST = ["Ana", "Bruno", "Cleo", "Dario", "Esme", "Felix", "Gina", "Hamid", "Ines", "Jakob", "Keiko", "Lars"]
FIRST += ["Mira", "Nico", "Omar", "Petra", "Rafael", "Sofia", "Tomas", "Una", "Viktor", "Wanda", "Yara", "Zeno"]
LAST = ["Abbott", "Brandt", "Costa", "Dietrich", "Eriksen", "Fontaine", "Greco", "Holm", "Iqbal", "Janssen"]
LAST += ["Kraus", "Lindqvist", "Marsh", "Novak", "Ortega", "Pires", "Ruiz", "Sato", "Tran", "Vidal"]
REMARKS = [
    "I can reproduce this every time.",
    "Seen again this morning.",
    "Could this be related to the last release?",
    "Attaching the steps I used.",
    "Not reproducible on my machine.",
    "Raising the priority: customers are affected.",
    "A fix is in review.",
    "Works after clearing the cache.",
    "Happens only for some accounts.",
    "Please add the browser version.",
]
EPOCH = datetime(2025, 1, 6, 9, 0)


def stamp(t: datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M")


def generate(seed: int = DEFAULT_SEED) -> dict[str, list[tuple]]:
    """Every table's rows (as tuples in schema order) for `seed`."""
    rng = random.Random(seed)
    users = people(rng, ACCOUNTS, USERS, FIRST, LAST)
    projects = [(i + 1, key, name, about) for i, (key, name, about) in enumerate(PROJECTS)]
    members: list[tuple] = []
    staff: dict[int, list[int]] = {}  # project -> developers and managers (who may be assigned)
    everyone: dict[int, list[int]] = {}
    for pid, *_ in projects:
        members += [(pid, uid, role) for uid, *_, role in ACCOUNTS]
        chosen = rng.sample(range(len(ACCOUNTS) + 1, USERS + 1), 18)
        for i, uid in enumerate(chosen):
            members.append((pid, uid, "manager" if i == 0 else "developer" if i < 9 else "reporter"))
        staff[pid] = [1, 2] + chosen[:9]
        everyone[pid] = [1, 2, 3] + chosen
    labels = [(i + 1, name) for i, name in enumerate(LABELS)]
    issues: list[tuple] = []
    issue_labels: list[tuple] = []
    comments: list[tuple] = []
    numbers = dict.fromkeys(staff, 0)
    for iid in range(1, ISSUES + 1):
        pid = rng.randint(1, len(projects))
        numbers[pid] += 1
        title = f"{rng.choice(COMPONENTS)} {rng.choice(SYMPTOMS)} {rng.choice(CONTEXTS)}"
        created = EPOCH + timedelta(minutes=iid * 97 + rng.randint(0, 90))
        updated = created + timedelta(minutes=rng.randint(5, 60 * 24 * 60))
        status = rng.choices(STATUSES, weights=(40, 20, 15, 25))[0]
        priority = rng.choices(PRIORITIES, weights=(25, 40, 25, 10))[0]
        resolution = rng.choice(RESOLUTIONS) if status == "closed" else ""
        assignee = rng.choice(staff[pid]) if rng.random() < 0.75 else None
        reporter = rng.choice(everyone[pid])
        body = f"Steps: open the {title.split(' ')[0].lower()} area and watch it. Expected it to work; it did not."
        issues.append(
            (
                iid,
                pid,
                numbers[pid],
                title,
                body,
                status,
                priority,
                reporter,
                assignee,
                stamp(created),
                stamp(updated),
                resolution,
            )
        )
        for label in rng.sample(labels, rng.choice((0, 1, 1, 2, 3))):
            issue_labels.append((iid, label[0]))
        for k in range(rng.choice((0, 0, 1, 2, 3, 4, 6))):
            when = created + timedelta(minutes=30 + k * 211 + rng.randint(0, 200))
            comments.append((len(comments) + 1, iid, rng.choice(everyone[pid]), stamp(when), rng.choice(REMARKS)))
    return {
        "users": users,
        "projects": projects,
        "members": members,
        "labels": labels,
        "issues": issues,
        "issue_labels": issue_labels,
        "comments": comments,
    }


def build_database(path: str | Path, seed: int = DEFAULT_SEED) -> None:
    """Create the tracker's database at `path` from `seed` (a new file; the caller renames it into place)."""
    write_generated(path, SCHEMA, generate(seed))
