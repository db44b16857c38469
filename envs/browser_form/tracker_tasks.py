"""The tracker-v1 task set, made from templates over the issue tracker's generated data.

`python -m sandgym.envs.browser_form.tracker_tasks OUT` writes the set; the
bundled copy under task_specs/browser_form/tracker-v1 is its output (a test
checks that they agree). As for shop-v1 (shop_tasks.py), every fact a task
names or checks is queried from the database the episodes start from; goals
name what to achieve, and the oracles act through roles and accessible names.
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path
from typing import Any

from sandgym.specs import TaskSet
from sandgym.specs.base import TaskSetMeta

from .app import trackerdata
from .app.trackerapp import PRIORITIES, RESOLUTIONS, STATUSES
from .app_tasks import Maker, make_set
from .shop_tasks import q

NEW_ISSUE = trackerdata.ISSUES + 1  # the id the first issue filed in an episode gets
ME = {"morgan": 1, "devon": 2, "riley": 3}
ISSUE = (
    "SELECT i.*, p.key, p.name AS project, i.project_id, a.display_name AS assignee, r.display_name AS reporter "
    "FROM issues i JOIN projects p ON p.id = i.project_id JOIN users r ON r.id = i.reporter_id "
    "LEFT JOIN users a ON a.id = i.assignee_id "
)


def ref(row: sqlite3.Row) -> str:
    return f"{row['key']}-{row['number']}"


def issue_check(name: str, row: sqlite3.Row, **expect: Any) -> dict:
    return {"name": name, "table": "issues", "where": {"id": row["id"]}, "count": 1, "expect": expect}


def filters(project: str = "", **chosen: str) -> list[str]:
    """The issue list's filter form: open it, choose, apply."""
    out = ['click("link:Issues")']
    if project:
        out.append(f'select("combobox:Project", {q(project)})')
    for label, option in chosen.items():
        out.append(f"select({q('combobox:' + label.replace('_', ' ').capitalize())}, {q(option)})")
    return out + ['click("button:Apply filters")']


# -- one page -----------------------------------------------------------------------------------


def one_page_tasks(m: Maker) -> None:
    for i in m.pick(ISSUE, 7):
        m.add(
            f"priority-{ref(i)}",
            1,
            f"What is the priority of issue {ref(i)}? Reply with the priority.",
            [f"send_msg_to_user({q(PRIORITIES[i['priority']])})"],
            start=f"/issues/{ref(i)}",
            login="riley",
            answer=[PRIORITIES[i["priority"]]],
        )
    for i in m.pick(ISSUE + "WHERE i.assignee_id IS NOT NULL", 7):
        m.add(
            f"assignee-{ref(i)}",
            1,
            f"Who is assigned to issue {ref(i)}? Reply with their full name.",
            [f"send_msg_to_user({q(i['assignee'])})"],
            start=f"/issues/{ref(i)}",
            login="riley",
            answer=[i["assignee"]],
        )
    for i in m.pick(ISSUE + "WHERE i.id IN (SELECT issue_id FROM comments)", 6):
        n = m.count("SELECT 1 FROM comments WHERE issue_id = ?", i["id"])
        m.add(
            f"comments-{ref(i)}",
            1,
            f"How many comments does issue {ref(i)} have? Reply with the number.",
            [f'send_msg_to_user("{n}")'],
            start=f"/issues/{ref(i)}",
            login="riley",
            answer=[str(n)],
        )
    for i in m.pick(ISSUE + "WHERE i.status != 'closed'", 7):
        new = m.rng.choice([p for p in PRIORITIES if p != i["priority"]])
        m.add(
            f"prioritise-{ref(i)}",
            1,
            f"Set the priority of issue {ref(i)} to {PRIORITIES[new]}; leave everything else as it is.",
            [f'select("combobox:Priority", "{PRIORITIES[new]}")', 'click("button:Save changes")', "done()"],
            start=f"/issues/{ref(i)}",
            login="devon",
            checks=[issue_check("priority set", i, priority=new, status=i["status"], assignee_id=i["assignee_id"])],
        )
    notes = [
        "I can reproduce this on the staging site.",
        "Confirmed by two customers today.",
        "This blocks the next release.",
        "Workaround: reload the page twice.",
    ]
    total = m.count("SELECT 1 FROM comments")
    for k, i in enumerate(m.pick(ISSUE, 7)):
        note = notes[k % len(notes)]
        m.add(
            f"comment-{ref(i)}",
            1,
            f'Add the comment "{note}" to issue {ref(i)}.',
            [f'fill("textbox:Comment", {q(note)})', 'click("button:Add comment")', "done()"],
            start=f"/issues/{ref(i)}",
            login="riley",
            checks=[
                {
                    "name": "comment added",
                    "table": "comments",
                    "where": {"issue_id": i["id"], "body": note},
                    "count": 1,
                    "expect": {"author_id": ME["riley"]},
                },
                {"name": "one comment only", "table": "comments", "count": total + 1},
            ],
        )
    labels = m.rows("SELECT * FROM labels")
    for i in m.pick(ISSUE, 6):
        had = {r["label_id"] for r in m.rows("SELECT label_id FROM issue_labels WHERE issue_id = ?", i["id"])}
        label = m.rng.choice([x for x in labels if x["id"] not in had])
        m.add(
            f"label-{ref(i)}",
            1,
            f"Add the label {label['name']} to issue {ref(i)}.",
            [f'select("combobox:Label to add", "{label["name"]}")', 'click("button:Add label")', "done()"],
            start=f"/issues/{ref(i)}",
            login="devon",
            checks=[
                {
                    "name": "label added",
                    "table": "issue_labels",
                    "where": {"issue_id": i["id"], "label_id": label["id"]},
                    "count": 1,
                },
                {
                    "name": "no other label",
                    "table": "issue_labels",
                    "where": {"issue_id": i["id"]},
                    "count": len(had) + 1,
                },
            ],
        )
    for i in m.pick(ISSUE + "WHERE i.status = 'open' AND i.assignee_id IS NULL", 5):
        m.add(
            f"start-{ref(i)}",
            1,
            f"You are Devon Price. Take issue {ref(i)}: assign it to yourself and mark it in progress.",
            [
                'select("combobox:Status", "In progress")',
                'select("combobox:Assignee", "Devon Price")',
                'click("button:Save changes")',
                "done()",
            ],
            start=f"/issues/{ref(i)}",
            login="devon",
            checks=[issue_check("taken", i, status="in_progress", assignee_id=ME["devon"], priority=i["priority"])],
        )


