"""SWE-bench format, both ways, and SWE-bench predictions.

**Import** (`sandgym tasks import swebench FILE --repos DIR --out SETDIR`):
rows with the fields of SWE-bench, SWE-Gym and SWE-smith instances
(`instance_id, repo, base_commit, patch, test_patch, problem_statement,
FAIL_TO_PASS, PASS_TO_PASS, version, environment_setup_commit`; the test
lists may be JSON-encoded strings, as the published datasets store them),
as JSONL or a JSON list. Each instance becomes a swe_repo task whose source
is the git repository at `base_commit` (`RepoSource(kind="git")`): the
commit is fetched from the clone under `--repos DIR` (`owner__name` or
`name`) into the SWE cache, and the start state is the usual squashed
one-commit repository of its tree. The test environment is the
repository's own requirements, read at `environment_setup_commit` (else
`base_commit`), pinned with pip's resolver next to the verifier's pytest,
and built into a cached venv, as the task factory does. The package is
not installed: its import root (`src` or the repository root) is put on
the path, so packages that need compiling do not work here. Test ids must
be pytest node ids. Every task is then validated with the verifier (the
gold patch must score FULL, the unchanged start state must fail) and
audited (`sandgym tasks audit`: nothing of the fix within the agent's
reach); tasks that fail are dropped and listed. The history is cut at
`base_commit`: the agent's repository is one new commit of that tree, with
no later commit, tag, branch, reflog, remote-tracking ref, stash or
unreachable object of the source repository.

**Export** (`sandgym tasks export SET --format swebench --out FILE`): one
SWE-bench instance per task (`.json`: a JSON list; otherwise JSONL), the
test lists JSON-encoded as in the published datasets, `hints_text` and
`created_at` empty. `base_commit` is a real commit: a git task without a
base patch keeps its own commit; any other task (a PyPI sdist or bundled
project with its `base_patch`) gets its start state as a commit, the same
root commit (one commit, no history, fixed identity and date) the agent's
sandbox holds, written with `--repos-out DIR` into `DIR/<owner>__<name>.git`
(repo `pypi/<name>` or `sandgym/<name>`), one tag per task. A `sandgym`
field (a JSON string) carries what SWE-bench has no field for (the test
environment, timeout, title, tags, visible tests and, where the SWE-bench
fields cannot say it, the source and base patch), so `sandgym tasks import
swebench` of the file gives the same task-set hash.

**Predictions** (`verify_prediction`, the family's `predictions` hook): a
blank `model_patch` is EMPTY without running anything (SWE-bench's
empty-patch rule); any other is judged by the verifier.
"""

from __future__ import annotations

import io
import json
import shutil
import tarfile
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from sandgym.envs.swe_repo.factory import FactoryError, pin_requirements
from sandgym.envs.swe_repo.requirements import discover_test_requirements, normalize_name
from sandgym.envs.swe_repo.source_tree import detect_import_root, is_test_path
from sandgym.outcomes import Outcome
from sandgym.runtimes.base import Runtime
from sandgym.safe_files import MAX_INPUT_BYTES, UnsafeFile, read_bytes_bounded
from sandgym.specs import TaskSet, TaskSetMeta, TaskSpecError, format_validation_error
from sandgym.specs.swe_repo import (
    COMMIT_RE,
    RepoSource,
    SWEHidden,
    SWETask,
    SWETaskPair,
    TestEnvironment,
    check_repo_name,
)
from sandgym.verifiers.models import Attempt, Verdict
from sandgym.verifiers.swe_repo.checkout import start_state
from sandgym.verifiers.swe_repo.git_sources import (
    copy_commits,
    ensure_commit,
    find_local_repo,
    ingest,
    mirror_dir,
    repo_slug,
    write_tree,
)
from sandgym.verifiers.swe_repo.sources import RepoError

