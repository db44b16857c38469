"""The wiki-v1 task set, made from templates over the wiki's generated data.

`python -m sandgym.envs.browser_form.wiki_tasks OUT` writes the set; the
bundled copy under task_specs/browser_form/wiki-v1 is its output (a test
checks that they agree). As for shop-v1 and tracker-v1, every fact a task
names or checks is queried from the database the episodes start from; goals
name what to achieve, and the oracles act through roles and accessible names.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sandgym.specs import TaskSet
from sandgym.specs.base import TaskSetMeta

from .app import wikidata
from .app.wikiapp import slugify
from .app_tasks import Maker, make_set, rows_check
from .shop_tasks import q

NEW_PAGE = len(wikidata.SPACES) * wikidata.PAGES_PER_SPACE + 1  # the id the first page written in an episode gets
ME = {"quinn": 1, "eli": 2, "rae": 3}
LIVE = (
    "SELECT p.*, s.key, s.name AS space, c.name AS category, w.display_name AS editor, f.display_name AS creator "
    "FROM pages p JOIN spaces s ON s.id = p.space_id JOIN categories c ON c.id = p.category_id "
    "JOIN users w ON w.id = p.editor_id JOIN users f ON f.id = p.creator_id WHERE p.deleted = 0 "
)


def at(p: sqlite3.Row) -> str:
    return f"/wiki/{p['key']}/{p['slug']}"


def named(p: sqlite3.Row) -> str:
    return f'the page "{p["title"]}" in the {p["space"]} space'


def page_check(name: str, p: sqlite3.Row, **expect: Any) -> dict:
    return rows_check(name, "pages", 1, expect, id=p["id"])


def search(space: str = "", text: str = "", **chosen: str) -> list[str]:
    """The search page's form: open it, type, choose, apply."""
    out = ['click("link:Search")']
    if text:
        out.append(f'fill("searchbox:Search pages", {q(text)})')
    if space:
        out.append(f'select("combobox:Space", {q(space)})')
    for label, option in chosen.items():
        out.append(f"select({q('combobox:' + label.replace('_', ' ').capitalize())}, {q(option)})")
    return out + ['click("button:Apply filters")']


def open_page(p: sqlite3.Row) -> list[str]:
    """Find the page by its title in its space and open it."""
    return search(p["space"], p["title"]) + [f"click({q('link:' + p['title'])})"]


def ask(m: Maker, tid: str, level: int, goal: str, steps: list[str], answer: str, start: str = "/") -> None:
    m.add(tid, level, goal, [*steps, f"send_msg_to_user({q(answer)})"], start=start, login="rae", answer=[answer])


# -- one page -----------------------------------------------------------------------------------