# -- several pages ------------------------------------------------------------------------------


def several_page_tasks(m: Maker) -> None:
    projects = m.rows("SELECT * FROM projects ORDER BY id")
    for p in projects:
        n = m.count("SELECT 1 FROM issues WHERE project_id = ? AND status = 'open' AND priority = 'critical'", p["id"])
        m.add(
            f"count-critical-{p['key']}",
            2,
            f"How many critical-priority issues with the status Open does the {p['name']} project have? "
            "Reply with the number.",
            filters(p["name"], status="Open", priority="Critical") + [f'send_msg_to_user("{n}")'],
            login="riley",
            answer=[str(n)],
        )
    labels = m.rows("SELECT * FROM labels")
    for p in projects:
        label = m.rng.choice(labels)
        n = m.count(
            "SELECT 1 FROM issues i JOIN issue_labels il ON il.issue_id = i.id WHERE i.project_id = ? "
            "AND il.label_id = ?",
            p["id"],
            label["id"],
        )
        m.add(
            f"count-label-{p['key']}",
            2,
            f"How many issues of the {p['name']} project carry the label {label['name']}? Reply with the number.",
            filters(p["name"], label=label["name"]) + [f'send_msg_to_user("{n}")'],
            login="riley",
            answer=[str(n)],
        )
    closed = m.count("SELECT 1 FROM issues WHERE status = 'closed'")
    for k, i in enumerate(m.pick(ISSUE + "WHERE i.status != 'closed'", 7)):
        res = list(RESOLUTIONS)[k % len(RESOLUTIONS)]
        m.add(
            f"close-{ref(i)}",
            2,
            f"Close issue {ref(i)} with the resolution {RESOLUTIONS[res]}.",
            [
                f'fill("searchbox:Search issues", "{ref(i)}")',
                'click("button:Search")',
                f'click("link:{ref(i)}")',
                'click("button:Close issue")',
                f'select("combobox:Resolution", {q(RESOLUTIONS[res])})',
                'click("button:Confirm close")',
                "done()",
            ],
            login="morgan",
            checks=[
                issue_check("closed", i, status="closed", resolution=res),
                {
                    "name": "no other issue closed",
                    "table": "issues",
                    "where": {"status": "closed"},
                    "count": closed + 1,
                },
            ],
        )
    data = trackerdata
    labels_by_name = {x["name"]: x["id"] for x in labels}
    for k, p in enumerate(m.pick("SELECT * FROM projects", 6) + m.pick("SELECT * FROM projects", 2)):
        title = f"{m.rng.choice(data.COMPONENTS)} {m.rng.choice(data.SYMPTOMS)} since version 4.{k + 1}"
        body = f"Seen by the support team on {m.rng.choice(data.CONTEXTS).split(' ', 1)[1]}; please look."
        prio, label = m.rng.choice(list(PRIORITIES)), m.rng.choice(list(labels_by_name))
        number = m.count("SELECT 1 FROM issues WHERE project_id = ?", p["id"]) + 1
        m.add(
            f"file-{p['key'].lower()}{k}",
            2,
            f'File a new issue in the {p["name"]} project titled "{title}" with the description "{body}", '
            f"priority {PRIORITIES[prio]} and the label {label}.",
            [
                'click("link:New issue")',
                f'select("combobox:Project", {q(p["name"])})',
                f'fill("textbox:Title", {q(title)})',
                f'fill("textbox:Description", {q(body)})',
                'click("button:Continue")',
                f'select("combobox:Priority", "{PRIORITIES[prio]}")',
                f'select("combobox:Label", "{label}")',
                'click("button:Continue to review")',
                'click("button:Create issue")',
                "done()",
            ],
            login="riley",
            checks=[
                {
                    "name": "issue filed",
                    "table": "issues",
                    "where": {"id": NEW_ISSUE},
                    "count": 1,
                    "expect": {
                        "project_id": p["id"],
                        "number": number,
                        "title": title,
                        "body": body,
                        "priority": prio,
                        "status": "open",
                        "reporter_id": ME["riley"],
                    },
                },
                {"name": "one issue only", "table": "issues", "count": NEW_ISSUE},
                {
                    "name": "its label",
                    "table": "issue_labels",
                    "where": {"issue_id": NEW_ISSUE},
                    "count": 1,
                    "expect": {"label_id": labels_by_name[label]},
                },
            ],
        )
    for p in m.pick("SELECT * FROM projects", 6):
        who = m.pick(
            "SELECT u.* FROM users u LEFT JOIN members m ON m.user_id = u.id AND m.project_id = ? "
            "WHERE u.id > 3 AND (m.role IS NULL OR m.role = 'reporter')",
            1,
            p["id"],
        )[0]
        was = m.count("SELECT 1 FROM members WHERE project_id = ? AND user_id = ?", p["id"], who["id"])
        size = m.count("SELECT 1 FROM members WHERE project_id = ?", p["id"])
        m.add(
            f"role-{p['key']}-{who['id']}",
            2,
            f"Give {who['display_name']} the developer role in the {p['name']} project.",
            [
                f"click({q('link:' + p['name'])})",
                'click("link:Members")',
                f'select("combobox:Person", {q(who["display_name"])})',
                'select("combobox:Role", "Developer")',
                'click("button:Save role")',
                "done()",
            ],
            login="morgan",
            checks=[
                {
                    "name": "developer now",
                    "table": "members",
                    "where": {"project_id": p["id"], "user_id": who["id"]},
                    "count": 1,
                    "expect": {"role": "developer"},
                },
                {"name": "members", "table": "members", "where": {"project_id": p["id"]}, "count": size + 1 - was},
            ],
        )