# swebench 5.x, swebench/types.py SWEbenchInstance, in its order.
SWEBENCH_FIELDS = (
    "repo",
    "instance_id",
    "base_commit",
    "patch",
    "test_patch",
    "problem_statement",
    "hints_text",
    "created_at",
    "version",
    "FAIL_TO_PASS",
    "PASS_TO_PASS",
    "environment_setup_commit",
)
TEST_KEYS = ("FAIL_TO_PASS", "PASS_TO_PASS")
REQUIRED = ("instance_id", "repo", "base_commit", "patch", "problem_statement", "FAIL_TO_PASS")
EXTRA = "sandgym"  # our own field: a JSON string
IMPORT_SOURCE = "swebench"
PREDICTION_FIELDS = ("instance_id", "model_name_or_path", "model_patch")

Progress = Callable[[str, int, int], None]  # (phase, done, total)


class SWEBenchError(TaskSpecError):
    """A SWE-bench file or instance cannot be used; the message names the line and field."""


# -- reading instances -------------------------------------------------------------------


def read_rows(path: str | Path) -> list[tuple[str, dict[str, Any]]]:
    """(where, row) of every instance in a JSONL file or a JSON list (`.json`), gzip allowed."""
    path = Path(path)
    try:  # a regular file, bounded (a FIFO or a device would hang or grow without end)
        text = read_bytes_bounded(path, MAX_INPUT_BYTES).decode("utf-8")
    except UnsafeFile as e:
        raise SWEBenchError(str(e)) from None
    except UnicodeDecodeError as e:
        raise SWEBenchError(f"{path}: not UTF-8 text ({e.reason})") from None
    stem = path.name.removesuffix(".gz")
    rows: list[tuple[str, Any]] = []
    if stem.endswith(".json") or text.lstrip().startswith("["):
        try:
            data = json.loads(text)
        except RecursionError:
            raise SWEBenchError(f"{path}: JSON nested too deeply to read; expected a list of instances") from None
        except ValueError as e:
            raise SWEBenchError(f"{path}: not JSON ({e}); expected a list of instances, or JSONL") from None
        if isinstance(data, dict):  # {instance_id: instance}, as SWE-agent writes predictions
            data = list(data.values())
        if not isinstance(data, list):
            raise SWEBenchError(f"{path}: expected a JSON list of instances, got {type(data).__name__}")
        rows = [(f"{path}[{i}]", row) for i, row in enumerate(data)]
    else:
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                rows.append((f"{path}:{n}", json.loads(line)))
            except RecursionError:
                raise SWEBenchError(f"{path}:{n}: JSON nested too deeply to read; expected one instance") from None
            except ValueError as e:
                raise SWEBenchError(f"{path}:{n}: not JSON: {e}") from None
    for where, row in rows:
        if not isinstance(row, dict):
            raise SWEBenchError(f"{where}: expected a JSON object, got {type(row).__name__}")
    if not rows:
        raise SWEBenchError(f"{path}: no instances in the file")
    return rows


def _str_field(row: dict, key: str, where: str, required: bool) -> str:
    value = row.get(key)
    if value is None:
        if required:
            raise SWEBenchError(f"{where}: field `{key}` is missing (SWE-bench instances need {', '.join(REQUIRED)})")
        return ""
    if not isinstance(value, str):
        raise SWEBenchError(f"{where}: field `{key}` must be a string, got {type(value).__name__}")
    return value


def test_list(row: dict, key: str, where: str) -> list[str]:
    """FAIL_TO_PASS / PASS_TO_PASS: a list of strings, or one JSON-encoded."""
    value = row.get(key, [])
    if value is None:
        value = []
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else []
        except (ValueError, RecursionError) as e:
            raise SWEBenchError(f"{where}: field `{key}` is a string but not a JSON list ({e})") from None
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise SWEBenchError(f"{where}: field `{key}` must be a list of test ids (or that list JSON-encoded)")
    return value


