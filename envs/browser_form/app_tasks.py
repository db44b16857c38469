"""What the generated apps' task makers share (shop_tasks.py, tracker_tasks.py):
a Maker that queries the app's database and adds task pairs, and the run
that builds the database from a seed and calls each template group on it."""

from __future__ import annotations

import random
import sqlite3
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from sandgym.specs import TaskSet
from sandgym.specs.base import TaskSetMeta
from sandgym.specs.browser_form import BrowserHidden, BrowserTask, BrowserTaskPair


class Maker:
    """Adds the tasks of one app (`app`), its facts queried from `con`; `rng`
    seeded from the data seed and the app's `salt`, so each set is its own."""

    def __init__(self, app: str, con: sqlite3.Connection, seed: int, salt: int):
        self.app, self.con, self.rng = app, con, random.Random(seed * 7919 + salt)
        self.pairs: list[BrowserTaskPair] = []

    def rows(self, sql: str, *args: Any) -> list[sqlite3.Row]:
        return self.con.execute(sql, args).fetchall()

    def count(self, sql: str, *args: Any) -> int:
        return int(self.con.execute(f"SELECT COUNT(*) FROM ({sql})", args).fetchone()[0])

    def pick(self, sql: str, n: int, *args: Any) -> list[sqlite3.Row]:
        rows = self.rows(sql, *args)
        return self.rng.sample(rows, min(n, len(rows)))

    def add(
        self,
        tid: str,
        level: int,
        goal: str,
        oracle: list[str],
        *,
        start: str = "/",
        login: str | None = None,
        checks: list[dict] | None = None,
        forbidden: list[dict] | None = None,
        answer: list[str] | None = None,
    ) -> None:
        tid = f"{self.app}/{tid}"
        visible = BrowserTask(
            id=tid,
            title=goal[:60],
            goal=goal,
            start_path=start,
            login_as=login,
            app=self.app,
            level=level,
            max_steps=max(20, 2 * len(oracle) + 6),
        )
        hidden = BrowserHidden(id=tid, checks=checks or [], forbidden=forbidden or [], oracle=oracle, answer=answer)
        self.pairs.append(BrowserTaskPair(visible=visible, hidden=hidden))


def rows_check(name: str, table: str, count: int | None = None, expect: dict | None = None, **where: Any) -> dict:
    """A state check: the rows of `table` matching `where` (column=value) number `count` and hold `expect`."""
    out: dict[str, Any] = {"name": name, "table": table}
    if where:
        out["where"] = where
    if count is not None:
        out["count"] = count
    if expect:
        out["expect"] = expect
    return out


def make_set(
    data: ModuleType, meta: TaskSetMeta, seed: int, salt: int, groups: list[Callable[[Maker], None]]
) -> TaskSet:
    """Build `data`'s database from `seed` in a scratch folder, run each template group on it."""
    app = meta.name.split("-", 1)[0]
    with tempfile.TemporaryDirectory(prefix=f"{app}-tasks-") as tmp:
        path = Path(tmp) / f"{app}.sqlite"
        data.build_database(path, seed)
        con = sqlite3.connect(path)
        con.row_factory = sqlite3.Row
        try:
            m = Maker(app, con, seed, salt)
            for group in groups:
                group(m)
        finally:
            con.close()
    return TaskSet(meta, m.pairs)
