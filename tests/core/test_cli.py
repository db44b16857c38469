"""The `sandgym` command line: eval, tasks import/list/validate/schema."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from sandgym.cli import app
from sandgym.outcomes import OUTCOME_NAMES
from sandgym.records import EpisodeRecord, Summary
from sandgym.specs import TaskSet
from sandgym.specs.code_function import CodeTaskPair
from sandgym.specs.swe_repo import SWETaskPair

runner = CliRunner()

TASKS: dict[str, tuple[dict, dict]] = {
    "add": (
        {"id": "add", "prompt": "Return a + b.", "entry_point": "add", "examples": [{"args": [1, 2], "expected": 3}]},
        {
            "id": "add",
            "tests": [{"args": [2, 3], "expected": 5}, {"args": [-1, 1], "expected": 0}],
            "reference_solution": "def add(a, b):\n    return a + b\n",
        },
    ),
    "rev": (
        {
            "id": "rev",
            "prompt": "Return the string reversed.",
            "entry_point": "rev",
            "examples": [{"args": ["abc"], "expected": "cba"}],
        },
        {
            "id": "rev",
            "tests": [{"args": ["hello"], "expected": "olleh"}, {"args": ["ab"], "expected": "ba"}],
            "reference_solution": "def rev(s):\n    return s[::-1]\n",
        },
    ),
    "even": (
        {
            "id": "even",
            "prompt": "Return whether n is even.",
            "entry_point": "is_even",
            "examples": [{"args": [2], "expected": True}],
        },
        {
            "id": "even",
            "check_code": "def check(candidate):\n    assert candidate(4) is True\n    assert candidate(7) is False\n",
            "reference_solution": "def is_even(n):\n    return n % 2 == 0\n",
        },
    ),
}
IDS = sorted(TASKS)


def squash(text: str) -> str:
    """Text without whitespace: rich wraps long lines (paths) at the console width."""
    return "".join(text.split())


def says(result, *needles: str) -> bool:
    out = squash(result.output)
    return all(squash(n) in out for n in needles)


def fence(code: str) -> str:
    return f"```python\n{code}```"


@pytest.fixture(scope="module")
def task_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("clitasks") / "ts"
    (root / "tasks").mkdir(parents=True)
    (root / "hidden").mkdir()
    (root / "taskset.yaml").write_text(yaml.safe_dump({"name": "cli-mini", "family": "code_function"}))
    for slug, (vis, hid) in TASKS.items():
        (root / "tasks" / f"{slug}.yaml").write_text(yaml.safe_dump(vis))
        (root / "hidden" / f"{slug}.yaml").write_text(yaml.safe_dump(hid))
    return root


def run_eval(task_dir: Path, out: Path, *extra: str):
    return runner.invoke(app, ["eval", "--tasks", str(task_dir), "--out", str(out), *extra])


def read_records(out: Path) -> list[EpisodeRecord]:
    lines = (out / "trajectories.jsonl").read_text().splitlines()
    records = []
    for line in lines:
        raw = json.loads(line)
        assert set(raw) == set(EpisodeRecord.model_fields)
        records.append(EpisodeRecord.model_validate(raw))
    return records


def read_summary(out: Path) -> dict:
    data = json.loads((out / "summary.json").read_text())
    Summary.model_validate(data)
    assert list(data["outcomes"]) == list(OUTCOME_NAMES)
    return data


# -- eval ----------------------------------------------------------------------------------


def test_eval_oracle_all_pass(task_dir, tmp_path):
    out = tmp_path / "run"
    result = run_eval(task_dir, out, "--policy", "oracle", "-j", "2")
    assert result.exit_code == 0, result.output
    records = read_records(out)
    assert sorted(r.task_id for r in records) == IDS
    ts_hash = TaskSet.load(task_dir).hash
    for r in records:
        assert r.outcome == "passed" and r.reward == 1.0 and r.pass_rate == 1.0
        assert r.task_set_hash == ts_hash and r.task_set == "cli-mini"
        assert r.env_id == "sandgym/CodeFunction-v0" and r.env_version == "0"
        assert r.policy == {"name": "oracle"}
        assert r.runtime["backend"] == "local" and r.runtime["isolation"]
        assert r.seed == 0 and r.error is None
        assert len(r.steps) == 1 and r.steps[0].tool == "submit" and r.steps[0].reward == 1.0
        assert r.artifact == TASKS[r.task_id][1]["reference_solution"]
        assert r.verifier_version and r.attempts and r.attempts[0]["outcome"] == "passed"
        assert r.tests and all(t["status"] == "passed" for t in r.tests)
        assert r.timings.total_s > 0 and r.timings.verify_s > 0
    assert len({r.episode_id for r in records}) == 3 and len({r.run_id for r in records}) == 1
    summary = read_summary(out)
    assert summary["task_set_hash"] == ts_hash
    assert summary["n_episodes"] == 3 and summary["n_scored"] == 3
    assert summary["outcomes"] == {name: (3 if name == "passed" else 0) for name in OUTCOME_NAMES}
    assert summary["reward_mean"] == 1.0
    assert summary["run_id"] == records[0].run_id
    assert says(result, "passed", "reward mean 1.000")


def test_eval_null_all_fail(task_dir, tmp_path):
    out = tmp_path / "run"
    result = run_eval(task_dir, out, "--policy", "null", "--mode", "multi")
    assert result.exit_code == 0, result.output
    records = read_records(out)
    assert len(records) == 3
    for r in records:
        assert r.outcome == "failed" and r.reward == 0.0
        assert r.env_kwargs["mode"] == "multi"
    summary = read_summary(out)
    assert summary["outcomes"] == {name: (3 if name == "failed" else 0) for name in OUTCOME_NAMES}
    assert summary["reward_mean"] == 0.0


def test_eval_reads_the_task_set_once(task_dir, tmp_path, monkeypatch):
    """Without --env, `eval` finds the env from taskset.yaml alone and loads
    the tasks once (hundreds of files for HumanEval: its fixed cost)."""
    loads: list[str] = []
    load = TaskSet.load.__func__  # type: ignore[attr-defined]

    def counted(cls, folder):
        loads.append(str(folder))
        return load(cls, folder)

    monkeypatch.setattr(TaskSet, "load", classmethod(counted))
    monkeypatch.setenv("SANDGYM_WARM_UP", "0")
    result = run_eval(task_dir, tmp_path / "run", "--policy", "null", "--limit", "1")
    assert result.exit_code == 0, result.output
    assert loads == [str(task_dir)]
    assert read_records(tmp_path / "run")[0].env_id == "sandgym/CodeFunction-v0"


def test_eval_task_id_filter(task_dir, tmp_path):
    out = tmp_path / "run"
    result = run_eval(task_dir, out, "--policy", "oracle", "--task-id", "rev")
    assert result.exit_code == 0, result.output
    assert [r.task_id for r in read_records(out)] == ["rev"]
    assert read_summary(out)["n_episodes"] == 1


def test_eval_replay_in_order(task_dir, tmp_path):
    replay = tmp_path / "replay.jsonl"
    add_actions = [fence("def add(a, b):\n    return a - b\n"), fence("def add(a, b):\n    return a + b\n"), "SUBMIT"]
    rev_actions = ["SUBMIT\n" + fence("def rev(s):\n    return s\n")]
    replay.write_text(
        json.dumps({"task_id": "add", "actions": add_actions})
        + "\n\n"
        + json.dumps({"task_id": "rev", "actions": rev_actions})
        + "\n"
    )
    out = tmp_path / "run"
    result = run_eval(
        task_dir, out, "--policy", f"replay:{replay}", "--mode", "multi", "--max-turns", "5", "--reward", "pass_rate"
    )
    assert result.exit_code == 0, result.output
    by_id = {r.task_id: r for r in read_records(out)}
    assert set(by_id) == set(IDS)

    add = by_id["add"]
    assert [s.action for s in add.steps] == add_actions
    assert [s.tool for s in add.steps] == ["run", "run", "submit"]
    assert "FAILED: add(1, 2)" in add.steps[0].observation
    assert "PASSED: add(1, 2)" in add.steps[1].observation
    assert add.outcome == "passed" and add.reward == 1.0
    assert add.policy == {"name": "replay", "file": str(replay)}

    rev = by_id["rev"]
    assert [s.action for s in rev.steps] == rev_actions
    assert rev.outcome == "failed" and rev.reward == 0.0  # 'ab'[::1] != 'ba', 'hello' != 'olleh'

    even = by_id["even"]
    assert even.outcome == "not_executed" and even.reward is None and even.steps == []
    assert even.error

    summary = read_summary(out)
    assert summary["outcomes"]["not_executed"] == 1 and summary["outcomes"]["passed"] == 1
    assert summary["outcomes"]["failed"] == 1
    assert summary["n_episodes"] == 3 and summary["n_scored"] == 2
    assert summary["reward_mean"] == pytest.approx(0.5)


def test_eval_replay_with_an_unknown_task_is_refused_naming_the_line(task_dir, tmp_path):
    replay = tmp_path / "replay.jsonl"
    replay.write_text("\n" + json.dumps({"task_id": "other", "actions": ["x"]}) + "\n")
    out = tmp_path / "run"
    result = run_eval(task_dir, out, "--policy", f"replay:{replay}")
    assert result.exit_code == 2
    assert says(result, "line 2", "'other'", "not in task set")
    assert not (out / "trajectories.jsonl").exists()


def test_eval_replay_with_no_line_for_any_task_scores_nothing(task_dir, tmp_path):
    replay = tmp_path / "replay.jsonl"
    replay.write_text("\n")
    out = tmp_path / "run"
    result = run_eval(task_dir, out, "--policy", f"replay:{replay}")
    assert result.exit_code == 0, result.output
    assert all(r.outcome == "not_executed" and r.reward is None for r in read_records(out))
    summary = read_summary(out)
    assert summary["outcomes"]["not_executed"] == 3
    assert summary["reward_mean"] is None and summary["n_scored"] == 0
    assert says(result, "reward mean n/a")


def test_eval_replay_that_stops_before_submitting(task_dir, tmp_path):
    replay = tmp_path / "replay.jsonl"
    replay.write_text(json.dumps({"task_id": "add", "actions": [fence("def add(a, b):\n    return 0\n")]}) + "\n")
    out = tmp_path / "run"
    result = run_eval(task_dir, out, "--policy", f"replay:{replay}", "--mode", "multi", "--task-id", "add")
    assert result.exit_code == 0, result.output
    (rec,) = read_records(out)
    assert rec.outcome == "not_executed" and rec.reward is None and len(rec.steps) == 1


# -- eval: bad input ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args,needles",
    [
        (["--env", "sandgym/Nope-v0"], ["unknown env id", "sandgym/Nope-v0", "sandgym/CodeFunction-v0"]),
        (["--policy", "gpt"], ["unknown policy", "'gpt'", "oracle", "null", "replay:FILE"]),
        (["--runtime", "nope"], ["unknown runtime", "'nope'", "local"]),
        (["--runtime", "kubernetes"], ["unknown runtime", "'kubernetes'", "k8s:gvisor"]),
        (["--task-id", "nope"], ["unknown task id", "'nope'", "add", "even", "rev"]),
        (["--task-id", "add", "--task-id", "nope"], ["'nope'", "choices"]),
    ],
)
def test_eval_bad_choices(task_dir, tmp_path, args, needles):
    out = tmp_path / "run"
    result = run_eval(task_dir, out, *args)
    assert result.exit_code != 0
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert says(result, "error:", *needles), result.output
    assert not (out / "trajectories.jsonl").exists()


def test_eval_bad_task_set(tmp_path):
    result = run_eval(tmp_path / "missing", tmp_path / "run")
    assert result.exit_code != 0 and says(result, "not a task-set folder")


@pytest.mark.parametrize("option,value", [("--mode", "both"), ("--reward", "dense")])
def test_eval_bad_env_option_fails_up_front(task_dir, tmp_path, option, value):
    out = tmp_path / "run"
    result = run_eval(task_dir, out, option, value, "--task-id", "add")
    assert result.exit_code != 0
    assert says(result, option.lstrip("-"), repr(value))
    assert not (out / "trajectories.jsonl").exists()


@pytest.mark.parametrize(
    "content,line,needles",
    [
        ('{"task_id": "add", "actions": ["x"]}\nnot json\n', 2, ["not JSON"]),
        ('\n\n{"task_id": "add", "actions": "x"}\n', 3, ["`actions`"]),
        ('["add"]\n', 1, ["task_id"]),
        ('{"task_id": "add", "actions": []}\n{"task_id": "add", "actions": []}\n', 2, ["twice"]),
    ],
)
def test_eval_malformed_replay_names_file_and_line(task_dir, tmp_path, content, line, needles):
    replay = tmp_path / "replay.jsonl"
    replay.write_text(content)
    result = run_eval(task_dir, tmp_path / "run", "--policy", f"replay:{replay}")
    assert result.exit_code != 0
    assert says(result, str(replay), f"line {line}", *needles), result.output


def test_eval_missing_replay_file(task_dir, tmp_path):
    result = run_eval(task_dir, tmp_path / "run", "--policy", f"replay:{tmp_path / 'none.jsonl'}")
    assert result.exit_code != 0 and says(result, "none.jsonl", "cannot read")


def test_eval_refuses_to_overwrite_records(task_dir, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    old = '{"old": "record"}\n'
    (out / "trajectories.jsonl").write_text(old)
    (out / "summary.json").write_text('{"old": true}\n')
    result = run_eval(task_dir, out, "--policy", "oracle")
    assert result.exit_code != 0
    assert says(result, "trajectories.jsonl", "already")
    assert (out / "trajectories.jsonl").read_text() == old
    assert (out / "summary.json").read_text() == '{"old": true}\n'


def test_eval_into_folder_with_empty_records_file(task_dir, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "trajectories.jsonl").write_text("")
    result = run_eval(task_dir, out, "--policy", "null", "--task-id", "add")
    assert result.exit_code == 0, result.output
    assert len(read_records(out)) == 1


def test_eval_end_to_end_subprocess(task_dir, tmp_path):
    exe = Path(sys.executable).parent / "sandgym"
    out = tmp_path / "run"
    proc = subprocess.run(
        [str(exe), "eval", "--tasks", str(task_dir), "--policy", "oracle", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        check=False,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "passed" in proc.stdout
    summary = read_summary(out)
    assert summary["outcomes"]["passed"] == 3 and summary["n_episodes"] == 3
    assert len(read_records(out)) == 3


# -- tasks import humaneval -----------------------------------------------------------------------

HUMANEVAL = [
    {
        "task_id": "HumanEval/0",
        "prompt": "from typing import List\n\n\ndef double_all(xs: List[int]) -> List[int]:\n"
        '    """Return every element doubled."""\n',
        "entry_point": "double_all",
        "canonical_solution": "    return [2 * x for x in xs]\n",
        "test": "\n\nMETADATA = {}\n\n\ndef check(candidate):\n    assert candidate([1, 2]) == [2, 4]\n"
        "    assert candidate([]) == []\n",
    },
    {
        "task_id": "HumanEval/1",
        "prompt": 'def shout(s: str) -> str:\n    """Upper-case s and add "!"."""\n',
        "entry_point": "shout",
        "canonical_solution": "    return s.upper() + '!'\n",
        "test": "def check(candidate):\n    assert candidate('hi') == 'HI!'\n    assert candidate('') == '!'\n",
    },
]


def write_jsonl(path: Path, rows, blank_first: bool = False) -> Path:
    path.write_text(("\n" if blank_first else "") + "".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_import_humaneval_then_validate_and_list(tmp_path):
    src = write_jsonl(tmp_path / "he.jsonl", HUMANEVAL)
    out = tmp_path / "he"
    result = runner.invoke(app, ["tasks", "import", "humaneval", str(src), "--out", str(out), "--name", "he-mini"])
    assert result.exit_code == 0, result.output
    assert says(result, "imported 2 tasks")
    ts = TaskSet.load(out)
    assert ts.ids == ["HumanEval/0", "HumanEval/1"] and ts.meta.name == "he-mini"
    check_code = CodeTaskPair.of(ts.get("HumanEval/1")).hidden.check_code
    assert check_code is not None and check_code.startswith("def check")
    assert CodeTaskPair.of(ts.get("HumanEval/0")).visible.entry_point == "double_all"

    result = runner.invoke(app, ["tasks", "validate", str(out)])
    assert result.exit_code == 0, result.output
    assert says(result, "2 tasks, 0 problems", ts.hash)

    result = runner.invoke(app, ["tasks", "list", str(out)])
    assert result.exit_code == 0, result.output
    assert says(result, "HumanEval/0", "HumanEval/1", "double_all", "shout")


def test_import_humaneval_gz(tmp_path):
    import gzip

    src = tmp_path / "he.jsonl.gz"
    with gzip.open(src, "wt") as f:
        f.write("".join(json.dumps(r) + "\n" for r in HUMANEVAL))
    result = runner.invoke(app, ["tasks", "import", "humaneval", str(src), "--out", str(tmp_path / "he")])
    assert result.exit_code == 0, result.output
    assert len(TaskSet.load(tmp_path / "he")) == 2


@pytest.mark.parametrize("field", ["entry_point", "test", "task_id"])
def test_import_humaneval_missing_field_names_line_and_field(tmp_path, field):
    bad = dict(HUMANEVAL[1])
    del bad[field]
    src = write_jsonl(tmp_path / "he.jsonl", [HUMANEVAL[0], bad])
    out = tmp_path / "he"
    result = runner.invoke(app, ["tasks", "import", "humaneval", str(src), "--out", str(out)])
    assert result.exit_code != 0
    assert says(result, f"{src}:2", f"`{field}`"), result.output
    assert not (out / "taskset.yaml").exists()  # nothing half-written


def test_import_humaneval_bad_json_line(tmp_path):
    src = tmp_path / "he.jsonl"
    src.write_text(json.dumps(HUMANEVAL[0]) + "\n{oops\n")
    result = runner.invoke(app, ["tasks", "import", "humaneval", str(src), "--out", str(tmp_path / "he")])
    assert result.exit_code != 0 and says(result, f"{src}:2")


def test_import_humaneval_missing_file(tmp_path):
    result = runner.invoke(
        app, ["tasks", "import", "humaneval", str(tmp_path / "no.jsonl"), "--out", str(tmp_path / "he")]
    )
    assert result.exit_code != 0 and says(result, "no such file")


def test_import_humaneval_line_number_counts_blank_lines(tmp_path):
    bad = dict(HUMANEVAL[1])
    del bad["entry_point"]
    src = write_jsonl(tmp_path / "he.jsonl", [HUMANEVAL[0], bad], blank_first=True)
    result = runner.invoke(app, ["tasks", "import", "humaneval", str(src), "--out", str(tmp_path / "he")])
    assert result.exit_code != 0
    assert says(result, f"{src}:3", "`entry_point`"), result.output


def test_import_humaneval_invalid_field_names_line_and_field(tmp_path):
    bad = dict(HUMANEVAL[1], entry_point="not valid")
    src = write_jsonl(tmp_path / "he.jsonl", [HUMANEVAL[0], bad])
    result = runner.invoke(app, ["tasks", "import", "humaneval", str(src), "--out", str(tmp_path / "he")])
    assert result.exit_code == 2, result.exception
    assert says(result, f"{src}:2", "entry_point"), result.output


# -- tasks validate / schema / list ---------------------------------------------------------------


def test_validate_reports_a_broken_reference(task_dir, tmp_path):
    import shutil

    root = tmp_path / "ts"
    shutil.copytree(task_dir, root)
    hid = yaml.safe_load((root / "hidden" / "rev.yaml").read_text())
    hid["reference_solution"] = "def rev(s):\n    return s\n"
    (root / "hidden" / "rev.yaml").write_text(yaml.safe_dump(hid))
    result = runner.invoke(app, ["tasks", "validate", str(root)])
    assert result.exit_code == 1
    assert says(result, "rev", "reference solution failed", "3 tasks, 1 problems")


def test_validate_reports_malformed_spec(task_dir, tmp_path):
    import shutil

    root = tmp_path / "ts"
    shutil.copytree(task_dir, root)
    (root / "tasks" / "add.yaml").write_text("id: add\nprompt: x\n")
    result = runner.invoke(app, ["tasks", "validate", str(root)])
    assert result.exit_code == 2
    assert says(result, str(root / "tasks" / "add.yaml"), "`entry_point`")


FILE_KINDS = ["taskset"] + [
    f"{family}.{half}" for family in ("code_function", "swe_repo", "browser_form") for half in ("task", "hidden")
]


def test_schema_out_writes_one_file_per_kind(tmp_path):
    out = tmp_path / "schemas"
    result = runner.invoke(app, ["tasks", "schema", "--out", str(out)])
    assert result.exit_code == 0, result.output
    files = sorted(p.name for p in out.iterdir())
    assert files == sorted(f"{kind}.schema.json" for kind in FILE_KINDS)
    for p in out.iterdir():
        schema = json.loads(p.read_text())
        assert schema["type"] == "object" and schema["properties"]


def test_schema_prints_json():
    result = runner.invoke(app, ["tasks", "schema"])
    assert result.exit_code == 0
    assert set(json.loads(result.stdout)) == set(FILE_KINDS)


def test_tasks_list_prints_ids(task_dir):
    result = runner.invoke(app, ["tasks", "list", str(task_dir)])
    assert result.exit_code == 0, result.output
    assert says(result, "cli-mini", "3 tasks", *IDS, "is_even", "check()")


def test_version_is_answered_without_importing_sandgym():
    """The console script (sandgym_launcher) prints the version with no
    import of the sandgym package, gymnasium or typer; its constant agrees
    with the package's and the distribution's."""
    import importlib.metadata

    import sandgym
    import sandgym_launcher

    assert sandgym_launcher.VERSION == sandgym.__version__ == importlib.metadata.version("sandgym")
    code = (
        "import sys, sandgym_launcher; sys.argv = ['sandgym', '--version']; sandgym_launcher.main(); "
        "print(sorted(m for m in sys.modules if m.partition('.')[0] in ('sandgym', 'gymnasium', 'typer', 'numpy')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == [f"sandgym {sandgym.__version__}", "[]"]
    result = runner.invoke(app, ["--version"])  # the CLI itself answers it the same way
    assert result.exit_code == 0 and result.output == f"sandgym {sandgym.__version__}\n"


def test_the_console_script_freezes_what_is_left_when_the_command_ends():
    """sandgym_launcher.main leaves the objects still alive to the OS (gc.freeze:
    no collection walks them at exit), also when the command fails."""
    code = (
        "import gc, sys, sandgym_launcher\n"
        "sys.argv = ['sandgym', 'tasks', 'list', 'no-such-set']\n"
        "assert gc.get_freeze_count() == 0\n"
        "try:\n"
        "    sandgym_launcher.main()\n"
        "except SystemExit as e:\n"
        "    print(e.code, gc.get_freeze_count() > 0)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["2", "True"], out.stderr
    assert "no-such-set" in out.stderr


def test_the_console_script_collects_no_garbage_while_the_cli_is_imported():
    """The collector is off while sandgym.cli is imported (its objects live as
    long as the process), and on again, with them frozen, for the command."""
    code = (
        "import gc, sys, sandgym_launcher\n"
        "seen = []\n"
        "def during(phase, info):\n"
        "    cli = sys.modules.get('sandgym.cli')\n"
        "    if phase == 'start':\n"
        "        seen.append('import' if getattr(cli, 'app', None) is None else 'command')\n"
        "gc.callbacks.append(during)\n"
        "gc.collect()\n"
        "sys.argv = ['sandgym', 'tasks', 'list', 'no-such-set']\n"
        "try:\n"
        "    sandgym_launcher.main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "gc.collect()\n"
        "print(seen.count('import'), seen.count('command') > 0, gc.isenabled())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # One collection, asked for before main(): none while the CLI was imported.
    assert out.stdout.split()[-3:] == ["1", "True", "True"], out.stderr


@pytest.mark.parametrize("given", [None, "2"])
def test_the_console_script_starts_numpy_with_one_blas_thread_unless_told(given):
    """OpenBLAS (loaded with numpy) starts no spinning threads of its own
    under the console script, and the variable that asks for that is gone
    again for the command and its child processes; a value the user set is
    kept and obeyed. pydantic's plugin scan is off unless the user's
    environment says otherwise."""
    code = (
        "import os, sys, sandgym_launcher\n"
        "sys.argv = ['sandgym', 'tasks', 'list', 'no-such-set']\n"
        "try:\n"
        "    sandgym_launcher.main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(len(os.listdir('/proc/self/task')), 'numpy' in sys.modules, "
        "os.environ.get('OPENBLAS_NUM_THREADS'), os.environ.get('PYDANTIC_DISABLE_PLUGINS'))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "PYDANTIC_DISABLE_PLUGINS")}
    if given is not None:
        env["OPENBLAS_NUM_THREADS"] = given
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    threads, numpy_loaded, blas, plugins = out.stdout.split()
    assert numpy_loaded == "True" and blas == str(given) and plugins == "__all__", out.stderr
    # OpenBLAS starts at most a thread per core, the caller's included.
    assert int(threads) == (1 if given is None else min(int(given), os.cpu_count() or 1))


def own_zygotes() -> set[bytes]:
    """The marks of this process's local zygotes that are running (bubblewrap's environment carries it)."""
    from sandgym.runtimes.host_processes import environs
    from sandgym.runtimes.local.runtime import OWNER_ENV

    mine = f"{OWNER_ENV}={os.getpid()}-".encode()
    marks = set()
    for pid, env in environs():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                zygote = b'"role": "zygote"' in f.read()
        except OSError:
            continue
        marks |= {e for e in env if e.startswith(mine) and zygote}
    return marks


@pytest.mark.sandbox
def test_eval_closes_the_zygote_it_started_ahead_on_every_way_out(task_dir, tmp_path, monkeypatch):
    """`eval` starts the local zygote on a thread as soon as the runtime is
    chosen (SANDGYM_WARM_UP); a run refused afterwards, and a run that
    plays, leave none of it running in the calling process."""
    monkeypatch.setenv("SANDGYM_WARM_UP", "1")
    before = own_zygotes()
    result = run_eval(task_dir, tmp_path / "a", "--mode", "both")  # refused once the env is made
    assert result.exit_code != 0 and says(result, "mode", "'both'")
    held = tmp_path / "b"
    held.mkdir()
    (held / "trajectories.jsonl").write_text('{"old": "record"}\n')
    result = run_eval(task_dir, held)  # refused by the run folder, after the first episode was queued
    assert result.exit_code != 0 and says(result, "already")
    result = run_eval(tmp_path / "nope", tmp_path / "d")  # no such task set
    assert result.exit_code != 0 and says(result, "not a task-set folder")
    result = run_eval(task_dir, tmp_path / "c", "--task-id", "add")
    assert result.exit_code == 0, result.output
    assert read_summary(tmp_path / "c")["outcomes"]["passed"] == 1
    assert own_zygotes() == before


def test_help_lists_commands():
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    assert says(result, "eval", "tasks")
    result = runner.invoke(app, ["tasks", "--help"])
    assert says(result, "import", "list", "validate", "schema", "make-swe")  # make-swe: the swe_repo family's
    result = runner.invoke(app, ["tasks", "import", "--help"])
    assert result.exit_code == 0 and says(result, "jsonl", "humaneval", "swebench")


def test_example_script_runs():
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "examples" / "code_function_episode.py"
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("| passed") == 2


def test_report_and_leaderboard_commands(tmp_path):
    """eval two policies on the bundled set's first tasks, then report and rank them."""
    from sandgym.specs import TaskSet, bundled_task_set

    ids = TaskSet.load(bundled_task_set("code_function")).ids[:3]
    picks = [arg for tid in ids for arg in ("--task-id", tid)]
    for policy in ("oracle", "null"):
        res = runner.invoke(app, ["eval", "--policy", policy, "--out", str(tmp_path / policy), *picks])
        assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["report", str(tmp_path / "oracle")])
    assert res.exit_code == 0, res.output
    html = (tmp_path / "oracle" / "report.html").read_text()
    assert "passed 3 of 3 scored" in html
    res = runner.invoke(app, ["leaderboard", str(tmp_path / "null"), str(tmp_path / "oracle"), "--json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)["rows"]
    assert [r["policy"] for r in rows] == ["oracle", "null"]
    assert rows[0]["mean_reward"] == 1.0 and rows[1]["mean_reward"] == 0.0
    res = runner.invoke(app, ["leaderboard", str(tmp_path / "oracle"), str(tmp_path / "nope")])
    assert res.exit_code == 2 and "nope" in res.output
    res = runner.invoke(app, ["report", str(tmp_path / "nope")])
    assert res.exit_code == 2


@pytest.mark.parametrize(
    "family,set_name,column",
    [
        ("swe_repo", "billing-v1", "FAIL_TO_PASS"),
        ("swe_repo", "pypi-v1", "PASS_TO_PASS"),
        ("browser_form", "basic-v1", "oracle steps"),
    ],
)
def test_list_shows_each_familys_columns(family, set_name, column):
    from sandgym.specs import bundled_dir

    result = runner.invoke(app, ["tasks", "list", str(bundled_dir() / family / set_name)])
    assert result.exit_code == 0, result.output
    assert family in result.stdout and column in result.stdout


def test_validate_plays_oracle_and_null_episodes_for_other_families(tmp_path):
    import shutil

    from sandgym.specs import bundled_dir

    result = runner.invoke(app, ["tasks", "validate", str(bundled_dir() / "swe_repo" / "billing-v1")])
    assert result.exit_code == 0, result.output
    assert "5 tasks, 0 problems" in result.stdout
    # A gold patch that no longer fixes the bug is reported, by task.
    root = tmp_path / "broken"
    shutil.copytree(bundled_dir() / "swe_repo" / "billing-v1", root)
    hidden = sorted((root / "hidden").iterdir())[0]
    data = yaml.safe_load(hidden.read_text())
    task = SWETaskPair.of(TaskSet.load(root).get(data["id"]))
    data["patch"] = task.visible.base_patch  # re-injects the bug: not a fix
    hidden.write_text(yaml.safe_dump(data))
    result = runner.invoke(app, ["tasks", "validate", str(root), "--task-id", data["id"], "--concurrency", "1"])
    assert result.exit_code == 1
    assert data["id"] in result.stdout and "oracle policy scored" in result.stdout


def test_env_options_reach_the_env_and_bad_ones_are_named(tmp_path):
    result = runner.invoke(
        app,
        [
            "eval",
            "--env",
            "sandgym/SWERepo-v0",
            "--policy",
            "null",
            "-o",
            "max_steps=3",
            "-o",
            "warm_pool=0",
            "--task-id",
            "billing/bulk-threshold",
            "--out",
            str(tmp_path / "a"),
        ],
    )
    assert result.exit_code == 0, result.output
    rec = json.loads((tmp_path / "a" / "trajectories.jsonl").read_text().splitlines()[0])
    assert rec["env_kwargs"]["max_steps"] == 3 and rec["env_kwargs"]["warm_pool"] == 0 and rec["status"] == "NO"
    for args, named in ((["-o", "bogus=1"], "bogus"), (["-o", "novalue"], "KEY=VALUE"), (["--mode", "multi"], "mode")):
        result = runner.invoke(app, ["eval", "--env", "sandgym/SWERepo-v0", *args, "--out", str(tmp_path / "b")])
        assert result.exit_code == 2 and named in result.output, result.output
