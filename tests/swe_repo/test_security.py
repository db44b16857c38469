"""Known attacks on SWE repo-issue verification, each tried for real.

Every test submits a hostile diff (or acts in the agent's sandbox) against
the bundled billing tasks, with real sandboxes, and asserts the outcome
(never `passed`; never an `env_error` the attacker could force) and that
nothing outside the sandbox changed: the bundled project, the cached start
state, the verifier's staged code, host paths the attack writes to, and no
process of the sandbox user (local) or container (docker) left behind.

The attacks from inside the test run (issue #11) run on the local runtime
(pytest in namespaces of its own) and on docker with runc (no user
namespaces: pytest as the runner's user); they are written as a real
attacker would, as a diff to billing's own modules that tampers at import
or at call time.
"""

from __future__ import annotations

import contextlib
import dis
import hashlib
import io
import os
import shutil
import subprocess
import tarfile
import time
import types
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandgym.outcomes import Outcome
from sandgym.runtimes import get_runtime
from sandgym.specs import TaskSet
from sandgym.verifiers.swe_repo.checkout import git_env, start_state
from sandgym.verifiers.swe_repo.diffs import split_diff
from sandgym.verifiers.swe_repo.host import verify, verify_once
from sandgym.verifiers.swe_repo.path_policy import filter_diff, protected_reason, start_info
from sandgym.verifiers.swe_repo.sandbox import boundary_mount, staged_venv
from sandgym.verifiers.swe_repo.scan import scan_diff
from sandgym.verifiers.swe_repo.sources import bundled_projects_dir, cache_dir
from sandgym.verifiers.swe_repo.sources import test_venv as cached_venv  # (not collected as a test)

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


def our_containers() -> set[str]:
    """Containers this test process made (other runs on this machine have theirs)."""
    import docker

    from sandgym.runtimes.docker import OWNER_LABEL, owner_label

    found = docker.from_env().containers.list(
        all=True, filters={"label": f"{OWNER_LABEL}={owner_label()}"}, ignore_removed=True
    )
    return {c.name for c in found}


@contextlib.contextmanager
def nothing_outside_changes(runtime):
    start_state(ROUNDING.visible)
    docker = getattr(runtime, "name", "") == "docker"
    if not docker:
        runtime.create().close()  # the zygote is up before the baseline
    watched = [
        bundled_projects_dir() / "billing",
        cache_dir() / "swe_start" / start_state(ROUNDING.visible).key,
        Path(boundary_mount().source),
    ]
    before = {str(p): tree_hash(p) for p in watched}
    procs = sandbox_user_processes()
    containers = our_containers() if docker else set()
    for m in HOST_MARKERS:
        m.unlink(missing_ok=True)
    yield
    deadline = time.monotonic() + 10
    while sandbox_user_processes() - procs and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not (sandbox_user_processes() - procs), "processes outlived the sandbox"
    if docker:
        assert our_containers() <= containers, "containers outlived the verification"
    assert {str(p): tree_hash(p) for p in watched} == before, "something outside the sandbox changed"
    for m in HOST_MARKERS:
        assert not m.exists(), f"{m} was written from inside a sandbox"


@pytest.fixture
def host_guard(runtime):
    with nothing_outside_changes(runtime):
        yield


@pytest.fixture(scope="module", params=["local", pytest.param("docker", marks=pytest.mark.docker)])
def rt(request):
    """The local runtime (pytest in namespaces of its own) and docker with runc (without)."""
    runtime = get_runtime(request.param)
    yield runtime
    runtime.close()


@pytest.fixture
def rt_guard(rt):
    with nothing_outside_changes(rt):
        yield


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
    attempt = verify_once(ROUNDING.visible, ROUNDING.hidden, diff, True, runtime)
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
    attempt = verify_once(BULK.visible, BULK.hidden, diff, True, runtime)
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
        "for t in @F2P@:\n"
        "    print(t + ' PASSED')\n"
        "    sys.stderr.write(t + ' PASSED\\n')\n"
        "rec = {'kind': 'report', 'nodeid': 'x', 'when': 'call', 'outcome': 'passed'}\n"
        "for d in ('/tmp', '/workspace', '/workspace/repo'):\n"
        "    try:\n"
        "        open(os.path.join(d, 'records.json'), 'w').write(json.dumps(rec))\n"
        "    except OSError:\n"
        "        pass\n"
        "print(json.dumps({'nonce': 'guess', 'exit_code': 0, 'records': '', 'output': ''}))\n"
    ).replace("@F2P@", repr(list(ROUNDING.hidden.FAIL_TO_PASS)))
    verdict = verify(ROUNDING, make_diff(ROUNDING, with_prefix(ROUNDING, "billing/money.py", forge)), runtime)
    assert_not_scored(verdict, Outcome.FAILED)
    assert verdict.status == "NO"


def test_reading_the_runner_through_proc_is_refused(rt, rt_guard):
    """The runner is out of sight (local: another PID namespace) or non-dumpable
    (docker): its stdout (the answer channel), memory and environment are closed
    to the tests, and the guard reports the attempt."""
    probe = (
        "import os\n"
        "ppid = os.getppid()\n"
        "for what in ('fd/1', 'mem', 'environ'):\n"
        "    try:\n"
        "        open(f'/proc/{ppid}/{what}', 'rb' if what != 'fd/1' else 'wb').close()\n"
        "        raise SystemExit(f'opened /proc/runner/{what}')\n"
        "    except (PermissionError, FileNotFoundError):\n"
        "        pass\n"
    )
    diff = make_diff(ROUNDING, with_prefix(ROUNDING, "billing/tax.py", probe), gold=True)
    verdict = verify(ROUNDING, diff, rt)
    assert_not_scored(verdict, Outcome.VIOLATION)
    assert any(v.startswith("open: /proc/") for v in verdict.violations), verdict.violations
    assert len(verdict.attempts) == 1


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


