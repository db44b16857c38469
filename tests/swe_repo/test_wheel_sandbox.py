"""A task's wheels are laid out by pip in a build sandbox, never on the host (issue 37).

Wheels crafted here (a wheel is a zip) try to write outside the venv, to
be links or setuid files, or to run code from a .pth: each is refused with
one line naming the wheel and the field, or contained, and nothing on the
host outside the sandbox changes. The build sandbox is also attacked
directly, with a hostile program in pip's place."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from sandgym.runtimes.rootfs import rootfs_cache
from sandgym.specs.swe_repo import TestEnvironment as Environment
from sandgym.verifiers.swe_repo.sources import RepoError, environment_key
from sandgym.verifiers.swe_repo.sources import test_venv as build_test_venv
from sandgym.verifiers.swe_repo.wheels import (
    BOX_PIP,
    BOX_VENV,
    BOX_WHEELS,
    Step,
    WheelError,
    check_wheel,
    install_step,
    pip_dir,
    sandboxed,
)

from .wheel_craft import OUTSIDE, make_wheel, public_folder

NAME = "sandgymprobewheel"


# -- the checks on the wheel (no sandbox) ----------------------------------------------


def _one_line_naming(err: Exception, wheel: Path, *words: str) -> None:
    message = str(err)
    assert "\n" not in message, message
    assert wheel.name in message, message
    for w in words:
        assert w in message, message


@pytest.mark.parametrize(
    ("files", "modes", "words"),
    [
        ({"../../escape.py": b"x = 1\n"}, {}, ["zip member", "'..'"]),
        ({f"{NAME}-1.0.data/data/../../../../escape": b"x"}, {}, ["zip member", "'..'"]),
        ({"/tmp/sandgym-wheel-escape/abs.py": b"x = 1\n"}, {}, ["zip member", "absolute"]),
        ({"C:/escape.py": b"x = 1\n"}, {}, ["zip member", "absolute"]),
        ({"..\\..\\escape.py": b"x = 1\n"}, {}, ["zip member", "'..'"]),
        ({"mod/shadow": b"/etc/shadow"}, {"mod/shadow": stat.S_IFLNK | 0o777}, ["zip member", "symlink"]),
        ({"mod/run": b"#!/bin/sh\n"}, {"mod/run": stat.S_IFREG | 0o4755}, ["zip member", "setuid"]),
        ({"mod/dir/": b""}, {"mod/dir/": stat.S_IFDIR | 0o2775}, ["zip member", "setgid"]),
        ({"mod/fifo": b""}, {"mod/fifo": stat.S_IFIFO | 0o644}, ["zip member", "file type"]),
    ],
)
def test_a_wheel_whose_members_leave_their_place_is_refused(tmp_path, files, modes, words):
    wheel = make_wheel(tmp_path, NAME, files, modes)
    with pytest.raises(WheelError) as err:
        check_wheel(wheel)
    _one_line_naming(err.value, wheel, *words)


@pytest.mark.parametrize("path", ["../../../../tmp/sandgym-wheel-escape/x", "/etc/cron.d/x", "a/../../b"])
def test_a_wheel_whose_record_names_a_path_outside_is_refused(tmp_path, path):
    wheel = make_wheel(tmp_path, NAME, {"mod.py": b""}, record_extra=f"{path},,\n")
    with pytest.raises(WheelError) as err:
        check_wheel(wheel)
    _one_line_naming(err.value, wheel, "RECORD path", path)


@pytest.mark.parametrize("script", ["../../../../tmp/sandgym-wheel-escape/x", "..", "a/b", "evil\x1b]0;t"])
def test_a_wheel_whose_script_name_is_a_path_is_refused(tmp_path, script):
    entry = f"[console_scripts]\n{script} = mod:main\n"
    wheel = make_wheel(tmp_path, NAME, {"mod.py": b"def main(): pass\n"}, entry_points=entry)
    with pytest.raises(WheelError) as err:
        check_wheel(wheel)
    _one_line_naming(err.value, wheel, "entry point script name")


def test_ordinary_wheels_pass_the_checks(tmp_path):
    wheel = make_wheel(
        tmp_path,
        NAME,
        {"mod/__init__.py": b"", "mod/run": b"#!/bin/sh\n", "hook.pth": b"import mod\n"},
        {"mod/run": stat.S_IFREG | 0o755},
        entry_points="[console_scripts]\nprobe-run = mod:main\n\n[other]\n../x = y\n",
    )
    check_wheel(wheel)
    broken = tmp_path / "broken.whl"
    broken.write_bytes(b"not a zip")
    with pytest.raises(WheelError) as err:
        check_wheel(broken)
    _one_line_naming(err.value, broken, "not a zip")


# -- the build sandbox, attacked directly ---------------------------------------------


def _hostile(script: str) -> Step:
    return Step("a hostile program in pip's place", ["/bin/sh", "-c", script])


@pytest.mark.sandbox
def test_the_sandbox_sees_nothing_of_the_host_and_has_no_network(fresh_venv, host_watch):
    script = (
        f"set -u; out={BOX_VENV}/seen;"
        f"ls {host_watch} >>$out 2>&1 && echo SAW-HOST >>$out;"
        f"echo x > {host_watch}/secret 2>>$out && echo WROTE-HOST >>$out;"
        f"echo x > {OUTSIDE} 2>>$out;"  # (its own /tmp: host_watch checks the host's)
        f"echo x > {BOX_VENV}/../escape 2>>$out && echo WROTE-BESIDE >>$out;"
        f"touch /usr/escape 2>>$out && echo WROTE-ROOT >>$out;"
        "id -u >>$out; tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | sed 's/^/iface:/' >>$out; true"
    )
    sandboxed(fresh_venv, [_hostile(script)], {})
    seen = (fresh_venv / "seen").read_text()
    for bad in ("SAW-HOST", "WROTE-HOST", "WROTE-BESIDE", "WROTE-ROOT"):
        assert bad not in seen, seen
    assert [line for line in seen.splitlines() if line.startswith("iface:")] == ["iface:lo"], seen  # no network
    assert "\n1000\n" in f"\n{seen}", seen  # not root inside either
    st = os.stat(fresh_venv / "seen")
    assert (st.st_uid, st.st_gid) == (os.getuid(), os.getgid())  # given back to us once checked


@pytest.mark.sandbox
@pytest.mark.parametrize(
    ("script", "words"),
    [
        ("ln -s /etc/shadow {venv}/lib/shadow", ["'lib/shadow'", "symlink", "/etc/shadow"]),
        ("ln -sf /tmp {venv}/bin/python", ["'bin/python'", "symlink"]),
        ("echo x > {venv}/run; chmod 4755 {venv}/run", ["'run'", "setuid"]),
        ("mkdir {venv}/d; chmod 2775 {venv}/d", ["'d'", "setgid"]),
        ("mkfifo {venv}/fifo", ["'fifo'", "file type"]),
        ("echo x > {venv}/w; chmod 666 {venv}/w", ["'w'", "world-writable"]),
    ],
)
def test_what_a_hostile_build_leaves_is_refused(fresh_venv, host_watch, script, words):
    with pytest.raises(WheelError) as err:
        sandboxed(fresh_venv, [_hostile(script.format(venv=BOX_VENV))], {})
    message = str(err.value)
    assert "\n" not in message and "refused" in message, message
    for w in words:
        assert w in message, message


@pytest.mark.sandbox
def test_pip_in_the_sandbox_refuses_a_traversing_wheel_unchecked(fresh_venv, host_watch, wheels):
    """Past the host's checks (skipped here), pip itself, sandboxed, still
    writes nothing outside: the sandbox holds even if pip were fooled."""
    make_wheel(wheels, NAME, {f"../../../../../..{OUTSIDE}/x.py": b"x = 1\n", "ok.py": b""})
    read_only = {f"{BOX_PIP}/pip": pip_dir(), BOX_WHEELS: wheels}
    with pytest.raises(WheelError) as err:
        sandboxed(fresh_venv, [install_step([f"{NAME}==1.0"])], read_only)
    assert "build sandbox failed" in str(err.value)


@pytest.mark.sandbox
def test_pip_in_the_sandbox_drops_setuid_bits_unchecked(fresh_venv, host_watch, wheels):
    make_wheel(wheels, NAME, {"probe_suid.py": b"x = 1\n"}, {"probe_suid.py": stat.S_IFREG | 0o6755})
    read_only = {f"{BOX_PIP}/pip": pip_dir(), BOX_WHEELS: wheels}
    sandboxed(fresh_venv, [install_step([f"{NAME}==1.0"])], read_only)
    installed = next(fresh_venv.glob("lib/python3*/site-packages/probe_suid.py"))
    assert not os.stat(installed).st_mode & 0o7000


# -- the whole venv build (PyPI for pytest, the crafted wheel from find-links) ---------------


@pytest.fixture
def links(tmp_path, monkeypatch):
    """A find-links folder the unprivileged fetch can read; the venv cache in
    tmp_path (the image roots linked from the shared cache)."""
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "rootfs").symlink_to(rootfs_cache())
    with public_folder() as d:
        monkeypatch.setenv("PIP_FIND_LINKS", str(d))
        monkeypatch.setenv("SANDGYM_CACHE", str(tmp_path / "cache"))
        yield d


@pytest.mark.sandbox
def test_a_traversing_wheel_stops_the_venv_build_in_one_line(links, tmp_path, host_watch):
    wheel = make_wheel(links, NAME, {f"../../../../../..{OUTSIDE}/x.py": b"x = 1\n"})
    env = Environment(requirements=[f"{NAME}==1.0"])
    with pytest.raises(RepoError) as err:
        build_test_venv(env)
    _one_line_naming(err.value, wheel, "zip member", "'..'")
    venvs = tmp_path / "cache" / "venvs"
    assert not list(venvs.glob("*/.complete")) and not (venvs / environment_key(env)).exists()
    assert [p.name for p in venvs.iterdir() if not p.name.endswith((".lock", ".wheels"))] == []


@pytest.mark.sandbox
def test_a_pth_wheel_runs_nothing_at_install(links, tmp_path, host_watch):
    """A .pth line starting with `import` runs in every interpreter that
    loads its site-packages: never during the build, on the host or in
    the sandbox; later only inside the sandboxes that run the tests."""
    inside = f"{BOX_VENV}/PTH-RAN"
    targets = f"({OUTSIDE!r}, {inside!r})"
    hook = f"import os; [open(p, 'w').close() for p in {targets} if os.path.isdir(os.path.dirname(p))]\n"
    make_wheel(links, NAME, {"sandgymprobewheel_hook.pth": hook.encode(), "probe_mod.py": b"x = 1\n"})
    venv = build_test_venv(Environment(requirements=[f"{NAME}==1.0"]))
    assert next(venv.glob("lib/python3*/site-packages/sandgymprobewheel_hook.pth")).read_text() == hook
    assert not (venv / "PTH-RAN").exists()
    assert next(venv.glob("lib/python3*/site-packages/_pytest/__pycache__/main.cpython-*.pyc"))
    lines = (venv.parent / f"{venv.name}.wheels").read_text().splitlines()
    assert any(line.endswith(f"  {NAME}-1.0-py3-none-any.whl") and len(line.split()[0]) == 64 for line in lines)
    assert any("pytest-8.3.4-py3-none-any.whl" in line for line in lines)
    owners = {(os.lstat(p).st_uid, os.lstat(p).st_gid) for p in [venv, *venv.rglob("*")]}
    assert owners == {(os.getuid(), os.getgid())}
