"""Data from elsewhere is hostile (issue 37): every case tried for real,
asserting the one-line error (or the contained outcome) AND that nothing
outside changed: no file written outside the run folder, no host file's
content in the output. Sandbox-free: the CLI commands here only read files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandgym.predictions import PredictionsError, read_predictions
from sandgym.records import MAX_ARTIFACT_BYTES, EpisodeRecord, encode_record
from sandgym.specs import TaskSet, TaskSpecError, bundled_task_set
from sandgym.specs.swe_repo import RepoSource, check_repo_name
from sandgym.terminal import shown
from sandgym.verifiers.swe_repo.git_sources import find_local_repo
from sandgym.verifiers.swe_repo.sources import RepoError, bundled_digest, pristine_tree

SECRET = "host-secret-7f3a"  # a host file's content that must never reach any output
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def sandgym(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sandgym", *args], capture_output=True, text=True, timeout=120, cwd=cwd
    )


def error_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error:"), proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


def tree_state(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def small_set(tmp_path) -> Path:
    ts = TaskSet.load(bundled_task_set("code_function"))
    return TaskSet(ts.meta, ts.tasks[:2]).write(tmp_path / "ts")


@pytest.fixture
def host_secret(tmp_path) -> Path:
    secret = tmp_path / "outside" / "secret.yaml"
    secret.parent.mkdir()
    secret.write_text(f"id: {SECRET}\n{SECRET}: [\n")  # invalid YAML that would be quoted in an error
    return secret


# -- paths confined --------------------------------------------------------------------------------


def test_a_task_file_linked_outside_the_set_is_refused_unread(small_set, host_secret, tmp_path):
    (small_set / "tasks" / "x.yaml").symlink_to(host_secret)
    before = tree_state(tmp_path)
    proc = sandgym("tasks", "list", str(small_set), cwd=tmp_path)
    line = error_line(proc)
    assert "x.yaml" in line and "outside" in line and "symlink" in line
    assert SECRET not in proc.stdout + proc.stderr
    assert tree_state(tmp_path) == before


def test_a_tasks_folder_linked_outside_the_set_is_refused(small_set, host_secret, tmp_path):
    (small_set / "hidden" / "evil.yaml").symlink_to(host_secret)
    with pytest.raises(TaskSpecError, match="outside") as e:
        TaskSet.load(small_set)
    assert SECRET not in str(e.value)


def test_a_fifo_task_file_is_refused_without_hanging(small_set, tmp_path):
    os.mkfifo(small_set / "tasks" / "fifo.yaml")
    before = tree_state(tmp_path)
    line = error_line(sandgym("tasks", "list", str(small_set), cwd=tmp_path))
    assert "fifo.yaml" in line and "not a regular file (a FIFO)" in line
    assert tree_state(tmp_path) == before


@pytest.mark.skipif(os.geteuid() != 0, reason="making a device node needs root")
@pytest.mark.parametrize("command", [["tasks", "list"], ["tasks", "validate"], ["tasks", "export", "--out", "x.jsonl"]])
def test_a_device_in_the_set_is_one_line_from_every_command(small_set, tmp_path, command):
    """/dev/zero's node inside the set: refused by its type before a byte is read."""
    os.mknod(small_set / "tasks" / "zero.yaml", 0o600 | 0o020000, os.makedev(1, 5))
    before = tree_state(tmp_path)
    line = error_line(sandgym(*command[:2], str(small_set), *command[2:], cwd=tmp_path))
    assert "zero.yaml" in line and "character device" in line, line
    assert tree_state(tmp_path) == before and not (tmp_path / "x.jsonl").exists()


def test_a_device_task_file_is_refused_without_reading(small_set, tmp_path):
    (small_set / "tasks" / "zero.yaml").symlink_to("/dev/zero")
    with pytest.raises(TaskSpecError, match="outside"):
        TaskSet.load(small_set)
    if os.geteuid() == 0:  # a device node inside the set itself
        (small_set / "tasks" / "zero.yaml").unlink()
        os.mknod(small_set / "tasks" / "zero.yaml", 0o600 | 0o020000, os.makedev(1, 5))
        with pytest.raises(TaskSpecError, match="character device"):
            TaskSet.load(small_set)