# -- attacks from inside the test run (issue #11) -----------------------------------------------
#
# Each is a diff to billing's own code; billing is imported by the tests, so
# the code runs in pytest's process. ROUNDING's FAIL_TO_PASS tests are in
# tests/test_money.py; billing is first imported by tests/test_discounts.py.

F2P = list(ROUNDING.hidden.FAIL_TO_PASS)


def at_call(task, code: str, gold: bool = False) -> str:
    """A diff that defines `code` (a function `_sg_attack()`) in billing/money.py
    and calls it from round_amount, i.e. while a test is running."""
    text = source(task, "billing/money.py")
    text = text.replace("from __future__ import annotations\n", "from __future__ import annotations\n" + code, 1)
    text = text.replace("    quantum = Decimal(1)", "    _sg_attack()\n    quantum = Decimal(1)", 1)
    return make_diff(task, {"billing/money.py": text}, gold=gold)


def test_the_test_process_has_a_fixed_hash_seed(runtime, host_guard):
    """PYTHONHASHSEED=0 reaches pytest's interpreter (started with -s -P,
    not -I, whose -E would drop it): test ids made from sets and dicts stay
    the same from run to run (the task factory compares them)."""
    seeded = "import sys\nassert sys.flags.hash_randomization == 0, 'hash seed lost'"
    fix = make_diff(ROUNDING, with_prefix(ROUNDING, "billing/tax.py", seeded), gold=True)
    verdict = verify(ROUNDING, fix, runtime)
    assert (verdict.outcome, verdict.status) == (Outcome.PASSED, "FULL"), verdict.detail


def violated(verdict, *needles: str) -> None:
    assert_not_scored(verdict, Outcome.VIOLATION)
    text = " | ".join(verdict.violations)
    for needle in needles:
        assert needle in text, (needle, verdict.violations, verdict.attempts[-1].output[-2000:])


# 1. patching pytest from the package under test


def test_runtest_made_a_no_op_at_import(rt, rt_guard):
    attack = "import _pytest.python\n_pytest.python.Function.runtest = lambda self: None\n"
    verdict = verify(ROUNDING, make_diff(ROUNDING, with_prefix(ROUNDING, "billing/money.py", attack)), rt)
    violated(verdict, "machinery: _pytest.python.Function.runtest was changed")
    # The static scan saw it too, and it is on the record.
    assert any("_pytest" in hit for hit in verdict.scan)
    assert any("reaches into the test machinery (_pytest)" in v for v in verdict.violations)


def test_reports_forced_to_pass_at_import(rt, rt_guard):
    attack = (
        "import importlib\n"
        "_reports = importlib.import_module(bytes.fromhex('5f7079746573742e7265706f727473').decode())\n"
        "_orig = _reports.TestReport.from_item_and_call\n"
        "def _forced(cls, item, call):\n"
        "    rep = _orig.__func__(cls, item, call)\n"
        "    rep.outcome, rep.longrepr = 'passed', None\n"
        "    return rep\n"
        "_reports.TestReport.from_item_and_call = classmethod(_forced)\n"
    )
    verdict = verify(ROUNDING, make_diff(ROUNDING, with_prefix(ROUNDING, "billing/money.py", attack)), rt)
    # No literal _pytest for the static scan: the guard's machinery check catches it.
    violated(verdict, "_pytest.reports.TestReport.from_item_and_call was changed")


def test_self_restoring_patch_installed_during_the_call(rt, rt_guard):
    """Patched while the test runs, undone by its own first use: the report
    says passed, but the plugin saw the call raise."""
    attack = (
        "def _sg_attack():\n"
        "    import sys\n"
        "    cls = sys.modules[bytes.fromhex('5f7079746573742e7265706f727473').decode()].TestReport\n"
        "    orig = cls.__dict__['from_item_and_call']\n"
        "    def forged(klass, item, call):\n"
        "        setattr(cls, 'from_item_and_call', orig)\n"
        "        rep = orig.__func__(klass, item, call)\n"
        "        rep.outcome, rep.longrepr = 'passed', None\n"
        "        return rep\n"
        "    setattr(cls, 'from_item_and_call', classmethod(forged))\n"
    )
    verdict = verify(ROUNDING, at_call(ROUNDING, attack), rt)
    violated(verdict, "was reported passed, but its call raised")
    assert not any("test machinery" in v for v in verdict.violations)  # the scan could not see it


def test_items_swapped_through_frames(rt, rt_guard):
    """Frames walked with f_back (no audit event) to the session's items, whose
    test functions are swapped for no-ops on the instances."""
    attack = (
        "def _sg_attack():\n"
        "    import sys\n"
        "    f = sys._getframe(1)\n"
        "    while f is not None and 'item' not in f.f_locals:\n"
        "        f = f.f_back\n"
        "    if f is None:\n"
        "        return\n"
        "    for it in f.f_locals['item'].session.items:\n"
        "        if it is not f.f_locals['item']:\n"
        "            it._obj = lambda *a, **k: None\n"
    )
    verdict = verify(ROUNDING, at_call(ROUNDING, attack), rt)
    violated(verdict, "item: tests/", "the function it calls comes from /workspace/repo/billing/money.py")


