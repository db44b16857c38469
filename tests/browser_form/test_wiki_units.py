"""The wiki without a browser: its generated data, its per-space roles and routes
(Starlette's test client on a real database), and the wiki-v1 set."""

from __future__ import annotations

import sqlite3

import pytest

from sandgym.envs.browser_form.app import wikidata
from sandgym.envs.browser_form.wiki_tasks import NEW_PAGE, make_task_set
from sandgym.specs.browser_form import BrowserTask

from .apps import check_bundled_set, login, query, table_digest

ADMIN, EDITOR, READER = ("quinn", "wiki-admin-1"), ("eli", "edit-pages-2"), ("rae", "read-only-3")


def a_page(client, where: str = "1 = 1") -> tuple[int, str, int]:
    """(id, path, revision) of the first live page matching `where`."""
    sql = "SELECT p.id, '/wiki/' || s.key || '/' || p.slug, p.revision FROM pages p JOIN spaces s ON s.id = p.space_id"
    return query(client.db, sql + f" WHERE p.deleted = 0 AND {where} ORDER BY p.id LIMIT 1")[0]


def test_data_is_generated_from_the_seed_alone(wiki_template, tmp_path):
    again = tmp_path / "again.sqlite"
    wikidata.build_database(again)
    assert table_digest(again) == table_digest(wiki_template)
    other = tmp_path / "other.sqlite"
    wikidata.build_database(other, seed=7)
    assert table_digest(other) != table_digest(wiki_template)
    con = sqlite3.connect(wiki_template)
    pages, revisions, comments = (
        con.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in ("pages", "revisions", "comments")
    )
    # every page's text is its last revision's
    stale = con.execute(
        "SELECT COUNT(*) FROM pages p JOIN revisions r ON r.page_id = p.id AND r.number = p.revision "
        "WHERE r.body != p.body OR r.author_id != p.editor_id"
    ).fetchone()[0]
    con.close()
    assert pages == NEW_PAGE - 1 and revisions > 2 * pages and comments > 1000 and stale == 0


def test_the_bundled_set_is_the_generators_output():
    check_bundled_set("wiki-v1", make_task_set(), "wiki", 140)


def test_a_wiki_task_takes_a_data_seed_not_rows():
    assert BrowserTask(id="wiki/x", goal="g", app="wiki", data_seed=3).data_seed == 3
    with pytest.raises(ValueError, match="remove `seed`"):
        BrowserTask(id="wiki/x", goal="g", app="wiki", seed={"users": []})