def test_a_symlink_inside_the_set_still_loads(small_set):
    name = next((small_set / "tasks").iterdir())
    moved = small_set / "kept.yaml"
    name.rename(moved)
    name.symlink_to(moved)
    assert len(TaskSet.load(small_set)) == 2


def test_a_hidden_folder_linked_outside_the_set_is_refused(small_set, tmp_path):
    """The folder itself a symlink out of the set (its files are read through
    the folder, opened once): every file in it is refused, unread."""
    outside = tmp_path / "elsewhere"
    (small_set / "hidden").rename(outside)
    (small_set / "hidden").symlink_to(outside)
    (outside / next(outside.iterdir()).name).write_text(f"id: {SECRET}\n{SECRET}: [\n")
    with pytest.raises(TaskSpecError, match="outside") as e:
        TaskSet.load(small_set)
    assert SECRET not in str(e.value)


def test_a_folder_linked_inside_the_set_loads_the_same(small_set):
    before = TaskSet.load(small_set)
    (small_set / "tasks").rename(small_set / "kept")
    (small_set / "tasks").symlink_to(small_set / "kept")
    after = TaskSet.load(small_set)
    assert after.hash == before.hash and after.ids == before.ids


@pytest.mark.parametrize("task_id", ["a/../b", "..", "a/./b", "x/..", "a\n"])
def test_ids_with_dot_segments_are_refused(task_id):
    from sandgym.specs.code_function import CodeTask

    with pytest.raises(ValueError, match="task id"):
        CodeTask.model_validate({"id": task_id, "prompt": "p", "entry_point": "f"})


@pytest.mark.parametrize("name", ["/etc", "../../etc", "..", "a/b", ".hidden", "x\0y", ""])
def test_bundled_project_names_are_plain(name):
    with pytest.raises(ValueError, match="plain name|at least 1"):
        RepoSource(kind="bundled", name=name)
    with pytest.raises(RepoError, match="plain name"):
        pristine_tree(RepoSource.model_construct(kind="bundled", name=name), Path("/nonexistent/never"))


def test_a_bundled_project_linked_outside_is_refused(tmp_path, monkeypatch):
    projects = tmp_path / "projects"
    (projects / "real").mkdir(parents=True)
    (projects / "real" / "a.py").write_text("x = 1\n")
    (projects / "real" / "leak.py").symlink_to("/etc/hostname")  # a link inside a project: left out
    (projects / "linked").symlink_to(tmp_path)
    monkeypatch.setattr("sandgym.verifiers.swe_repo.sources.bundled_projects_dir", lambda: projects)
    with pytest.raises(RepoError, match="not a link"):
        pristine_tree(RepoSource(kind="bundled", name="linked"), tmp_path / "out1")
    out = pristine_tree(RepoSource(kind="bundled", name="real"), tmp_path / "out2")
    assert sorted(p.name for p in out.iterdir()) == ["a.py"]


@pytest.mark.parametrize("name", ["owner/..", "../x", "owner/../x", "/abs/x", "o/.git", "o", "o/n/x", "o/n\n"])
def test_repository_names_are_owner_slash_name(name, tmp_path):
    with pytest.raises(ValueError, match="owner/name"):
        check_repo_name(name)
    (tmp_path / "repos").mkdir()
    with pytest.raises(RepoError, match="owner/name"):  # the --repos lookup never leaves the folder
        find_local_repo(tmp_path / "repos", name)


def test_pypi_sources_name_no_path_and_fetch_https_only():
    sha = "0" * 64
    for bad in ({"name": "../x"}, {"version": "1/../../x"}, {"sdist_url": "file:///etc/shadow"}):
        fields = {"kind": "pypi", "name": "pkg", "version": "1.0", "sdist_sha256": sha, **bad}
        with pytest.raises(ValueError):
            RepoSource.model_validate(fields)


# -- caches keyed by content --------------------------------------------------------------------------


def test_the_start_state_key_follows_the_bundled_projects_files(tmp_path, monkeypatch):
    from sandgym.specs.swe_repo import SWETask
    from sandgym.verifiers.swe_repo.checkout import start_key

    projects = tmp_path / "projects"
    (projects / "p").mkdir(parents=True)
    (projects / "p" / "m.py").write_text("x = 1\n")
    monkeypatch.setattr("sandgym.verifiers.swe_repo.sources.bundled_projects_dir", lambda: projects)
    task = SWETask(id="t", problem_statement="p", repo=RepoSource(kind="bundled", name="p"))
    first, digest = start_key(task), bundled_digest("p")
    (projects / "p" / "m.py").write_text("x = 2\n")
    assert start_key(task) != first and bundled_digest("p") != digest
    (projects / "p" / "m.py").write_text("x = 1\n")
    assert start_key(task) == first  # the same files: the same entry
    (projects / "p" / "m.py").chmod(0o755)
    assert start_key(task) != first  # the mode is part of the tree


