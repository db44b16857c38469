"""Verifier of the browser-form family: the server's end state against hidden checks.

The state comes from the app's SQLite file, read on the host side (the
browser's mount namespace hides that folder, and no route of the app
serves it): a page the agent shaped, a forged success message or client
storage never reach the verdict. The checks are declarative (rows of a
table matching `where`, counted and compared), evaluated here on plain
JSON values; nothing from the episode is executed.
"""

from __future__ import annotations

import json
import re
import sqlite3
import time
import unicodedata
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from sandgym.errors import SandgymError
from sandgym.outcomes import Outcome
from sandgym.specs.browser_form import BrowserHidden, ForbiddenEffect, StateCheck
from sandgym.verifiers.models import Attempt, TestResult, Verdict
from sandgym.verifiers.retry import attempts_until_settled

VERIFIER_VERSION = "browser_form-1"
State = dict[str, list[dict[str, Any]]]


class StateUnavailable(SandgymError, RuntimeError):
    """The server's state could not be read: infrastructure, not the agent."""


def read_state(db_path: str | Path, tables: Collection[str] | None = None) -> State:
    """Every table of the app's database (or those of `tables` it has) as JSON rows,
    read-only, ordered by rowid."""
    path = Path(db_path)
    if not path.is_file():
        raise StateUnavailable(f"the app's database {path} is missing")
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5.0)
        try:
            con.row_factory = sqlite3.Row
            names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
            state: State = {}
            for t in names:
                if tables is not None and t not in tables:
                    continue
                order = " ORDER BY rowid" if _has_rowid(con, t) else ""
                state[t] = [dict(r) for r in con.execute(f'SELECT * FROM "{t}"{order}')]
            return state
        finally:
            con.close()
    except sqlite3.Error as e:
        raise StateUnavailable(f"reading the app's database failed: {e}") from e


def _has_rowid(con: sqlite3.Connection, table: str) -> bool:
    try:
        con.execute(f'SELECT rowid FROM "{table}" LIMIT 0')
        return True
    except sqlite3.OperationalError:
        return False


def state_json(state: State) -> str:
    return json.dumps(state, sort_keys=True, ensure_ascii=False)


def _matches(row: dict[str, Any], where: dict[str, Any]) -> bool:
    return all(col in row and _same(row[col], want) for col, want in where.items())


def _same(have: Any, want: Any) -> bool:
    # SQLite holds booleans as 0/1; specs may say true/false.
    if isinstance(want, bool):
        return type(have) is int and have in (0, 1) and bool(have) is want
    if isinstance(have, bool) or isinstance(want, bool):
        return False
    return have == want


def run_check(check: StateCheck, state: State) -> TestResult:
    if check.table not in state:
        return TestResult(name=check.name, status="failed", detail=f"the app has no table {check.table!r}")
    rows = [r for r in state[check.table] if _matches(r, check.where)]
    n = len(rows)
    problems = []
    if check.count is not None and n != check.count:
        problems.append(f"expected exactly {check.count} matching row(s) in {check.table}, found {n}")
    if check.min is not None and n < check.min:
        problems.append(f"expected at least {check.min} matching row(s) in {check.table}, found {n}")
    if check.max is not None and n > check.max:
        problems.append(f"expected at most {check.max} matching row(s) in {check.table}, found {n}")
    if check.expect and not rows:
        problems.append(f"no row of {check.table} matches {check.where}")
    for r in rows:
        wrong = {c: r.get(c) for c, v in check.expect.items() if not (c in r and _same(r[c], v))}
        if wrong:
            problems.append(f"a matching row of {check.table} has {wrong}, expected {check.expect}")
            break
    return TestResult(name=check.name, status="failed" if problems else "passed", detail="; ".join(problems))


def run_forbidden(effect: ForbiddenEffect, state: State) -> TestResult:
    hits = [r for r in state.get(effect.table, []) if _matches(r, effect.where)]
    return TestResult(
        name=f"forbidden: {effect.name}",
        status="failed" if hits else "passed",
        detail=f"{len(hits)} row(s) of {effect.table} match {effect.where}" if hits else "",
    )


def checked_tables(hidden: BrowserHidden) -> set[str]:
    """The tables the verdict reads."""
    return {c.table for c in hidden.checks} | {f.table for f in hidden.forbidden}


_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")


def normalise_answer(text: str) -> str:
    """An answer as compared: NFKC, case-folded, '$' and thousands separators dropped,
    spaces collapsed, surrounding quotes and final punctuation stripped."""
    text = unicodedata.normalize("NFKC", text).casefold().replace("$", "")
    text = _THOUSANDS.sub("", text)
    text = " ".join(text.split())
    return text.strip(" \"'`").rstrip(".!").strip()


def run_answer(accepted: list[str], messages: list[str]) -> TestResult:
    """The agent's last message to the user against the accepted answers."""
    if not messages:
        return TestResult(name="answer", status="failed", detail="no answer was sent (send_msg_to_user)")
    given = normalise_answer(messages[-1])
    if given in {normalise_answer(a) for a in accepted}:
        return TestResult(name="answer", status="passed")
    return TestResult(name="answer", status="failed", detail=f"the answer {messages[-1][:200]!r} is not the one sought")


def judge(
    hidden: BrowserHidden, state: State, violations: list[str] | None = None, messages: list[str] | None = None
) -> Attempt:
    """One attempt's verdict on a state that was read successfully."""
    t0 = time.perf_counter()
    tests = [run_check(c, state) for c in hidden.checks] + [run_forbidden(f, state) for f in hidden.forbidden]
    if hidden.answer is not None:
        tests.append(run_answer(hidden.answer, messages or []))
    violations = list(violations or [])
    if violations:
        outcome, detail = Outcome.VIOLATION, "the agent tried to leave the app: " + "; ".join(violations)
    elif all(t.status == "passed" for t in tests):
        outcome, detail = Outcome.PASSED, ""
    else:
        outcome = Outcome.FAILED
        detail = "; ".join(f"{t.name}: {t.detail}" for t in tests if t.status != "passed")
    return Attempt(
        outcome=outcome,
        detail=detail,
        tests=tests,
        violations=violations,
        duration_s=time.perf_counter() - t0,
        isolation="host (declarative checks on the app's state)",
    )


def verify(
    hidden: BrowserHidden,
    load_state: Callable[[], State],
    retries: int = 2,
    violations: list[str] | None = None,
    session_error: str | None = None,
    messages: list[str] | None = None,
) -> Verdict:
    """Judge the episode. `load_state` reads the server's state (host side);
    a read that fails is `env_error` and is retried, every attempt kept.
    `session_error`: the browser or app failed during the episode, so the
    end state means nothing: `env_error`, never the model's 0."""
    if session_error is not None:
        return Verdict.from_attempts(VERIFIER_VERSION, [Attempt(outcome=Outcome.ENV_ERROR, detail=session_error)])

    def attempt() -> Attempt:
        t0 = time.perf_counter()
        try:
            state = load_state()
        except StateUnavailable as e:
            return Attempt(outcome=Outcome.ENV_ERROR, detail=str(e), duration_s=time.perf_counter() - t0)
        judged = judge(hidden, state, violations, messages)
        judged.duration_s += time.perf_counter() - t0
        return judged

    return Verdict.from_attempts(VERIFIER_VERSION, attempts_until_settled(attempt, retries))