def one_page_tasks(m: Maker) -> None:
    facts = [
        ("last-editor", "Who last edited {}? Reply with their full name.", "editor"),
        ("creator", "Who created {}? Reply with their full name.", "creator"),
        ("revisions", "How many revisions does {} have? Reply with the number.", "revision"),
        ("category", "Which category is {} in? Reply with the category's name.", "category"),
    ]
    for k, (name, goal, column) in enumerate(facts):
        for p in m.pick(LIVE, 7 if k % 2 == 0 else 6):
            ask(m, f"{name}-{p['id']}", 1, goal.format(named(p)), [], str(p[column]), start=at(p))
    for p in m.pick(LIVE + "AND p.id IN (SELECT page_id FROM comments)", 6):
        n = m.count("SELECT 1 FROM comments WHERE page_id = ?", p["id"])
        ask(
            m,
            f"comments-{p['id']}",
            1,
            f"How many comments does {named(p)} have? Reply with the number.",
            [],
            str(n),
            start=at(p),
        )
    notes = [
        "The screenshots in step two are out of date.",
        "Checked this against the current process: still right.",
        "Please add who to ask when this fails.",
        "A link to the dashboard would help here.",
    ]
    total = m.count("SELECT 1 FROM comments")
    for k, p in enumerate(m.pick(LIVE, 7)):
        note = notes[k % len(notes)]
        m.add(
            f"comment-{p['id']}",
            1,
            f'Add the comment "{note}" to {named(p)}.',
            [f'fill("textbox:Comment", {q(note)})', 'click("button:Add comment")', "done()"],
            start=at(p),
            login="rae",
            checks=[
                rows_check("comment added", "comments", 1, {"author_id": ME["rae"]}, page_id=p["id"], body=note),
                rows_check("one comment only", "comments", total + 1),
            ],
        )
    tags = m.rows("SELECT * FROM tags")
    for p in m.pick(LIVE, 7):
        had = {r["tag_id"] for r in m.rows("SELECT tag_id FROM page_tags WHERE page_id = ?", p["id"])}
        tag = m.rng.choice([t for t in tags if t["id"] not in had])
        m.add(
            f"tag-{p['id']}",
            1,
            f"Tag {named(p)} with {tag['name']}.",
            [f'select("combobox:Tag to add", {q(tag["name"])})', 'click("button:Add tag")', "done()"],
            start=at(p),
            login="eli",
            checks=[
                rows_check("tagged", "page_tags", 1, page_id=p["id"], tag_id=tag["id"]),
                rows_check("no other tag", "page_tags", len(had) + 1, page_id=p["id"]),
            ],
        )
    for p in m.pick(LIVE + "AND p.id IN (SELECT page_id FROM page_tags)", 6):
        on = m.rows(
            "SELECT t.* FROM page_tags pt JOIN tags t ON t.id = pt.tag_id WHERE pt.page_id = ? ORDER BY t.id", p["id"]
        )
        tag = m.rng.choice(on)
        m.add(
            f"untag-{p['id']}",
            1,
            f"Remove the tag {tag['name']} from {named(p)}; keep its other tags.",
            [f"click({q('button:Remove tag ' + tag['name'])})", "done()"],
            start=at(p),
            login="eli",
            checks=[
                rows_check("untagged", "page_tags", 0, page_id=p["id"], tag_id=tag["id"]),
                rows_check("others kept", "page_tags", len(on) - 1, page_id=p["id"]),
            ],
        )
    reasons = ["Frequent accidental edits", "Legal review in progress", "Source of truth for audits"]
    protected = m.count("SELECT 1 FROM pages WHERE protected = 1")
    for k, p in enumerate(m.pick(LIVE + "AND p.protected = 0", 6)):
        reason = reasons[k % len(reasons)]
        m.add(
            f"protect-{p['id']}",
            1,
            f'Protect {named(p)} so that only admins can edit it, giving the reason "{reason}".',
            [
                'click("button:Protect page")',
                f'fill("textbox:Reason for protection", {q(reason)})',
                'click("button:Confirm protection")',
                "done()",
            ],
            start=at(p),
            login="quinn",
            checks=[
                page_check("protected", p, protected=1, protect_reason=reason, deleted=0, revision=p["revision"]),
                rows_check("only that page", "pages", protected + 1, protected=1),
            ],
        )


# -- several pages ------------------------------------------------------------------------------