# -- every outcome encodable ---------------------------------------------------------------------------


def record(**fields) -> EpisodeRecord:
    base = dict(
        run_id="r",
        episode_id="e",
        task_id="t",
        task_version=1,
        task_set="s",
        task_set_hash="h",
        env_id="sandgym/CodeFunction-v0",
        env_version="0",
        runtime={},
        policy={"name": "samples", "model": "m"},
        seed=None,
        outcome="failed",
        reward=0.0,
        started_at="now",
    )
    return EpisodeRecord(**{**base, **fields})


@FUZZ
@given(st.text(st.characters(codec=None, exclude_categories=()), max_size=50), st.sampled_from(["failed", "passed"]))
def test_any_text_keeps_its_verdict_when_stored(text, outcome):
    rec = record(artifact=text, outcome=outcome, reward=1.0 if outcome == "passed" else 0.0, policy={"model": text})
    back = EpisodeRecord.model_validate_json(encode_record(rec))
    assert back.outcome == outcome and back.reward == rec.reward
    assert back.artifact == text.encode("utf-8", "backslashreplace").decode("utf-8")


def test_a_lone_surrogate_in_samples_is_judged_escaped(tmp_path):
    path = tmp_path / "samples.jsonl"
    path.write_text(json.dumps({"task_id": "t", "completion": "    return '\ud800'", "model": "m\udfff"}) + "\n")
    [p] = read_predictions(path, "samples")
    assert p.text == "    return '\\ud800'" and p.model == "m\\udfff"
    p.text.encode("utf-8")


# -- predictions and samples files -------------------------------------------------------------------------


def test_a_predictions_file_that_is_a_fifo_or_a_device_is_refused(tmp_path):
    fifo = tmp_path / "p.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(PredictionsError, match="FIFO"):
        read_predictions(fifo)
    with pytest.raises(PredictionsError, match="character device"):
        read_predictions("/dev/zero")


def test_deeply_nested_predictions_are_one_error(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(PredictionsError, match="nested too deeply|expected"):
        read_predictions(path)


@FUZZ
@given(st.binary(max_size=300), st.sampled_from(["predictions", "samples"]), st.sampled_from([".jsonl", ".json"]))
def test_predictions_reader_takes_any_bytes(tmp_path_factory, data, kind, suffix):
    path = tmp_path_factory.mktemp("p") / f"x{suffix}"
    path.write_bytes(data)
    try:
        for p in read_predictions(path, kind):
            p.text.encode("utf-8")
            p.model.encode("utf-8")
    except PredictionsError as e:
        assert str(e).startswith(str(path)), e


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(st.characters(codec=None), max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(["task_id", "completion", "model_patch", "instance_id", "model_name_or_path", "x"]),
            inner,
            max_size=5,
        )
    ),
    max_leaves=20,
)


@FUZZ
@given(st.lists(JSON_VALUES, max_size=5))
def test_predictions_reader_takes_any_json_lines(tmp_path_factory, rows):
    path = tmp_path_factory.mktemp("p") / "x.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for kind in ("predictions", "samples"):
        try:
            read_predictions(path, kind)
        except PredictionsError as e:
            assert str(e).startswith(str(path)), e


# -- records and run folders --------------------------------------------------------------------------------


def test_a_huge_artifact_keeps_a_digest_and_its_first_bytes():
    import hashlib

    patch = "diff --git a/x b/x\n" + "+" * (55 << 20)
    rec = record(artifact=patch)
    assert rec.artifact is not None and len(rec.artifact.encode()) == MAX_ARTIFACT_BYTES
    assert rec.artifact_bytes == len(patch) and rec.artifact_sha256 == hashlib.sha256(patch.encode()).hexdigest()
    assert len(encode_record(rec)) < MAX_ARTIFACT_BYTES + 10_000
    again = EpisodeRecord.model_validate_json(encode_record(rec))
    assert again.artifact == rec.artifact and again.artifact_sha256 == rec.artifact_sha256


