"""Docker containers started ahead (DockerRuntime(prestart=N)) and the SWE
venv's bytecode, part of the conformance suite (see test_conformance.py).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from sandgym.runtimes import SandboxError, SandboxSpec, get_runtime
from sandgym.runtimes.docker.leaks import reap
from sandgym.runtimes.docker.runtime import OWNER_LABEL, DockerRuntime
from sandgym.specs import TaskSet
from tests.helpers import swe_tasks


def _wait_until(predicate, what: str, limit_s: float = 180.0) -> None:
    """Poll until `predicate()` holds; a generous bound, only so a broken stock cannot hang the suite."""
    deadline = time.monotonic() + limit_s
    while not predicate():
        assert time.monotonic() < deadline, f"gave up waiting: {what}"
        time.sleep(0.1)


def _listed(owner: str = "") -> dict[str, dict]:
    """sandgym containers (of one owner host:pid, if given): name -> labels, in one listing call."""
    import docker

    label = f"{OWNER_LABEL}={owner}" if owner else OWNER_LABEL
    listed = docker.from_env().api.containers(all=True, filters={"label": label})
    return {c["Names"][0].lstrip("/"): c["Labels"] for c in listed}


def _mine(**labels: str) -> dict[str, dict]:
    """This process's containers: name -> labels (one listing call, so none vanishes half-way)."""
    import docker

    from sandgym.runtimes.docker.runtime import owner_label

    filters = [f"{OWNER_LABEL}={owner_label()}", *(f"{k}={v}" for k, v in labels.items())]
    listed = docker.from_env().api.containers(all=True, filters={"label": filters})
    return {c["Names"][0].lstrip("/"): c["Labels"] for c in listed}


@pytest.mark.docker
def test_the_stock_hands_each_container_out_once_and_close_leaves_nothing():
    from sandgym.runtimes.docker.runtime import STOCK_LABEL

    rt = DockerRuntime(prestart=2)
    spec = SandboxSpec(labels={"role": "stock-test"})
    names, from_stock = [], 0
    try:
        for i in range(6):
            if i >= 2:  # the spec has repeated: wait until a container is ready for it
                _wait_until(lambda: rt.stocked() >= 1, "a stocked container")
            sb = rt.create(spec)
            assert sb.info.labels == {"role": "stock-test"}
            from_stock += _mine()[sb.info.id].get(STOCK_LABEL) == "1"
            # Fresh: nothing of an earlier sandbox's workspace or /tmp.
            assert sb.exec(["sh", "-c", "ls -A /workspace /tmp | grep -c mark || true"]).stdout == b"0\n"
            assert sb.exec(["sh", "-c", f"echo {i} > /workspace/mark && echo {i} > /tmp/mark"]).exit_code == 0
            names.append(sb.info.id)
            sb.close()
        assert len(set(names)) == len(names)  # never handed out twice
        assert from_stock >= 4
        rt.settle()  # background removal done: the used containers are gone
        assert not set(_mine()) & set(names)
    finally:
        rt.close()
    assert rt.stocked() == 0
    assert not _mine(**{STOCK_LABEL: "1"})
    assert not set(_mine()) & set(names)


@pytest.mark.docker
def test_a_stocked_sandbox_keeps_the_specs_lifetime():
    """A stocked container's agent lives STOCK_MAX_IDLE_S longer; the host ends
    the sandbox at the spec's lifetime after hand-out."""
    rt = DockerRuntime(prestart=1)
    spec = SandboxSpec(wall_timeout_s=3)
    try:
        rt.create(spec).close()
        rt.create(spec).close()
        _wait_until(lambda: rt.stocked() >= 1, "a stocked container")
        sb = rt.create(spec)
        from sandgym.runtimes.docker.runtime import STOCK_LABEL

        assert _mine()[sb.info.id].get(STOCK_LABEL) == "1"  # its agent would live 63 s
        assert sb.exec(["true"]).exit_code == 0
        time.sleep(8)
        with pytest.raises(SandboxError):
            sb.exec(["true"])
        sb.close()
    finally:
        rt.close()


@pytest.mark.docker
def test_a_stocked_container_never_holds_a_replaced_mount(tmp_path):
    """A bind mount holds the folder it found: a stocked container started
    before its mount source was replaced is not handed out."""
    import shutil

    from sandgym.runtimes import Mount

    def folder(name: str, text: str):
        d = tmp_path / name
        d.mkdir(mode=0o755)
        (d / "v").write_text(text)
        os.chmod(d / "v", 0o644)
        return d

    src = folder("m", "old")
    spec = SandboxSpec(mounts=(Mount(source=str(src), target="/mnt/m"),))
    rt = DockerRuntime(prestart=1)
    try:
        for _ in range(2):
            with rt.create(spec) as sb:
                assert sb.exec(["cat", "/mnt/m/v"]).stdout == b"old"
        _wait_until(lambda: rt.stocked() >= 1, "a stocked container")
        new = folder("new", "new")
        shutil.rmtree(src)
        os.rename(new, src)
        with rt.create(spec) as sb:
            assert sb.exec(["cat", "/mnt/m/v"]).stdout == b"new"
    finally:
        rt.close()