def several_page_tasks(m: Maker) -> None:
    spaces = m.rows("SELECT * FROM spaces ORDER BY id")
    tags, cats = m.rows("SELECT * FROM tags"), m.rows("SELECT * FROM categories")
    for s in spaces:
        tag = m.rng.choice(tags)
        n = m.count(
            LIVE + "AND p.space_id = ? AND p.id IN (SELECT page_id FROM page_tags WHERE tag_id = ?)", s["id"], tag["id"]
        )
        ask(
            m,
            f"count-tag-{s['key']}",
            2,
            f"How many pages of the {s['name']} space are tagged {tag['name']}? Reply with the number.",
            search(s["name"], tag=tag["name"]),
            str(n),
        )
    for s in spaces:
        cat = m.rng.choice(cats)
        n = m.count(LIVE + "AND p.space_id = ? AND p.category_id = ?", s["id"], cat["id"])
        ask(
            m,
            f"count-category-{s['key']}",
            2,
            f"How many pages of the {s['name']} space are in the category {cat['name']}? Reply with the number.",
            search(s["name"], category=cat["name"]),
            str(n),
        )
    for p in m.pick(LIVE + "AND p.revision >= 2", 6):
        number = m.rng.randint(2, p["revision"])
        (rev,) = m.rows("SELECT summary FROM revisions WHERE page_id = ? AND number = ?", p["id"], number)
        ask(
            m,
            f"summary-{p['id']}",
            2,
            f"What was the edit summary of revision {number} of {named(p)}? Reply with the summary.",
            [*open_page(p), 'click("link:Page history")'],
            rev["summary"],
        )
    for p in m.pick(LIVE + "AND p.protected = 0", 6):
        cat = m.rng.choice([c for c in cats if c["id"] != p["category_id"]])
        summary = f"Filed under {cat['name']}"
        m.add(
            f"recategorise-{p['id']}",
            2,
            f'Move {named(p)} to the category {cat["name"]}, with the edit summary "{summary}"; change nothing else.',
            [
                *open_page(p),
                'click("link:Edit page")',
                f'select("combobox:Category", {q(cat["name"])})',
                f'fill("textbox:Edit summary", {q(summary)})',
                'click("button:Preview")',
                'click("button:Publish")',
                "done()",
            ],
            login="eli",
            checks=edit_checks(p, summary, category_id=cat["id"], body=p["body"], title=p["title"]),
        )
    lines = [
        "Since the last review, the team lead signs off every change.",
        "Questions go to the shared inbox first.",
        "This applies to every region from next month.",
    ]
    for k, p in enumerate(m.pick(LIVE + "AND p.protected = 0", 6)):
        line, summary = lines[k % len(lines)], "Added a note"
        body = p["body"] + "\n" + line
        m.add(
            f"append-{p['id']}",
            2,
            f'Add the paragraph "{line}" at the end of {named(p)}, with the edit summary "{summary}"; keep the rest '
            "of the page as it is.",
            [
                *open_page(p),
                'click("link:Edit page")',
                f'fill("textbox:Content", {json.dumps(body)})',
                f'fill("textbox:Edit summary", {q(summary)})',
                'click("button:Preview")',
                'click("button:Publish")',
                "done()",
            ],
            login="eli",
            checks=edit_checks(p, summary, body=body, category_id=p["category_id"], title=p["title"]),
        )
    fresh = ["rollout plan", "retrospective", "cheat sheet", "migration notes", "quick start", "risk register"]
    pages = m.count("SELECT 1 FROM pages")
    for k, s in enumerate(m.pick("SELECT * FROM spaces", 6) + m.pick("SELECT * FROM spaces", 1)):
        title = f"{m.rng.choice(wikidata.SUBJECTS)} {fresh[k % len(fresh)]}"
        cat = m.rng.choice(cats)
        body = f"Owner: {m.rng.choice(['the platform team', 'the support leads', 'the finance office'])}."
        m.add(
            f"create-{s['key'].lower()}{k}",
            2,
            f'Write a new page in the {s["name"]} space titled "{title}", in the category {cat["name"]}, whose '
            f'content is "{body}".',
            [
                f"click({q('link:' + s['name'])})",
                'click("link:New page")',
                f'fill("textbox:Title", {q(title)})',
                f'select("combobox:Category", {q(cat["name"])})',
                f'fill("textbox:Content", {q(body)})',
                'click("button:Preview")',
                'click("button:Publish")',
                "done()",
            ],
            login="eli",
            checks=[
                rows_check(
                    "page written",
                    "pages",
                    1,
                    {
                        "space_id": s["id"],
                        "title": title,
                        "slug": slugify(title),
                        "category_id": cat["id"],
                        "body": body,
                        "revision": 1,
                        "creator_id": ME["eli"],
                        "deleted": 0,
                    },
                    id=NEW_PAGE,
                ),
                rows_check("one page only", "pages", pages + 1),
                rows_check(
                    "its first revision",
                    "revisions",
                    1,
                    {"number": 1, "author_id": ME["eli"], "body": body},
                    page_id=NEW_PAGE,
                ),
            ],
        )
    for p in m.pick(LIVE + "AND p.revision >= 2 AND p.protected = 0", 6):
        number = m.rng.randint(1, p["revision"] - 1)
        (old,) = m.rows("SELECT * FROM revisions WHERE page_id = ? AND number = ?", p["id"], number)
        m.add(
            f"restore-{p['id']}",
            2,
            f"Bring {named(p)} back to its revision {number}, as a new revision.",
            [*open_page(p), 'click("link:Page history")', f'click("button:Restore revision {number}")', "done()"],
            login="eli",
            checks=edit_checks(p, f"Restored revision {number}", body=old["body"], category_id=old["category_id"]),
        )
    for s in m.pick("SELECT * FROM spaces", 6):
        (who,) = m.pick(
            "SELECT u.* FROM users u LEFT JOIN members m ON m.user_id = u.id AND m.space_id = ? "
            "WHERE u.id > 3 AND (m.role IS NULL OR m.role = 'reader')",
            1,
            s["id"],
        )
        was = m.count("SELECT 1 FROM members WHERE space_id = ? AND user_id = ?", s["id"], who["id"])
        size = m.count("SELECT 1 FROM members WHERE space_id = ?", s["id"])
        m.add(
            f"role-{s['key']}-{who['id']}",
            2,
            f"Make {who['display_name']} an editor of the {s['name']} space.",
            [
                f"click({q('link:' + s['name'])})",
                'click("link:Members")',
                f'select("combobox:Person", {q(who["display_name"])})',
                'select("combobox:Role", "Editor")',
                'click("button:Save role")',
                "done()",
            ],
            login="quinn",
            checks=[
                rows_check("editor now", "members", 1, {"role": "editor"}, space_id=s["id"], user_id=who["id"]),
                rows_check("members", "members", size + 1 - was, space_id=s["id"]),
            ],
        )
    deleted = m.count("SELECT 1 FROM pages WHERE deleted = 1")
    for k, p in enumerate(m.pick(LIVE, 6)):
        reason = ["Replaced by a newer page", "Duplicate of another page", "No longer true"][k % 3]
        m.add(
            f"delete-{p['id']}",
            2,
            f'Delete {named(p)}, giving the reason "{reason}".',
            [
                *open_page(p),
                'click("button:Delete page")',
                f'fill("textbox:Reason for deletion", {q(reason)})',
                'click("button:Confirm delete")',
                "done()",
            ],
            login="quinn",
            checks=[
                page_check("deleted", p, deleted=1, delete_reason=reason, revision=p["revision"]),
                rows_check("only that page", "pages", deleted + 1, deleted=1),
            ],
        )


