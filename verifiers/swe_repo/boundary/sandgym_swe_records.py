"""The verifier's pytest plugin: what pytest did, handed to the guard.

Loaded with `-p sandgym_swe_records` from the read-only verifier mount,
imported by pytest_child.py before the guard is armed (the guard keeps
the code objects of this module's functions). It writes nothing itself:
each record goes through `sys.audit("sandgym.swe.record", ...)` to the
guard (sandgym_swe_guard.py), which writes it to the runner, signed,
only when it comes from `_emit` called by one of these hooks with no code
of the package on the stack. Records: `collected` (the items that will
run), `collect_error`, `call_start` / `call_end` (around each test's call:
whether it raised, and whether the test function itself raised, seen from
around pytest's own call of it), `report` (each call, and each setup or
teardown that did not pass), `finish` (pytest's
exit status). Nothing here decides a score; the host does.

Replacing anything here from inside the test process can only silence
records (a missing record fails the test); it cannot make one.

PYTEST_DONT_REWRITE (imported before pytest starts; no assertions here).
"""

import json
import os
import sys

import pytest

_audit = sys.audit
_wanted: set[str] | None = None  # node ids to run
_prefixes: tuple[str, ...] = ()  # files or folders whose tests all run


def _take_selection():
    global _wanted, _prefixes
    select = os.environ.pop("SANDGYM_SWE_SELECT", None)
    if select:
        with open(select) as f:
            listed = json.load(f)
        _wanted = {t for t in listed if "::" in t}
        _prefixes = tuple(t.rstrip("/") for t in listed if "::" not in t)


_take_selection()


def _emit(kind, fields, obj=None):
    _audit("sandgym.swe.record", kind, fields, obj)


def _text(longrepr, limit=3000):
    if longrepr is None:
        return ""
    return str(longrepr)[-limit:]


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    # Last: the guard takes in what pytest's own plugins changed while configuring.
    _emit("configured", {}, config)


def pytest_collectreport(report):
    if report.failed:
        _emit("collect_error", {"nodeid": report.nodeid, "detail": _text(report.longrepr)}, report)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    # Only the listed tests run; the others are deselected, never skipped.
    if _wanted is None:
        return

    def listed(nodeid):
        return nodeid in _wanted or any(nodeid.startswith(p + "::") or nodeid.startswith(p + "/") for p in _prefixes)

    keep = [it for it in items if listed(it.nodeid)]
    dropped = [it for it in items if not listed(it.nodeid)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = keep


def pytest_collection_finish(session):
    _emit("collected", {}, session)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_call(item):
    # The outermost wrapper: it sees exactly what pytest's CallInfo sees.
    nodeid = item.nodeid
    _emit("call_start", {"nodeid": nodeid}, item)
    try:
        result = yield
    except BaseException:
        _emit("call_end", {"nodeid": nodeid, "raised": True}, item)
        raise
    _emit("call_end", {"nodeid": nodeid, "raised": False}, item)
    return result


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    # Around pytest's own call of the test function: the innermost observer.
    try:
        result = yield
    except BaseException:
        _emit("pyfunc_end", {"raised": True}, pyfuncitem)
        raise
    _emit("pyfunc_end", {"raised": False}, pyfuncitem)
    return result


def pytest_runtest_logreport(report):
    if report.when != "call" and report.passed:
        return  # a setup or teardown that passed tells the host nothing
    record = {
        "nodeid": report.nodeid,
        "when": report.when,
        "outcome": report.outcome,
        "xfail": hasattr(report, "wasxfail"),
    }
    if report.failed:
        record["detail"] = _text(report.longrepr)
    _emit("report", record, report)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    _emit("finish", {"exitstatus": int(exitstatus)}, session)