def test_records_linked_outside_the_run_folder_are_refused(tmp_path, host_secret):
    from sandgym.runs import RunError, load_run

    run = tmp_path / "run"
    run.mkdir()
    (run / "trajectories.jsonl").symlink_to(host_secret)
    with pytest.raises(RunError, match="outside") as e:
        load_run(run)
    assert SECRET not in str(e.value)


@FUZZ
@given(st.binary(max_size=400))
def test_run_reader_takes_any_bytes(tmp_path_factory, data):
    from sandgym.runs import RunError, load_run

    run = tmp_path_factory.mktemp("run")
    (run / "trajectories.jsonl").write_bytes(data)
    try:
        load_run(run)
    except RunError as e:
        assert str(run) in str(e), e


# -- terminal output ---------------------------------------------------------------------------------------


NASTY = "\x1b]0;pwned\x07\x1b[2J\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\ [/] [bold]b\u202e\x9b31m\ud800"


def test_shown_strips_controls_and_escapes_markup():
    from rich.console import Console

    console = Console(record=True, force_terminal=False, width=200)
    console.print(shown(NASTY), highlight=False)
    out = console.export_text()
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out and "\x9b" not in out
    assert "[/] [bold]b" in out and "\\ud800" in out


def test_task_list_and_leaderboard_print_hostile_names_as_text(tmp_path):
    from sandgym.specs.base import TaskSetMeta, make_pair
    from sandgym.specs.code_function import CodeHidden, CodeTask

    ts = TaskSet.load(bundled_task_set("code_function"))
    t = ts.tasks[0]
    visible = CodeTask.model_validate({**t.visible.model_dump(), "title": NASTY.replace("\ud800", "")})
    hidden = CodeHidden.model_validate(t.hidden.model_dump())
    root = TaskSet(TaskSetMeta(name="evil [/] \x1b[2J", family="code_function"), [make_pair(visible, hidden)]).write(
        tmp_path / "evil"
    )
    proc = sandgym("tasks", "list", str(root), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout and "[/]" in proc.stdout


# -- size caps and whole writes of import outputs ---------------------------------------------------------


def test_a_set_with_a_task_file_over_the_loaders_limit_is_not_written(tmp_path, monkeypatch):
    import sandgym.specs.base as base
    from sandgym.specs.yaml_text import dump_yaml

    ts = TaskSet.load(bundled_task_set("code_function"))
    size = max(len(dump_yaml(t.hidden.model_dump(mode="json"))) for t in ts.tasks)
    monkeypatch.setattr(base, "MAX_SPEC_BYTES", size // 2)
    before = tree_state(tmp_path)
    with pytest.raises(TaskSpecError, match="over the .* a task file may hold"):
        ts.write(tmp_path / "out")
    assert not (tmp_path / "out").exists() and tree_state(tmp_path) == before
    assert not list(tmp_path.iterdir())  # no temp folder left either


def test_a_written_set_appears_whole(tmp_path):
    ts = TaskSet.load(bundled_task_set("code_function"))
    (tmp_path / "out").mkdir()  # an empty folder is taken
    ts.write(tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert TaskSet.load(tmp_path / "out").hash == ts.hash


@FUZZ
@given(st.binary(max_size=300))
def test_task_set_jsonl_reader_takes_any_bytes(tmp_path_factory, data):
    from sandgym.specs.portable import read_jsonl

    path = tmp_path_factory.mktemp("j") / "set.jsonl"
    path.write_bytes(data)
    try:
        read_jsonl(path)
    except TaskSpecError as e:
        assert str(e).startswith(str(path)), e


def test_task_set_jsonl_round_trips_gzipped_and_refuses_a_fifo(tmp_path):
    import gzip

    from sandgym.specs.portable import read_jsonl, write_jsonl

    ts = TaskSet.load(bundled_task_set("code_function"))
    plain = write_jsonl(ts, tmp_path / "set.jsonl")
    (tmp_path / "set.jsonl.gz").write_bytes(gzip.compress(plain.read_bytes()))
    assert read_jsonl(tmp_path / "set.jsonl.gz").hash == ts.hash
    os.mkfifo(tmp_path / "fifo.jsonl")
    with pytest.raises(TaskSpecError, match="FIFO"):
        read_jsonl(tmp_path / "fifo.jsonl")
