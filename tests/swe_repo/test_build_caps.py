"""Building a task's test environment is bounded, and leaves nothing behind (issue 37).

Caps (verifiers/swe_repo/build_caps.py) on the bytes downloaded, the
wheels' unpacked size, each build process's memory and each step's time:
a build over one stops with one line naming the cap's variable and how to
raise it, and nothing outside the build changed. A build killed halfway
leaves its area for `sandgym gc`; a host without bubblewrap builds nothing.

Offline: the wheels come from a local folder (PIP_NO_INDEX, PIP_FIND_LINKS),
a stand-in pytest among them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandgym.runtimes.rootfs import rootfs_cache
from sandgym.specs.swe_repo import TestEnvironment as Environment
from sandgym.verifiers.swe_repo import build_caps
from sandgym.verifiers.swe_repo.build_caps import CapError
from sandgym.verifiers.swe_repo.sources import RepoError, environment_key
from sandgym.verifiers.swe_repo.sources import test_venv as build_test_venv
from sandgym.verifiers.swe_repo.wheels import BOX_VENV, Step, check_unpacked, fetch_wheels, pip_as_build_user, sandboxed

from .wheel_craft import make_wheel, public_folder

NAME = "sandgymprobecap"
PIP_PIN = "pytest==8.3.4"  # every test venv's; a stand-in here


def _one_line_cap(err: Exception, cap: build_caps.Cap) -> str:
    message = str(err)
    assert "\n" not in message, message
    assert cap.variable in message and "raise it" in message, message
    return message


def _processes_naming(text: str) -> list[str]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
            except OSError:
                continue
            if text in cmd:
                out.append(f"{entry}: {cmd[:200]}")
    return out


def _wait_gone(text: str) -> list[str]:
    """The processes whose command line names `text`, once they had 10 s to die."""
    deadline = time.monotonic() + 10
    while (left := _processes_naming(text)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


@pytest.mark.parametrize("raw", ["x", "0", "-1", "1.5", "1e9"])
def test_a_cap_that_is_not_a_whole_number_is_one_line(monkeypatch, raw):
    monkeypatch.setenv(build_caps.MEMORY.variable, raw)
    with pytest.raises(CapError) as err:
        build_caps.value(build_caps.MEMORY)
    message = str(err.value)
    assert "\n" not in message and build_caps.MEMORY.variable in message and repr(raw) in message


def test_wheels_over_the_unpacked_cap_are_refused_before_install(tmp_path, monkeypatch):
    """A small wheel that unpacks to 40 MB (zeros compress well): the sizes
    its members record are summed before pip sees it."""
    wheel = make_wheel(tmp_path, NAME, {"bomb.bin": bytes(40 << 20)}, deflate=True)
    assert wheel.stat().st_size < 1 << 20
    monkeypatch.setenv(build_caps.UNPACKED.variable, "8")
    with pytest.raises(CapError) as err:
        check_unpacked([wheel])
    assert wheel.name in _one_line_cap(err.value, build_caps.UNPACKED)
    monkeypatch.setenv(build_caps.UNPACKED.variable, "64")
    check_unpacked([wheel])  # under a higher cap it passes


# -- the build sandbox's caps ------------------------------------------------------------


def _hostile(script: str) -> Step:
    return Step("a hostile build step", ["/bin/sh", "-c", script])


@pytest.mark.sandbox
def test_a_build_step_over_the_memory_cap_is_stopped(fresh_venv, host_watch, monkeypatch):
    monkeypatch.setenv(build_caps.MEMORY.variable, "200")
    grab = "python3 -c 'x = bytearray(400 << 20); print(len(x))'"
    with pytest.raises(CapError) as err:
        sandboxed(fresh_venv, [_hostile(grab)], {})
    _one_line_cap(err.value, build_caps.MEMORY)
    monkeypatch.setenv(build_caps.MEMORY.variable, "1024")
    fresh_venv.parent.chmod(0o711)  # (a build closes its area to the build user; open it again, as made)
    sandboxed(fresh_venv, [_hostile(f"{grab} > {BOX_VENV}/ok")], {})  # the same step, under a higher cap
    assert (fresh_venv / "ok").read_text() == f"{400 << 20}\n"


@pytest.mark.sandbox
def test_a_build_step_over_the_time_cap_is_killed(fresh_venv, host_watch, monkeypatch):
    monkeypatch.setenv(build_caps.TIME.variable, "2")
    with pytest.raises(CapError) as err:
        sandboxed(fresh_venv, [_hostile("sleep 61.25; echo late > /opt/venv/late")], {})
    _one_line_cap(err.value, build_caps.TIME)
    assert _wait_gone("sleep 61.25") == []  # the sandbox died with it
    assert not (fresh_venv / "late").exists()


@pytest.mark.sandbox
def test_a_file_over_the_unpacked_cap_is_cut_and_refused(fresh_venv, host_watch, monkeypatch):
    monkeypatch.setenv(build_caps.UNPACKED.variable, "1")
    write = f"python3 -c \"open('{BOX_VENV}/big', 'wb').write(bytes(3 << 20))\""
    with pytest.raises(CapError) as err:
        sandboxed(fresh_venv, [_hostile(write)], {})
    _one_line_cap(err.value, build_caps.UNPACKED)
    assert (fresh_venv / "big").stat().st_size <= 1 << 20


@pytest.mark.sandbox
def test_a_venv_over_the_unpacked_cap_in_small_files_is_refused(fresh_venv, host_watch, monkeypatch):
    monkeypatch.setenv(build_caps.UNPACKED.variable, "1")
    many = f"for i in 1 2 3 4; do head -c 400000 /dev/zero > {BOX_VENV}/part$i; done"
    with pytest.raises(CapError) as err:
        sandboxed(fresh_venv, [_hostile(many)], {})
    assert "checking the built venv" in _one_line_cap(err.value, build_caps.UNPACKED)


# -- the download's cap ----------------------------------------------------------------------


@pytest.fixture
def offline(monkeypatch) -> Iterator[Path]:
    """A find-links folder the build user can read, and pip kept off the index."""
    with public_folder() as links:
        monkeypatch.setenv("PIP_FIND_LINKS", str(links))
        monkeypatch.setenv("PIP_NO_INDEX", "1")
        yield links


def test_a_download_over_its_cap_is_stopped_and_leaves_no_pip(offline, monkeypatch):
    make_wheel(offline, NAME, {"noise.bin": os.urandom(3 << 20)})
    monkeypatch.setenv(build_caps.DOWNLOAD.variable, "1")
    with pip_as_build_user() as (pip, work), pytest.raises(CapError) as err:
        fetch_wheels([f"{NAME}==1.0"], pip, work)
    _one_line_cap(err.value, build_caps.DOWNLOAD)
    assert not work.exists()  # the scratch folder went with it
    assert _wait_gone(str(work)) == []
    monkeypatch.setenv(build_caps.DOWNLOAD.variable, "8")
    with pip_as_build_user() as (pip, work):
        [got] = fetch_wheels([f"{NAME}==1.0"], pip, work)  # under a higher cap it is fetched
        assert got.stat().st_size > 3 << 20


# -- a killed build, and a host without bubblewrap ------------------------------------------


@pytest.fixture
def offline_cache(offline, monkeypatch) -> Iterator[Path]:
    """A venv cache the build user can walk (so builds happen in its build
    areas), the image roots linked from the shared cache; the stand-in
    pytest and a wheel of many modules (a build that takes a while) offered."""
    make_wheel(offline, "pytest", {"pytest/__init__.py": b"version = '8.3.4'\n"}, version="8.3.4")
    make_wheel(offline, NAME, {f"{NAME}/m{i}.py": f"def f{i}(x):\n    return x + {i}\n".encode() for i in range(3000)})
    roots = rootfs_cache()
    with public_folder() as cache:
        (cache / "rootfs").symlink_to(roots)
        monkeypatch.setenv("SANDGYM_CACHE", str(cache))
        yield cache


@pytest.mark.sandbox
def test_a_killed_build_leaves_its_area_for_gc_and_builds_again(offline_cache):
    env = Environment(requirements=[f"{NAME}==1.0"])
    venvs, builds = offline_cache / "venvs", offline_cache / "build"
    code = (
        "from sandgym.specs.swe_repo import TestEnvironment as E\n"
        "from sandgym.verifiers.swe_repo.sources import test_venv\n"
        f"test_venv(E(requirements=[{NAME + '==1.0'!r}]))\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE)
    manifest = venvs / f"{environment_key(env)}.wheels"
    while not manifest.exists() and child.poll() is None:  # fetched and checked: pip runs in the sandbox now
        time.sleep(0.01)
    assert child.poll() is None, f"the build ended before it could be killed: {child.stderr.read()!r}"  # type: ignore[union-attr]
    child.send_signal(signal.SIGKILL)
    child.wait()
    tag = f"sandgym-build-{child.pid}-"
    [area] = [p for p in builds.iterdir() if p.name.startswith(tag)]
    assert _wait_gone(tag) == [] and _wait_gone(f"sandgym-pip-{child.pid}-") == []  # died with the build
    assert not (venvs / environment_key(env)).exists()
    gc = subprocess.run(
        [sys.executable, "-m", "sandgym", "gc", "--owner", str(child.pid)], capture_output=True, text=True, timeout=120
    )
    assert gc.returncode == 0, gc.stderr
    assert not area.exists() and area.name in gc.stdout, gc.stdout
    venv = build_test_venv(env)  # and the next build makes it whole
    assert (venv / ".complete").exists() and list(builds.iterdir()) == []


def test_a_host_without_bubblewrap_builds_nothing(offline_cache, tmp_path, monkeypatch):
    """No other build sandbox is there (a Docker-only host): one line says
    what to install, before anything is downloaded or laid out."""
    tools = tmp_path / "bin"
    tools.mkdir()
    for tool in ("setpriv", "prlimit"):
        (tools / tool).symlink_to(f"/usr/bin/{tool}")
    monkeypatch.setenv("PATH", str(tools))
    with pytest.raises(RepoError) as err:
        build_test_venv(Environment(requirements=[f"{NAME}==1.0"]))
    message = str(err.value)
    assert "\n" not in message and "bubblewrap" in message and "apt-get install bubblewrap" in message
    assert [p.name for p in (offline_cache / "venvs").iterdir()] == [
        f"{environment_key(Environment(requirements=[f'{NAME}==1.0']))}.lock"
    ]
    assert list((offline_cache / "build").iterdir()) == []
