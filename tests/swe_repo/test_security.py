"""Known attacks on SWE repo-issue verification, each tried for real.

Every test submits a hostile diff (or acts in the agent's sandbox) against
the bundled billing tasks, with real bubblewrap sandboxes, and asserts the
outcome (never `passed`; never an `env_error` the attacker could force)
and that nothing outside the sandbox changed: the bundled project, the
cached start state, the verifier's staged code, host paths the attack
writes to, and no process of the sandbox user left behind.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from sandgym.outcomes import Outcome
from sandgym.specs import TaskSet
from sandgym.verifiers.swe_repo.checkout import git_env, start_state
from sandgym.verifiers.swe_repo.host import _attempt, boundary_mount, filter_diff, verify
from sandgym.verifiers.swe_repo.sources import bundled_projects_dir, cache_dir

TASKS = TaskSet.load(Path(__file__).resolve().parents[2] / "task_specs" / "swe_repo" / "billing-v1")
ROUNDING = TASKS.get("billing/round-half-even")  # F2P: tests/test_money.py rounding tests
BULK = TASKS.get("billing/bulk-threshold")  # its test patch adds tests/test_bulk_pricing.py
SANDBOX_UID = 65534 if os.geteuid() == 0 else os.geteuid()
HOST_MARKERS = [Path("/tmp/sandgym-swe-pwned"), Path("/var/tmp/sandgym-swe-pwned")]


def sandbox_user_processes() -> set[int]:
    """Our own descendants running as the sandbox user (other test runs on
    this machine have theirs)."""
    found, frontier = set(), [os.getpid()]
    while frontier:
        pid = frontier.pop()
        try:
            if pid != os.getpid() and os.stat(f"/proc/{pid}").st_uid == SANDBOX_UID:
                found.add(pid)
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as f:
                    frontier.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return found


def tree_hash(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts:
            h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


@pytest.fixture
def host_guard(runtime):
    start_state(ROUNDING.visible)
    runtime.create().close()  # the zygote is up before the baseline
    watched = [
        bundled_projects_dir() / "billing",
        cache_dir() / "swe_start" / start_state(ROUNDING.visible).key,
        Path(boundary_mount().source),
    ]
    before = {str(p): tree_hash(p) for p in watched}
    procs = sandbox_user_processes()
    for m in HOST_MARKERS:
        m.unlink(missing_ok=True)
    yield
    deadline = time.monotonic() + 10
    while sandbox_user_processes() - procs and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not (sandbox_user_processes() - procs), "processes outlived the sandbox"
    assert {str(p): tree_hash(p) for p in watched} == before, "something outside the sandbox changed"
    for m in HOST_MARKERS:
        assert not m.exists(), f"{m} was written from inside a sandbox"


def make_diff(task, files: dict[str, str | None], gold: bool = False) -> str:
    """A git diff against the task's start state: `files` maps paths to new
    contents (None deletes); `gold` applies the gold patch first."""
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"sg-attack-{os.getpid()}-{time.monotonic_ns()}"
    work.mkdir()
    try:
        with tarfile.open(fileobj=io.BytesIO(start_state(task.visible).tree_tar)) as tar:
            tar.extractall(work, filter="data")
        repo = work / "repo"
        env = git_env(str(work))

        def git(*args, stdin=None):
            return subprocess.run(
                ["git", *args], cwd=repo, env=env, input=stdin, check=True, capture_output=True
            ).stdout

        git("init", "-q")
        git("add", "-A", "-f")
        git("commit", "-q", "-m", "start")
        if gold:
            git("apply", "-", stdin=task.hidden.patch.encode())
        for rel, text in files.items():
            if text is None:
                (repo / rel).unlink()
            else:
                (repo / rel).parent.mkdir(parents=True, exist_ok=True)
                (repo / rel).write_text(text)
        git("add", "-A", "-f")
        return git("diff", "--cached", "--binary").decode()
    finally:
        shutil.rmtree(work)


def source(task, rel: str) -> str:
    with tarfile.open(fileobj=io.BytesIO(start_state(task.visible).tree_tar)) as tar:
        return tar.extractfile(f"repo/{rel}").read().decode()


def with_prefix(task, rel: str, code: str) -> dict[str, str]:
    """The module `rel` with `code` run at its import (after its __future__ import)."""
    text = source(task, rel)
    anchor = "from __future__ import annotations\n"
    assert anchor in text
    return {rel: text.replace(anchor, anchor + code + "\n", 1)}


def assert_not_scored(verdict, *allowed: Outcome):
    assert verdict.outcome in allowed, (verdict.outcome, verdict.status, verdict.detail)
    assert verdict.reward() == 0.0


# -- the agent's own sandbox: git history ------------------------------------------------------


def test_git_history_holds_only_the_start_state(runtime, host_guard):
    from sandgym.envs.swe_repo.env import SWERepoEnv

    env = SWERepoEnv(runtime=runtime, max_steps=10)
    try:
        env.reset(options={"task_id": "billing/tax-on-gross"})
        probe = (
            "git log --all --oneline | wc -l; git reflog | wc -l; git rev-parse -q --verify HEAD~1 || echo no-parent;"
            "git remote | wc -l; git tag | wc -l; git stash list | wc -l; git fsck --lost-found 2>&1 | wc -l;"
            "git count-objects -v | grep -E '^(count|in-pack):';"
            "git cat-file --batch-all-objects --batch | grep -c 'line.net(self.currency) \\* rate' ;"
            "grep -rIl 'line.net(self.currency) \\* rate' /workspace /tmp /opt 2>/dev/null | wc -l"
        )
        obs, *_ = env.step({"tool": "bash", "command": probe})
        lines = obs["feedback"].split("\n")
        assert lines[:7] == ["1", "0", "no-parent", "0", "0", "0", "0"], obs["feedback"]
        assert lines[7].startswith("count: ") and lines[8] == "in-pack: 0", obs["feedback"]
        # The fixed line exists nowhere: not in an object, not in a file.
        assert lines[9:11] == ["0", "0"], obs["feedback"]
    finally:
        env.close()


def test_no_network_in_the_agent_sandbox(runtime, host_guard):
    from sandgym.envs.swe_repo.env import SWERepoEnv

    env = SWERepoEnv(runtime=runtime, max_steps=10)
    try:
        env.reset(options={"task_id": "billing/tax-on-gross"})
        cmd = (
            "python -c \"import urllib.request as u; u.urlopen('https://pypi.org/simple/', timeout=5)\" "
            ">/dev/null 2>&1 && echo REACHED || echo BLOCKED"
        )
        obs, *_ = env.step({"tool": "bash", "command": cmd})
        assert obs["feedback"].startswith("BLOCKED"), obs["feedback"]
    finally:
        env.close()


# -- protected paths ---------------------------------------------------------------------------


def test_editing_tests_is_dropped_and_flagged(runtime, host_guard):
    tests = source(ROUNDING, "tests/test_money.py").replace("assert round_amount", "assert True or round_amount")
    verdict = verify(ROUNDING, make_diff(ROUNDING, {"tests/test_money.py": tests}), runtime)
    assert_not_scored(verdict, Outcome.VIOLATION)
    assert any("tests/test_money.py" in v for v in verdict.violations)
    assert verdict.status == "NO"  # the edit was dropped: the real tests ran


def test_deleting_tests_is_dropped_and_flagged(runtime, host_guard):
    verdict = verify(ROUNDING, make_diff(ROUNDING, {"tests/test_money.py": None}), runtime)
    assert_not_scored(verdict, Outcome.VIOLATION)
    assert any("tests/test_money.py" in v for v in verdict.violations)
    assert verdict.status == "NO"


def test_conftest_rewriting_outcomes(runtime, host_guard):
    conftest = (
        "import pytest\n\n"
        "@pytest.hookimpl(hookwrapper=True)\n"
        "def pytest_runtest_makereport(item, call):\n"
        "    outcome = yield\n"
        "    rep = outcome.get_result()\n"
        "    rep.outcome = 'passed'\n"
    )
    diff = make_diff(ROUNDING, {"conftest.py": conftest, "billing/conftest.py": conftest})
    verdict = verify(ROUNDING, diff, runtime)
    assert_not_scored(verdict, Outcome.VIOLATION)
    assert {"conftest.py", "billing/conftest.py"} <= {v.split(": ")[1] for v in verdict.violations}
    assert verdict.status == "NO"


@pytest.mark.parametrize(
    "rel",
    [
        "sitecustomize.py",
        "billing/usercustomize.py",
        "billing_hook.pth",
        "pytest.ini",
        "tox.ini",
        "setup.cfg",
        "pyproject.toml",
    ],
)
def test_interpreter_and_config_hooks_are_protected(rel):
    kept, dropped = filter_diff(make_diff(ROUNDING, {rel: "import os\n"}))
    assert kept == "" and len(dropped) == 1 and rel in dropped[0]


def test_hooks_are_inert_even_when_not_filtered(runtime, host_guard):
    """Defence in depth: with the filter bypassed, a sitecustomize.py, a .pth,
    a pytest.ini and a plugin module shadowing the verifier's are still not
    honoured by the isolated interpreter and the verifier's own config."""
    writes = "".join(f"open({str(m)!r}, 'w').write('x')\n" for m in HOST_MARKERS)
    forge = "import os\n" + "os.environ['PYTEST_ADDOPTS'] = '-p no:sandgym_swe_records'\n" + writes
    files = {
        "sitecustomize.py": forge + "import billing.money as m\nm.round_amount = lambda a, c: 0\n",
        "zz_hook.pth": "import os; os._exit(0)\n",
        "pytest.ini": "[pytest]\naddopts = -p no:sandgym_swe_records -x\n",
        "sandgym_swe_records.py": "def pytest_runtest_logreport(report):\n    report.outcome = 'passed'\n",
    }
    diff = make_diff(ROUNDING, files)
    attempt = _attempt(ROUNDING.visible, ROUNDING.hidden, diff, True, runtime)
    assert attempt.status == "NO", (attempt.status, attempt.detail, attempt.output)
    assert {t.name for t in attempt.tests if t.status == "passed"} == set(ROUNDING.hidden.PASS_TO_PASS)


