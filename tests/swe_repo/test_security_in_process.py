"""Attacks from inside the test run (issue #11), tried for real.

The code under test runs in pytest's own process: each attack is a diff to
billing's own modules that tampers at import or at call time, as a real
attacker would write it. They run on the local runtime (pytest in
namespaces of its own) and on docker with runc (no user namespaces: pytest
as the runner's user). ROUNDING's FAIL_TO_PASS tests are in
tests/test_money.py; billing is first imported by tests/test_discounts.py.
Every test asserts the outcome and that nothing outside the sandbox changed.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from sandgym.outcomes import Outcome
from sandgym.verifiers.swe_repo.host import verify
from sandgym.verifiers.swe_repo.sandbox import staged_venv
from sandgym.verifiers.swe_repo.sources import test_venv as cached_venv  # (not collected as a test)

from .security_helpers import (
    F2P,
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