def test_exception_swallowed_between_the_test_and_the_report(rt, rt_guard):
    """Installed while the test runs and gone once used: a context manager
    exit (pytest's capture wraps every call in one) that swallows the test's
    AssertionError. pytest reports a pass; the plugin saw the test function raise."""
    attack = (
        "def _sg_attack():\n"
        "    import contextlib\n"
        "    cls = contextlib._GeneratorContextManager\n"
        "    orig = cls.__exit__\n"
        "    def swallow(self, typ, value, tb):\n"
        "        if typ is AssertionError:\n"
        "            cls.__exit__ = orig\n"
        "            orig(self, typ, value, tb)\n"
        "            return True\n"
        "        return orig(self, typ, value, tb)\n"
        "    cls.__exit__ = swallow\n"
    )
    verdict = verify(ROUNDING, at_call(ROUNDING, attack), rt)
    violated(verdict, "was reported passed, but its call raised")


@pytest.mark.parametrize(
    "code, event",
    [
        ("    for i in range(2, 12):\n        sys._getframe(i)\n", "sys._getframe: /workspace/repo/billing/money.py"),
        ("    import gc\n    [o for o in gc.get_objects() if type(o).__name__ == 'Session']\n", "gc: "),
        ("    import ctypes\n    ctypes.string_at(id(sys), 8)\n", "ctypes: "),
        ("    sys.settrace(lambda *a: None)\n    sys.settrace(None)\n", "trace: "),
        ("    sys.addaudithook(lambda *a: None)\n", "audit: "),
        ("    import subprocess\n    subprocess.run([sys.executable, '-m', 'pytest', '--version'])\n", "spawn: "),
    ],
    ids=["frames", "gc", "ctypes", "settrace", "audithook", "pytest-again"],
)
def test_introspection_from_the_package_is_reported(rt, rt_guard, code, event):
    """What tampering starts with, done by the package while a test runs: the
    guard reports it as it happens (the gold fix underneath does not help)."""
    attack = "def _sg_attack():\n    import sys\n" + code
    text = source(ROUNDING, "billing/money.py").replace("ROUND_HALF_EVEN", "ROUND_HALF_UP")
    text = text.replace("from __future__ import annotations\n", "from __future__ import annotations\n" + attack, 1)
    text = text.replace("    quantum = Decimal(1)", "    _sg_attack()\n    quantum = Decimal(1)", 1)
    verdict = verify(ROUNDING, make_diff(ROUNDING, {"billing/money.py": text}), rt)
    violated(verdict, event)


# 2. replacing or bypassing the records plugin


def test_plugin_silenced_and_records_forged_on_its_pipe(rt, rt_guard):
    attack = (
        "import json, os, stat, sys\n"
        "_rec = sys.modules.get('sandgym_swe_' + 'records')\n"
        "if _rec is not None:\n"
        "    _rec._emit = lambda *a, **k: None\n"
        "for _fd in range(3, 1024):\n"
        "    try:\n"
        "        if not stat.S_ISFIFO(os.fstat(_fd).st_mode):\n"
        "            continue\n"
        "        for _t in @F2P@:\n"
        "            _line = {'kind': 'report', 'nodeid': _t, 'when': 'call', 'outcome': 'passed'}\n"
        "            os.write(_fd, (json.dumps(_line) + '\\n').encode())\n"
        "    except OSError:\n"
        "        pass\n"
    ).replace("@F2P@", repr(F2P))
    verdict = verify(ROUNDING, make_diff(ROUNDING, with_prefix(ROUNDING, "billing/money.py", attack)), rt)
    violated(verdict, "on the records channel")


def test_plugin_hook_called_with_a_forged_report(rt, rt_guard):
    attack = (
        "import sys\n"
        "from importlib import import_module as _imp\n"
        "_rec = sys.modules['sandgym_swe_' + 'records']\n"
        "_TR = _imp('_py' 'test.reports').TestReport\n"
        "for _t in @F2P@:\n"
        "    _rec.pytest_runtest_logreport(_TR(_t, ('x', 0, 'x'), {}, 'passed', None, 'call'))\n"
        "    sys.audit('sandgym.swe.record', 'report', {'nodeid': _t, 'when': 'call', 'outcome': 'passed'}, None)\n"
    ).replace("@F2P@", repr(F2P))
    verdict = verify(ROUNDING, make_diff(ROUNDING, with_prefix(ROUNDING, "billing/money.py", attack)), rt)
    violated(verdict, "forged-record: a record handed to the plugin by /workspace/repo/billing/money.py")
    violated(verdict, "forged-record: a record was handed over by /workspace/repo/billing/money.py")


def test_closing_the_records_channel(rt, rt_guard):
    """Every pipe closed: the guard's next write finds its channel gone and ends the process."""
    attack = (
        "import os, stat\n"
        "for _fd in range(3, 1024):\n"
        "    try:\n"
        "        if stat.S_ISFIFO(os.fstat(_fd).st_mode):\n"
        "            os.close(_fd)\n"
        "    except OSError:\n"
        "        pass\n"
    )
    verdict = verify(ROUNDING, make_diff(ROUNDING, with_prefix(ROUNDING, "billing/money.py", attack), gold=True), rt)
    violated(verdict, "the guard found its channel replaced or closed")


