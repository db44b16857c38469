"""A task's pinned wheels laid out in its test venv, pip never run as root.

The requirements a task names come from strangers, and so do the wheels
they resolve to: a wheel runs no code when installed, but its file names,
RECORD, entry points, .data folders and the zip's mode bits are read by
pip, which would then write where they say. So:

1. fetch: `pip download` (wheels only) on the host as the unprivileged
   build user, into a folder of its own; the files are then copied into a
   folder only root can write, hashed (`<venv key>.wheels` records the
   sha256 of each) and checked (`check_wheel`): no member, RECORD path or
   script name leaving its folder, only regular files and folders, no
   setuid/setgid/sticky bits. One line names the wheel, the field and the
   value.
2. install: pip, from the wheels alone (`--no-index`), and the
   byte-compiling of the venv run in the build sandbox
   (runtimes/local/build.py): no network, uid 1000 inside, the build
   user outside, seeing pip and the wheels read-only and the venv writable.
3. check: the venv as left by the sandbox (`check_tree`): regular files and
   folders only, the venv's own interpreter links unchanged, no
   setuid/setgid/sticky bits, nothing world-writable; then it is given
   back to the host's user.

The venv's files are those the host's pip made before (same pip, same
wheels, same resolver, the scripts' shebangs named a temporary build path
then and do now): the venv key and the task sets' hashes are unchanged.
"""

from __future__ import annotations

import csv
import hashlib
import importlib.util
import io
import os
import re
import secrets
import shutil
import signal
import stat
import subprocess
import tempfile
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

from sandgym.errors import SandgymError
from sandgym.runtimes.base import RuntimeUnavailable
from sandgym.runtimes.local.build import build_user, check_build_sandbox, limited, run_build
from sandgym.runtimes.tempdirs import build_root, owned_tempdir

from . import build_caps as caps

SANDBOX_PYTHON = "/usr/bin/python3"
# Where the build sandbox sees its folders.
BOX_PIP = "/opt/pip"  # pip's package folder is BOX_PIP/pip
BOX_WHEELS = "/opt/wheels"
BOX_VENV = "/opt/venv"
POLL_S = 0.25  # how often a download's size is measured
MAX_MEMBERS = 100_000  # zip entries in one wheel
MAX_META_BYTES = 16 * 1024 * 1024  # a RECORD or entry_points.txt read whole
SCRIPT_SECTIONS = ("[console_scripts]", "[gui_scripts]")


class WheelError(SandgymError, RuntimeError):
    """A wheel or what installing it left is refused; the message names the wheel or path and why."""


def pip_dir() -> Path:
    """The host's pip package: the same pip that installed venvs on the host before."""
    spec = importlib.util.find_spec("pip")
    if spec is None or not spec.submodule_search_locations:
        raise WheelError("pip is not installed in sandgym's environment: run `python -m ensurepip`")
    return Path(list(spec.submodule_search_locations)[0])


def _give(path: Path, owner: tuple[int, int]) -> None:
    """chown a tree (links themselves, never their targets)."""
    os.lchown(path, *owner)
    for dirpath, dirnames, filenames in os.walk(path):
        for n in dirnames + filenames:
            os.lchown(os.path.join(dirpath, n), *owner)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# -- 1. fetch and check ------------------------------------------------------------


def as_build_user(argv: list[str]) -> list[str]:
    """`argv` run as the unprivileged build user (as us, when we are not
    root), killed if we die: a killed build leaves no download running."""
    user = build_user()
    drop = [f"--reuid={user[0]}", f"--regid={user[1]}", "--clear-groups"] if user else []
    return ["setpriv", *drop, "--pdeathsig", "KILL", "--", *argv]


@contextmanager
def pip_as_build_user() -> Iterator[tuple[list[str], Path]]:
    """(the command running the host's pip as the build user, a folder of
    its own to write in), for pip's work over data from elsewhere that needs
    the network: resolving and downloading wheels. Its own copy of pip, so
    the build user need not read the folder ours lives in."""
    scratch = owned_tempdir("pip")  # (`sandgym gc` removes a killed process's)
    try:
        work = scratch / "work"
        work.mkdir(mode=0o700)
        shutil.copytree(pip_dir(), scratch / "pip" / "pip", symlinks=True)
        user = build_user()
        if user:
            os.chmod(scratch, 0o711)
            _give(work, user)
        yield as_build_user([SANDBOX_PYTHON, "-E", "-s", str(scratch / "pip" / "pip")]), work
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def tree_bytes(root: Path) -> int:
    """The size of the files under `root` (links not followed)."""
    total = 0
    for dirpath, _, filenames in os.walk(root):
        for n in filenames:
            try:
                total += os.lstat(os.path.join(dirpath, n)).st_size
            except OSError:
                pass  # (gone meanwhile: pip renames its temporary files)
    return total


