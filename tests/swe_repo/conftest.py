"""Fixtures of the SWE security tests: a runtime per backend and the guard
that fails a test when anything outside the sandbox changed."""

from __future__ import annotations

import pytest

from sandgym.runtimes import get_runtime

from .security_helpers import nothing_outside_changes


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