# 3. the nonce: other processes' memory and descriptors, a forged answer, the runner killed


NONCE_THIEF = """import json, os, re, signal
_me = os.getpid()
_nonces = set()
_pids = [p for p in os.listdir('/proc') if p.isdigit() and int(p) != _me]
for _pid in _pids:
    try:
        with open(f'/proc/{_pid}/maps') as _maps, open(f'/proc/{_pid}/mem', 'rb', 0) as _mem:
            for _line in _maps:
                _lo, _hi = (int(x, 16) for x in _line.split()[0].split('-'))
                if 'rw' not in _line.split()[1] or _hi - _lo > 64 << 20:
                    continue
                try:
                    _mem.seek(_lo)
                    _nonces.update(re.findall(rb'"nonce": "([0-9a-f]{32})"', _mem.read(_hi - _lo)))
                except (OSError, ValueError, OverflowError):
                    pass
    except OSError:
        pass
_answers = b''.join(
    json.dumps({'nonce': n.decode(), 'exit_code': 0, 'records': [], 'timed_out': False}).encode() + b'\\n'
    for n in _nonces
)
for _pid in _pids:
    try:
        for _fd in os.listdir(f'/proc/{_pid}/fd'):
            try:
                with open(f'/proc/{_pid}/fd/{_fd}', 'wb') as _w:
                    _w.write(_answers or b'{"nonce": "0"}\\n')
            except OSError:
                pass
    except OSError:
        pass
for _pid in [*_pids, str(os.getppid())]:
    try:
        os.kill(int(_pid), signal.SIGKILL)
    except (OSError, ValueError):
        pass
"""


def test_nonce_stolen_answer_forged_runner_killed(rt, rt_guard):
    verdict = verify(ROUNDING, make_diff(ROUNDING, with_prefix(ROUNDING, "billing/money.py", NONCE_THIEF)), rt)
    # Local: no other process is in sight (its own PID namespace), so nothing is
    # found, nothing is killed and the tests fail as they should. Docker (runc):
    # the runner is killed, and a runner that died by a signal is never accepted.
    assert_not_scored(verdict, Outcome.FAILED, Outcome.VIOLATION)
    assert len(verdict.attempts) == 1
    if getattr(rt, "name", "") == "docker":
        assert verdict.outcome == Outcome.VIOLATION, verdict.violations
    else:
        assert verdict.status == "NO", (verdict.status, verdict.detail)


def test_killing_the_runner_is_never_accepted(rt, rt_guard):
    kill = "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n"
    diff = make_diff(ROUNDING, with_prefix(ROUNDING, "billing/tax.py", kill), gold=True)
    verdict = verify(ROUNDING, diff, rt)
    # Local: the runner is out of reach (getppid() is 0 in a PID namespace of
    # its own) and the gold fix underneath scores; docker: it dies, and that is
    # a violation, never an answer.
    if getattr(rt, "name", "") == "docker":
        violated(verdict, "the runner was killed by signal 9")
    else:
        assert verdict.status == "FULL", (verdict.status, verdict.detail)
    assert len(verdict.attempts) == 1  # not retried as an infrastructure error


def test_own_memory_is_out_of_bounds(rt, rt_guard):
    attack = "open('/proc/self/mem', 'rb').close()\n"
    verdict = verify(ROUNDING, make_diff(ROUNDING, with_prefix(ROUNDING, "billing/money.py", attack), gold=True), rt)
    violated(verdict, "open: /proc/")


def venv_state(root: Path) -> list[tuple[str, int, int, str]]:
    """Every entry of a venv (bytecode included): path, size, mtime, content hash."""
    out = []
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() and not p.is_symlink() else ""
        out.append((str(p.relative_to(root)), st.st_size, st.st_mtime_ns, digest))
    return out


def test_the_venv_cannot_be_written_from_the_tests(rt, rt_guard):
    """The verifier's sandbox mounts the test venv from the staging folder, as
    hard links to the cached venv: the package writing into it at import (a
    module appended to, a new file, bytecode) changes neither copy, and the
    real fix still passes."""
    attack = (
        "import glob as _glob, os as _os, sys as _sys\n"
        "for _p in _glob.glob(_os.path.join(_sys.prefix, 'lib', 'python3*', 'site-packages', '*', '__init__.py')):\n"
        "    for _target in (_p, _os.path.join(_os.path.dirname(_p), '__pycache__', 'x.pyc')):\n"
        "        try:\n"
        "            with open(_target, 'a') as _f:\n"
        "                _f.write('raise SystemExit(0)\\n')\n"
        "        except OSError:\n"
        "            pass\n"
        "try:\n"
        "    open(_os.path.join(_sys.prefix, 'pwned'), 'w').close()\n"
        "except OSError:\n"
        "    pass\n"
    )
    env = ROUNDING.visible.environment
    before = venv_state(cached_venv(env)), venv_state(staged_venv(env))
    verdict = verify(ROUNDING, make_diff(ROUNDING, with_prefix(ROUNDING, "billing/tax.py", attack), gold=True), rt)
    assert (venv_state(cached_venv(env)), venv_state(staged_venv(env))) == before
    assert verdict.outcome == Outcome.PASSED, (verdict.status, verdict.detail)