@dataclass
class Instance:
    where: str
    instance_id: str
    repo: str
    base_commit: str
    patch: str
    test_patch: str
    problem_statement: str
    version: str
    env_commit: str  # environment_setup_commit, or base_commit when the row has none
    fail_to_pass: list[str]
    pass_to_pass: list[str]
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def source(self) -> RepoSource | None:
        """The source the `sandgym` field names (None: the git repository at base_commit)."""
        raw = self.extra.get("repo")
        if raw is None:
            return None
        try:
            return RepoSource.model_validate(raw)
        except ValidationError as e:
            raise SWEBenchError(format_validation_error(f"{self.where}: field `{EXTRA}.repo`", e)) from None


def parse_instance(row: dict, where: str) -> Instance:
    values = {k: _str_field(row, k, where, k in REQUIRED) for k in SWEBENCH_FIELDS if k not in TEST_KEYS}
    try:
        check_repo_name(values["repo"])
    except ValueError as e:
        raise SWEBenchError(f"{where}: field `repo`: {e}") from None
    for k in ("base_commit", "environment_setup_commit"):
        if values[k] and not COMMIT_RE.match(values[k]):
            raise SWEBenchError(f"{where}: field `{k}` must be a full hex commit id (40 digits), got {values[k]!r}")
    if not values["patch"].strip():
        raise SWEBenchError(f"{where}: field `patch` is empty; a task needs its gold patch")
    f2p = test_list(row, "FAIL_TO_PASS", where)
    if not f2p:
        raise SWEBenchError(f"{where}: field `FAIL_TO_PASS` is empty; nothing would grade this task")
    extra_raw = row.get(EXTRA)
    extra: dict[str, Any] = {}
    if extra_raw is not None:
        try:
            extra = json.loads(extra_raw) if isinstance(extra_raw, str) else extra_raw
        except (ValueError, RecursionError) as e:
            raise SWEBenchError(f"{where}: field `{EXTRA}` is not JSON ({e})") from None
        if not isinstance(extra, dict):
            raise SWEBenchError(f"{where}: field `{EXTRA}` must be a JSON object")
    return Instance(
        where=where,
        instance_id=values["instance_id"],
        repo=values["repo"],
        base_commit=values["base_commit"],
        patch=values["patch"],
        test_patch=values["test_patch"],
        problem_statement=values["problem_statement"],
        version=values["version"],
        env_commit=values["environment_setup_commit"] or values["base_commit"],
        fail_to_pass=f2p,
        pass_to_pass=test_list(row, "PASS_TO_PASS", where),
        extra=extra,
    )


def read_instances(path: str | Path) -> list[Instance]:
    instances = [parse_instance(row, where) for where, row in read_rows(path)]
    seen: dict[str, str] = {}
    for inst in instances:
        if inst.instance_id in seen:
            raise SWEBenchError(
                f"{inst.where}: field `instance_id`: {inst.instance_id!r} also at {seen[inst.instance_id]}"
            )
        seen[inst.instance_id] = inst.where
    return instances


# -- making tasks ------------------------------------------------------------------------


def _title(problem: str) -> str:
    for line in problem.splitlines():
        line = line.strip().lstrip("#").strip()
        if line:
            return line if len(line) <= 100 else line[:99] + "…"
    return ""


def _project_name(tree: Path, repo: str) -> str:
    import tomllib

    try:
        name = tomllib.loads((tree / "pyproject.toml").read_text()).get("project", {}).get("name")
    except (OSError, tomllib.TOMLDecodeError, AttributeError):
        name = None
    return name if isinstance(name, str) and name else repo.rsplit("/", 1)[-1]


class _Environments:
    """Test environments per (repo, environment commit), found once per import."""

    def __init__(self, work: Path, log: Callable[[str], None]):
        self.work, self.log = work, log
        self._done: dict[tuple[str, str], list[str]] = {}
        self._lock = threading.Lock()

    def requirements(self, repo: str, commit: str) -> list[str]:
        with self._lock:
            key = (repo, commit)
            if key not in self._done:
                tree = write_tree(mirror_dir(repo), commit, self.work / f"env-{repo_slug(repo)}-{commit[:12]}")
                wanted, found_in = discover_test_requirements(tree, _project_name(tree, repo))
                try:
                    pins = pin_requirements(wanted)
                except FactoryError as e:
                    raise SWEBenchError(f"{repo}@{commit[:12]}: {e}") from None
                self.log(
                    f"{repo}@{commit[:12]}: requirements {pins or 'none beyond pytest'} "
                    f"(from {', '.join(found_in) or 'nothing declared'})"
                )
                shutil.rmtree(tree, ignore_errors=True)
                self._done[key] = pins
            return self._done[key]


