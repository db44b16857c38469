"""The issue tracker without a browser: its generated data, its per-project roles and routes
(Starlette's test client on a real database), and the tracker-v1 set."""

from __future__ import annotations

import sqlite3

import pytest

from sandgym.envs.browser_form.app import trackerdata
from sandgym.envs.browser_form.tracker_tasks import make_task_set
from sandgym.specs.browser_form import BrowserTask

from .apps import check_bundled_set, login, query, table_digest


def test_data_is_generated_from_the_seed_alone(tracker_template, tmp_path):
    again = tmp_path / "again.sqlite"
    trackerdata.build_database(again)
    assert table_digest(again) == table_digest(tracker_template)
    other = tmp_path / "other.sqlite"
    trackerdata.build_database(other, seed=7)
    assert table_digest(other) != table_digest(tracker_template)
    con = sqlite3.connect(tracker_template)
    issues, comments = (con.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in ("issues", "comments"))
    con.close()
    assert issues == trackerdata.ISSUES and comments > 5000


def test_the_bundled_set_is_the_generators_output():
    check_bundled_set("tracker-v1", make_task_set(), "tracker", 100)


def test_a_tracker_task_takes_a_data_seed_not_rows():
    assert BrowserTask(id="tracker/x", goal="g", app="tracker", data_seed=3).data_seed == 3
    with pytest.raises(ValueError, match="remove `seed`"):
        BrowserTask(id="tracker/x", goal="g", app="tracker", seed={"users": []})


def test_every_page_needs_a_sign_in(tracker):
    for path in ("/", "/issues", "/issues/WEB-1", "/projects/WEB", "/projects/WEB/members", "/issues/new"):
        r = tracker.get(path, follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"].startswith("/login"), path
    before = table_digest(tracker.db)
    r = tracker.post("/issues/WEB-1", data={"action": "close", "resolution": "fixed"}, follow_redirects=False)
    assert r.status_code == 303 and table_digest(tracker.db) == before


def open_issue(client, where: str = "1 = 1") -> str:
    sql = "SELECT p.key || '-' || i.number FROM issues i JOIN projects p ON p.id = i.project_id "
    return query(client.db, sql + f"WHERE i.status = 'open' AND {where} ORDER BY i.id LIMIT 1")[0][0]


def test_roles_decide_what_a_member_may_change(tracker):
    issue = open_issue(tracker, "i.assignee_id IS NULL")
    before = table_digest(tracker.db)
    login(tracker, "riley", "report-it-3")  # a reporter: may comment, nothing else
    for data in (
        {"action": "edit", "status": "resolved", "priority": "low", "assignee": ""},
        {"action": "add_label", "label": "1"},
        {"action": "close", "resolution": "fixed"},
    ):
        assert tracker.post(f"/issues/{issue}", data=data).status_code == 403, data
    assert tracker.post("/projects/WEB/members", data={"person": "3", "role": "manager"}).status_code == 403
    assert table_digest(tracker.db) == before
    login(tracker, "devon", "fix-it-2")  # a developer: may not close, nor hand an issue to someone else
    assert tracker.post(f"/issues/{issue}", data={"action": "close", "resolution": "fixed"}).status_code == 403
    r = tracker.post(f"/issues/{issue}", data={"action": "edit", "status": "open", "priority": "low", "assignee": "1"})
    assert r.status_code == 400 and "to themselves only" in r.text
    assert table_digest(tracker.db) == before
    login(tracker, "morgan", "tracker-lead-1")  # a manager closes with a resolution from the dialog
    r = tracker.post(f"/issues/{issue}", data={"action": "close", "resolution": "maybe"})
    assert r.status_code == 400 and "Choose a resolution" in r.text
    r = tracker.post(f"/issues/{issue}", data={"action": "close", "resolution": "duplicate"})
    assert r.status_code == 200 and "<dd>Duplicate</dd>" in r.text and "Reopen issue" in r.text


def test_the_new_issue_form_checks_each_step(tracker):
    login(tracker, "riley", "report-it-3")
    r = tracker.post("/issues/new", data={"project": "", "title": "short", "body": ""})
    assert r.status_code == 400
    for text in ("Choose a project you are a member of.", "Title must be 8 to 120", "Description is required."):
        assert text in r.text
    r = tracker.post("/issues/new", data={"project": "2", "title": "Export button does nothing", "body": "Nothing."})
    assert r.url.path == "/issues/new/details"
    r = tracker.post("/issues/new/details", data={"priority": "urgent", "label": ""})
    assert r.status_code == 400 and "Choose a priority." in r.text
    r = tracker.post("/issues/new/details", data={"priority": "high", "label": "3"})
    assert r.url.path == "/issues/new/review" and "Export button does nothing" in r.text
    r = tracker.post("/issues/new/review")
    assert r.status_code == 200 and r.url.path.startswith("/issues/API-")
    row = query(
        tracker.db,
        "SELECT project_id, title, priority, reporter_id, status FROM issues WHERE id = ?",
        trackerdata.ISSUES + 1,
    )
    assert row == [(2, "Export button does nothing", "high", 3, "open")]
    assert query(tracker.db, "SELECT label_id FROM issue_labels WHERE issue_id = ?", trackerdata.ISSUES + 1) == [(3,)]
    assert query(tracker.db, "SELECT COUNT(*) FROM drafts") == [(0,)]


def test_search_filters_and_pagination(tracker):
    login(tracker, "riley", "report-it-3")
    params = {"project": "PAY", "status": "open", "sort": "oldest"}
    r = tracker.get("/issues", params=params)
    rows = query(tracker.db, "SELECT number FROM issues WHERE project_id = 4 AND status = 'open' ORDER BY created, id")
    pages = -(-len(rows) // 25)
    assert f"{len(rows):,} issues. Page 1 of {pages}." in r.text and f">PAY-{rows[0][0]}<" in r.text
    assert "Next page" in r.text
    last = tracker.get("/issues", params={**params, "page": str(pages)})
    assert "Next page" not in last.text and f">PAY-{rows[-1][0]}<" in last.text
    r = tracker.get("/issues", params={"q": "pay-3"})
    assert "1 issues. Page 1 of 1." in r.text and ">PAY-3<" in r.text


def test_no_route_serves_the_database_or_files(tracker):
    login(tracker, "riley", "report-it-3")
    for path in ("/app.sqlite", "/state/app.sqlite", "/../app.sqlite", "/issues/../../etc/passwd"):
        assert tracker.get(path).status_code == 404, path