# 4. rewriting the patched test files and running pytest again


def test_tests_rewritten_at_import_and_pytest_run_again(rt, rt_guard):
    attack = (
        "import os, sys\n"
        "for _name in ('test_money.py', 'test_invoice.py', 'test_discounts.py'):\n"
        "    _p = os.path.join('tests', _name)\n"
        "    try:\n"
        "        os.chmod(_p, 0o644)\n"
        "        _src = open(_p).read()\n"
        "        with open(_p, 'w') as _f:\n"
        "            _f.write(_src.replace('assert ', 'assert True or '))\n"
        "    except OSError as _e:\n"
        "        print('rewrite failed:', _e)\n"
        "os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])\n"
    )
    verdict = verify(ROUNDING, make_diff(ROUNDING, with_prefix(ROUNDING, "billing/money.py", attack)), rt)
    violated(verdict, "os.exec: the test process tried to replace itself")
    assert any("opened for writing" in v or "changed on disk" in v for v in verdict.violations)


def test_tests_rewritten_before_they_are_compiled(rt, rt_guard):
    """tests/test_money.py (listed first) imports billing: the test modules
    collected after it are rewritten on disk before pytest compiles them
    (docker: they can be, by mode only read-only; local: a read-only mount)."""
    attack = (
        "import os\n"
        "for _name in ('test_invoice.py', 'test_discounts.py'):\n"
        "    _p = os.path.join('tests', _name)\n"
        "    try:\n"
        "        os.chmod(_p, 0o644)\n"
        "        _src = open(_p).read()\n"
        "        with open(_p, 'w') as _f:\n"
        "            _f.write(_src.replace('assert ', 'assert True or '))\n"
        "    except OSError as _e:\n"
        "        print('rewrite failed:', _e)\n"
    )
    verdict = verify(ROUNDING, make_diff(ROUNDING, with_prefix(ROUNDING, "billing/money.py", attack)), rt)
    violated(verdict, "fs: a test file was changed on disk")  # the chmod, seen as it happened
    if getattr(rt, "name", "") == "docker":
        violated(verdict, "tests/test_invoice.py was compiled from a source the verifier did not apply")
        violated(verdict, "test file changed while the tests ran: tests/test_invoice.py")
    else:
        assert not any("compiled from a source" in v for v in verdict.violations)  # read-only: nothing was written


def test_test_code_recompiled_in_memory(rt, rt_guard):
    attack = (
        "def _sg_attack():\n"
        "    import sys\n"
        "    for _m in list(sys.modules.values()):\n"
        "        _f = getattr(_m, '__file__', '') or ''\n"
        "        if _f.endswith('test_money.py'):\n"
        "            _src = open(_f).read().replace('assert ', 'assert True or ')\n"
        "            exec(compile(_src, _f, 'exec'), _m.__dict__)\n"
    )
    verdict = verify(ROUNDING, at_call(ROUNDING, attack), rt)
    violated(verdict, "read the test file", "compiled the test file")


def test_sentinels_removed_by_an_import_hook(rt, rt_guard):
    """A finder that strips, from every test module it loads, the tests the
    verifier did not list in the issue: the sentinels go missing."""
    attack = (
        "import sys, importlib.abc, importlib.util\n"
        "class _Strip(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if not name.startswith('test_') or getattr(self, 'busy', False):\n"
        "            return None\n"
        "        self.busy = True\n"
        "        try:\n"
        "            spec = importlib.util.find_spec(name)\n"
        "        finally:\n"
        "            self.busy = False\n"
        "        if spec is None:\n"
        "            return None\n"
        "        run = spec.loader.exec_module\n"
        "        def exec_module(module):\n"
        "            run(module)\n"
        "            for k in [k for k in vars(module) if k.startswith('test_') and len(k.split('_')[-1]) == 6]:\n"
        "                del vars(module)[k]\n"
        "        spec.loader.exec_module = exec_module\n"
        "        return spec\n"
        "sys.meta_path.insert(0, _Strip())\n"
    )
    verdict = verify(ROUNDING, make_diff(ROUNDING, with_prefix(ROUNDING, "billing/money.py", attack), gold=True), rt)
    assert_not_scored(verdict, Outcome.VIOLATION)
    # Its loader runs the test modules from the package's code: seen at once.
    assert any("compiled the test file" in v for v in verdict.violations), verdict.violations


# 5. git configuration that hides a protected path from the diff filter

FORCE_PASS_CONFTEST = (
    "import pytest\n\n"
    "@pytest.hookimpl(hookwrapper=True)\n"
    "def pytest_runtest_makereport(item, call):\n"
    "    outcome = yield\n"
    "    outcome.get_result().outcome = 'passed'\n"
)


