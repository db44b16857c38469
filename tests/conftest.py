"""Shared fixtures. Sandboxes here are real: bubblewrap, installed by scripts/setup.sh."""

from __future__ import annotations

import os

import pytest

from sandgym.runtimes.local.runtime import LocalRuntime


def pytest_collection_modifyitems(config, items):
    # Soak tests run in full only when asked; CI runs a bounded sample.
    if os.environ.get("SANDGYM_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow soak test: set SANDGYM_SLOW=1")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


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
