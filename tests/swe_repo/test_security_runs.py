"""Attacks on the answer and the score, tried for real: mining the agent
sandbox's git history or the network for the fix, fake PASSED lines and
forged record files, reading the runner through /proc, broken, exited,
skipped or timed-out runs; and the host's own reading of the scan and the
signed records. Every test asserts the outcome (never `passed`; never an
`env_error` the attacker could force) and that nothing outside the sandbox
changed.
"""

from __future__ import annotations

import dis
import types
from pathlib import Path

from sandgym.envs.swe_repo.redteam import payloads
from sandgym.outcomes import Outcome
from sandgym.verifiers.swe_repo.checkout import start_state
from sandgym.verifiers.swe_repo.host import SWEAttempt, verify
from sandgym.verifiers.swe_repo.path_policy import start_info
from sandgym.verifiers.swe_repo.sandbox import boundary_mount
from sandgym.verifiers.swe_repo.scan import scan_diff

from .security_helpers import (
    ROUNDING,
    assert_not_scored,
    make_diff,
    source,
    with_prefix,
)

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


# -- forged results ------------------------------------------------------------------------------


def test_fake_passed_lines_and_forged_record_files(runtime, host_guard):
    # The ids named outright (the catalogue's program reads them from the test files, itself a violation).
    forge = payloads.OUTPUT_FORGERY.replace("_sg_tests()", repr(list(ROUNDING.hidden.FAIL_TO_PASS)))
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


# -- the scan and the records, read on the host ----------------------------------------------


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
    assert isinstance(attempt, SWEAttempt)
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

    def run_of(*records: dict) -> TestRun:
        run = TestRun(exit_code=1)
        ids = [r["nodeid"] for r in records if r.get("kind") == "report"]
        head: list[dict] = [{"kind": "armed"}, {"kind": "collected", "n": len(ids), "ids": ids}]
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