def test_every_page_needs_a_sign_in(wiki):
    _, path, _ = a_page(wiki)
    for url in ("/", "/search", "/spaces/ENG", "/spaces/ENG/members", path, f"{path}/history", f"{path}/edit"):
        r = wiki.get(url, follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"].startswith("/login"), url
    before = table_digest(wiki.db)
    r = wiki.post(path, data={"action": "delete", "delete_reason": "gone"}, follow_redirects=False)
    assert r.status_code == 303 and table_digest(wiki.db) == before


def test_roles_decide_what_a_member_may_do(wiki):
    pid, path, rev = a_page(wiki, "p.protected = 0 AND p.revision >= 2")
    before = table_digest(wiki.db)
    login(wiki, *READER)  # a reader: reads and comments, nothing else
    assert wiki.get(path).status_code == 200
    for url, data in (
        (path, {"action": "add_tag", "tag": "1"}),
        (path, {"action": "protect", "protect_reason": "mine"}),
        (path, {"action": "delete", "delete_reason": "mine"}),
        (f"{path}/history", {"revision": "1"}),
        (f"{path}/edit", {"title": "x", "category": "1", "body": "x", "summary": "x"}),
        ("/spaces/ENG/new", {"title": "A new page", "category": "1", "body": "x"}),
        ("/spaces/ENG/members", {"person": "3", "role": "admin"}),
        ("/spaces/ENG/trash", {"page": "1"}),
    ):
        assert wiki.post(url, data=data).status_code == 403, (url, data)
    assert wiki.get("/spaces/ENG/trash").status_code == 403
    assert table_digest(wiki.db) == before
    login(wiki, *EDITOR)  # an editor: no protecting or deleting, and a protected page is not theirs to edit
    assert wiki.post(path, data={"action": "protect", "protect_reason": "mine"}).status_code == 403
    _, locked, _ = a_page(wiki, "p.protected = 1")
    assert wiki.get(f"{locked}/edit").status_code == 403 and "Edit page" not in wiki.get(locked).text
    assert table_digest(wiki.db) == before
    login(wiki, *ADMIN)  # an admin protects, through the dialog's form, with a reason
    r = wiki.post(path, data={"action": "protect", "protect_reason": ""})
    assert r.status_code == 400 and "Give a reason" in r.text and "showModal()</script>" in r.text
    r = wiki.post(path, data={"action": "protect", "protect_reason": "Audited"})
    assert r.status_code == 200 and "<dd>Yes</dd>" in r.text
    outsider = query(
        wiki.db,
        "SELECT id, username, password FROM users WHERE id NOT IN (SELECT user_id FROM members "
        "WHERE space_id = 1) LIMIT 1",
    )[0]
    login(wiki, outsider[1], outsider[2])  # not a member of Engineering: refused everywhere in it
    for url in ("/spaces/ENG", path, f"{path}/history", "/spaces/ENG/members"):
        assert wiki.get(url).status_code == 403, url
    assert f'href="{path}"' not in wiki.get("/search", params={"space": "ENG"}).text


def test_the_editor_checks_each_field_then_previews_and_publishes(wiki):
    pid, path, rev = a_page(wiki, "p.protected = 0 AND p.space_id = 1")
    login(wiki, *EDITOR)
    r = wiki.post(f"{path}/edit", data={"title": "x", "category": "", "body": "", "summary": ""})
    assert r.status_code == 400
    for text in ("Title must be 3 to 100", "Choose a category.", "Content is required.", "Edit summary must be"):
        assert text in r.text
    title, category, body = query(wiki.db, "SELECT title, category_id, body FROM pages WHERE id = ?", pid)[0]
    same = {"title": title, "category": str(category), "body": body, "summary": "No change"}
    assert "Nothing changed" in wiki.post(f"{path}/edit", data=same).text
    r = wiki.post(f"{path}/edit", data={**same, "body": body + "\r\nOne more line."})
    assert r.url.path == "/editor/preview" and "One more line." in r.text and "Publish" in r.text
    assert query(wiki.db, "SELECT revision FROM pages WHERE id = ?", pid) == [(rev,)]  # not before publishing
    r = wiki.post("/editor/preview")
    assert r.status_code == 200 and r.url.path == path and "Published." in r.text
    assert query(wiki.db, "SELECT revision, body, editor_id FROM pages WHERE id = ?", pid) == [
        (rev + 1, body + "\nOne more line.", 2)
    ]
    assert query(wiki.db, "SELECT summary FROM revisions WHERE page_id = ? AND number = ?", pid, rev + 1) == [
        ("No change",)
    ]
    diff = wiki.get(f"{path}/diff/{rev + 1}")
    assert "Added: <ins>One more line.</ins>" in diff.text
    r = wiki.post("/spaces/ENG/new", data={"title": title, "category": "2", "body": "Text."})
    assert r.status_code == 400 and "Another page of this space has that title." in r.text
    r = wiki.post("/spaces/ENG/new", data={"title": "Brand new page", "category": "2", "body": "Text."})
    r = wiki.post("/editor/preview")
    assert r.url.path == "/wiki/ENG/brand-new-page"
    assert query(wiki.db, "SELECT id, revision, creator_id FROM pages WHERE slug = 'brand-new-page'") == [
        (NEW_PAGE, 1, 2)
    ]
    assert query(wiki.db, "SELECT COUNT(*) FROM drafts") == [(0,)]


def test_history_restores_an_old_revision_as_a_new_one(wiki):
    pid, path, rev = a_page(wiki, "p.protected = 0 AND p.revision >= 3")
    login(wiki, *EDITOR)
    (first,) = query(wiki.db, "SELECT body, category_id FROM revisions WHERE page_id = ? AND number = 1", pid)
    r = wiki.get(f"{path}/history")
    assert f"Restore revision {rev}" not in r.text and "Restore revision 1" in r.text
    r = wiki.post(f"{path}/history", data={"revision": "1"})
    assert r.status_code == 200 and r.url.path == path
    assert query(wiki.db, "SELECT body, category_id, revision FROM pages WHERE id = ?", pid) == [(*first, rev + 1)]
    assert query(wiki.db, "SELECT summary FROM revisions WHERE page_id = ? AND number = ?", pid, rev + 1) == [
        ("Restored revision 1",)
    ]


def test_delete_and_restore_from_the_trash(wiki):
    pid, path, _ = a_page(wiki)
    login(wiki, *ADMIN)
    r = wiki.post(path, data={"action": "delete", "delete_reason": "Old news"})
    assert r.url.path == "/spaces/ENG" and "to the trash" in r.text
    assert wiki.get(path).status_code == 404
    assert query(wiki.db, "SELECT deleted, delete_reason FROM pages WHERE id = ?", pid) == [(1, "Old news")]
    assert "Restore " in wiki.get("/spaces/ENG/trash").text
    r = wiki.post("/spaces/ENG/trash", data={"page": str(pid)})
    assert r.url.path == path and query(wiki.db, "SELECT deleted FROM pages WHERE id = ?", pid) == [(0,)]


def test_search_filters_and_pagination(wiki):
    login(wiki, *READER)
    params = {"space": "SUP", "category": "2", "sort": "oldest"}
    r = wiki.get("/search", params=params)
    rows = query(
        wiki.db, "SELECT title FROM pages WHERE space_id = 5 AND category_id = 2 AND deleted = 0 ORDER BY created, id"
    )
    pages = -(-len(rows) // 20)
    assert f"{len(rows):,} pages. Page 1 of {pages}." in r.text and f">{rows[0][0]}</a>" in r.text
    assert "Next page" in r.text
    last = wiki.get("/search", params={**params, "page": str(pages)})
    assert "Next page" not in last.text and f">{rows[-1][0]}</a>" in last.text
    r = wiki.get("/search", params={"q": "document FIN-1801"})
    assert "1 pages. Page 1 of 1." in r.text


def test_no_route_serves_the_database_or_files(wiki):
    login(wiki, *READER)
    for path in ("/app.sqlite", "/state/app.sqlite", "/../app.sqlite", "/wiki/../../etc/passwd"):
        assert wiki.get(path).status_code == 404, path