def _extra_fields(inst: Instance) -> dict[str, Any]:
    """SWETask fields the `sandgym` field may set (the rest come from SWE-bench's fields)."""
    out: dict[str, Any] = {}
    for key in ("title", "visible_tests", "timeout_s", "source", "tags", "difficulty"):
        if key in inst.extra:
            out[key] = inst.extra[key]
    if "task_version" in inst.extra:
        out["version"] = inst.extra["task_version"]
    return out


def make_task(inst: Instance, envs: _Environments, work: Path) -> SWETaskPair:
    """One instance as a swe_repo task (its commits already in the cache mirror)."""
    source = inst.source
    base_patch = str(inst.extra.get("base_patch", ""))
    if source is None:
        source = RepoSource(
            kind="git",
            name=inst.repo,
            version=inst.version,
            commit=inst.base_commit,
            environment_setup_commit="" if inst.env_commit == inst.base_commit else inst.env_commit,
        )
    try:
        if "environment" in inst.extra:
            environment = TestEnvironment.model_validate(inst.extra["environment"])
            fields = _extra_fields(inst)
            needs_tree = "visible_tests" not in fields
        else:
            environment, fields, needs_tree = None, _extra_fields(inst), True
        if needs_tree or environment is None:
            if source.kind != "git" or base_patch:
                raise SWEBenchError(
                    f"{inst.where}: field `{EXTRA}` names a {source.kind} source but not its `environment` "
                    "and `visible_tests`; export the set again with `sandgym tasks export`"
                )
            slot = work / f"base-{inst.instance_id.replace('/', '_')}"
            tree = write_tree(mirror_dir(source.name), source.commit, slot)
            try:
                if environment is None:
                    environment = TestEnvironment(
                        requirements=envs.requirements(inst.repo, inst.env_commit), import_root=detect_import_root(tree)
                    )
                if "visible_tests" not in fields:
                    files = {t.split("::", 1)[0] for t in inst.fail_to_pass + inst.pass_to_pass}
                    fields["visible_tests"] = sorted(f for f in files if (tree / f).is_file() and is_test_path(f))
            finally:
                shutil.rmtree(tree, ignore_errors=True)
        visible = SWETask(
            id=inst.instance_id,
            title=fields.pop("title", _title(inst.problem_statement)),
            problem_statement=inst.problem_statement,
            repo=source,
            environment=environment,
            base_patch=base_patch,
            source=fields.pop("source", IMPORT_SOURCE),
            **fields,
        )
        hidden = SWEHidden(
            id=inst.instance_id,
            patch=inst.patch,
            test_patch=inst.test_patch,
            FAIL_TO_PASS=inst.fail_to_pass,
            PASS_TO_PASS=inst.pass_to_pass,
        )
    except ValidationError as e:
        raise SWEBenchError(format_validation_error(inst.where, e)) from None
    return SWETaskPair(visible=visible, hidden=hidden)