# -- several pages, something to find first ---------------------------------------------------------


def find_first_tasks(m: Maker) -> None:
    projects = m.rows("SELECT * FROM projects ORDER BY id")
    for p in projects:
        top = m.rows(
            ISSUE + "WHERE i.project_id = ? AND i.status IN ('open', 'in_progress') AND i.priority = 'critical' "
            "ORDER BY i.updated DESC, i.id DESC LIMIT 2",
            p["id"],
        )
        if len(top) < 2 or top[0]["updated"] == top[1]["updated"]:
            continue
        m.add(
            f"latest-critical-{p['key']}",
            3,
            f"Of the {p['name']} project's critical issues that are open or in progress, which was updated most "
            "recently? Reply with its key (such as WEB-12).",
            filters(p["name"], status="Open or in progress", priority="Critical", sort_by="Recently updated")
            + [f'send_msg_to_user("{ref(top[0])}")'],
            login="riley",
            answer=[ref(top[0])],
        )
    for p in projects:
        first = m.rows(
            ISSUE + "WHERE i.project_id = ? AND i.status = 'open' AND i.assignee_id IS NULL ORDER BY i.created, i.id "
            "LIMIT 1",
            p["id"],
        )[0]
        m.add(
            f"reporter-oldest-{p['key']}",
            3,
            f"Who reported the oldest unassigned issue with the status Open in the {p['name']} project? "
            "Reply with their full name.",
            filters(p["name"], status="Open", assignee="Unassigned", sort_by="Oldest first")
            + [f'click("link:{ref(first)}")', f"send_msg_to_user({q(first['reporter'])})"],
            login="riley",
            answer=[first["reporter"]],
        )
    taken = m.count("SELECT 1 FROM issues WHERE assignee_id = 2 AND status = 'in_progress'")
    for p in projects:
        oldest = m.rows(
            ISSUE + "WHERE i.project_id = ? AND i.status = 'open' AND i.assignee_id IS NULL AND i.priority = "
            "'critical' ORDER BY i.created, i.id LIMIT 1",
            p["id"],
        )
        if not oldest:
            continue
        i = oldest[0]
        m.add(
            f"take-oldest-{p['key']}",
            3,
            f"You are Devon Price. In the {p['name']} project, find the oldest open critical issue that nobody is "
            "assigned to; assign it to yourself and mark it in progress.",
            filters(p["name"], status="Open", priority="Critical", assignee="Unassigned", sort_by="Oldest first")
            + [
                f'click("link:{ref(i)}")',
                'select("combobox:Status", "In progress")',
                'select("combobox:Assignee", "Devon Price")',
                'click("button:Save changes")',
                "done()",
            ],
            login="devon",
            checks=[
                issue_check("taken", i, status="in_progress", assignee_id=ME["devon"]),
                {
                    "name": "only that one",
                    "table": "issues",
                    "where": {"assignee_id": 2, "status": "in_progress"},
                    "count": taken + 1,
                },
            ],
        )
    unique = (
        ISSUE + "WHERE i.status IN ('open', 'in_progress') AND i.priority != 'critical' AND (i.project_id, i.title) "
        "IN (SELECT project_id, title FROM issues GROUP BY project_id, title HAVING COUNT(*) = 1)"
    )
    for i in m.pick(unique, 6):
        m.add(
            f"escalate-{ref(i)}",
            3,
            f'In the {i["project"]} project, {i["reporter"]} reported an issue titled "{i["title"]}". '
            "Raise its priority to Critical.",
            [
                'click("link:Issues")',
                f'fill("searchbox:Search issues", {q(i["title"])})',
                f'select("combobox:Project", {q(i["project"])})',
                'click("button:Apply filters")',
                f'click("link:{ref(i)}")',
                'select("combobox:Priority", "Critical")',
                'click("button:Save changes")',
                "done()",
            ],
            login="devon",
            checks=[issue_check("escalated", i, priority="critical", status=i["status"])],
        )
    closed = m.count("SELECT 1 FROM issues WHERE status = 'closed'")
    for p in m.pick("SELECT * FROM projects", 6):
        i = m.rows(
            ISSUE + "WHERE i.project_id = ? AND i.status = 'resolved' ORDER BY i.updated DESC, i.id DESC LIMIT 1",
            p["id"],
        )[0]
        m.add(
            f"close-resolved-{p['key']}",
            3,
            f"Close, as fixed, the {p['name']} project's most recently updated issue with the status Resolved.",
            filters(p["name"], status="Resolved", sort_by="Recently updated")
            + [
                f'click("link:{ref(i)}")',
                'click("button:Close issue")',
                'select("combobox:Resolution", "Fixed")',
                'click("button:Confirm close")',
                "done()",
            ],
            login="morgan",
            checks=[
                issue_check("closed", i, status="closed", resolution="fixed"),
                {
                    "name": "no other issue closed",
                    "table": "issues",
                    "where": {"status": "closed"},
                    "count": closed + 1,
                },
            ],
        )


assert set(STATUSES) == set(trackerdata.STATUSES)


def make_task_set(seed: int = trackerdata.DEFAULT_SEED) -> TaskSet:
    meta = TaskSetMeta(
        name="tracker-v1",
        family="browser_form",
        description="An issue tracker with projects and roles (generated data: 6 projects, 48 people, 4,000 issues, "
        "comments and labels): searching, filtering, filing, triaging, closing, answering questions; three levels.",
    )
    return make_set(trackerdata, meta, seed, 2, [one_page_tasks, several_page_tasks, find_first_tasks])


if __name__ == "__main__":  # pragma: no cover - the bundled set's maker
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "task_specs/browser_form/tracker-v1")
    task_set = make_task_set()
    task_set.write(out)
    print(f"{len(task_set)} tasks written to {out}")
