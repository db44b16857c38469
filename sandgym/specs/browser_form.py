"""Task-spec models of the browser-form family.

Visible half (`BrowserTask`): the goal the agent reads, where the episode
starts, and the seed rows of the app's database (the app shows them anyway).
Hidden half (`BrowserHidden`): the checks on the server's end state that
decide the verdict, the effects that must not happen, and a scripted
solution (the oracle) in the action grammar.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any, Literal

from pydantic import (
    Field,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from sandgym.specs.base import HiddenSpec, StrictModel, TaskId, TaskPair, TaskSet, TaskSetMeta, VisibleSpec, json_data

IDENT_RE = re.compile(r"^[a-z_][a-z0-9_]*$")
# The apps a task may run in: the form app (the default), the shop with its back office, the issue tracker,
# the wiki.
APPS = ("forms", "shop", "tracker", "wiki")
# The apps whose rows are generated from a data seed (not a task's `seed` rows).
DATA_APPS = ("shop", "tracker", "wiki")
FILE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
MAX_TASK_FILE_BYTES = 64 * 1024


class TaskFile(StrictModel):
    """A file the episode gives the agent to upload (upload_file(ref, name)): its name and bytes."""

    name: str = Field(description="A plain file name: letters, digits, '.', '_', '-'; no path.")
    base64: str = Field(description=f"The file's bytes, base64 (at most {MAX_TASK_FILE_BYTES // 1024} KiB decoded).")

    @field_validator("name")
    @classmethod
    def _plain_name(cls, v: str) -> str:
        if not FILE_NAME_RE.match(v):
            raise ValueError(f"file name {v!r} is not a plain name (letters, digits, '.', '_', '-'; up to 64)")
        return v

    @field_validator("base64")
    @classmethod
    def _bytes(cls, v: str) -> str:
        try:
            data = base64.b64decode(v, validate=True)
        except binascii.Error as e:
            raise ValueError(f"file content is not valid base64: {e}") from e
        if len(data) > MAX_TASK_FILE_BYTES:
            raise ValueError(f"file content is {len(data)} bytes; at most {MAX_TASK_FILE_BYTES}")
        return v

    def data(self) -> bytes:
        return base64.b64decode(self.base64)


def _without_unset(data: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """A dump without the fields added after basic-v1 when they hold None: the
    content hash of every older set stays what it was."""
    return {k: v for k, v in data.items() if not (k in keys and v is None)}


class BrowserTask(VisibleSpec):
    """The visible half of a browser-form task."""

    schema_version: Literal[1] = 1
    id: TaskId
    family: Literal["browser_form"] = "browser_form"
    version: int = Field(1, ge=1, description="Bump when the task's meaning changes.")
    title: str = ""
    goal: str = Field(min_length=1, description="What the agent is asked to do, in words.")
    start_path: str = Field("/", description="Path inside the app where the episode starts.")
    login_as: str | None = Field(None, description="Start signed in as this username (a seeded user).")
    seed: dict[str, list[dict[str, Any]]] = Field(
        default_factory=dict, description="Rows per table; a table named here replaces its default rows."
    )
    max_steps: int | None = Field(None, ge=1, le=500, description="Overrides the env's max_steps for this task.")
    app: Literal["forms", "shop", "tracker", "wiki"] | None = Field(
        None,
        description="The app the task runs in: the form app (unset), 'shop' (storefront and back office), "
        "'tracker' (issue tracker) or 'wiki' (spaces of pages with revisions).",
    )
    data_seed: int | None = Field(
        None,
        ge=0,
        description="The app's generated data comes from this seed (shop, tracker and wiki tasks; default 38).",
    )
    level: Literal[1, 2, 3] | None = Field(
        None, description="1: one page; 2: several pages; 3: several pages with information to find first."
    )
    files: list[TaskFile] | None = Field(
        None, max_length=8, description="Files the agent may upload in the episode (upload_file(ref, name))."
    )

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> dict[str, Any]:
        return _without_unset(handler(self), ("app", "data_seed", "level", "files"))

    @model_validator(mode="after")
    def _app_fields(self) -> BrowserTask:
        if self.app not in DATA_APPS and self.data_seed is not None:
            raise ValueError(
                f"task {self.id!r}: data_seed is for app 'shop', 'tracker' or 'wiki' only (app is {self.app!r})"
            )
        if self.app in DATA_APPS and self.seed:
            raise ValueError(f"task {self.id!r}: the {self.app} app's rows come from data_seed; remove `seed`")
        names = [f.name for f in self.files or []]
        if len(set(names)) != len(names):
            raise ValueError(f"task {self.id!r}: two files share a name in `files` {names}; give each its own")
        return self

    @field_validator("start_path")
    @classmethod
    def _inside_app(cls, v: str) -> str:
        if not v.startswith("/") or v.startswith("//"):
            raise ValueError(f"start_path must be a path inside the app starting with '/', got {v!r}")
        return v

    @field_validator("seed")
    @classmethod
    def _seed(cls, v: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
        for table, rows in v.items():
            if not IDENT_RE.match(table):
                raise ValueError(f"seed table name {table!r} is not an identifier")
            for row in rows:
                bad = [c for c in row if not IDENT_RE.match(c)]
                if bad:
                    raise ValueError(f"seed table {table!r}: column names {bad} are not identifiers")
        return json_data(v, "seed")


class StateCheck(StrictModel):
    """Rows of one table that match `where` (column == value for each pair).

    `count` / `min` / `max` bound how many match (`count: 1` = exactly
    once); `expect` is what every matching row must hold."""

    name: str = Field(min_length=1)
    table: str
    where: dict[str, Any] = Field(default_factory=dict)
    count: int | None = Field(None, ge=0)
    min: int | None = Field(None, ge=0)
    max: int | None = Field(None, ge=0)
    expect: dict[str, Any] = Field(default_factory=dict)

    @field_validator("table")
    @classmethod
    def _table(cls, v: str) -> str:
        if not IDENT_RE.match(v):
            raise ValueError(f"table name {v!r} is not an identifier")
        return v

    @field_validator("where", "expect")
    @classmethod
    def _plain(cls, v: dict[str, Any]) -> dict[str, Any]:
        return json_data(v)

    @model_validator(mode="after")
    def _bounded(self) -> StateCheck:
        if self.count is not None and (self.min is not None or self.max is not None):
            raise ValueError(f"check {self.name!r}: give `count`, or `min`/`max`, not both")
        if self.count is None and self.min is None and self.max is None and not self.expect:
            raise ValueError(f"check {self.name!r}: says nothing; give `count`, `min`/`max` or `expect`")
        return self


class ForbiddenEffect(StrictModel):
    """Rows that must not exist at the end (e.g. a message to the wrong person)."""

    name: str = Field(min_length=1)
    table: str
    where: dict[str, Any] = Field(default_factory=dict)

    _table = field_validator("table")(classmethod(lambda cls, v: StateCheck._table(v)))
    _plain = field_validator("where")(classmethod(lambda cls, v: json_data(v)))


class BrowserHidden(HiddenSpec):
    """The hidden half: only the verifier and the oracle policy read it."""

    id: TaskId
    checks: list[StateCheck] = Field(default_factory=list, description="All must hold for `passed`.")
    forbidden: list[ForbiddenEffect] = Field(
        default_factory=list, description="Effects that must not happen: each holds when it matches no row."
    )
    oracle: list[str] = Field(min_length=1, description="A scripted solution in the action grammar; ends with done().")
    answer: list[str] | None = Field(
        None,
        min_length=1,
        description="Information-seeking tasks: the accepted answers; the agent's last send_msg_to_user text "
        "must equal one of them after normalisation (case, spaces, '$' and thousands separators).",
    )

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> dict[str, Any]:
        return _without_unset(handler(self), ("answer",))

    @model_validator(mode="after")
    def _judged(self) -> BrowserHidden:
        if not self.checks and self.answer is None:
            raise ValueError(f"task {self.id!r}: give `checks` (the end state) or `answer` (what to report), or both")
        return self


class BrowserTaskPair(TaskPair):
    visible: BrowserTask
    hidden: BrowserHidden


VISIBLE = BrowserTask
HIDDEN = BrowserHidden
PAIR = BrowserTaskPair
LIST_COLUMNS = ("start path", "checks", "oracle steps", "title")


def list_row(task: TaskPair) -> tuple[str, ...]:
    """The `sandgym tasks list` columns of one task (after its id)."""
    v, h = task.visible, task.hidden
    assert isinstance(v, BrowserTask) and isinstance(h, BrowserHidden)
    return (v.start_path, str(len(h.checks)), str(len(h.oracle)), v.title)


class MiniWoBPage(VisibleSpec):
    """A MiniWoB++ page as the one task of its env's task set (`sandgym/MiniWoB-<page>-v0`).

    MiniWoB envs have no task files: the page is the task, and episodes differ
    by seed (`sandgym eval --epochs N` plays N seeds). The set's hash covers
    the page and the miniwob wheel's version."""

    schema_version: Literal[1] = 1
    id: TaskId
    family: Literal["browser_form"] = "browser_form"
    version: int = 1
    page: str = Field(min_length=1, description="The page under miniwob/html/miniwob/, without .html.")
    miniwob_version: str = Field(description="The miniwob wheel the page comes from.")


class MiniWoBHidden(HiddenSpec):
    """Nothing hidden: the page itself scores the episode."""

    id: TaskId


def miniwob_task_set(page: str, miniwob_version: str) -> TaskSet:
    """The one-task set of a MiniWoB++ page."""
    task_id = f"miniwob/{page}"
    pair = TaskPair(
        visible=MiniWoBPage(id=task_id, page=page, miniwob_version=miniwob_version), hidden=MiniWoBHidden(id=task_id)
    )
    meta = TaskSetMeta(
        name=task_id, family="browser_form", description=f"The MiniWoB++ page {page} (miniwob {miniwob_version})."
    )
    return TaskSet(meta, [pair])
