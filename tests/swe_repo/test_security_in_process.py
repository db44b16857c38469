"""Attacks from inside the test run (issue #11), tried for real.

The code under test runs in pytest's own process: each attack is a diff to
billing's own modules that tampers at import or at call time, as a real
attacker would write it. They run on the local runtime (pytest in
namespaces of its own) and on docker with runc (no user namespaces: pytest
as the runner's user). ROUNDING's FAIL_TO_PASS tests are in
tests/test_money.py; billing is first imported by tests/test_discounts.py.
The payloads come from the family's attack catalogue
(envs/swe_repo/redteam/payloads.py, which `sandgym redteam` plays too).
Every test asserts the outcome and that nothing outside the sandbox changed.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from sandgym.envs.swe_repo.redteam import payloads
from sandgym.outcomes import Outcome
from sandgym.verifiers.swe_repo.host import verify
from sandgym.verifiers.swe_repo.sandbox import staged_venv
from sandgym.verifiers.swe_repo.sources import test_venv as cached_venv  # (not collected as a test)

from .security_helpers import (
    ROUNDING,
    assert_not_scored,
    at_call,
    make_diff,
    source,
    violated,
    with_prefix,
)

# -- attacks from inside the test run (issue #11) -----------------------------------------------
#
# Each is a diff to billing's own code; billing is imported by the tests, so
# the code runs in pytest's process. ROUNDING's FAIL_TO_PASS tests are in
# tests/test_money.py; billing is first imported by tests/test_discounts.py.


def test_the_test_process_has_a_fixed_hash_seed(runtime, host_guard):
    """PYTHONHASHSEED=0 reaches pytest's interpreter (started with -s -P,
    not -I, whose -E would drop it): test ids made from sets and dicts stay
    the same from run to run (the task factory compares them)."""
    seeded = "import sys\nassert sys.flags.hash_randomization == 0, 'hash seed lost'"
    fix = make_diff(ROUNDING, with_prefix(ROUNDING, "billing/tax.py", seeded), gold=True)
    verdict = verify(ROUNDING, fix, runtime)
    assert (verdict.outcome, verdict.status) == (Outcome.PASSED, "FULL"), verdict.detail


# 1. patching pytest from the package under test


def test_runtest_made_a_no_op_at_import(rt, rt_guard):
    attack = payloads.RUNTEST_NO_OP
    verdict = verify(ROUNDING, make_diff(ROUNDING, with_prefix(ROUNDING, "billing/money.py", attack)), rt)
    violated(verdict, "machinery: _pytest.python.Function.runtest was changed")
    # The static scan saw it too, and it is on the record.
    assert any("_pytest" in hit for hit in verdict.scan)
    assert any("reaches into the test machinery (_pytest)" in v for v in verdict.violations)


def test_reports_forced_to_pass_at_import(rt, rt_guard):
    attack = payloads.REPORTS_FORCED_OBFUSCATED
    verdict = verify(ROUNDING, make_diff(ROUNDING, with_prefix(ROUNDING, "billing/money.py", attack)), rt)
    # No literal _pytest for the static scan: the guard's machinery check catches it.
    violated(verdict, "_pytest.reports.TestReport.from_item_and_call was changed")


def test_self_restoring_patch_installed_during_the_call(rt, rt_guard):
    """Patched while the test runs, undone by its own first use: the report
    says passed, but the plugin saw the call raise."""
    attack = payloads.SELF_RESTORING_PATCH
    verdict = verify(ROUNDING, at_call(ROUNDING, attack), rt)
    violated(verdict, "was reported passed, but its call raised")
    assert not any("test machinery" in v for v in verdict.violations)  # the scan could not see it


def test_items_swapped_through_frames(rt, rt_guard):
    """Frames walked with f_back (no audit event) to the session's items, whose
    test functions are swapped for no-ops on the instances."""
    attack = payloads.ITEMS_SWAPPED
    verdict = verify(ROUNDING, at_call(ROUNDING, attack), rt)
    violated(verdict, "item: tests/", "the function it calls comes from /workspace/repo/billing/money.py")


def test_exception_swallowed_between_the_test_and_the_report(rt, rt_guard):
    """Installed while the test runs and gone once used: a context manager
    exit (pytest's capture wraps every call in one) that swallows the test's
    AssertionError. pytest reports a pass; the plugin saw the test function raise."""
    attack = payloads.EXCEPTION_SWALLOWED
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
    attack = payloads.RECORDS_FORGED_ON_PIPE
    verdict = verify(ROUNDING, make_diff(ROUNDING, with_prefix(ROUNDING, "billing/money.py", attack)), rt)
    violated(verdict, "on the records channel")


def test_plugin_hook_called_with_a_forged_report(rt, rt_guard):
    attack = payloads.RECORDS_HOOK_FORGED
    verdict = verify(ROUNDING, make_diff(ROUNDING, with_prefix(ROUNDING, "billing/money.py", attack)), rt)
    violated(verdict, "forged-record: a record handed to the plugin by /workspace/repo/billing/money.py")
    violated(verdict, "forged-record: a record was handed over by /workspace/repo/billing/money.py")


def test_closing_the_records_channel(rt, rt_guard):
    """Every pipe closed: the guard's next write finds its channel gone and ends the process."""
    attack = payloads.CLOSE_RECORDS_CHANNEL
    verdict = verify(ROUNDING, make_diff(ROUNDING, with_prefix(ROUNDING, "billing/money.py", attack), gold=True), rt)
    violated(verdict, "the guard found its channel replaced or closed")


# 3. the nonce: other processes' memory and descriptors, a forged answer, the runner killed


NONCE_THIEF = payloads.NONCE_THIEF


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
    kill = payloads.KILL_RUNNER
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
    attack = payloads.VENV_WRITE
    env = ROUNDING.visible.environment
    before = venv_state(cached_venv(env)), venv_state(staged_venv(env))
    verdict = verify(ROUNDING, make_diff(ROUNDING, with_prefix(ROUNDING, "billing/tax.py", attack), gold=True), rt)
    assert (venv_state(cached_venv(env)), venv_state(staged_venv(env))) == before
    assert verdict.outcome == Outcome.PASSED, (verdict.status, verdict.detail)


# 4. rewriting the patched test files and running pytest again


def test_tests_rewritten_at_import_and_pytest_run_again(rt, rt_guard):
    attack = payloads.TESTS_REWRITTEN_AND_REEXEC
    verdict = verify(ROUNDING, make_diff(ROUNDING, with_prefix(ROUNDING, "billing/money.py", attack)), rt)
    violated(verdict, "os.exec: the test process tried to replace itself")
    assert any("opened for writing" in v or "changed on disk" in v for v in verdict.violations)


def test_tests_rewritten_before_they_are_compiled(rt, rt_guard):
    """tests/test_money.py (listed first) imports billing: the test modules
    collected after it are rewritten on disk before pytest compiles them
    (docker: they can be, by mode only read-only; local: a read-only mount)."""
    attack = payloads.TESTS_REWRITTEN_BEFORE_COMPILE
    verdict = verify(ROUNDING, make_diff(ROUNDING, with_prefix(ROUNDING, "billing/money.py", attack)), rt)
    violated(verdict, "fs: a test file was changed on disk")  # the chmod, seen as it happened
    if getattr(rt, "name", "") == "docker":
        violated(verdict, "tests/test_invoice.py was compiled from a source the verifier did not apply")
        violated(verdict, "test file changed while the tests ran: tests/test_invoice.py")
    else:
        assert not any("compiled from a source" in v for v in verdict.violations)  # read-only: nothing was written


def test_test_code_recompiled_in_memory(rt, rt_guard):
    attack = payloads.TEST_RECOMPILED_IN_MEMORY
    verdict = verify(ROUNDING, at_call(ROUNDING, attack), rt)
    violated(verdict, "read the test file", "compiled the test file")


def test_sentinels_removed_by_an_import_hook(rt, rt_guard):
    """A finder that strips, from every test module it loads, the tests the
    verifier did not list in the issue: the sentinels go missing."""
    attack = payloads.SENTINEL_STRIP_HOOK
    verdict = verify(ROUNDING, make_diff(ROUNDING, with_prefix(ROUNDING, "billing/money.py", attack), gold=True), rt)
    assert_not_scored(verdict, Outcome.VIOLATION)
    # Its loader runs the test modules from the package's code: seen at once.
    assert any("compiled the test file" in v for v in verdict.violations), verdict.violations