def test_precreated_test_patch_files_are_replaced(runtime, host_guard):
    """Files at paths the test patch adds are removed before it applies (shown
    with the filter bypassed: a fake tests/test_bulk_pricing.py whose tests pass)."""
    fake = "".join(
        f"def {name.split('::')[1]}():\n    pass\n\n"
        for name in BULK.hidden.FAIL_TO_PASS
        if name.startswith("tests/test_bulk_pricing.py")
    )
    diff = make_diff(BULK, {"tests/test_bulk_pricing.py": fake})
    attempt = _attempt(BULK.visible, BULK.hidden, diff, True, runtime)
    assert attempt.status == "NO", (attempt.status, attempt.detail)
    verdict = verify(BULK, diff, runtime)
    assert_not_scored(verdict, Outcome.VIOLATION)


def test_symlinks_in_a_diff_are_refused():
    diff = (
        "diff --git a/billing/link.py b/billing/link.py\nnew file mode 120000\nindex 0000000..1111111\n"
        "--- /dev/null\n+++ b/billing/link.py\n@@ -0,0 +1 @@\n+../tests/test_money.py\n"
        "\\ No newline at end of file\n"
    )
    kept, dropped = filter_diff(diff)
    assert kept == "" and "symlink" in dropped[0]


# -- forged results ------------------------------------------------------------------------------