@pytest.mark.parametrize("config", ["diff.noprefix true", "diff.mnemonicPrefix true", "core.quotePath false"])
def test_git_config_cannot_hide_a_conftest(rt, rt_guard, config):
    from sandgym.envs.swe_repo.env import SWERepoEnv

    env = SWERepoEnv(runtime=rt, max_steps=5, warm_pool=0)
    try:
        env.reset(options={"task_id": ROUNDING.id})
        cmd = (
            f"git config {config} && git config diff.srcPrefix x/ && git config diff.external /bin/true && "
            f"mkdir -p 'ünï code' && cat > conftest.py <<'EOF'\n{FORCE_PASS_CONFTEST}EOF\n"
            "cp conftest.py 'ünï code/conftest.py'"
        )
        obs, *_ = env.step({"tool": "bash", "command": cmd})
        assert obs["feedback"].startswith("[no output, exit code 0]"), obs["feedback"]
        _, reward, done, _, info = env.step({"tool": "submit"})
        assert done and reward == 0.0
        verdict = env.last_verdict
        assert verdict is not None
        assert_not_scored(verdict, Outcome.VIOLATION)
        assert verdict.status == "NO"  # the conftest never reached the verifier's tree
        assert {"conftest.py", "ünï code/conftest.py"} <= {v.split(": ")[1] for v in verdict.violations}
        assert info["violations"] == verdict.violations
    finally:
        env.close()


def agent_diff(task, files: dict[str, str], *config: str, flags: tuple[str, ...] = ()) -> str:
    """The diff as git writes it under the agent's own configuration (how the
    env took it before issue #11)."""
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"sg-gitcfg-{os.getpid()}-{time.monotonic_ns()}"
    work.mkdir()
    try:
        with tarfile.open(fileobj=io.BytesIO(start_state(task.visible).tree_tar)) as tar:
            tar.extractall(work, filter="data")
        repo, env = work / "repo", git_env(str(work))
        cfg = [x for c in config for x in ("-c", c)]

        def git(*args):
            return subprocess.run(["git", *cfg, *args], cwd=repo, env=env, check=True, capture_output=True).stdout

        git("init", "-q")
        git("add", "-A", "-f")
        git("commit", "-q", "-m", "start")
        for rel, text in files.items():
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            (repo / rel).write_text(text)
        git("add", "-A", "-f")
        return git("diff", "--cached", "--binary", *flags).decode()
    finally:
        shutil.rmtree(work)


@pytest.mark.parametrize(
    "config, flags",
    [
        (("diff.mnemonicPrefix=true",), ()),
        (("diff.noprefix=true",), ()),
        (("diff.srcPrefix=c/", "diff.dstPrefix=o/"), ()),
        ((), ("--src-prefix=a/x/", "--dst-prefix=b/x/")),
        (("core.quotePath=false",), ()),
    ],
)
def test_diffs_in_foreign_prefix_styles_are_never_applied(config, flags):
    files = {"conftest.py": FORCE_PASS_CONFTEST, "ünï tests/test_x.py": "x = 1\n", "billing/extra.py": "y = 2\n"}
    diff = agent_diff(ROUNDING, files, *config, flags=flags)
    kept, dropped = filter_diff(diff)
    assert len(dropped) >= 2, (diff, dropped)
    # Whatever was kept, git's own reading of it names no protected path.
    assert not [p for p in git_apply_paths(kept) if protected_reason(p)], kept


# -- the defences' own edge cases --------------------------------------------------------------


def git_apply_paths(patch: str) -> list[str]:
    """Every path `git apply -p1` would touch (its own parse, not ours); []
    when git refuses the patch outright (then nothing is applied either)."""
    if not patch.strip():
        return []
    r = subprocess.run(
        ["git", "apply", "--numstat", "--summary", "-z", "-p1", "-"],
        input=patch.encode("utf-8", "surrogateescape"),
        capture_output=True,
        env={"PATH": "/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "HOME": "/"},
        cwd="/",
    )
    if r.returncode != 0:
        return []
    out = []
    for field in r.stdout.split(b"\0"):
        text = field.decode("utf-8", "surrogateescape")
        if "\t" in text:
            text = text.rsplit("\t", 1)[1]
        if text and not text.startswith(" "):
            out.append(text)
    return out


PROTECTED = ["conftest.py", "tests/test_money.py", "billing/conftest.py", "sitecustomize.py", "x.pth", "ünï tests/a.py"]
PLAIN = ["billing/money.py", "billing/sp ace.py", "billing/ünï.py", "billing/tab\tx.py"]


def _c_quote(name: str) -> str:
    out = ""
    for b in name.encode("utf-8", "surrogateescape"):
        c = chr(b)
        if c in '"\\':
            out += "\\" + c
        elif c == "\t":
            out += "\\t"
        elif b < 0x20 or b >= 0x7F:
            out += f"\\{b:03o}"
        else:
            out += c
    return f'"{out}"'


@st.composite
def diff_sections(draw):
    """One `diff --git` section in one of the shapes and prefix styles git can write."""
    styles = [("a/", "b/"), ("i/", "w/"), ("c/", "o/"), ("", ""), ("b/", "a/"), ("a/", "a/")]
    old_p, new_p = draw(st.sampled_from(styles))
    src = draw(st.sampled_from(PROTECTED + PLAIN))
    dst = draw(st.sampled_from(PROTECTED + PLAIN)) if draw(st.booleans()) else src
    shape = draw(st.sampled_from(["modify", "new", "delete", "rename", "copy", "mode", "binary", "symlink"]))
    quote = draw(st.booleans())

    def q(name: str) -> str:
        return _c_quote(name) if quote or any(ord(c) < 0x20 or ord(c) > 0x7E for c in name) else name

    if shape not in ("rename", "copy"):
        dst = src
    lines = [f"diff --git {q(old_p + src)} {q(new_p + dst)}"]
    if shape in ("rename", "copy"):
        lines += ["similarity index 90%", f"{shape} from {q(src)}", f"{shape} to {q(dst)}"]
    if shape == "mode":
        lines += ["old mode 100644", "new mode 100755"]
        return "\n".join(lines) + "\n"
    if shape == "new":
        lines += ["new file mode 100644", "index 0000000..1111111", "--- /dev/null", f"+++ {q(new_p + dst)}"]
        lines += ["@@ -0,0 +1 @@", "+import os"]
    elif shape == "symlink":
        lines += ["new file mode 120000", "index 0000000..1111111", "--- /dev/null", f"+++ {q(new_p + dst)}"]
        lines += ["@@ -0,0 +1 @@", "+../tests/test_money.py", "\\ No newline at end of file"]
    elif shape == "delete":
        lines += ["deleted file mode 100644", "index 1111111..0000000", f"--- {q(old_p + src)}", "+++ /dev/null"]
        lines += ["@@ -1 +0,0 @@", "-import os"]
    elif shape == "binary":
        lines += ["new file mode 100644", "index 0000000..1111111", "GIT binary patch", "literal 2"]
        lines += ["JcmZRu0000", "", "literal 0", "HcmV?d00001", ""]
    else:
        lines += ["index 1111111..2222222 100644", f"--- {q(old_p + src)}", f"+++ {q(new_p + dst)}"]
        lines += ["@@ -1 +1 @@", "-import os", "+import sys"]
    return "\n".join(lines) + "\n"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(diff_sections(), min_size=1, max_size=3), st.sampled_from(["", "From 0 Mon\nSubject: x\n\n"]))