def test_bad_prestart_values(monkeypatch):
    from sandgym.runtimes.docker.runtime import PRESTART_ENV, prestart_setting

    monkeypatch.setenv(PRESTART_ENV, "many")
    with pytest.raises(ValueError, match=f"{PRESTART_ENV}='many'"):
        prestart_setting(None)
    with pytest.raises(ValueError, match="prestart=-1"):
        prestart_setting(-1)
    monkeypatch.setenv(PRESTART_ENV, "3")
    assert prestart_setting(None) == 3 and prestart_setting(0) == 0


@pytest.mark.docker
def test_sigkill_then_gc_removes_the_stock():
    script = textwrap.dedent("""
        import time
        from sandgym.runtimes import SandboxSpec
        from sandgym.runtimes.docker.runtime import DockerRuntime
        rt = DockerRuntime(prestart=2)
        for _ in range(2):
            rt.create(SandboxSpec()).close()
        while rt.stocked() < 2:
            time.sleep(0.1)
        print("ready", flush=True)
        time.sleep(600)
    """)
    from sandgym.runtimes.docker.runtime import STOCK_LABEL

    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == b"ready\n"
        owner = f"{socket.gethostname()}:{child.pid}"
        stocked = [name for name, labels in _listed(owner).items() if labels.get(STOCK_LABEL) == "1"]
        assert len(stocked) >= 2
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    removed = reap()
    assert set(stocked) <= set(removed)
    assert not _listed(owner)


@pytest.mark.docker
def test_the_stock_and_pending_removals_are_gone_at_exit():
    """A process that exits without closing its runtime leaves no container:
    not the stocked ones, not those closed and still being removed."""
    script = textwrap.dedent("""
        import time
        from sandgym.runtimes import SandboxSpec
        from sandgym.runtimes.docker.runtime import DockerRuntime
        rt = DockerRuntime(prestart=2)
        used = []
        for _ in range(2):
            sb = rt.create(SandboxSpec())
            used.append(sb.info.id)
            sb.close()
        while rt.stocked() < 2:
            time.sleep(0.1)
        last = rt.create(SandboxSpec())
        used.append(last.info.id)
        last.close()  # queued for removal; the process exits at once
        print(",".join(used), flush=True)
    """)
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = child.communicate(timeout=300)
    assert child.returncode == 0, err[-2000:]
    used = set(out.strip().split(","))
    assert len(used) == 3
    assert not set(_listed()) & used
    # Nothing of the child's is left, the stocked containers included.
    assert not _listed(f"{socket.gethostname()}:{child.pid}")


def test_the_swe_venv_is_byte_compiled_in_place(tmp_path, monkeypatch):
    """A venv cached before bytecode was made is compiled on first use."""
    import shutil

    from sandgym.runtimes.rootfs import rootfs_cache
    from sandgym.specs import bundled_dir
    from sandgym.verifiers.swe_repo.sources import COMPILED_MARK, environment_key, test_venv

    env = swe_tasks(TaskSet.load(bundled_dir() / "swe_repo" / "billing-v1"))[0].visible.environment
    cached = test_venv(env)
    (tmp_path / "rootfs").symlink_to(rootfs_cache())  # the build sandbox's image root
    monkeypatch.setenv("SANDGYM_CACHE", str(tmp_path))
    old = tmp_path / "venvs" / environment_key(env)
    shutil.copytree(cached, old, symlinks=True, ignore=shutil.ignore_patterns("__pycache__", COMPILED_MARK))
    assert not list(old.rglob("*.pyc"))
    assert test_venv(env) == old
    main_py = next(old.glob("lib/python3*/site-packages/_pytest/main.py"))
    assert (main_py.parent / "__pycache__" / f"main.cpython-{sys.version_info[0]}{sys.version_info[1]}.pyc").exists()
    assert (old / COMPILED_MARK).exists()


@pytest.mark.parametrize("backend", ["local", pytest.param("docker", marks=pytest.mark.docker)])
def test_swe_verdicts_hold_with_bytecode_and_the_stock(backend):
    """The sandboxed interpreter loads the venv's bytecode (not the source),
    and the verifier still scores the gold patch FULL and an empty diff NO,
    on docker through containers started ahead."""
    from sandgym.specs import bundled_dir
    from sandgym.verifiers.swe_repo.host import verify as verify_swe
    from sandgym.verifiers.swe_repo.sandbox import IMAGE, VENV_DIR, venv_mount

    task = swe_tasks(TaskSet.load(bundled_dir() / "swe_repo" / "billing-v1"))[0]
    rt = DockerRuntime(prestart=1) if backend == "docker" else get_runtime(backend)
    try:
        spec = SandboxSpec(image=IMAGE, mounts=(venv_mount(task.visible.environment),))
        with rt.create(spec) as sb:
            r = sb.exec([f"{VENV_DIR}/bin/python", "-v", "-c", "import _pytest.main"])
            assert r.exit_code == 0, r.stderr[-2000:]
            assert b"_pytest/__pycache__/main.cpython-" in r.stderr  # "code object from ...pyc"
        for _ in range(3):  # the spec repeats: on docker, later runs take stocked containers
            gold = verify_swe(task, task.hidden.patch, rt)
            assert gold.status == "FULL", gold.detail
        empty = verify_swe(task, "", rt)
        assert empty.status == "NO", empty.detail
    finally:
        rt.close()
