"""The wiki's database: schema and realistic data generated from a seed.

As with the shop and the tracker: random.Random and no clock, so a seed gives
the same rows everywhere. Six spaces of pages, each page with its revisions
(every revision keeps the whole text, so history, diffs and restores need
nothing else), a category, tags and comments; people hold a role per space.
Standalone (stdlib only): the host, the task generator and the tests import it too.
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
CREATE TABLE spaces (id INTEGER PRIMARY KEY, key TEXT UNIQUE NOT NULL, name TEXT UNIQUE NOT NULL,
    description TEXT NOT NULL);
CREATE TABLE members (space_id INTEGER NOT NULL, user_id INTEGER NOT NULL,
    role TEXT NOT NULL CHECK (role IN ('reader', 'editor', 'admin')), PRIMARY KEY (space_id, user_id));
CREATE TABLE categories (id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL);
CREATE TABLE tags (id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL);
CREATE TABLE pages (id INTEGER PRIMARY KEY, space_id INTEGER NOT NULL, slug TEXT NOT NULL, title TEXT NOT NULL,
    category_id INTEGER NOT NULL, body TEXT NOT NULL, revision INTEGER NOT NULL, creator_id INTEGER NOT NULL,
    editor_id INTEGER NOT NULL, created TEXT NOT NULL, updated TEXT NOT NULL,
    protected INTEGER NOT NULL DEFAULT 0, protect_reason TEXT NOT NULL DEFAULT '',
    deleted INTEGER NOT NULL DEFAULT 0, delete_reason TEXT NOT NULL DEFAULT '', deleted_at TEXT NOT NULL DEFAULT '',
    UNIQUE (space_id, slug));
CREATE TABLE revisions (id INTEGER PRIMARY KEY, page_id INTEGER NOT NULL, number INTEGER NOT NULL,
    author_id INTEGER NOT NULL, created TEXT NOT NULL, summary TEXT NOT NULL, title TEXT NOT NULL,
    category_id INTEGER NOT NULL, body TEXT NOT NULL, UNIQUE (page_id, number));
CREATE TABLE page_tags (page_id INTEGER NOT NULL, tag_id INTEGER NOT NULL, PRIMARY KEY (page_id, tag_id));
CREATE TABLE comments (id INTEGER PRIMARY KEY, page_id INTEGER NOT NULL, author_id INTEGER NOT NULL,
    created TEXT NOT NULL, body TEXT NOT NULL);
CREATE TABLE drafts (user_id INTEGER PRIMARY KEY, space_id INTEGER NOT NULL, page_id INTEGER,
    title TEXT NOT NULL, category_id INTEGER NOT NULL, body TEXT NOT NULL, summary TEXT NOT NULL);
CREATE INDEX pages_space ON pages (space_id, deleted, updated);
CREATE INDEX comments_page ON comments (page_id);
CREATE INDEX page_tags_tag ON page_tags (tag_id);
"""