def validate_task(task: SWETaskPair, runtime: Runtime) -> list[str]:
    """The gold patch must score FULL, the unchanged start state must not
    pass, and neither the answer nor the hidden tests may be within the
    agent's reach (audit.py)."""
    from sandgym.verifiers.swe_repo.host import verify

    problems = []
    gold = verify(task, task.hidden.patch, runtime)
    if gold.status != "FULL":
        failing = [f"{t.name} ({t.status})" for t in gold.tests if t.status != "passed"][:5]
        problems.append(
            f"gold patch scored {gold.status} ({gold.outcome.value})"
            + (f"; not passing: {', '.join(failing)}" if failing else "")
            + (f"; {gold.detail[:300]}" if gold.detail else "")
        )
    empty = verify(task, "", runtime)
    if empty.outcome == Outcome.PASSED or empty.status != "NO":
        problems.append(
            f"the unchanged start state scored {empty.status} ({empty.outcome.value}); FAIL_TO_PASS must fail there"
        )
    if not problems:
        from .audit import audit_task

        for f in audit_task(task, runtime)[:3]:
            problems.append(f"within the agent's reach: {f.kind} {f.file} at {f.where}")
    return problems


def import_swebench(
    src: str | Path,
    out: str | Path,
    repos: str | Path | None,
    runtime=None,
    name: str = "",
    validate: bool = True,
    jobs: int = 2,
    limit: int | None = None,
    progress: Progress | None = None,
    log: Callable[[str], None] = print,
) -> tuple[TaskSet, list[tuple[str, str]]]:
    """Import a SWE-bench-format file into the task-set folder `out`.
    Returns the written set and the dropped instances (id, why)."""
    src, out = Path(src), Path(out)
    progress = progress or (lambda phase, done, total: None)
    if (out / "taskset.yaml").exists() or (out / "tasks").exists():
        raise SWEBenchError(f"{out}: already holds a task set; choose another --out folder or remove it")
    if validate and runtime is None:
        raise ValueError("validation needs a runtime")
    instances = read_instances(src)[: limit or None]
    repos_dir = Path(repos) if repos is not None else None
    if repos_dir is not None and not repos_dir.is_dir():
        raise SWEBenchError(f"--repos {repos_dir}: not a folder; it must hold a clone per repository (owner__name)")
    dropped: list[tuple[str, str]] = []
    # 1. fetch the commits each repository's instances need into the cache.
    by_repo: dict[str, list[Instance]] = {}
    for inst in instances:
        if inst.source is None:
            by_repo.setdefault(inst.repo, []).append(inst)
    for i, (repo, group) in enumerate(sorted(by_repo.items())):
        progress(f"fetching {repo}", i, len(by_repo))
        commits = sorted({c for inst in group for c in (inst.base_commit, inst.env_commit)})
        missing = [c for c in commits if not _in_mirror(repo, c)]
        if not missing:
            continue
        if repos_dir is None:
            for c in missing:
                ensure_commit(repo, c)  # $SANDGYM_GIT_REPOS, or an error naming --repos
            continue
        ingest(find_local_repo(repos_dir, repo), repo, missing)
    # 2. tasks
    tasks: list[SWETaskPair] = []
    with tempfile.TemporaryDirectory(prefix="sandgym-swebench-") as tmp:
        envs = _Environments(Path(tmp), log)
        for i, inst in enumerate(instances):
            progress("reading instances", i, len(instances))
            try:
                tasks.append(make_task(inst, envs, Path(tmp)))
            except (SWEBenchError, RepoError) as e:
                dropped.append((inst.instance_id, str(e)))
                log(f"dropped {inst.instance_id}: {e}")
    # 3. validation with the verifier
    if validate and tasks:
        done = 0
        progress("validating", 0, len(tasks))

        def check(task: SWETaskPair) -> list[str]:
            try:
                return validate_task(task, runtime)
            except (RepoError, OSError, ValueError) as e:  # venv build, start state
                return [f"{type(e).__name__}: {e}"]

        kept = []
        with ThreadPoolExecutor(max(1, jobs)) as pool:
            for task, problems in zip(tasks, pool.map(check, tasks), strict=True):
                done += 1
                progress("validating", done, len(tasks))
                if problems:
                    dropped.append((task.id, "; ".join(problems)))
                    log(f"dropped {task.id}: {'; '.join(problems)}")
                else:
                    kept.append(task)
        tasks = kept
    if not tasks:
        raise SWEBenchError(
            f"{src}: no instance became a valid task ({len(dropped)} dropped)"
            + (": " + "; ".join(f"{i}: {why[:200]}" for i, why in dropped[:3]) if dropped else "")
        )
    meta = TaskSetMeta(
        name=name or out.name,
        family="swe_repo",
        version=1,
        description=f"Imported from {src.name} (SWE-bench format), {len(tasks)} instances"
        + (", each validated by the verifier." if validate else "."),
    )
    TaskSet(meta, tasks).write(out)
    return TaskSet.load(out), dropped


