"""Task specs of the SWE repo-issue family (`swe_repo`).

A task is a repository at a start state with an issue to fix:

- the visible half names where the source comes from (a PyPI sdist, pinned
  by version and sha256, or a project bundled with sandgym), the test
  environment, the patch that turns the pristine source into the task's
  start state (`base_patch`, e.g. an injected bug), and the issue text;
- the hidden half holds the gold `patch` (start state -> fixed), an
  optional `test_patch`, and the test lists FAIL_TO_PASS / PASS_TO_PASS.

Specs store references, hashes, patches and test ids, never a package's
source. Test ids are pytest node ids relative to the repository root.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, field_validator, model_serializer, model_validator

from sandgym.specs.base import HiddenSpec, StrictModel, TaskId, TaskPair, VisibleSpec

# Requirement pins: `name==version` (extras allowed), nothing that pip would
# resolve differently tomorrow.
PIN_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-]*(\[[A-Za-z0-9_,\-]+\])?==[A-Za-z0-9.+!\-]+$")
REL_PATH_RE = re.compile(r"^(?!/)(?!.*(^|/)\.\.(/|$))[^\0]*$")
COMMIT_RE = re.compile(r"^([0-9a-f]{40}|[0-9a-f]{64})$")
# Names that become paths (a bundled project's folder, a cache file, a
# clone's folder): one segment of safe characters, never "." or "..".
SEGMENT_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]*")  # fullmatch: `$` would let a "\n" end pass


def check_repo_name(name: str) -> str:
    """`name` if it is a repository as SWE-bench names it, `owner/name` with
    two safe segments (letters, digits, '_', '.', '-'; no '..'), else ValueError."""
    parts = name.split("/")
    if len(parts) != 2 or not all(SEGMENT_RE.fullmatch(p) and ".." not in p for p in parts):
        raise ValueError(
            f"repository {name!r} must be owner/name, each part letters, digits, '_', '.', '-' "
            "(starting with a letter or digit, no '..'), e.g. astropy/astropy"
        )
    return name


def check_plain_name(name: str, what: str) -> str:
    """`name` if it is one safe path segment (a bundled project, a PyPI distribution), else ValueError."""
    if not SEGMENT_RE.fullmatch(name) or ".." in name:
        raise ValueError(
            f"{what} {name!r} must be a plain name: letters, digits, '_', '.', '-', starting with a letter "
            "or digit, no '/' or '..'"
        )
    return name


# Fields only a git source uses: left out of a dump while empty, so adding
# them changed no existing task's content hash or start-state key.
GIT_ONLY_FIELDS = ("commit", "environment_setup_commit")


class RepoSource(StrictModel):
    """Where the pristine source comes from: a PyPI sdist, a project bundled
    with sandgym, or a git repository at a commit (SWE-bench's repo and
    base_commit; the objects live in the SWE cache, fetched from a local
    clone: `sandgym tasks import swebench --repos DIR`)."""

    kind: Literal["pypi", "bundled", "git"]
    name: str = Field(
        min_length=1,
        description="PyPI distribution name, the bundled project's folder name, or the git repository "
        "as SWE-bench names it (owner/name).",
    )
    version: str = Field("", description="pypi: the release whose sdist is used; git: SWE-bench's `version` label.")
    sdist_url: str = Field("", description="pypi: where the sdist was downloaded from.")
    sdist_sha256: str = Field("", description="pypi: checked after every download.")
    commit: str = Field("", description="git: the commit (full hex id) whose tree is the pristine source.")
    environment_setup_commit: str = Field(
        "", description="git: the commit whose requirements made the test environment (SWE-bench's field)."
    )

    @model_validator(mode="after")
    def _pinned(self) -> RepoSource:
        if self.kind == "git":
            check_repo_name(self.name)
        else:  # a folder under the bundled projects, or a file name in the sdist cache
            check_plain_name(self.name, "a bundled project's name" if self.kind == "bundled" else "a PyPI name")
        if self.kind == "pypi" and not (self.version and re.fullmatch(r"[0-9a-f]{64}", self.sdist_sha256)):
            raise ValueError("a pypi source needs `version` and a 64-hex `sdist_sha256`")
        if self.kind == "pypi":  # the version names the cached sdist's file; the url is fetched
            check_plain_name(self.version, "a PyPI version")
            if self.sdist_url and not self.sdist_url.startswith("https://"):
                raise ValueError(f"`sdist_url` {self.sdist_url[:200]!r} must be an https:// URL (or left out)")
        if self.kind == "git":
            if not COMMIT_RE.match(self.commit):
                raise ValueError(
                    "a git source needs `commit`, a full lowercase hex commit id (40 or 64 digits), "
                    f"got {self.commit!r}"
                )
            if self.environment_setup_commit and not COMMIT_RE.match(self.environment_setup_commit):
                raise ValueError(
                    f"`environment_setup_commit` must be a full hex commit id, got {self.environment_setup_commit!r}"
                )
        elif self.commit or self.environment_setup_commit:
            raise ValueError(f"`commit` and `environment_setup_commit` belong to git sources, not {self.kind}")
        return self

    @model_serializer(mode="wrap")
    def _without_empty_git_fields(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        for key in GIT_ONLY_FIELDS:
            if not data.get(key):
                data.pop(key, None)
        return data


class TestEnvironment(StrictModel):
    """What the tests need: a virtualenv built once per distinct value, cached."""

    requirements: list[str] = Field(default_factory=list, description="Pinned test dependencies (name==version).")
    import_root: str = Field(".", description="Folder (relative to the repo root) put first on PYTHONPATH.")
    test_args: list[str] = Field(default_factory=list, description="Extra pytest arguments (e.g. -p no:cacheprovider).")

    @field_validator("requirements")
    @classmethod
    def _pinned(cls, v: list[str]) -> list[str]:
        for r in v:
            if not PIN_RE.fullmatch(r):
                raise ValueError(f"requirement {r!r} must be pinned as name==version")
        return v

    @field_validator("import_root")
    @classmethod
    def _relative(cls, v: str) -> str:
        if not REL_PATH_RE.fullmatch(v):
            raise ValueError(f"import_root {v!r} must be a relative path inside the repository")
        return v


IssueLevel = Literal["located", "symptom", "minimal"]


class Difficulty(StrictModel):
    """Signals of how hard a task is, recorded by the task factory (counts
    only: nothing here points at the fix)."""

    issue_level: IssueLevel = Field(
        description="located: names the function and failing tests; symptom: a standalone reproduction; "
        "minimal: one sentence of symptom."
    )
    names_location: bool = Field(description="Whether the issue text names the file or function to fix.")
    failing_tests: int = Field(ge=1, description="FAIL_TO_PASS tests.")
    held_out: int = Field(ge=0, description="FAIL_TO_PASS tests the issue text neither names nor quotes.")
    files_touched: int = Field(ge=1, description="Source files the gold patch changes.")
    functions_touched: int = Field(ge=1, description="Functions the gold patch changes (one per injected bug).")


class SWETask(VisibleSpec):
    """The visible half: what builds the agent's start state and prompt."""

    schema_version: Literal[1] = 1
    id: TaskId
    family: Literal["swe_repo"] = "swe_repo"
    version: int = Field(1, ge=1, description="Bump when the task's meaning changes.")
    title: str = ""
    problem_statement: str = Field(min_length=1, description="The issue text the agent is given.")
    repo: RepoSource
    environment: TestEnvironment = Field(default_factory=TestEnvironment)
    base_patch: str = Field("", description="Unified diff applied to the pristine source: the start state.")
    visible_tests: list[str] = Field(
        default_factory=list, description="Test ids or files the agent's run_tests tool runs."
    )
    timeout_s: float = Field(300, gt=0, le=3600, description="Wall time of one verification run.")
    source: str = Field("sandgym", description="Where the task comes from (factory, hand-written).")
    tags: list[str] = Field(default_factory=list)
    difficulty: Difficulty | None = Field(None, description="Set by the task factory; absent on other tasks.")

    @model_serializer(mode="wrap")
    def _without_empty_difficulty(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Absent rather than null, so tasks without it keep their content hash.
        data = handler(self)
        if data.get("difficulty") is None:
            data.pop("difficulty", None)
        return data


class SWEHidden(HiddenSpec):
    """The hidden half: only the verifier (and the oracle policy) reads it."""

    schema_version: Literal[1] = 1
    id: str
    patch: str = Field(min_length=1, description="Gold patch: start state -> fixed (never shown to the agent).")
    test_patch: str = Field("", description="Applied after the agent's diff; its added files are removed first.")
    FAIL_TO_PASS: list[str] = Field(min_length=1, description="Tests that fail at the start state and must pass.")
    PASS_TO_PASS: list[str] = Field(default_factory=list, description="Tests that pass and must keep passing.")


class SWETaskPair(TaskPair):
    visible: SWETask
    hidden: SWEHidden


VISIBLE = SWETask
HIDDEN = SWEHidden
PAIR = SWETaskPair
LIST_COLUMNS = ("source", "FAIL_TO_PASS", "PASS_TO_PASS", "title")


def list_row(task: TaskPair) -> tuple[str, ...]:
    """The `sandgym tasks list` columns of one task (after its id)."""
    v, h = task.visible, task.hidden
    assert isinstance(v, SWETask) and isinstance(h, SWEHidden)
    if v.repo.kind == "pypi":
        source = f"{v.repo.name}=={v.repo.version}"
    elif v.repo.kind == "git":
        source = f"{v.repo.name}@{v.repo.commit[:10]}"
    else:
        source = f"{v.repo.name} (bundled)"
    return (source, str(len(h.FAIL_TO_PASS)), str(len(h.PASS_TO_PASS)), v.title)