def pip_said(stderr: str) -> str:
    """pip's complaint in one line: its ERROR lines (else its last line), joined and cut."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR:")] or lines[-1:]
    said = " / ".join(errors) or "(pip said nothing)"
    return said if len(said) <= 600 else said[:600] + " ..."


def run_pip(pip: list[str], work: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    """`pip args` as the build user, from `work`, with no cache (the build
    user's would be shared). Capped (build_caps): everything it writes goes
    to `work` (its temporary files too), whose size is measured as it runs;
    each file, its memory and its time are bounded too. Over a cap, it is
    killed and a one-line CapError names the cap."""
    doing = f"pip {args[0]} {[a for a in args if '==' in a]}"
    limit, deadline = caps.in_bytes(caps.DOWNLOAD), time.monotonic() + caps.value(caps.TIME)
    argv = limited(
        [*pip, *args[:1], "--disable-pip-version-check", "--no-cache-dir", *args[1:]], caps.in_bytes(caps.MEMORY), limit
    )
    env = {**os.environ, "HOME": str(work), "TMPDIR": str(work)}
    with subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=work,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    ) as proc:
        while True:
            try:
                out, err = proc.communicate(timeout=POLL_S)
                break
            except subprocess.TimeoutExpired:
                cap = caps.DOWNLOAD if tree_bytes(work) > limit else caps.TIME if time.monotonic() > deadline else None
                if cap is not None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.communicate()
                    raise caps.over(cap, doing) from None
    if proc.returncode == -signal.SIGXFSZ or "File too large" in err:
        raise caps.over(caps.DOWNLOAD, doing)
    if "MemoryError" in err or "Cannot allocate memory" in err:
        raise caps.over(caps.MEMORY, doing)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def fetch_wheels(reqs: list[str], pip: list[str], work: Path) -> list[Path]:
    """Download the wheels `reqs` resolve to for SANDBOX_PYTHON with
    `pip_as_build_user`'s (pip, work); return copies the build user cannot
    change, in `work`'s sibling `wheels`, sorted."""
    # Wheels only: an sdist's build backend (setup.py) would run here, on the host.
    args = ["download", "--quiet", "--only-binary", ":all:", "--dest", str(work / "dl"), "--", *reqs]
    r = run_pip(pip, work, args)
    if r.returncode != 0:
        raise WheelError(
            f"downloading {reqs} failed (wheels only: a requirement with no wheel for this Python "
            f"is refused, its build would run on the host): {pip_said(r.stderr)}"
        )
    dest = work.parent / "wheels"
    dest.mkdir()
    for f in sorted((work / "dl").iterdir()):
        if not f.name.endswith(".whl") or not stat.S_ISREG(os.lstat(f).st_mode):
            raise WheelError(f"the download of {reqs} left {f.name!r}, not a wheel file; refused")
        shutil.copyfile(f, dest / f.name, follow_symlinks=False)
    return sorted(dest.iterdir())


def _refuse(wheel: str, field: str, value: str, why: str) -> WheelError:
    return WheelError(f"wheel {wheel}: {field} {value!r} {why}; the wheel is refused, nothing was installed")


def check_path(wheel: str, field: str, value: str) -> None:
    """A path inside the wheel: relative, no `..` segment (either slash), no NUL."""
    if "\0" in value or not value:
        raise _refuse(wheel, field, value, "is empty or holds a NUL")
    if value.startswith(("/", "\\")) or re.match(r"[A-Za-z]:", value):
        raise _refuse(wheel, field, value, "is absolute: it would be written outside the venv")
    if ".." in re.split(r"[/\\]", value):
        raise _refuse(wheel, field, value, "has a '..' segment: it would be written outside its folder")


def _script_names(text: str) -> list[str]:
    """The console and GUI script names of an entry_points.txt (each becomes a file in bin/)."""
    names, inside = [], False
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("["):
            inside = line.replace(" ", "") in SCRIPT_SECTIONS
        elif inside and line and not line.startswith(("#", ";")):
            names.append(line.split("=", 1)[0].strip())
    return names


def check_wheel(path: Path) -> int:
    """Refuse a wheel whose contents would be laid out anywhere but their
    place in the venv, or as anything but plain files (see the module doc).
    Returns its unpacked size: the sum of its members' sizes (reading a
    member yields no more than its recorded size)."""
    wheel = path.name
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as e:
        raise WheelError(f"wheel {wheel}: not a zip archive ({e}); the wheel is refused") from None
    with zf:
        infos = zf.infolist()
        if len(infos) > MAX_MEMBERS:
            raise _refuse(wheel, "member count", str(len(infos)), f"is over {MAX_MEMBERS}")
        for info in infos:
            check_path(wheel, "zip member", info.filename)
            mode = info.external_attr >> 16
            kind = stat.S_IFMT(mode)
            if kind and kind not in (stat.S_IFREG, stat.S_IFDIR):
                what = "a symlink" if kind == stat.S_IFLNK else f"of file type {oct(kind)}"
                raise _refuse(wheel, "zip member", info.filename, f"is {what}, not a regular file")
            if mode & 0o7000:
                raise _refuse(
                    wheel, "zip member", info.filename, f"has mode {oct(mode & 0o7777)} (setuid, setgid or sticky)"
                )
        for info in infos:
            top, _, rest = info.filename.partition("/")
            if not top.endswith(".dist-info") or rest not in ("RECORD", "entry_points.txt"):
                continue
            if info.file_size > MAX_META_BYTES:
                raise _refuse(wheel, "zip member", info.filename, f"is over {MAX_META_BYTES} bytes")
            text = zf.read(info).decode("utf-8", "replace")
            if rest == "RECORD":
                for row in csv.reader(io.StringIO(text)):
                    if row:
                        check_path(wheel, "RECORD path", row[0])
            else:
                for name in _script_names(text):
                    if not name or name in (".", "..") or re.search(r"[/\\\x00-\x1f]", name):
                        raise _refuse(wheel, "entry point script name", name, "is not a plain file name in bin/")
        return sum(info.file_size for info in infos)


def check_unpacked(wheels: list[Path]) -> None:
    """Check every wheel; refuse the set if it would unpack to more than the cap."""
    total = sum(check_wheel(w) for w in wheels)
    if total > caps.in_bytes(caps.UNPACKED):
        names = ", ".join(w.name for w in wheels)
        raise caps.over(caps.UNPACKED, f"installing {names} ({total:,} bytes unpacked)")


def write_manifest(wheels: list[Path], manifest: Path) -> None:
    """`sha256  file name` per wheel, beside the venv: what it was built from."""
    tmp = manifest.with_name(manifest.name + ".part")
    tmp.write_text("".join(f"{sha256_file(w)}  {w.name}\n" for w in wheels))
    os.replace(tmp, manifest)


# -- 2. in the build sandbox ---------------------------------------------------------


class Step(NamedTuple):
    """One command of a build, run in its own build sandbox."""

    what: str  # for messages: "installing [...]"
    argv: list[str]
    any_exit: bool = False  # its exit status says nothing (compileall's 1: some file did not compile)


def _in_sandbox(step: Step, venv: Path, read_only: dict[str, Path]) -> None:
    """Run `step` in a build sandbox that sees the venv at BOX_VENV (writable),
    under the caps on memory, file size and time (build_caps)."""
    doing = f"{step.what} in the build sandbox"
    memory, largest = caps.in_bytes(caps.MEMORY), caps.in_bytes(caps.UNPACKED)
    try:
        r = run_build(step.argv, (venv, BOX_VENV), read_only, caps.value(caps.TIME), None, memory, largest)
    except subprocess.TimeoutExpired:
        raise caps.over(caps.TIME, doing) from None
    err = r.stderr.decode("utf-8", "replace")
    if r.returncode == -signal.SIGXFSZ or "File too large" in err:
        raise caps.over(caps.UNPACKED, doing)
    if r.returncode != 0 and ("MemoryError" in err or "Cannot allocate memory" in err):
        raise caps.over(caps.MEMORY, doing)
    if r.returncode != 0 and not step.any_exit:
        raise WheelError(f"{doing} failed (exit {r.returncode}): {pip_said(err)}")


def own_links(venv: Path) -> dict[str, str]:
    """The symlinks of a fresh venv (bin/python*, lib64): the only ones it may keep."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(venv):
        for n in dirnames + filenames:
            p = os.path.join(dirpath, n)
            if os.path.islink(p):
                out[os.path.relpath(p, venv)] = os.readlink(p)
    return out


def check_tree(venv: Path, links: dict[str, str]) -> None:
    """What the build sandbox left in the venv, before the host uses it."""

    def refuse(rel: str, why: str) -> WheelError:
        return WheelError(f"the built venv's {rel!r} {why}; the venv is refused (a wheel or pip misbehaved)")

    total, limit = 0, caps.in_bytes(caps.UNPACKED)
    for dirpath, dirnames, filenames in os.walk(venv):  # symlinked folders are listed, not entered
        for n in dirnames + filenames:
            p = os.path.join(dirpath, n)
            rel = os.path.relpath(p, venv)
            st = os.lstat(p)
            total += st.st_size
            if total > limit:
                raise caps.over(caps.UNPACKED, "checking the built venv")
            if stat.S_ISLNK(st.st_mode):
                target = os.readlink(p)
                if links.get(rel) != target:
                    raise refuse(rel, f"is a symlink to {target!r}")
                continue
            # (A hard link can only name a file the sandbox saw: one in the venv.)
            if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
                raise refuse(rel, f"is of file type {oct(stat.S_IFMT(st.st_mode))}, not a file or folder")
            if st.st_mode & 0o7000:
                raise refuse(rel, f"has mode {oct(st.st_mode & 0o7777)} (setuid, setgid or sticky)")
            if st.st_mode & 0o002:
                raise refuse(rel, f"has mode {oct(st.st_mode & 0o7777)} (world-writable)")


def world_traversable(path: Path) -> bool:
    return all(os.stat(p).st_mode & stat.S_IXOTH for p in [path, *path.parents])


@contextmanager
def build_area() -> Iterator[Path]:
    """A folder for a venv being built: root's, crossable by the build user
    but not listable (0711), so a venv in it under a random name is out of
    other users' reach. In the cache's build areas (a rename away from the
    venvs) when the build user can walk there, else in the temp folder;
    `sandgym gc` removes it if this process is killed."""
    near = build_root()
    near.mkdir(mode=0o711, parents=True, exist_ok=True)
    near = near.resolve()
    base = near if build_user() is None or world_traversable(near) else Path(tempfile.gettempdir())
    area = owned_tempdir("build", base)
    try:
        os.chmod(area, 0o711)
        yield area
    finally:
        shutil.rmtree(area, ignore_errors=True)


def venv_place(area: Path) -> Path:
    """A place in `build_area` for a venv, under a name no one can guess."""
    return area / secrets.token_hex(16)


def sandboxed(venv: Path, steps: list[Step], read_only: dict[str, Path]) -> None:
    """Run `steps` over `venv` (in a `build_area`) in build sandboxes, check
    what they left and give the venv back to us. The build user owns the
    venv meanwhile; once the sandboxes are gone, its area is closed to it."""
    links = own_links(venv)
    user = build_user()
    if user:
        _give(venv, user)
    try:
        for step in steps:
            _in_sandbox(step, venv, read_only)
    finally:
        os.chmod(venv.parent, 0o700)
    check_tree(venv, links)
    if user:
        _give(venv, (os.getuid(), os.getgid()))


def compile_step() -> Step:
    """Byte-compile with the sandboxes' interpreter (same magic number and
    cache tag), timestamp mode: sandboxes see the files through bind mounts,
    which keep mtimes and sizes. What does not compile stays as it is."""
    lib = f"{BOX_VENV}/lib"
    argv = [SANDBOX_PYTHON, "-I", "-m", "compileall", "-q", "-j", "0", "--invalidation-mode", "timestamp", lib]
    return Step("compiling", argv, any_exit=True)


def install_step(reqs: list[str]) -> Step:
    argv = [f"{BOX_VENV}/bin/python", "-E", "-s", "-B", f"{BOX_PIP}/pip"]
    argv += ["install", "--isolated", "--no-index", "--find-links", BOX_WHEELS, "--only-binary", ":all:"]
    argv += ["--no-compile", "--no-cache-dir", "--disable-pip-version-check", "--quiet", "--", *reqs]
    return Step(f"installing {reqs}", argv)


def build_venv(venv: Path, reqs: list[str], manifest: Path) -> None:
    """Install the pinned `reqs` into the fresh venv `venv` (made by
    `SANDBOX_PYTHON -m venv --without-pip` at `venv_place`) and
    byte-compile it, as the module doc says."""
    try:
        check_build_sandbox()  # before anything is downloaded
    except RuntimeUnavailable as e:
        raise WheelError(str(e)) from None
    with pip_as_build_user() as (pip, work):
        wheels = fetch_wheels(reqs, pip, work)
        check_unpacked(wheels)
        write_manifest(wheels, manifest)
        read_only = {f"{BOX_PIP}/pip": work.parent / "pip" / "pip", BOX_WHEELS: work.parent / "wheels"}
        sandboxed(venv, [install_step(reqs), compile_step()], read_only)


def compile_in_sandbox(venv: Path) -> None:
    """Byte-compile a venv cached before that was done, in a build sandbox."""
    sandboxed(venv, [compile_step()], {})
