"""Source trees and test environments of the SWE repo-issue family.

Shared by the env (the agent's start state), the verifier (a pristine
checkout) and the task factory. Everything downloaded or built is cached
under `cache_dir()`, keyed by what it is made of:

- sdists from PyPI, checked against the sha256 the task spec records;
- virtualenvs with a task's pinned test requirements, made with Debian's
  /usr/bin/python3 so that the same venv runs inside local sandboxes (which
  see the host's /usr) and in the bookworm container images. The network is
  used only here, at build time, by an unprivileged download of wheels;
  pip lays them out in a build sandbox and the venv is checked before use
  (wheels.py); sandboxes never have the network. Each venv is
  byte-compiled once by that same interpreter (`compile_venv`): sandboxes
  mount it read-only and never write bytecode, so without this every test
  run would compile pytest and its plugins from source.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tarfile
import urllib.request
from contextlib import contextmanager
from pathlib import Path

from sandgym.errors import SandgymError
from sandgym.runtimes.rootfs import cache_root
from sandgym.specs.swe_repo import PIN_RE, RepoSource, TestEnvironment, check_plain_name
from sandgym.verifiers.swe_repo.build_caps import CapError
from sandgym.verifiers.swe_repo.wheels import WheelError, build_area, build_venv, compile_in_sandbox, venv_place

PYPI_SIMPLE = "https://pypi.org/simple"
SANDBOX_PYTHON = "/usr/bin/python3"
# pytest is part of every test environment (the verifier's plugin needs it),
# unless the task pins its own.
BASE_REQUIREMENTS = ["pytest==8.3.4"]
# Marks a venv whose modules are byte-compiled; venvs cached before this
# was done lack it and are compiled in place on first use.
COMPILED_MARK = ".compiled-1"


def all_requirements(env: TestEnvironment) -> list[str]:
    named = {r.split("==")[0].split("[")[0].lower() for r in env.requirements}
    return [r for r in BASE_REQUIREMENTS if r.split("==")[0] not in named] + sorted(env.requirements)


class RepoError(SandgymError, RuntimeError):
    """A source or environment could not be made; the message says why."""


def cache_dir() -> Path:
    """Where sdists and venvs are kept. Sandboxes mount venvs from here, and
    as root they run as `nobody`, so the folder must be world-readable: not
    under /root."""
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    return root


@contextmanager
def cache_lock(path: Path):
    """One builder per cache entry, across processes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def find_sdist(name: str, version: str) -> tuple[str, str]:
    """(url, sha256) of NAME==VERSION's sdist, from PyPI's simple JSON index."""
    req = urllib.request.Request(f"{PYPI_SIMPLE}/{name}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            index = json.load(r)
    except OSError as e:
        raise RepoError(f"cannot reach PyPI for {name!r}: {e}") from None

    def norm(s: str) -> str:
        return s.lower().replace("-", "_").replace(".", "_")

    for f in index.get("files", []):
        fn = f["filename"]
        if fn.endswith(".tar.gz") and norm(fn[: -len(".tar.gz")]) == norm(f"{name}-{version}"):
            return f["url"], f["hashes"]["sha256"]
    raise RepoError(f"PyPI has no sdist (.tar.gz) of {name}=={version}")


def fetch_sdist(source: RepoSource) -> Path:
    """The sdist's path in the cache, downloaded once and checked every time."""
    if source.kind != "pypi":
        raise RepoError(f"{source.name!r} is a {source.kind} source, not an sdist")
    dest = cache_dir() / "sdists" / f"{source.name}-{source.version}.tar.gz"
    with cache_lock(dest):
        if not dest.exists():
            url = source.sdist_url or find_sdist(source.name, source.version)[0]
            tmp = dest.with_suffix(".part")
            try:
                with urllib.request.urlopen(url, timeout=120) as r, open(tmp, "wb") as out:
                    shutil.copyfileobj(r, out)
            except OSError as e:
                raise RepoError(f"cannot download {url}: {e}") from None
            os.replace(tmp, dest)
        got = _sha256(dest)
    if got != source.sdist_sha256:
        raise RepoError(
            f"{dest}: sha256 {got} differs from the task spec's sdist_sha256 "
            f"{source.sdist_sha256}; delete the file to download it again"
        )
    return dest


def bundled_projects_dir() -> Path:
    from sandgym.specs import bundled_dir

    return bundled_dir() / "swe_repo" / "projects"


def bundled_project(name: str) -> Path:
    """The folder of the bundled project `name`: a plain name, a real folder
    right under the bundled projects (not a symlink leaving them)."""
    root = bundled_projects_dir()
    try:
        check_plain_name(name, "a bundled project's name")
    except ValueError as e:
        raise RepoError(str(e)) from None
    src = root / name
    if src.is_symlink() or not src.is_dir():
        raise RepoError(
            f"no bundled project {name!r} in {root} (a folder there, not a link); choose one of "
            f"{', '.join(sorted(p.name for p in root.iterdir() if p.is_dir() and not p.is_symlink()))}"
        )
    return src


def bundled_files(name: str) -> list[tuple[str, Path]]:
    """(relative path, path) of the regular files of a bundled project, sorted:
    symlinks (to files or folders) and caches are left out, as from sdists."""
    src = bundled_project(name)
    out: list[tuple[str, Path]] = []
    for dirpath, dirnames, filenames in os.walk(src):  # os.walk does not enter symlinked folders
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for fn in filenames:
            path = Path(dirpath) / fn
            if fn.endswith(".pyc") or path.is_symlink() or not path.is_file():
                continue
            out.append((path.relative_to(src).as_posix(), path))
    return sorted(out)


def bundled_digest(name: str) -> str:
    """A hash of a bundled project's files (paths, modes, contents): what a start state made from it holds."""
    h = hashlib.sha256()
    for rel, path in bundled_files(name):
        data = path.read_bytes()
        h.update(f"{rel}\0{os.stat(path).st_mode & 0o111 != 0}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def pristine_tree(source: RepoSource, dest: Path) -> Path:
    """Write the pristine source into `dest` (created; must not exist)."""
    dest = Path(dest)
    if source.kind == "bundled":
        files = bundled_files(source.name)  # the name checked before anything is made
        dest.mkdir(parents=True)
        for rel, path in files:
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target, follow_symlinks=False)
            os.chmod(target, 0o755 if os.stat(path).st_mode & 0o111 else 0o644)
        return dest
    if source.kind == "git":  # a repository at a commit (git_sources.py)
        from sandgym.verifiers.swe_repo.git_sources import git_tree

        return git_tree(source, dest)
    sdist = fetch_sdist(source)
    dest.mkdir(parents=True)
    with tarfile.open(sdist) as tar:
        members = tar.getmembers()
        tops = {m.name.split("/", 1)[0] for m in members}
        if len(tops) != 1:
            raise RepoError(f"{sdist}: expected one top-level folder, found {sorted(tops)[:5]}")
        top = tops.pop() + "/"
        keep = []
        for m in members:
            if not m.name.startswith(top) or not (m.isfile() or m.isdir()):
                continue  # links and devices are not source
            m.name = m.name[len(top) :]
            if m.name:
                keep.append(m)
        tar.extractall(dest, members=keep, filter="data")
    return dest


def environment_key(env: TestEnvironment) -> str:
    raw = json.dumps({"python": SANDBOX_PYTHON, "requirements": all_requirements(env)}, sort_keys=True)
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def test_venv(env: TestEnvironment) -> Path:
    """A venv with pytest and the pinned requirements, built once (network
    only here) and reused by every task that names the same set. The wheels
    are fetched on the host as an unprivileged user; pip lays them out in a
    build sandbox, and the result is checked before use (wheels.py)."""
    dest = cache_dir() / "venvs" / environment_key(env)
    with cache_lock(dest):
        if (dest / ".complete").exists():
            if not (dest / COMPILED_MARK).exists():
                compile_venv(dest)
            return dest
        if dest.exists():
            shutil.rmtree(dest)
        reqs = all_requirements(env)
        for req in reqs:  # the spec's model checks this too; nothing else reaches pip here
            if not PIN_RE.fullmatch(req):
                raise RepoError(f"environment.requirements: {req!r} is not name==version; fix the task spec")
        with build_area() as area:  # the build user owns the venv meanwhile
            tmp = venv_place(area)
            subprocess.run([SANDBOX_PYTHON, "-m", "venv", "--without-pip", str(tmp)], check=True, capture_output=True)
            try:
                build_venv(tmp, reqs, dest.with_name(dest.name + ".wheels"))
            except (WheelError, CapError) as e:
                raise RepoError(str(e)) from None
            # Tests run as `python -m pytest`, so the scripts naming the build path do not matter.
            shutil.move(tmp, dest)
        (dest / COMPILED_MARK).write_text("")
        (dest / ".complete").write_text("\n".join(all_requirements(env)) + "\n")
        os.chmod(dest, 0o755)
    return dest


def compile_venv(venv: Path) -> None:
    """Byte-compile a venv's modules with the sandboxes' interpreter, in a
    build sandbox (wheels.compile_step); for venvs cached before bytecode
    was made. Moved into a build area while the build user owns it; a venv
    refused there is gone (built anew next time)."""
    with build_area() as area:
        tmp = venv_place(area)
        shutil.move(venv, tmp)
        try:
            compile_in_sandbox(tmp)
        except (WheelError, CapError) as e:
            raise RepoError(str(e)) from None
        shutil.move(tmp, venv)
    (venv / COMPILED_MARK).write_text("")
