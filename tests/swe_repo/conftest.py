"""Fixtures of the SWE security tests: a runtime per backend and the guard
that fails a test when anything outside the sandbox changed; an empty venv
in a build area, the guard of the build sandbox's tests."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandgym.runtimes import get_runtime
from sandgym.verifiers.swe_repo.wheels import SANDBOX_PYTHON, build_area, venv_place

from .security_helpers import nothing_outside_changes
from .wheel_craft import OUTSIDE, public_folder, snapshot


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


@pytest.fixture
def fresh_venv() -> Iterator[Path]:
    """An empty venv in a build area, as test_venv makes it."""
    with build_area() as area:
        venv = venv_place(area)
        subprocess.run([SANDBOX_PYTHON, "-m", "venv", "--without-pip", str(venv)], check=True)
        yield venv


@pytest.fixture
def host_watch(tmp_path):
    """Fails the test if anything outside the venv changed: the escape
    target, the test's folder (the venv aside) and the wheels."""
    escape = Path(OUTSIDE)
    assert not escape.exists(), f"{escape} is left over: remove it"
    watched = tmp_path / "watched"
    watched.mkdir()
    (watched / "secret").write_text("host secret\n")
    before = snapshot(watched)
    yield watched
    assert not escape.exists(), f"{escape} was written from the build sandbox"
    assert snapshot(watched) == before, "a host folder outside the sandbox changed"


@pytest.fixture
def wheels() -> Iterator[Path]:
    """A wheels folder the build user can read."""
    with public_folder() as d:
        yield d