def edit_checks(p: sqlite3.Row, summary: str, **now: Any) -> list[dict]:
    """The page as the edit leaves it (one revision more, by Eli) and the revision it adds."""
    return [
        page_check("page edited", p, revision=p["revision"] + 1, editor_id=ME["eli"], deleted=0, **now),
        rows_check(
            "the new revision",
            "revisions",
            1,
            {"author_id": ME["eli"], "summary": summary, "body": now["body"]},
            page_id=p["id"],
            number=p["revision"] + 1,
        ),
        rows_check("one revision more", "revisions", p["revision"] + 1, page_id=p["id"]),
    ]


# -- several pages, something to find first ---------------------------------------------------------


def clear_top(
    m: Maker,
    options: list[sqlite3.Row],
    sql: str,
    space_id: int,
    key: str,
    also: Callable[[sqlite3.Row], bool] = lambda row: True,
) -> tuple[sqlite3.Row, list[sqlite3.Row]]:
    """The first of `options` (in a seeded order) whose two first pages by
    `sql` (space_id, option id) differ in `key`, so the question has one
    answer, and whose first page passes `also`; the option and those pages."""
    for option in m.rng.sample(options, len(options)):
        top = m.rows(sql + " LIMIT 2", space_id, option["id"])
        if len(top) == 2 and top[0][key] != top[1][key] and also(top[0]):
            break
    return option, top