def test_property_a_protected_path_is_never_applied(sections, preamble):
    diff = preamble + "".join(sections)
    kept, dropped = filter_diff(diff)
    touched = [p for s in split_diff(diff) for p in s.paths]
    applied = git_apply_paths(kept)
    # git, reading what is kept, touches no protected path ...
    assert not [p for p in applied if protected_reason(p)], (diff, kept)
    # ... every kept section was read exactly, and a protected path in a
    # section we could read is reported (dropped + violation), not just lost.
    assert all(not s.problem for s in split_diff(kept))
    if any(protected_reason(p) for p in touched):
        assert dropped, diff


def test_unreadable_sections_are_dropped_not_kept():
    traditional = "--- a/conftest.py\n+++ b/conftest.py\n@@ -0,0 +1 @@\n+import os\n"
    cases = {
        "trailing traditional diff": (
            "diff --git a/billing/money.py b/billing/money.py\nindex 1111111..2222222 100644\n"
            "--- a/billing/money.py\n+++ b/billing/money.py\n@@ -1 +1 @@\n-a\n+b\n" + traditional
        ),
        "header and --- disagree": (
            "diff --git a/billing/money.py b/billing/money.py\n--- a/conftest.py\n+++ b/conftest.py\n"
            "@@ -1 +1 @@\n-a\n+b\n"
        ),
        "bad quoting": 'diff --git "a/conftest.py b/conftest.py\n',
        "gitlink": "diff --git a/sub b/sub\nnew file mode 160000\nindex 0000000..1111111\n",
        "path into .git": "diff --git a/.git/hooks/x b/.git/hooks/x\nnew file mode 100755\n",
        "dot-dot": "diff --git a/../conftest.py b/../conftest.py\nnew file mode 100644\n",
        "hunk longer than its header": (
            "diff --git a/billing/money.py b/billing/money.py\n--- a/billing/money.py\n+++ b/billing/money.py\n"
            "@@ -1 +1 @@\n-a\n+b\n+c\n"
        ),
    }
    for name, diff in cases.items():
        kept, dropped = filter_diff(diff)
        assert kept == "" and len(dropped) == 1 and "unreadable" in dropped[0], name


def test_applied_tree_is_checked_whatever_the_diff_said(runtime, host_guard):
    """With the filter bypassed, a diff that adds a protected path, a symlink
    and a module shadowing the standard library: the tree after `git apply`,
    compared with the start state, shows all three."""
    diff = make_diff(ROUNDING, {"billing/conftest.py": FORCE_PASS_CONFTEST, "decimal.py": "x = 1\n"})
    diff += (
        "diff --git a/billing/link.py b/billing/link.py\nnew file mode 120000\nindex 0000000..1111111\n"
        "--- /dev/null\n+++ b/billing/link.py\n@@ -0,0 +1 @@\n+../tests/test_money.py\n"
        "\\ No newline at end of file\n"
    )
    attempt = verify_once(ROUNDING.visible, ROUNDING.hidden, diff, True, runtime)
    assert attempt.outcome == Outcome.VIOLATION, (attempt.status, attempt.detail)
    text = " | ".join(attempt.violations)
    assert "billing/conftest.py: conftest.py configures" in text
    assert "billing/link.py: the applied diff made a symlink file" in text
    assert "decimal.py: a new module named like 'decimal'" in text