def _in_mirror(repo: str, commit: str) -> bool:
    from sandgym.verifiers.swe_repo.git_sources import has_commit

    return has_commit(mirror_dir(repo), commit)


# -- export --------------------------------------------------------------------------------


def _ref_name(task_id: str) -> str:
    """A tag name for a task: its id, each part made safe for git."""
    parts = []
    for part in task_id.split("/"):
        part = part.replace("..", "_")
        if part.startswith(".") or part.endswith(".lock"):
            part = "_" + part.replace(".lock", "_lock")
        parts.append(part or "_")
    return "refs/tags/sandgym/" + "/".join(parts)


def exported_repo(source: RepoSource) -> str:
    """The SWE-bench `repo` of a source: git keeps its own; pypi `pypi/<name>`; bundled `sandgym/<name>`."""
    if source.kind == "git":
        return source.name
    return f"{'pypi' if source.kind == 'pypi' else 'sandgym'}/{normalize_name(source.name)}"


def export_instance(task: SWETaskPair, base_commit: str) -> dict[str, Any]:
    visible, hidden = task.visible, task.hidden
    src = visible.repo
    at_source = src.kind == "git" and not visible.base_patch.strip()
    extra: dict[str, Any] = {
        "task_version": visible.version,
        "title": visible.title,
        "environment": visible.environment.model_dump(mode="json"),
        "visible_tests": visible.visible_tests,
        "timeout_s": visible.timeout_s,
        "source": visible.source,
        "tags": visible.tags,
    }
    if not at_source:
        extra["repo"] = src.model_dump(mode="json")
        extra["base_patch"] = visible.base_patch
    if visible.difficulty is not None:
        extra["difficulty"] = visible.difficulty.model_dump(mode="json")
    return {
        "repo": exported_repo(src),
        "instance_id": visible.id,
        "base_commit": base_commit,
        "patch": hidden.patch,
        "test_patch": hidden.test_patch,
        "problem_statement": visible.problem_statement,
        "hints_text": "",
        "created_at": "",
        "version": src.version,
        "FAIL_TO_PASS": json.dumps(hidden.FAIL_TO_PASS),
        "PASS_TO_PASS": json.dumps(hidden.PASS_TO_PASS),
        "environment_setup_commit": (src.environment_setup_commit or base_commit) if at_source else base_commit,
        EXTRA: json.dumps(extra, sort_keys=True),
    }


def _start_commit(task: SWETaskPair, repos_out: Path | None, tag: bool) -> str:
    """The task's start state as a commit; copied into repos_out when given."""
    state = start_state(task.visible)
    if repos_out is None:
        return state.base_commit
    with tempfile.TemporaryDirectory(prefix="sandgym-export-") as tmp:
        with tarfile.open(fileobj=io.BytesIO(state.repo_tar)) as tar:
            tar.extractall(tmp, filter="data")
        dest = repos_out / f"{repo_slug(exported_repo(task.visible.repo))}.git"
        refs = {_ref_name(task.id): state.base_commit} if tag else {}
        copy_commits(Path(tmp) / "repo" / ".git", refs, dest)
    return state.base_commit


