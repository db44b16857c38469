"""Shared fixtures. Sandboxes here are real: bubblewrap, installed by scripts/setup.sh.

Tests that need a sandbox carry the `sandbox` marker: set here on every
test that uses a sandbox fixture (`runtime`, `bwrap_runtime`,
`k8s_cluster`, or one built on them) or is marked `docker`, `chromium` or
`k8s`, and by hand (`@pytest.mark.sandbox`) on a test that makes its own.
`pytest --quick` (`scripts/test.sh --quick`) runs the rest, with
bubblewrap replaced on PATH by a tripwire: a test that starts a sandbox
without the marker fails, naming the marker it needs.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest

from sandgym.runtimes.local import LocalRuntime

# What makes a test need a sandbox, besides the `sandbox` marker itself.
SANDBOX_FIXTURES = ("runtime", "bwrap_runtime", "k8s_cluster")
SANDBOX_MARKERS = ("docker", "chromium", "k8s")
# In --quick runs: the file the tripwire appends the running test's id to.
TRIPWIRE_LOG = "SANDGYM_QUICK_TRIPWIRE"


def pytest_addoption(parser):
    parser.addoption(
        "--quick",
        action="store_true",
        help="run only the tests that need no sandbox (no bubblewrap, Docker, Chromium or Kubernetes)",
    )


def pytest_configure(config):
    if not config.getoption("--quick"):
        return
    # bubblewrap is found on PATH (shutil.which), by this process and by the
    # sandgym commands tests start: put a tripwire first on PATH.
    tripwire = Path(tempfile.mkdtemp(prefix="sandgym-quick-"))
    log = tripwire / "started.log"
    log.touch()
    shim = tripwire / "bwrap"
    shim.write_text(
        '#!/bin/sh\necho "$PYTEST_CURRENT_TEST" >> "$SANDGYM_QUICK_TRIPWIRE"\n'
        'echo "bwrap: not in a --quick test run (the test needs the sandbox marker)" >&2\nexit 127\n'
    )
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    os.environ["PATH"] = f"{tripwire}{os.pathsep}{os.environ.get('PATH', '')}"
    os.environ[TRIPWIRE_LOG] = str(log)


def needs_sandbox(item: pytest.Item) -> bool:
    fixtures = getattr(item, "fixturenames", ())
    return any(f in fixtures for f in SANDBOX_FIXTURES) or any(
        item.get_closest_marker(m) for m in ("sandbox", *SANDBOX_MARKERS)
    )


def pytest_collection_modifyitems(config, items):
    for item in items:
        if needs_sandbox(item) and not item.get_closest_marker("sandbox"):
            item.add_marker(pytest.mark.sandbox)
    if config.getoption("--quick"):
        quick = [i for i in items if not i.get_closest_marker("sandbox")]
        config.hook.pytest_deselected(items=[i for i in items if i.get_closest_marker("sandbox")])
        items[:] = quick
    # Soak tests run in full only when asked; CI runs a bounded sample.
    if os.environ.get("SANDGYM_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow soak test: set SANDGYM_SLOW=1")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    log = os.environ.get(TRIPWIRE_LOG)
    if not log or call.when != "teardown":
        return
    started = [line for line in Path(log).read_text().splitlines() if line.startswith(item.nodeid + " ")]
    if started:
        report = outcome.get_result()
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} started a sandbox (bubblewrap) in a --quick run: "
            "mark it @pytest.mark.sandbox or give it the `runtime` fixture"
        )


@pytest.fixture(scope="session")
def runtime():
    rt = LocalRuntime()
    yield rt
    rt.close()


@pytest.fixture(scope="session")
def bwrap_runtime():
    """A runtime that starts one bubblewrap process per sandbox (no zygote)."""
    rt = LocalRuntime(zygote=False)
    yield rt
    rt.close()


K8S_SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "k8s-cluster.sh")


@pytest.fixture(scope="session")
def k8s_cluster():
    """The real single-node test cluster (scripts/k8s-cluster.sh), started
    for the tests that need it and stopped after them if they started it."""
    import subprocess

    status = subprocess.run(["bash", K8S_SCRIPT, "status"], capture_output=True, text=True)
    started = "kube-apiserver: running" not in status.stdout
    if started:
        up = subprocess.run(["bash", K8S_SCRIPT, "up"], capture_output=True, text=True)
        assert up.returncode == 0, f"scripts/k8s-cluster.sh up failed:\n{up.stdout[-3000:]}\n{up.stderr[-3000:]}"
    # The script says where its kubeconfig is and which node pods name.
    env_line = subprocess.run(["bash", K8S_SCRIPT, "env"], capture_output=True, text=True, check=True).stdout
    wanted = dict(item.split("=", 1) for item in env_line.split()[1:])
    saved = {k: os.environ.get(k) for k in wanted}
    os.environ.update(wanted)
    kubeconfig = wanted["KUBECONFIG"]
    yield kubeconfig
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    if started:
        subprocess.run(["bash", K8S_SCRIPT, "down"], capture_output=True, text=True)
