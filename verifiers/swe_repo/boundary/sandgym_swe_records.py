"""The verifier's pytest plugin: one JSON line per event, written to a pipe.

Loaded with `-p sandgym_swe_records` from the read-only verifier mount.
The runner passes the write end of a pipe as a file descriptor whose
number is in $SANDGYM_SWE_RECORD_FD; the plugin takes the number out of
the environment at import (before any repository code runs) and keeps the
descriptor out of subprocesses. Records: `collected` (the items that will
run), `collect_error`, `report` (one per test phase), `finish` (pytest's
exit status). Nothing here decides a score; the host does, from these
records and the process's exit code.

PYTEST_DONT_REWRITE (imported before pytest starts; no assertions here).
"""

import json
import os

import pytest

_fd = None
_wanted = None  # node ids to run
_prefixes = ()  # files or folders whose tests all run


def _take_channel():
    global _fd, _wanted, _prefixes
    raw = os.environ.pop("SANDGYM_SWE_RECORD_FD", None)
    if raw is not None:
        _fd = int(raw)
        os.set_inheritable(_fd, False)
    select = os.environ.pop("SANDGYM_SWE_SELECT", None)
    if select:
        with open(select) as f:
            listed = json.load(f)
        _wanted = {t for t in listed if "::" in t}
        _prefixes = tuple(t.rstrip("/") for t in listed if "::" not in t)


_take_channel()


def _emit(record):
    if _fd is None:
        return
    data = (json.dumps(record) + "\n").encode()
    while data:
        data = data[os.write(_fd, data) :]


def _text(longrepr, limit=3000):
    if longrepr is None:
        return ""
    text = str(longrepr)
    return text[-limit:]


def pytest_collectreport(report):
    if report.failed:
        _emit({"kind": "collect_error", "nodeid": report.nodeid, "detail": _text(report.longrepr)})


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
    _emit({"kind": "collected", "n": len(session.items), "ids": [it.nodeid for it in session.items]})


def pytest_runtest_logreport(report):
    record = {
        "kind": "report",
        "nodeid": report.nodeid,
        "when": report.when,
        "outcome": report.outcome,
        "xfail": hasattr(report, "wasxfail"),
    }
    if report.failed:
        record["detail"] = _text(report.longrepr)
    _emit(record)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    _emit({"kind": "finish", "exitstatus": int(exitstatus)})