DEFAULT_SEED = 38
PAGES_PER_SPACE, USERS = 320, 40
ROLES = ("reader", "editor", "admin")
# The accounts tasks sign in with; each holds its role in every space.
ACCOUNTS = (
    (1, "quinn", "wiki-admin-1", "Quinn Harper", "admin"),
    (2, "eli", "edit-pages-2", "Eli Navarro", "editor"),
    (3, "rae", "read-only-3", "Rae Okafor", "reader"),
)
SPACES = (
    ("ENG", "Engineering", "How the services are built, deployed and kept running."),
    ("OPS", "Operations", "Runbooks, on-call and incident reviews."),
    ("PPL", "People", "Hiring, onboarding, leave and benefits."),
    ("SAL", "Sales", "Playbooks, pricing and customer stories."),
    ("SUP", "Support", "Answers for customers and how the helpdesk works."),
    ("FIN", "Finance", "Budgets, expenses and invoices."),
)
CATEGORIES = ("How-to", "Runbook", "Policy", "Reference", "Meeting notes", "Decision record")
TAGS = (
    "onboarding",
    "security",
    "customer-facing",
    "internal",
    "draft",
    "archived",
    "needs-review",
    "q3-planning",
    "compliance",
    "tooling",
    "billing",
    "faq",
)
SUBJECTS = [
    "Billing service",
    "Search index",
    "Customer portal",
    "Data warehouse",
    "Mobile release",
    "Payroll run",
    "Laptop setup",
    "VPN access",
    "Expense claims",
    "Office network",
    "Incident review",
    "Release train",
    "Quarterly planning",
    "Support inbox",
    "Refund process",
    "Vendor contracts",
    "Hiring loop",
    "New starter week",
    "Backup jobs",
    "Status page",
    "Feature flags",
    "Error budget",
    "Writing style",
    "Sales playbook",
    "Pricing tiers",
    "Travel booking",
    "Security training",
    "Access reviews",
    "Log retention",
    "Team offsite",
]
ASPECTS = [
    "overview",
    "checklist",
    "FAQ",
    "troubleshooting",
    "glossary",
    "owners",
    "step-by-step guide",
    "known issues",
    "metrics",
    "escalation path",
    "templates",
    "history",
    "budget",
    "timeline",
    "best practices",
    "setup notes",
    "review notes",
    "open questions",
    "contacts",
    "decisions",
]
LINES = [
    "Ask in the team channel before changing anything described here.",
    "The owner reviews this page at the start of every quarter.",
    "Steps marked optional may be skipped outside office hours.",
    "Keep the numbers in this page in step with the finance dashboard.",
    "Customers never see this page; link to the help centre instead.",
    "Write down every exception in the log at the bottom.",
    "Two people must approve a change to this process.",
    "The previous version of this process was retired last spring.",
    "Links to the dashboards live in the sidebar of the space.",
    "If a step fails, stop and page the person on call.",
    "New starters read this page in their first week.",
    "Screenshots were taken on the desktop app, not the web one.",
    "Most questions about this are answered in the FAQ below.",
    "Old tickets about this are kept for two years.",
    "The contract terms are summarised, not quoted, on this page.",
    "Nothing on this page applies to contractors.",
]
SUMMARIES = [
    "Fixed typos",
    "Added a step",
    "Updated the owners",
    "Clarified the wording",
    "Reordered the sections",
    "Removed an outdated note",
    "Added links",
    "Brought in line with the new policy",
]
REMARKS = [
    "Thanks, this saved me an hour.",
    "Is this still current?",
    "The second step no longer matches the screen.",
    "Could we add an example?",
    "Linked this from the onboarding checklist.",
    "Who owns this page now?",
    "Worked for me on the first try.",
    "Please mention the approval step.",
]
FIRST = ["Amara", "Basil", "Carmen", "Dmitri", "Elena", "Farid", "Greta", "Hugo", "Ilse", "Joaquin", "Kalani"]
FIRST += ["Leona", "Mateo", "Nadia", "Oskar", "Priya", "Quentin", "Rosa", "Stellan", "Talia", "Ulrich", "Vera"]
LAST = ["Achterberg", "Bianchi", "Castellanos", "Dubois", "Engel", "Falk", "Gallo", "Haas", "Ivanova", "Jovanovic"]
LAST += ["Kowalski", "Lund", "Moreau", "Nakamura", "Oliveira", "Peralta", "Quist", "Rahman", "Schulz", "Toivonen"]
EPOCH = datetime(2024, 3, 4, 9, 0)