def test_fake_passed_lines_and_forged_record_files(runtime, host_guard):
    forge = (
        "import json, os, sys\n"
        "for t in %r:\n"
        "    print(t + ' PASSED')\n"
        "    sys.stderr.write(t + ' PASSED\\n')\n"
        "rec = {'kind': 'report', 'nodeid': 'x', 'when': 'call', 'outcome': 'passed'}\n"
        "for d in ('/tmp', '/workspace', '/workspace/repo'):\n"
        "    try:\n"
        "        open(os.path.join(d, 'records.json'), 'w').write(json.dumps(rec))\n"
        "    except OSError:\n"
        "        pass\n"
        "print(json.dumps({'nonce': 'guess', 'exit_code': 0, 'records': '', 'output': ''}))\n"
    ) % (list(ROUNDING.hidden.FAIL_TO_PASS),)
    verdict = verify(ROUNDING, make_diff(ROUNDING, with_prefix(ROUNDING, "billing/money.py", forge)), runtime)
    assert_not_scored(verdict, Outcome.FAILED)
    assert verdict.status == "NO"


def test_killing_the_runner_is_a_violation(runtime, host_guard):
    kill = "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n"
    verdict = verify(ROUNDING, make_diff(ROUNDING, with_prefix(ROUNDING, "billing/money.py", kill)), runtime)
    assert_not_scored(verdict, Outcome.VIOLATION)
    assert len(verdict.attempts) == 1  # not retried as an infrastructure error


