"""The OpenEnv server image (`sandgym images build serve`).

No registry is reachable and the engine runs with `--bridge=none`, so
nothing is installed during the image build: the locked Python packages
and sandgym are installed on the host into build contexts (`site/`, for
the image's Python: Debian bookworm's 3.11, the same ABI as the host's).
The packages are copied onto the `python-bwrap` base image (bookworm +
python3 + bubblewrap, built by debootstrap) as an image of their own, and
the repository's `Dockerfile` copies sandgym onto that. The server runs
its sandboxes with the `jail` runtime (runtimes/jail/), so the image
needs no option beyond `-p`. The tags are content hashes: of the base
image and the lock for the packages, of those and sandgym's sources for
the server.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from .runtimes.base import RuntimeUnavailable
from .runtimes.images import LABEL, docker_client, image_exists
from .runtimes.images import build as build_base

REPOSITORY = "sandgym/serve"
DEPS_REPOSITORY = "sandgym/serve-deps"
# What the dependencies' layer is made from (besides the base image).
DEPS_SOURCES = ("pyproject.toml", "requirements.lock")
# The dependencies' layer: the locked packages on the base (bookworm + python3).
DEPS_DOCKERFILE = "ARG BASE\nFROM ${BASE}\nCOPY site /opt/sandgym/site\n"
SOURCES = (
    "pyproject.toml",
    "requirements.lock",
    "Dockerfile",
    "sandgym",
    "envs",
    "runtimes",
    "verifiers",
    "task_specs",
)


def project_root() -> Path:
    root = Path(__file__).resolve().parent.parent
    if not (root / "Dockerfile").exists() or not (root / "pyproject.toml").exists():
        raise RuntimeUnavailable(f"the serve image is built from a sandgym checkout; {root} is not one")
    return root


def _content_hash(root: Path, base_tag: str, sources: tuple[str, ...] = SOURCES) -> str:
    h = hashlib.sha256(base_tag.encode())
    for name in sources:
        path = root / name
        files = (
            [path]
            if path.is_file()
            else sorted(
                p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
            )
        )
        for f in files:
            h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def constraints_from_lock(lock: str) -> str:
    """The lock's pins without hashes (pip refuses hashes in constraints)."""
    out = []
    for line in lock.splitlines():
        line = line.strip()
        if line and not line.startswith(("#", "--")) and re.match(r"^[A-Za-z0-9]", line):
            out.append(line.rstrip("\\").strip())
    return "\n".join(out) + "\n"


def _installer() -> list[str]:
    """uv beside the interpreter when setup.sh put it there (a shared cache,
    parallel downloads: ~10x faster here), else pip; both leave bytecode
    out (the image's PYTHONDONTWRITEBYTECODE)."""
    uv = Path(sys.executable).parent / "uv"
    if uv.is_file():
        return [str(uv), "pip", "install", "--quiet", "--native-tls", "--python", sys.executable]
    return [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile"]


def _split_own(site: Path, own: Path) -> None:
    """Move the files sandgym's own install wrote (its RECORD) from `site`
    to `own`, leaving the dependencies."""
    records = list(site.glob("sandgym-*.dist-info/RECORD"))
    if len(records) != 1:
        raise RuntimeUnavailable(f"installing sandgym for the image wrote {len(records)} sandgym RECORD files, not 1")
    for line in records[0].read_text().splitlines():
        rel = line.split(",")[0]
        src = site / rel
        if rel and ".." not in Path(rel).parts and src.is_file():
            (own / rel).parent.mkdir(parents=True, exist_ok=True)
            src.rename(own / rel)


def _docker_build(client, context: Path, tag: str, base: str, role: str) -> None:
    try:
        client.images.build(
            path=str(context), tag=tag, buildargs={"BASE": base}, network_mode="none", rm=True, labels={LABEL: role}
        )
    except Exception as e:  # BuildError, APIError
        raise RuntimeUnavailable(f"docker build of {tag} failed: {e}") from None


def build(force: bool = False, log: Callable[[str], None] = print) -> str:
    """Build (or find) the serve image; returns its tag. Two layers: the
    locked packages (`sandgym/serve-deps:<hash of the base and the lock>`,
    400 MB, built again only when the lock changes) and sandgym itself on
    top, so a change to sandgym's sources copies sandgym alone."""
    root = project_root()
    client = docker_client()
    base = build_base("python-bwrap", log=log)
    tag = f"{REPOSITORY}:{_content_hash(root, base)}"
    if image_exists(client, tag) and not force:
        log(f"{tag}: up to date")
        return tag
    deps = f"{DEPS_REPOSITORY}:{_content_hash(root, base, DEPS_SOURCES)}"
    with_deps = force or not image_exists(client, deps)
    work = Path(tempfile.mkdtemp(prefix="sandgym-serve-"))
    try:
        (work / "constraints.txt").write_text(constraints_from_lock((root / "requirements.lock").read_text()))
        what = "sandgym[serve] and its locked dependencies" if with_deps else f"sandgym alone (on {deps})"
        log(f"{tag}: installing {what} into the build context")
        # The network is used here, on the host (PyPI), never inside the build.
        r = subprocess.run(
            [
                *_installer(),
                *([] if with_deps else ["--no-deps"]),
                "--target",
                str(work / "deps" / "site"),
                "-c",
                str(work / "constraints.txt"),
                f"{root}[serve]",
            ],
            capture_output=True,
            text=True,
        )
        if r.returncode != 0:
            raise RuntimeUnavailable(f"installing sandgym[serve] for the image failed:\n{r.stderr[-2000:]}")
        _split_own(work / "deps" / "site", work / "own" / "site")
        if with_deps:
            log(f"{deps}: docker build (no network)")
            (work / "deps" / "Dockerfile").write_text(DEPS_DOCKERFILE)
            _docker_build(client, work / "deps", deps, base, "serve-deps")
        shutil.copy(root / "Dockerfile", work / "own" / "Dockerfile")
        log(f"{tag}: docker build (no network)")
        _docker_build(client, work / "own", tag, deps, "serve")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    log(f"{tag}: built")
    return tag


def run_command(
    tag: str, port: int = 8000, env_id: str = "sandgym/CodeFunction-v0", network: str | None = None
) -> list[str]:
    """How to run it: a plain `docker run -p` (the server binds 0.0.0.0 in
    the container; its sandboxes need nothing beyond Docker's defaults).
    `network`: a user-defined network, for engines without the default
    bridge (dockerd --bridge=none, where `-p` alone publishes nothing)."""
    return [
        "docker",
        "run",
        "--rm",
        *(["--network", network] if network else []),
        "-p",
        f"127.0.0.1:{port}:8000",
        "-e",
        f"SANDGYM_ENV={env_id}",
        tag,
    ]
