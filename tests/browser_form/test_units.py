"""The browser family's parts that need no browser: action grammar, spec models, verifier checks."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sandgym.envs.browser_form.actions import ActionError, parse_action
from sandgym.envs.browser_form.app.schema import build_database
from sandgym.outcomes import Outcome
from sandgym.specs import TaskSet, bundled_task_set
from sandgym.specs.browser_form import BrowserHidden, BrowserTask
from sandgym.verifiers.browser_form.host import StateUnavailable, read_state, verify

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "text,kind,ref,role,name,arg",
    [
        ("click(e12)", "click", "e12", None, None, None),
        ('  click("e3") ', "click", "e3", None, None, None),
        ("click(f1e4)", "click", "f1e4", None, None, None),
        ('click("button:Sign in")', "click", None, "button", "Sign in", None),
        ('fill(e5, "a \\"quoted\\" word\\n")', "fill", "e5", None, None, 'a "quoted" word\n'),
        ("fill(e5, 'single')", "fill", "e5", None, None, "single"),
        (
            'select("combobox:Room", "Garden Room (up to 2)")',
            "select",
            None,
            "combobox",
            "Room",
            "Garden Room (up to 2)",
        ),
        ('press("Enter")', "press", None, None, None, "Enter"),
        ('goto("/profile")', "goto", None, None, None, "/profile"),
        ("done()", "done", None, None, None, None),
        ("```\ndone()\n```", "done", None, None, None, None),
        ('fill(e1, "caf\\u00e9")', "fill", "e1", None, None, "café"),
    ],
)
def test_parser_accepts_the_grammar(text, kind, ref, role, name, arg):
    a = parse_action(text)
    assert a.kind == kind and a.text == arg
    if ref or role:
        assert a.target is not None
        assert (a.target.ref, a.target.role, a.target.name) == (ref, role, name)


@pytest.mark.parametrize(
    "text,why",
    [
        ("", "empty"),
        ("click", "one call"),
        ("click(e1", "one call"),
        ("explode(e1)", "unknown action"),
        ("click()", "takes 1"),
        ("fill(e1)", "takes 2"),
        ("click(e1, e2)", "takes 1"),
        ("click(button)", "not a ref"),
        ('click("nonsense")', "not a target"),
        ("goto(/x)", "unexpected"),
        ('fill(e1, "open', "not closed"),
        ("__import__('os').system('id')", "unexpected"),
        ("click(e1) click(e2)", "one call"),
        ('press("\\q")', "unknown escape"),
        ("done(),", "one call"),
        ("click(e1,)", "trailing"),
    ],
)
def test_parser_rejects_with_a_reason(text, why):
    with pytest.raises(ActionError, match=why):
        parse_action(text)


@given(st.text(max_size=200))
def test_parser_never_crashes(text):
    try:
        parse_action(text)
    except ActionError:
        pass


def test_bundled_task_set_loads_with_20_or_more_tasks_and_parsable_oracles():
    ts = TaskSet.load(bundled_task_set("browser_form"))
    assert ts.meta.family == "browser_form" and len(ts) >= 20
    kinds = set()
    for t in ts.tasks:
        assert isinstance(t.visible, BrowserTask) and isinstance(t.hidden, BrowserHidden)
        actions = [parse_action(a) for a in t.hidden.oracle]
        assert actions[-1].kind == "done"
        kinds |= {a.kind for a in actions}
        assert "oracle" not in t.visible.model_dump() and "checks" not in t.visible.model_dump()
    assert {"click", "fill", "select", "goto", "done"} <= kinds


def test_spec_errors_name_the_field():
    with pytest.raises(ValueError, match="start_path"):
        BrowserTask(id="a/b", goal="g", start_path="https://evil.test/")
    with pytest.raises(ValueError, match="count"):
        BrowserHidden(id="a/b", checks=[{"name": "n", "table": "outbox", "count": 1, "min": 1}], oracle=["done()"])
    with pytest.raises(ValueError, match="identifier"):
        BrowserTask(id="a/b", goal="g", seed={"users; DROP": []})


def _db(tmp_path, seed=None) -> Path:
    path = tmp_path / "app.sqlite"
    build_database(path, seed)
    return path


def test_verifier_counts_exactly_once_and_forbidden(tmp_path):
    path = _db(tmp_path)
    hidden = BrowserHidden(
        id="t/x",
        checks=[
            {
                "name": "once",
                "table": "outbox",
                "where": {"recipient": "bob@example.test"},
                "count": 1,
                "expect": {"subject": "Hi"},
            }
        ],
        forbidden=[{"name": "to carol", "table": "outbox", "where": {"recipient": "carol@example.test"}}],
        oracle=["done()"],
    )
    load = lambda: read_state(path)  # noqa: E731
    assert verify(hidden, load).outcome == Outcome.FAILED
    con = sqlite3.connect(path)
    con.execute("INSERT INTO outbox (user_id, recipient, subject, body) VALUES (1, 'bob@example.test', 'Hi', 'x')")
    con.commit()
    assert verify(hidden, load).outcome == Outcome.PASSED
    con.execute("INSERT INTO outbox (user_id, recipient, subject, body) VALUES (1, 'bob@example.test', 'Hi', 'x')")
    con.commit()
    v = verify(hidden, load)
    assert v.outcome == Outcome.FAILED and "found 2" in v.detail
    con.execute("DELETE FROM outbox WHERE id = 2")
    con.execute("INSERT INTO outbox (user_id, recipient, subject, body) VALUES (1, 'carol@example.test', 'Hi', 'x')")
    con.commit()
    v = verify(hidden, load)
    assert v.outcome == Outcome.FAILED and any(
        t.name == "forbidden: to carol" and t.status == "failed" for t in v.tests
    )
    assert verify(hidden, load, violations=["goto('file:///') refused"]).outcome == Outcome.VIOLATION


def test_unreadable_state_is_env_error_retried_never_a_score(tmp_path):
    hidden = BrowserHidden(id="t/x", checks=[{"name": "n", "table": "outbox", "count": 0}], oracle=["done()"])
    calls = []

    def load():
        calls.append(1)
        return read_state(tmp_path / "missing.sqlite")

    v = verify(hidden, load, retries=2)
    assert v.outcome == Outcome.ENV_ERROR and len(v.attempts) == 3 and len(calls) == 3
    assert v.reward("binary") is None
    with pytest.raises(StateUnavailable):
        read_state(tmp_path / "missing.sqlite")
    crashed = verify(hidden, load, session_error="the browser disconnected")
    assert crashed.outcome == Outcome.ENV_ERROR and crashed.reward() is None