def stamp(t: datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M")


def slugify(title: str) -> str:
    return "-".join("".join(c if c.isalnum() else " " for c in title.lower()).split())


def generate(seed: int = DEFAULT_SEED) -> dict[str, list[tuple]]:
    """Every table's rows (as tuples in schema order) for `seed`."""
    rng = random.Random(seed)
    users = people(rng, ACCOUNTS, USERS, FIRST, LAST)
    spaces = [(i + 1, key, name, about) for i, (key, name, about) in enumerate(SPACES)]
    members: list[tuple] = []
    writers: dict[int, list[int]] = {}  # space -> editors and admins (who write pages)
    everyone: dict[int, list[int]] = {}
    for sid, *_ in spaces:
        members += [(sid, uid, role) for uid, *_, role in ACCOUNTS]
        chosen = rng.sample(range(len(ACCOUNTS) + 1, USERS + 1), 16)
        for i, uid in enumerate(chosen):
            members.append((sid, uid, "admin" if i == 0 else "editor" if i < 8 else "reader"))
        writers[sid] = [1, 2] + chosen[:8]
        everyone[sid] = [1, 2, 3] + chosen
    categories = [(i + 1, name) for i, name in enumerate(CATEGORIES)]
    tags = [(i + 1, name) for i, name in enumerate(TAGS)]
    pages: list[tuple] = []
    revisions: list[tuple] = []
    page_tags: list[tuple] = []
    comments: list[tuple] = []
    for sid, key, *_ in spaces:
        titles: dict[str, None] = {}  # in the order drawn (a set's order would vary between processes)
        while len(titles) < PAGES_PER_SPACE:
            titles[f"{rng.choice(SUBJECTS)} {rng.choice(ASPECTS)}"] = None
        for title in titles:
            pid = len(pages) + 1
            category = rng.randint(1, len(categories))
            lines = [f"This page is the {title[0].lower() + title[1:]} of the {key} space (document {key}-{pid:04d})."]
            lines += rng.sample(LINES, 2)
            when = EPOCH + timedelta(minutes=pid * 211 + rng.randint(0, 200))
            created, creator = when, rng.choice(writers[sid])
            n = rng.choice((1, 1, 2, 2, 3, 3, 4, 5, 6))
            author = creator
            for number in range(1, n + 1):
                if number > 1:
                    when += timedelta(minutes=rng.randint(60, 60 * 24 * 40))
                    author = rng.choice(writers[sid])
                    extra = rng.choice([x for x in LINES if x not in lines])
                    if rng.random() < 0.3 and len(lines) > 2:
                        lines[rng.randrange(1, len(lines))] = extra
                    else:
                        lines.append(extra)
                summary = "Created the page" if number == 1 else rng.choice(SUMMARIES)
                revisions.append(
                    (len(revisions) + 1, pid, number, author, stamp(when), summary, title, category, "\n".join(lines))
                )
            deleted = rng.random() < 0.03
            gone = stamp(when + timedelta(days=rng.randint(1, 60))) if deleted else ""
            protected = rng.random() < 0.05
            pages.append(
                (
                    pid,
                    sid,
                    slugify(title),
                    title,
                    category,
                    "\n".join(lines),
                    n,
                    creator,
                    author,
                    stamp(created),
                    stamp(when),
                    int(protected),
                    "Edited often by mistake" if protected else "",
                    int(deleted),
                    "Out of date" if deleted else "",
                    gone,
                )
            )
            for tag in rng.sample(tags, rng.choice((0, 1, 1, 2, 2, 3))):
                page_tags.append((pid, tag[0]))
            for k in range(rng.choice((0, 0, 0, 1, 1, 2, 3))):
                at = created + timedelta(minutes=45 + k * 733 + rng.randint(0, 500))
                comments.append((len(comments) + 1, pid, rng.choice(everyone[sid]), stamp(at), rng.choice(REMARKS)))
    return {
        "users": users,
        "spaces": spaces,
        "members": members,
        "categories": categories,
        "tags": tags,
        "pages": pages,
        "revisions": revisions,
        "page_tags": page_tags,
        "comments": comments,
    }


def build_database(path: str | Path, seed: int = DEFAULT_SEED) -> None:
    """Create the wiki's database at `path` from `seed` (a new file; the caller renames it into place)."""
    write_generated(path, SCHEMA, generate(seed))
