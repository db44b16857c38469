"""The build sandbox: one command over data from elsewhere, run in bubblewrap.

Work that lays hostile files out on disk (pip unpacking a task's wheels
into its venv, byte-compiling them) runs here instead of on the host: the
default image's root read-only (runtimes/rootfs.py), no network, new user,
pid, ipc and uts namespaces, uid 1000 inside and, under root, the
unprivileged host user outside (the local runtime's `default_drop_to`).
It sees the folders it is given, read-only, and exactly one writable
folder; /tmp is a small tmpfs. Everything else of the host is absent.

bubblewrap runs as that unprivileged user, so it must be able to walk
the host paths of the folders it binds (a descriptor does not help:
bubblewrap resolves it back to its path).

What the command leaves in the writable folder is still hostile: the
caller checks it (file types, modes, links) before the host uses it.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from ..base import RuntimeUnavailable, SandboxSpec
from ..rootfs import rootfs
from ..staging import stage_files
from .bwrap import SANDBOX_ETC, default_drop_to, image_root_args

BUILD_PATH = "/usr/local/bin:/usr/bin:/bin"
TMP_BYTES = 256 * 1024 * 1024


def build_user() -> tuple[int, int] | None:
    """The host (uid, gid) a build sandbox runs as: None when not root (it runs as us)."""
    return default_drop_to()


def check_build_sandbox() -> str:
    """bubblewrap's path, or RuntimeUnavailable in one line: what is missing.
    There is no other build sandbox (a Docker-only host builds nothing: a
    task's environment is never built on the host instead)."""
    bwrap = shutil.which("bwrap")
    if not bwrap:
        raise RuntimeUnavailable(
            "building a task's test environment needs bubblewrap (its build sandbox), even where "
            "tasks run on docker or k8s: run `apt-get install bubblewrap`"
        )
    for tool in ("setpriv", "prlimit"):
        if not shutil.which(tool):
            raise RuntimeUnavailable(f"the build sandbox needs {tool}: run `apt-get install util-linux`")
    return bwrap


def limited(argv: list[str], memory_bytes: int | None, file_bytes: int | None) -> list[str]:
    """`argv` under rlimits its children inherit: address space (each
    process's memory) and file size (the largest file it may write)."""
    caps = [f"--as={memory_bytes}"] if memory_bytes else []
    caps += [f"--fsize={file_bytes}"] if file_bytes else []
    return ["prlimit", *caps, "--", *argv] if caps else argv


def run_build(
    argv: list[str],
    writable: tuple[Path, str],
    read_only: dict[str, Path],
    timeout_s: float,
    env: dict[str, str] | None = None,
    memory_bytes: int | None = None,
    file_bytes: int | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run `argv` in a build sandbox; `writable` is (host folder, where the
    sandbox sees it), `read_only` maps sandbox paths to host folders. Every
    host folder must be reachable by `build_user()`, the writable one
    writable by it. Every process in it is bound by `limited`. Raises
    RuntimeUnavailable when bubblewrap or the image's root is missing,
    TimeoutExpired after `timeout_s` (the sandbox dies with bubblewrap)."""
    bwrap = check_build_sandbox()
    drop_to = build_user()
    # (Raises, naming the command that unpacks it.) Resolved: the build user
    # walks the path, and a test's cache may link to the shared tree.
    root = rootfs(SandboxSpec().image).resolve()
    etc_dir = stage_files("etc", SANDBOX_ETC)
    a = image_root_args(bwrap, drop_to, root, etc_dir)
    a += ["--proc", "/proc", "--dev", "/dev", "--size", str(TMP_BYTES), "--tmpfs", "/tmp"]
    for target, source in sorted(read_only.items()):
        a += ["--ro-bind", str(source), target]
    a += ["--bind", str(writable[0]), writable[1]]
    a += ["--remount-ro", "/", "--chdir", "/tmp", "--clearenv"]
    for k, v in {"PATH": BUILD_PATH, "HOME": "/tmp", "LANG": "C.UTF-8", **(env or {})}.items():
        a += ["--setenv", k, v]
    a += ["--", *argv]
    # umask 022: the files' modes do not depend on the caller's.
    a = limited(a, memory_bytes, file_bytes)
    return subprocess.run(a, capture_output=True, timeout=timeout_s, stdin=subprocess.DEVNULL, umask=0o022)
