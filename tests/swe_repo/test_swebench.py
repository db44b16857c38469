"""SWE-bench format both ways, and SWE-bench predictions, on a real repository.

The repository is made here from the inflection 0.5.1 sdist that
task_specs/swe_repo/pypi-v1 uses (cached by the SWE family): a git history
with five bugs, each introduced in one commit and fixed (with a new test)
in the next, as upstream history looks to SWE-bench. Each fix is one
SWE-bench instance: base_commit is the commit with the bug, `patch` and
`test_patch` the fix's source and test halves, and HEAD (the future) is
the last fix. Everything runs for real: git, the cache mirror, the test
venv, the verifier in bubblewrap sandboxes.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from sandgym.cli import app
from sandgym.envs.swe_repo.swebench import export_swebench, import_swebench, verify_prediction
from sandgym.envs.swe_repo.swebench_report import swebench_report
from sandgym.errors import SandgymError
from sandgym.leaderboard import rank
from sandgym.records import EpisodeRecord
from sandgym.specs import TaskSet, TaskSetMeta
from sandgym.specs.swe_repo import SWETaskPair
from sandgym.verifiers.swe_repo.checkout import start_state
from sandgym.verifiers.swe_repo.sources import pristine_tree
from tests.helpers import swe_tasks

runner = CliRunner()

# swebench 5.0.2, swebench/types.py: the fields of SWEbenchInstance (every one a
# str; FAIL_TO_PASS / PASS_TO_PASS hold JSON-encoded lists). swebench itself is
# not installed here: it pulls in datasets, modal, docker and more; its loader
# for a local file is `json.loads` per line (.jsonl) or of the file (.json)
# (swebench.harness.utils.load_swebench_dataset), and its test spec decodes the
# lists with `json.loads(f2p) if isinstance(f2p, str) else f2p`.
SWEBENCH_INSTANCE_FIELDS = {
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
}
# swebench.harness.reporting.make_run_report: the counts and id lists of its report.
REPORT_COUNTS = (
    "total_instances",
    "submitted_instances",
    "completed_instances",
    "resolved_instances",
    "unresolved_instances",
    "empty_patch_instances",
    "error_instances",
)
REPORT_IDS = (
    "submitted_ids",
    "completed_ids",
    "incomplete_ids",
    "resolved_ids",
    "unresolved_ids",
    "empty_patch_ids",
    "error_ids",
)

MODULE = "inflection/__init__.py"
TESTS = "test_inflection.py"
P2P = [
    "test_inflection.py::test_pluralize_plurals",
    "test_inflection.py::test_camelize_with_lower_downcases_the_first_letter",
    "test_inflection.py::test_camelize_with_underscores",
]
# (name, the correct line, the buggy line, a new test that fails on the bug)
BUGS = [
    (
        "dasherize",
        "    return word.replace('_', '-')\n",
        "    return word.replace('_', '-', 1)\n",
        'assert inflection.dasherize("puni_puni_puni") == "puni-puni-puni"',
    ),
    (
        "ordinal",
        "    if number % 100 in (11, 12, 13):\n",
        "    if number % 100 in (11, 12):\n",
        'assert inflection.ordinal(113) == "th"',
    ),
    (
        "ordinalize",
        '    return "{}{}".format(number, ordinal(number))\n',
        '    return "{}{}".format(abs(number), ordinal(number))\n',
        'assert inflection.ordinalize(-3) == "-3rd"',
    ),
    (
        "transliterate",
        "    return normalized.encode('ascii', 'ignore').decode('ascii')\n",
        "    return normalized.encode('ascii', 'replace').decode('ascii')\n",
        'assert inflection.transliterate("Ærø") == "r"',
    ),
    (
        "underscore",
        '    word = word.replace("-", "_")\n',
        '    word = word.replace("-", "-")\n',
        'assert inflection.underscore("a-b") == "a_b"',
    ),
]
REPO = "jpvanhal/inflection"


def instance_id(i: int) -> str:
    return f"jpvanhal__inflection-{i + 1}"


def git(repo: Path, *args: str) -> str:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(repo.parent),
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "Dev",
        "GIT_AUTHOR_EMAIL": "dev@example.com",
        "GIT_COMMITTER_NAME": "Dev",
        "GIT_COMMITTER_EMAIL": "dev@example.com",
        # Fixed dates: the same commits (and cache entries) on every run.
        "GIT_AUTHOR_DATE": "2020-08-22T12:00:00+0000",
        "GIT_COMMITTER_DATE": "2020-08-22T12:00:00+0000",
    }
    r = subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout


def inflection_source():
    return SWETaskPair.of(TaskSet.load("swe_repo/pypi-v1").get("inflection-0.5.1/mut-0000")).visible.repo


def build_history(root: Path) -> tuple[Path, list[dict]]:
    """The clone (root/repos/jpvanhal__inflection) and one SWE-bench row per bug."""
    repo = pristine_tree(inflection_source(), root / "repos" / "jpvanhal__inflection")
    subprocess.run(["rm", "-rf", str(repo / "PKG-INFO"), str(repo / "inflection.egg-info")], check=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "Import inflection 0.5.1")
    rows = []
    for i, (name, good, bad, check) in enumerate(BUGS):
        module = repo / MODULE
        text = module.read_text()
        assert text.count(good) == 1, name
        module.write_text(text.replace(good, bad))
        git(repo, "commit", "-q", "-am", f"{name}: simplify")
        base = git(repo, "rev-parse", "HEAD").strip()
        module.write_text(text)
        test_name = f"test_{name}_regression"
        (repo / TESTS).write_text((repo / TESTS).read_text() + f"\n\ndef {test_name}():\n    {check}\n")
        patch = git(repo, "diff", "--", "inflection")
        test_patch = git(repo, "diff", "--", TESTS)
        git(repo, "commit", "-q", "-am", f"{name}: fix the regression (#{i + 1})")
        # Everything a clone may hold beyond the base commit: a tag, a branch,
        # a remote-tracking ref, a stash (the fix again), a reflog.
        git(repo, "tag", f"fixed-{name}")
        git(repo, "branch", f"future-{name}")
        git(repo, "update-ref", f"refs/remotes/origin/fix-{name}", "HEAD")
        (repo / TESTS).write_text((repo / TESTS).read_text() + f"\n# stashed work on {name}\n")
        git(repo, "stash", "-q")
        rows.append(
            {
                "repo": REPO,
                "instance_id": instance_id(i),
                "base_commit": base,
                "patch": patch,
                "test_patch": test_patch,
                "problem_statement": f"{name} is wrong\n\n`{check.removeprefix('assert ')}` does not hold.",
                "hints_text": "",
                "created_at": "2020-08-22T12:00:00Z",
                "version": "0.5",
                "FAIL_TO_PASS": json.dumps([f"{TESTS}::{test_name}"]),
                "PASS_TO_PASS": json.dumps(P2P),
                "environment_setup_commit": base,
            }
        )
    return repo, rows


@pytest.fixture(scope="module")
def made(tmp_path_factory, runtime):
    """The repository, its SWE-bench file, and the task set imported from it (validated)."""
    root = tmp_path_factory.mktemp("swebench")
    repo, rows = build_history(root)
    src = root / "instances.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ts, dropped = import_swebench(src, root / "set", root / "repos", runtime, jobs=2, log=lambda m: None)
    return {"root": root, "repo": repo, "rows": rows, "file": src, "set": ts, "dropped": dropped}


def test_the_repository_has_a_future_beyond_each_base_commit(made):
    repo = made["repo"]
    head = git(repo, "rev-parse", "HEAD").strip()
    assert all(r["base_commit"] != head for r in made["rows"])
    # The upstream history holds every fix; the task's start state must not.
    assert git(repo, "rev-list", "--count", "HEAD").strip() == str(1 + 2 * len(BUGS))


def test_the_history_is_cut_at_the_base_commit(made, runtime):
    """The clone holds every fix (tags, branches, remote-tracking refs, a
    stash, the reflog); the import validated and audited every instance and
    dropped none, and the audit of the imported set finds nothing: the
    agent's repository holds the base commit's tree and nothing after it."""
    from sandgym.envs.swe_repo.audit import audit_tasks

    repo = made["repo"]
    assert len(git(repo, "tag").split()) == len(BUGS)
    assert len(git(repo, "stash", "list").splitlines()) == len(BUGS)
    assert git(repo, "for-each-ref", "refs/remotes").count("\n") == len(BUGS)
    assert made["dropped"] == []
    report = audit_tasks([SWETaskPair.of(t) for t in made["set"].tasks], runtime)
    assert report.to_json() == {"tasks": len(BUGS), "reachable_answers": [], "hidden_tests_visible": []}
    # ...and the audit would have found the fix: the fixed module is in the clone's objects.
    fixed = git(repo, "show", f"fixed-{BUGS[0][0]}:{MODULE}")
    assert BUGS[0][1] in fixed


def test_import_validates_every_instance_and_keeps_the_commit(made, runtime):
    ts, rows = made["set"], made["rows"]
    assert made["dropped"] == []
    assert ts.ids == sorted(r["instance_id"] for r in rows)
    for row in rows:
        task = ts.get(row["instance_id"])
        v, h = task.visible, task.hidden
        assert (v.repo.kind, v.repo.name, v.repo.commit, v.repo.version) == ("git", REPO, row["base_commit"], "0.5")
        assert v.base_patch == "" and v.source == "swebench"
        assert v.environment.requirements == [] and v.environment.import_root == "."
        assert v.visible_tests == [TESTS]
        assert h.patch == row["patch"] and h.test_patch == row["test_patch"]
        assert h.FAIL_TO_PASS == json.loads(row["FAIL_TO_PASS"]) and h.PASS_TO_PASS == P2P
    # The agent's start state: one commit, the bug in, neither the fix nor its test.
    task = ts.get(instance_id(0))
    state = start_state(task.visible)
    assert state.base_commit != rows[0]["base_commit"]
    import io
    import tarfile

    with tarfile.open(fileobj=io.BytesIO(state.repo_tar)) as tar:
        names = tar.getnames()
        module_file, tests_file = tar.extractfile(f"repo/{MODULE}"), tar.extractfile(f"repo/{TESTS}")
        assert module_file is not None and tests_file is not None
        module, tests = module_file.read().decode(), tests_file.read().decode()
    assert BUGS[0][2] in module and BUGS[0][1] not in module
    assert "test_dasherize_regression" not in tests
    assert not any(n.startswith("repo/.git/logs") for n in names)
    # Gold FULL; an empty prediction EMPTY (not run, no pass rate).
    gold = verify_prediction(task, task.hidden.patch, runtime)
    assert (gold.status, gold.outcome.value) == ("FULL", "passed")
    empty = verify_prediction(task, "", runtime)
    assert (empty.status, empty.outcome.value, empty.tests) == ("EMPTY", "failed", [])
    assert empty.reward("binary") == 0.0


def test_cli_lists_the_imported_set(made):
    from sandgym.specs.swe_repo import list_row

    result = runner.invoke(app, ["tasks", "list", str(made["set"].root)])
    assert result.exit_code == 0, result.output
    assert "swe_repo · 5 tasks" in result.output
    first = made["set"].get(instance_id(0))
    assert list_row(first)[0] == f"{REPO}@{made['rows'][0]['base_commit'][:10]}"


def test_export_import_round_trip_keeps_the_hash(made, tmp_path):
    ts = made["set"]
    out = tmp_path / "exported.jsonl"
    result = runner.invoke(
        app,
        [
            "tasks",
            "export",
            str(ts.root),
            "--format",
            "swebench",
            "--out",
            str(out),
            "--repos-out",
            str(tmp_path / "r"),
        ],
    )
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["instance_id"] for r in rows] == ts.ids
    for r in rows:
        original = next(x for x in made["rows"] if x["instance_id"] == r["instance_id"])
        for key in ("repo", "base_commit", "patch", "test_patch", "problem_statement", "version"):
            assert r[key] == original[key], key
        assert json.loads(r["FAIL_TO_PASS"]) == json.loads(original["FAIL_TO_PASS"])
    # The exported repository holds every base commit, tagged per task, and nothing after it.
    exported = tmp_path / "r" / "jpvanhal__inflection.git"
    for r in rows:
        assert git(exported, "cat-file", "-t", r["base_commit"]).strip() == "commit"
    assert git(exported, "rev-list", "--count", rows[-1]["base_commit"]).strip() == "1"  # shallow: no history
    # Import it again, from the exported repositories: the same task set.
    result = runner.invoke(
        app,
        ["tasks", "import", "swebench", str(out), "--repos", str(tmp_path / "r"), "--out", str(tmp_path / "again")]
        + ["--no-validate"],
    )
    assert result.exit_code == 0, result.output
    assert TaskSet.load(tmp_path / "again").hash == ts.hash
    # The SWE-bench fields alone (no `sandgym` field) give the same tasks for git sources.
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps([{k: v for k, v in r.items() if k != "sandgym"} for r in rows]))
    plain, _ = import_swebench(bare, tmp_path / "plain", tmp_path / "r", validate=False, log=lambda m: None)
    assert plain.hash == ts.hash


def test_exported_file_matches_swebench_schema(made, tmp_path):
    for suffix in (".jsonl", ".json"):
        out = tmp_path / f"instances{suffix}"
        export_swebench(made["set"], out)
        # swebench's load_swebench_dataset for a local file:
        text = out.read_text()
        data = json.loads(text) if suffix == ".json" else [json.loads(line) for line in text.splitlines()]
        assert len(data) == len(made["set"])
        for inst in data:
            assert SWEBENCH_INSTANCE_FIELDS <= set(inst), SWEBENCH_INSTANCE_FIELDS - set(inst)
            assert set(inst) - SWEBENCH_INSTANCE_FIELDS == {"sandgym"}  # ours: a JSON string
            for key in SWEBENCH_INSTANCE_FIELDS | {"sandgym"}:
                assert isinstance(inst[key], str), key
            for key in ("FAIL_TO_PASS", "PASS_TO_PASS"):
                tests = json.loads(inst[key])
                assert isinstance(tests, list) and all(isinstance(t, str) for t in tests)
            assert len(inst["base_commit"]) == 40 and len(inst["environment_setup_commit"]) == 40
            assert inst["patch"].startswith("diff --git") and inst["test_patch"].startswith("diff --git")
            assert isinstance(json.loads(inst["sandgym"]), dict)


def test_predictions_give_swebench_report(made, tmp_path):
    ts, rows = made["set"], made["rows"]
    by_id = {r["instance_id"]: r for r in rows}
    gold = by_id[instance_id(0)]["patch"]
    # Applies, changes the right line, still wrong: the new test fails.
    wrong = by_id[instance_id(1)]["patch"].replace(
        "+    if number % 100 in (11, 12, 13):", "+    if number % 100 in (11, 12, 14):"
    )
    assert wrong != by_id[instance_id(1)]["patch"]
    # The gold patch with one context line changed: `git apply` refuses it,
    # SWE-bench's `patch --fuzz=5` applies it, and it resolves.
    fuzzy = by_id[instance_id(3)]["patch"].replace(
        "     normalized = unicodedata.normalize('NFKD', string)",
        "     normalized = unicodedata.normalize('NFC', string)",
    )
    assert fuzzy != by_id[instance_id(3)]["patch"]
    preds = [
        {"instance_id": instance_id(0), "model_name_or_path": "acme/coder-7b", "model_patch": gold},
        {"instance_id": instance_id(1), "model_name_or_path": "acme/coder-7b", "model_patch": wrong},
        # Garbage: applies by none of SWE-bench's commands, an error instance.
        {"instance_id": instance_id(2), "model_name_or_path": "acme/coder-7b", "model_patch": "I fixed it!\n"},
        {"instance_id": instance_id(3), "model_name_or_path": "acme/coder-7b", "model_patch": fuzzy},
        # instance 5: no prediction
    ]
    pred_file = tmp_path / "preds.json"  # a JSON list, as some harnesses write them
    pred_file.write_text(json.dumps(preds))
    out = tmp_path / "run"
    result = runner.invoke(
        app,
        ["eval", "--env", "sandgym/SWERepo-v0", "--tasks", str(ts.root), "--predictions", str(pred_file)]
        + ["--out", str(out), "-j", "2"],
    )
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text())
    assert {k: report[k] for k in REPORT_COUNTS} == {
        "total_instances": 5,
        "submitted_instances": 4,
        "completed_instances": 3,
        "resolved_instances": 2,
        "unresolved_instances": 1,
        "empty_patch_instances": 0,
        "error_instances": 1,
    }
    assert {k: report[k] for k in REPORT_IDS} == {
        "submitted_ids": [instance_id(i) for i in range(4)],
        "completed_ids": [instance_id(0), instance_id(1), instance_id(3)],
        "incomplete_ids": [instance_id(4)],
        "resolved_ids": [instance_id(0), instance_id(3)],
        "unresolved_ids": [instance_id(1)],
        "empty_patch_ids": [],
        "error_ids": [instance_id(2)],
    }
    records = {
        r.task_id: r
        for r in (EpisodeRecord.model_validate_json(x) for x in (out / "trajectories.jsonl").read_text().splitlines())
    }
    assert {tid: (r.status, r.outcome) for tid, r in records.items()} == {
        instance_id(0): ("FULL", "passed"),
        instance_id(1): ("NO", "failed"),
        instance_id(2): ("APPLY_FAILED", "failed"),
        instance_id(3): ("FULL", "passed"),
        instance_id(4): (None, "not_executed"),
    }
    assert records[instance_id(2)].pass_rate is None and not records[instance_id(2)].violations
    assert all(r.policy["model"] == "acme/coder-7b" and r.policy["name"] == "predictions" for r in records.values())
    # The HTML report shows the statuses and SWE-bench's counts.
    result = runner.invoke(app, ["report", str(out)])
    assert result.exit_code == 0, result.output
    page = (out / "report.html").read_text()
    for status in ("FULL", "NO", "APPLY_FAILED"):
        assert f'data-status="{status}"' in page
    assert 'data-field="resolved_instances">2<' in page and 'data-field="error_instances">1<' in page
    # The leaderboard names the model and counts the missing prediction as unresolved.
    row = rank([out]).to_rows()[0]
    assert row["model"] == "acme/coder-7b"
    assert (row["mean_reward"], row["n_counted"], row["not_executed"]) == (2 / 5, 5, 1)


def test_predictions_that_cannot_apply_are_errors_never_violations(made, runtime):
    """SWE-bench's error instances: what none of its apply commands takes.
    Only "" is an empty patch; a blank one is submitted and fails to apply."""
    task = made["set"].get(instance_id(1))
    gold = task.hidden.patch
    header = next(line for line in gold.splitlines() if line.startswith("@@"))
    old_start = header.split()[1]  # "-N,M"
    malformed = gold.replace(header, header.replace(old_start, old_start.split(",")[0] + ",99"), 1)
    assert malformed != gold
    # Reads exactly but matches nothing in the tree, even with fuzz: judged in the sandbox.
    far = gold.replace("\n ", "\n NOT THE BASE ").replace("\n-    ", "\n-    NOT THE BASE ")
    assert "\n-    NOT THE BASE " in far
    cases = {"garbage": "I fixed it!\n", "blank": "  \n\n", "malformed": malformed, "far": far}
    verdicts = {name: verify_prediction(task, text, runtime) for name, text in cases.items()}
    for name, v in verdicts.items():
        assert (v.status, v.outcome.value, v.violations) == ("APPLY_FAILED", "failed", []), (name, v.detail)
    assert "does not apply to the base commit" in verdicts["far"].detail  # the sandbox's chain ran
    assert "patch --batch --forward --fuzz=5" in verdicts["far"].detail
    empty = verify_prediction(task, "", runtime)
    assert (empty.status, empty.tests, empty.violations) == ("EMPTY", [], [])
    records = [
        SimpleNamespace(task_id=name, artifact=cases.get(name, ""), outcome=v.outcome.value, status=v.status)
        for name, v in [*verdicts.items(), ("empty", empty)]
    ]
    report = swebench_report(records, [*cases, "empty"])
    assert (report["error_ids"], report["empty_patch_ids"], report["completed_ids"]) == (
        sorted(cases),
        ["empty"],
        [],
    )


def test_pypi_tasks_export_with_real_base_commits(tmp_path, runtime):
    """pypi-v1 tasks carry a base patch on a pristine sdist: export writes their
    start states as commits, which a SWE-bench-style harness checks out and patches."""
    full = TaskSet.load("swe_repo/pypi-v1")
    # and a pypi-v2 task: its difficulty record goes out and comes back too.
    v2 = next(t for t in swe_tasks(TaskSet.load("swe_repo/pypi-v2")) if t.visible.difficulty is not None)
    picked = [full.get("inflection-0.5.1/mut-0000"), full.get("toolz-1.2.0/mut-0001"), v2]
    subset = TaskSet(TaskSetMeta(name="pypi-pick", family="swe_repo"), picked)
    out, repos = tmp_path / "pypi.jsonl", tmp_path / "repos"
    with pytest.raises(ValueError, match="--repos-out"):
        export_swebench(subset, out)
    rows = export_swebench(subset, out, repos)
    for task, row in zip(swe_tasks(subset), rows, strict=True):
        assert row["base_commit"] == start_state(task.visible).base_commit
        assert row["repo"] == f"pypi/{task.visible.repo.name}"
        clone = tmp_path / "clones" / task.id.replace("/", "_")
        subprocess.run(
            ["git", "clone", "-q", f"file://{repos / (row['repo'].replace('/', '__') + '.git')}", str(clone)],
            check=True,
            capture_output=True,
        )
        git(clone, "checkout", "-q", row["base_commit"])
        assert git(clone, "rev-list", "--count", "HEAD").strip() == "1"  # no history: the fix is nowhere
        (tmp_path / "gold.diff").write_text(row["patch"])
        git(clone, "apply", str(tmp_path / "gold.diff"))
    # Read back: the same tasks (the `sandgym` field names the sdist and base patch).
    again, _ = import_swebench(out, tmp_path / "again", None, validate=False, log=lambda m: None)
    assert again.hash == subset.hash
    # With the SWE-bench fields alone, the exported repositories give git tasks the verifier accepts.
    bare = tmp_path / "bare.jsonl"
    bare.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "sandgym"}) + "\n" for r in rows[:1]))
    plain, dropped = import_swebench(bare, tmp_path / "plain", repos, runtime, log=lambda m: None)
    assert dropped == [] and len(plain) == 1
    repo = swe_tasks(plain)[0].visible.repo
    assert repo.kind == "git" and repo.commit == rows[0]["base_commit"]


def test_bad_rows_are_named(tmp_path, made):
    row = dict(made["rows"][0])
    cases = [
        ({k: v for k, v in row.items() if k != "base_commit"}, "field `base_commit` is missing"),
        ({**row, "FAIL_TO_PASS": "not json"}, "field `FAIL_TO_PASS` is a string but not a JSON list"),
        ({**row, "FAIL_TO_PASS": "[]"}, "field `FAIL_TO_PASS` is empty"),
        ({**row, "base_commit": "abc123"}, "field `base_commit` must be a full hex commit id"),
    ]
    for bad, message in cases:
        path = tmp_path / "bad.jsonl"
        path.write_text(json.dumps(bad) + "\n")
        with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
            import_swebench(path, tmp_path / "out", made["root"] / "repos", validate=False)
    # A repository that is not under --repos: the error says where it looked and how to fix it.
    path = tmp_path / "other.jsonl"
    path.write_text(json.dumps({**row, "repo": "someone/elsewhere"}) + "\n")
    with pytest.raises(SandgymError, match="no git clone in .* git clone https://github.com/someone/elsewhere"):
        import_swebench(path, tmp_path / "out2", made["root"] / "repos", validate=False)
    # A duplicate prediction is refused with both places named.
    preds = tmp_path / "dup.jsonl"
    line = json.dumps({"instance_id": row["instance_id"], "model_name_or_path": "m", "model_patch": ""})
    preds.write_text(line + "\n" + line + "\n")
    result = runner.invoke(
        app, ["eval", "--env", "sandgym/SWERepo-v0", "--tasks", str(made["set"].root), "--predictions", str(preds)]
    )
    assert result.exit_code == 2 and "second prediction" in result.output