def export_swebench(
    task_set: TaskSet, out: str | Path, repos_out: str | Path | None = None, progress: Progress | None = None
) -> list[dict[str, Any]]:
    """Write `task_set` (family swe_repo) as SWE-bench instances to `out`
    (`.json`: a JSON list; otherwise JSONL). Returns the instances."""
    if task_set.meta.family != "swe_repo":
        raise SWEBenchError(
            f"task set {task_set.meta.name!r} is of family {task_set.meta.family!r}; "
            "the swebench format holds swe_repo tasks (use --format jsonl for any family)"
        )
    out = Path(out)
    progress = progress or (lambda phase, done, total: None)
    repos_dir = Path(repos_out) if repos_out is not None else None
    tasks = [SWETaskPair.of(t) for t in task_set.tasks]
    needs_repo = [t.id for t in tasks if not (t.visible.repo.kind == "git" and not t.visible.base_patch.strip())]
    if needs_repo and repos_dir is None:
        raise SWEBenchError(
            f"{len(needs_repo)} task(s) (e.g. {needs_repo[0]!r}) start from a state that is no commit of a "
            "public repository (a PyPI sdist or bundled project plus a base patch); pass --repos-out DIR and "
            "export writes a git repository per source there whose commits are those start states"
        )
    rows = []
    by_repo: dict[str, dict[str, str]] = {}  # git source name -> {tag: commit}
    for i, task in enumerate(tasks):
        progress("exporting", i, len(task_set))
        src = task.visible.repo
        if task.id in needs_repo:
            base = _start_commit(task, repos_dir, tag=True)
        else:
            base = src.commit
            if repos_dir is not None:
                ensure_commit(src.name, base)
                by_repo.setdefault(src.name, {})[_ref_name(task.id)] = base
        rows.append(export_instance(task, base))
    if repos_dir is not None:
        for name, refs in by_repo.items():
            copy_commits(mirror_dir(name), refs, repos_dir / f"{repo_slug(name)}.git")
        for dest in sorted(repos_dir.glob("*.git")):
            _point_head(dest)
    progress("exporting", len(task_set), len(task_set))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    if out.name.endswith(".json"):
        tmp.write_text(json.dumps(rows, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    else:
        tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    tmp.replace(out)
    return rows


def _point_head(git_dir: Path) -> None:
    """A `main` branch at the last tagged commit, so a clone checks something out."""
    from sandgym.verifiers.swe_repo.git_sources import run_git

    tags = run_git(["for-each-ref", "--format=%(objectname)", "--sort=refname", "refs/tags/sandgym"], git_dir).split()
    if tags:
        run_git(["update-ref", "refs/heads/main", tags[-1].decode()], git_dir)
        run_git(["symbolic-ref", "HEAD", "refs/heads/main"], git_dir)


def export_task_set(task_set: TaskSet, out: Path, options: dict[str, Any]) -> str:
    """The family's `swebench` exporter (`sandgym tasks export --format swebench`)."""
    unknown = set(options) - {"repos_out", "progress"}
    if unknown:
        raise SWEBenchError(f"the swebench format takes --repos-out only, not {', '.join(sorted(unknown))}")
    rows = export_swebench(task_set, out, options.get("repos_out"), options.get("progress"))
    where = f"; repositories in {options['repos_out']}" if options.get("repos_out") else ""
    return f"wrote {len(rows)} SWE-bench instances to {out}{where}"


# -- predictions ---------------------------------------------------------------------------


def verify_prediction(task: SWETaskPair, patch: str, runtime: Runtime) -> Verdict:
    """The family's `predictions` hook: a SWE-bench model_patch, judged by the
    verifier and applied as SWE-bench applies it. Only "" is an empty patch
    (SWE-bench's test); a blank one is submitted and fails to apply."""
    from sandgym.verifiers.swe_repo.host import VERIFIER_VERSION, SWEVerdict, verify

    if patch == "":
        detail = "the prediction's model_patch is empty: nothing to apply (SWE-bench counts it as an empty patch)"
        attempt = Attempt(outcome=Outcome.FAILED, status="EMPTY", detail=detail)
        return SWEVerdict(
            verifier_version=VERIFIER_VERSION,
            outcome=Outcome.FAILED,
            status="EMPTY",
            detail=detail,
            attempts=[attempt],
        )
    return verify(task, patch, runtime, apply="swebench")
