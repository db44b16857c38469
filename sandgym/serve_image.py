"""The OpenEnv server image (`sandgym images build serve`).

No registry is reachable and the engine runs with `--bridge=none`, so
nothing is installed during the image build: the locked Python packages
and sandgym are installed on the host into a build context (`site/`, for
the image's Python: Debian bookworm's 3.11, the same ABI as the host's),
and the repository's `Dockerfile` copies them onto the `serve` base image
(bookworm + python3 + bubblewrap, built by debootstrap). The server runs
its sandboxes with the `jail` runtime (runtimes/jail/), so the image
needs no option beyond `-p`. The tag is a
content hash of the base image, the lock, and sandgym's sources.
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


def _content_hash(root: Path, base_tag: str) -> str:
    h = hashlib.sha256(base_tag.encode())
    for name in SOURCES:
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


def build(force: bool = False, log: Callable[[str], None] = print) -> str:
    """Build (or find) the serve image; returns its tag."""
    root = project_root()
    client = docker_client()
    base = build_base("python-bwrap", log=log)
    tag = f"{REPOSITORY}:{_content_hash(root, base)}"
    if image_exists(client, tag) and not force:
        log(f"{tag}: up to date")
        return tag
    work = Path(tempfile.mkdtemp(prefix="sandgym-serve-"))
    try:
        (work / "constraints.txt").write_text(constraints_from_lock((root / "requirements.lock").read_text()))
        log(f"{tag}: installing sandgym[serve] and its locked dependencies into the build context")
        # The network is used here, on the host (PyPI), never inside the build.
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-compile",
                "--target",
                str(work / "site"),
                "-c",
                str(work / "constraints.txt"),
                f"{root}[serve]",
            ],
            capture_output=True,
            text=True,
        )
        if r.returncode != 0:
            raise RuntimeUnavailable(f"installing sandgym[serve] for the image failed:\n{r.stderr[-2000:]}")
        shutil.copy(root / "Dockerfile", work / "Dockerfile")
        log(f"{tag}: docker build (no network)")
        repo, version = tag.split(":")
        try:
            client.images.build(
                path=str(work), tag=tag, buildargs={"BASE": base}, network_mode="none", rm=True, labels={LABEL: "serve"}
            )
        except Exception as e:  # BuildError, APIError
            raise RuntimeUnavailable(f"docker build of {tag} failed: {e}") from None
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
