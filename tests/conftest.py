"""Shared fixtures. Sandboxes here are real: bubblewrap, installed by scripts/setup.sh."""

from __future__ import annotations

import os

import pytest

from sandgym.runtimes.local import LocalRuntime


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