def test_reading_the_runner_through_proc_is_refused(runtime, host_guard):
    """The runner is non-dumpable: its stdout (the answer channel) and memory
    are closed to the tests, so they cannot write an answer with its nonce."""
    probe = (
        "import os\n"
        "ppid = os.getppid()\n"
        "for what in ('fd/1', 'mem', 'environ'):\n"
        "    try:\n"
        "        open(f'/proc/{ppid}/{what}', 'rb' if what != 'fd/1' else 'wb').close()\n"
        "        raise SystemExit(f'opened /proc/runner/{what}')\n"
        "    except PermissionError:\n"
        "        pass\n"
    )
    diff = make_diff(ROUNDING, with_prefix(ROUNDING, "billing/tax.py", probe), gold=True)
    verdict = verify(ROUNDING, diff, runtime)
    # The probe found every door shut, so the gold fix underneath scores normally.
    assert verdict.status == "FULL", (verdict.status, verdict.detail, verdict.attempts[-1].output)


# -- broken runs ---------------------------------------------------------------------------------


def test_breaking_collection_is_the_models_failure(runtime, host_guard):
    verdict = verify(
        ROUNDING,
        make_diff(ROUNDING, with_prefix(ROUNDING, "billing/money.py", "raise ImportError('broken')\n")),
        runtime,
    )
    assert_not_scored(verdict, Outcome.FAILED)
    assert verdict.status == "NO" and "collection errors" in verdict.detail


def test_os_exit_during_tests_is_an_invalid_log_scored_failed(runtime, host_guard):
    code = source(ROUNDING, "billing/money.py").replace(
        "    quantum = Decimal(1)", "    import os\n    os._exit(0)\n    quantum = Decimal(1)"
    )
    verdict = verify(ROUNDING, make_diff(ROUNDING, {"billing/money.py": code}), runtime)
    assert_not_scored(verdict, Outcome.FAILED)
    assert verdict.status == "INVALID_LOG" and len(verdict.attempts) == 1


def test_sys_exit_and_skip_do_not_pass(runtime, host_guard):
    code = source(ROUNDING, "billing/money.py").replace(
        "    quantum = Decimal(1)",
        '    import sys, unittest\n    if amount == Decimal("0.125"):\n        sys.exit(0)\n'
        '    if amount < 0:\n        raise unittest.SkipTest("no")\n    quantum = Decimal(1)',
    )
    verdict = verify(ROUNDING, make_diff(ROUNDING, {"billing/money.py": code}, gold=False), runtime)
    assert_not_scored(verdict, Outcome.FAILED)
    by_name = {t.name: t for t in verdict.tests}
    assert by_name["tests/test_money.py::test_round_amount_half_away_from_zero_for_negatives"].status == "failed"


def test_forcing_a_timeout_is_a_timeout_not_an_env_error(runtime, host_guard):
    task = ROUNDING.model_copy(update={"visible": ROUNDING.visible.model_copy(update={"timeout_s": 8})})
    code = source(ROUNDING, "billing/money.py").replace(
        "    quantum = Decimal(1)", "    import time\n    time.sleep(3600)\n    quantum = Decimal(1)"
    )
    verdict = verify(task, make_diff(ROUNDING, {"billing/money.py": code}), runtime)
    assert_not_scored(verdict, Outcome.TIMEOUT)
    assert verdict.status == "TIMEOUT" and len(verdict.attempts) == 1


def test_fetching_the_fix_over_the_network_fails(runtime, host_guard):
    fetch = (
        "import urllib.request\n"
        "try:\n"
        "    src = urllib.request.urlopen('https://files.pythonhosted.org/', timeout=5).read()\n"
        "    open(__file__, 'wb').write(src)\n"
        "except OSError:\n"
        "    pass\n"
    )
    verdict = verify(ROUNDING, make_diff(ROUNDING, with_prefix(ROUNDING, "billing/money.py", fetch)), runtime)
    assert_not_scored(verdict, Outcome.FAILED)
    assert verdict.status == "NO"


def test_garbage_and_unappliable_diffs(runtime, host_guard):
    assert verify(ROUNDING, "I fixed it, trust me", runtime).status == "EMPTY"
    stale = ROUNDING.hidden.patch.replace("ROUND_HALF_EVEN", "ROUND_CEILING")
    verdict = verify(ROUNDING, stale, runtime)
    assert_not_scored(verdict, Outcome.FAILED)
    assert verdict.status == "APPLY_FAILED" and "does not apply" in verdict.detail


def test_gold_and_empty_diffs(runtime, host_guard):
    gold = verify(ROUNDING, ROUNDING.hidden.patch, runtime)
    assert (gold.outcome, gold.status, gold.reward()) == (Outcome.PASSED, "FULL", 1.0)
    empty = verify(ROUNDING, "", runtime)
    assert (empty.outcome, empty.status, empty.reward()) == (Outcome.FAILED, "NO", 0.0)