def test_legitimate_introspection_is_noted_not_punished(runtime, host_guard):
    """A real fix that also uses inspect and gc: the scan records it, the guard
    lets it be (it touches nothing of the test machinery), FULL."""
    text = source(ROUNDING, "billing/money.py")
    text = text.replace("ROUND_HALF_EVEN", "ROUND_HALF_UP").replace(
        "from dataclasses import dataclass\n",
        "import gc\nimport inspect\nfrom dataclasses import dataclass\n",
    )
    text += "\n\nPARAMS = list(inspect.signature(round_amount).parameters)\nTRACKED = gc.is_tracked(PARAMS)\n"
    verdict = verify(ROUNDING, make_diff(ROUNDING, {"billing/money.py": text}), runtime)
    assert (verdict.outcome, verdict.status) == (Outcome.PASSED, "FULL"), (verdict.detail, verdict.violations)
    assert {"billing/money.py:5: gc", "billing/money.py:6: inspect"} <= set(verdict.scan), verdict.scan
    attempt = verdict.attempts[-1]
    assert attempt.scan == verdict.scan and attempt.checks["sentinels"]


def test_static_scan_is_precise():
    info = start_info(start_state(ROUNDING.visible))
    body = source(ROUNDING, "billing/money.py")

    def scan(new_text: str):
        return scan_diff(make_diff(ROUNDING, {"billing/money.py": new_text}), info)

    end = len(body.splitlines()) + 2  # the first line after a blank one appended
    hits, violations = scan(body + "\nimport inspect\n")
    assert hits == [f"billing/money.py:{end}: inspect"] and not violations
    hits, violations = scan(body + "\nimport _pytest.runner\n_pytest.runner.call_and_report = None\n")
    assert len(violations) == 2 and all("(_pytest)" in v for v in violations)
    _, violations = scan(body + "\nM = __import__('_py' + 'test')\n")
    assert violations == [f"billing/money.py:{end}: the fix reaches into the test machinery (_pytest)"]
    # A file that already used pytest may keep doing so.
    info.texts["billing/money.py"] = body + "\nimport pytest\n"
    try:
        _, violations = scan(body + "\nimport pytest\nimport pytest\n")
        assert violations == []
    finally:
        info.texts["billing/money.py"] = body


def test_the_guard_runs_nothing_it_looks_up_at_run_time():
    """Every function the guard builds reads only its closure: no global or
    builtin name is looked up while it runs, so nothing the tests replace later
    (a builtin, a module attribute) ever runs inside it."""
    import sys

    sys.path.insert(0, str(Path(boundary_mount().source)))
    try:
        import sandgym_swe_guard
    finally:
        sys.path.pop(0)

    def nested(code):
        for c in code.co_consts:
            if isinstance(c, types.CodeType):
                yield c
                yield from nested(c)

    lookups = {
        (c.co_name, i.argval)
        for c in nested(sandgym_swe_guard.arm.__code__)
        for i in dis.get_instructions(c)
        if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")
    }
    assert lookups == set()


def test_records_cross_checks_and_sentinel_rules():
    """The host's reading of signed records: what makes a run a violation, and
    what is only the candidate's failure (its module would not import, a
    fixture broke)."""
    from sandgym.verifiers.swe_repo.records import TestRun, parse_records
    from sandgym.verifiers.swe_repo.sentinels import Sentinel, sentinel_problems

    mod = "tests/test_money.py"
    ok, bad = Sentinel(mod, "test_a_b_1", True, ""), Sentinel(mod, "test_a_b_2", False, "")

    def run_of(*records):
        run = TestRun(exit_code=1)
        ids = [r["nodeid"] for r in records if r.get("kind") == "report"]
        head = [{"kind": "armed"}, {"kind": "collected", "n": len(ids), "ids": ids}]
        parse_records([*head, *records, {"kind": "finish", "exitstatus": 1}], run)
        return run

    def call(nodeid, outcome, raised):
        # The guard merges what the plugin saw the call do into the call's report.
        return [{"kind": "report", "nodeid": nodeid, "when": "call", "outcome": outcome, "raised": raised}]

    honest = run_of(*call(ok.nodeid, "passed", False), *call(bad.nodeid, "failed", True))
    assert honest.valid and not honest.violations and sentinel_problems(honest, [ok, bad])[0] == []

    forced = run_of(*call(ok.nodeid, "passed", False), *call(bad.nodeid, "passed", True))
    assert "reported passed, but its call raised" in forced.violations[0]
    assert "must fail, was passed" in sentinel_problems(forced, [ok, bad])[0][0]

    gone = run_of(*call(ok.nodeid, "passed", False), *call(f"{mod}::test_other", "failed", True))
    assert [p for p in sentinel_problems(gone, [ok, bad])[0] if "went missing" in p]

    broken_module = TestRun(exit_code=1)
    parse_records(
        [
            {"kind": "armed"},
            {"kind": "collect_error", "nodeid": mod, "detail": "ImportError"},
            {"kind": "collected", "n": 0, "ids": []},
            {"kind": "finish", "exitstatus": 1},
        ],
        broken_module,
    )
    assert broken_module.valid and sentinel_problems(broken_module, [ok, bad])[0] == []

    fixture_broke = run_of(
        {"kind": "report", "nodeid": ok.nodeid, "when": "setup", "outcome": "failed"},
        {"kind": "report", "nodeid": bad.nodeid, "when": "setup", "outcome": "failed"},
    )
    assert sentinel_problems(fixture_broke, [ok, bad])[0] == []

    twice = run_of(*call(ok.nodeid, "passed", False), *call(ok.nodeid, "passed", False))
    assert any("a second call report" in v for v in twice.violations)

    unseen = run_of(*call(ok.nodeid, "passed", None))
    assert "reported passed, but its call was not seen" in unseen.violations[0]