def find_first_tasks(m: Maker) -> None:
    spaces = m.rows("SELECT * FROM spaces ORDER BY id")
    tags, cats = m.rows("SELECT * FROM tags"), m.rows("SELECT * FROM categories")
    tagged = LIVE + "AND p.space_id = ? AND p.id IN (SELECT page_id FROM page_tags WHERE tag_id = ?) "
    for s in spaces:
        tag, top = clear_top(m, tags, tagged + "ORDER BY p.updated DESC, p.id DESC", s["id"], "updated")
        ask(
            m,
            f"latest-tag-{s['key']}",
            3,
            f"Of the {s['name']} space's pages tagged {tag['name']}, which was "
            "updated most recently? Reply with its title.",
            search(s["name"], tag=tag["name"], sort_by="Recently updated"),
            top[0]["title"],
        )
    in_cat = LIVE + "AND p.space_id = ? AND p.category_id = ? "
    for s in spaces:
        order = "ORDER BY p.revision DESC, p.updated DESC, p.id DESC"
        cat, top = clear_top(m, cats, in_cat + order, s["id"], "revision")
        ask(
            m,
            f"most-revised-{s['key']}",
            3,
            f"In the {s['name']} space, which page of the category {cat['name']} "
            "has the most revisions? Reply with the full name of the person who created it.",
            search(s["name"], category=cat["name"], sort_by="Most revisions")
            + [f"click({q('link:' + top[0]['title'])})"],
            top[0]["creator"],
        )
    for s in spaces:
        tag, top = clear_top(m, tags, tagged + "ORDER BY p.created, p.id", s["id"], "created")
        ask(
            m,
            f"oldest-tag-{s['key']}",
            3,
            f"Who last edited the oldest page (the first created) of the "
            f"{s['name']} space among those tagged {tag['name']}? Reply with their full name.",
            search(s["name"], tag=tag["name"], sort_by="Oldest first"),
            top[0]["editor"],
        )
    deleted = m.count("SELECT 1 FROM pages WHERE deleted = 1")
    for s in spaces:
        gone = m.rows(
            "SELECT * FROM pages WHERE space_id = ? AND deleted = 1 ORDER BY deleted_at DESC LIMIT 2", s["id"]
        )
        assert gone[0]["deleted_at"] != gone[1]["deleted_at"], s["key"]
        p = gone[0]
        m.add(
            f"undelete-{s['key']}",
            3,
            f"Find the page of the {s['name']} space that was deleted most recently and restore it.",
            [
                f"click({q('link:' + s['name'])})",
                'click("link:Trash")',
                f"click({q('button:Restore ' + p['title'])})",
                "done()",
            ],
            login="quinn",
            checks=[
                page_check("restored", p, deleted=0, revision=p["revision"], body=p["body"]),
                rows_check("only that page", "pages", deleted - 1, deleted=1),
            ],
        )
    protected = m.count("SELECT 1 FROM pages WHERE protected = 1")
    for s in spaces:
        (p,) = m.pick(LIVE + "AND p.space_id = ? AND p.protected = 0", 1, s["id"])
        code = f"{s['key']}-{p['id']:04d}"
        m.add(
            f"protect-code-{s['key']}",
            3,
            f"One page gives the document code {code} in its content. Protect that page, giving the reason "
            '"Audited copy".',
            [
                'fill("searchbox:Search pages", ' + q(code) + ")",
                'click("button:Search")',
                f"click({q('link:' + p['title'])})",
                'click("button:Protect page")',
                'fill("textbox:Reason for protection", "Audited copy")',
                'click("button:Confirm protection")',
                "done()",
            ],
            login="quinn",
            checks=[
                page_check("protected", p, protected=1, protect_reason="Audited copy", deleted=0),
                rows_check("only that page", "pages", protected + 1, protected=1),
            ],
        )
    review = next(t for t in tags if t["name"] == "needs-review")

    def tags_of(page: sqlite3.Row) -> set[int]:
        return {r["tag_id"] for r in m.rows("SELECT tag_id FROM page_tags WHERE page_id = ?", page["id"])}

    for s in spaces:
        cat, top = clear_top(
            m,
            cats,
            in_cat + "ORDER BY p.created, p.id",
            s["id"],
            "created",
            lambda page: review["id"] not in tags_of(page),
        )
        p = top[0]
        had = tags_of(p)
        m.add(
            f"review-oldest-{s['key']}",
            3,
            f"Tag the oldest page (the first created) of the category {cat['name']} in the {s['name']} space with "
            "needs-review.",
            search(s["name"], category=cat["name"], sort_by="Oldest first")
            + [
                f"click({q('link:' + p['title'])})",
                'select("combobox:Tag to add", "needs-review")',
                'click("button:Add tag")',
                "done()",
            ],
            login="eli",
            checks=[
                rows_check("tagged", "page_tags", 1, page_id=p["id"], tag_id=review["id"]),
                rows_check("no other tag", "page_tags", len(had) + 1, page_id=p["id"]),
            ],
        )


def make_task_set(seed: int = wikidata.DEFAULT_SEED) -> TaskSet:
    meta = TaskSetMeta(
        name="wiki-v1",
        family="browser_form",
        description="A wiki with spaces and roles (generated data: 6 spaces, 40 people, 1,920 pages with revisions, "
        "tags and comments): searching, filtering, writing, editing with a preview, restoring revisions, protecting, "
        "deleting and undeleting, answering questions; three levels.",
    )
    return make_set(wikidata, meta, seed, 3, [one_page_tasks, several_page_tasks, find_first_tasks])


if __name__ == "__main__":  # pragma: no cover - the bundled set's maker
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "task_specs/browser_form/wiki-v1")
    task_set = make_task_set()
    task_set.write(out)
    print(f"{len(task_set)} tasks written to {out}")
