"""Image root filesystems unpacked on disk, for the backends that build a
sandbox's root with bind mounts (local's bubblewrap sandboxes and browser).

A local sandbox sees the same files as a Docker sandbox of the same task:
the layer of the image `sandgym images build` made from the recipe
(runtimes/images.py), unpacked once under `rootfs_cache()/<name>-<digest>/`
and never written again. Nothing of the host's /usr, /lib or /opt shows:
a host that holds a copy of a package under test (Debian's python3-*, a
copy vendored inside some tool) must not hand it to the agent.

The tree is unpacked into a temporary folder beside its final place; the
stamp is written last and the folder renamed into place, so a tree is
whole or absent.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path

from .base import RuntimeUnavailable
from .images import DEFAULT_RECIPE, ImageRecipe, recipe

STAMP = ".sandgym-rootfs"  # beside `root/`: the recipe's digest, written last
# Top-level folders of an image that a sandbox never sees from the image:
# each is an empty folder (the sandbox mounts its own /proc, /dev, tmpfs on
# /tmp, the staged code under /opt...). `unpack` checks they are empty in
# the image, so the file set a sandbox sees is the image's.
MOUNT_POINTS = ("proc", "dev", "sys", "tmp", "run", "opt", "home", "mnt", "media", "srv")
# Mount points every sandbox has, in the image or not (the zygote's clones
# mount tmpfs on them; bubblewrap makes any other target itself).
ALWAYS = ("proc", "dev", "tmp", "opt", "workspace")
# /etc files a local sandbox gets from the runtime instead of the image
# (the sandbox's own users and host names); they must exist in the tree to
# be bound over.
ETC_OWN = ("passwd", "group", "hosts", "hostname", "nsswitch.conf")


def cache_root() -> Path:
    """sandgym's cache folder (SANDGYM_CACHE): world-readable (sandboxes run
    as nobody under root), so not under /root. Not created here."""
    if os.environ.get("SANDGYM_CACHE"):
        return Path(os.environ["SANDGYM_CACHE"])
    if os.geteuid() == 0:
        return Path("/var/cache/sandgym")
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "sandgym"


def rootfs_cache() -> Path:
    """Where unpacked trees are kept."""
    return cache_root() / "rootfs"


def recipe_of(image: str) -> ImageRecipe:
    """The recipe a SandboxSpec's `image` names: 'host' is the default recipe."""
    if image == "host":
        return recipe(DEFAULT_RECIPE)
    if image.startswith("recipe:"):
        return recipe(image.split(":", 1)[1])
    raise RuntimeUnavailable(
        f"image {image!r}: the local runtime runs only sandgym's own images ('host' or 'recipe:NAME'); "
        "run other images with --runtime docker"
    )


def tree_dir(r: ImageRecipe) -> Path:
    return rootfs_cache() / f"{r.name}-{r.digest}"


def rootfs(image: str) -> Path:
    """The unpacked root of `image` (read-only to everyone but its builder).
    Raises RuntimeUnavailable naming the command that makes it."""
    r = recipe_of(image)
    d = tree_dir(r)
    try:
        whole = (d / STAMP).read_text().strip() == r.digest
    except OSError:
        whole = False
    if not whole:
        raise RuntimeUnavailable(
            f"the local runtime runs sandboxes on the root filesystem of image recipe {r.name!r} ({r.tag}), "
            f"which is not unpacked at {d}: run `sandgym images build {r.name}` (scripts/setup.sh does)"
        )
    return d / "root"


def root_args(root: Path) -> list[str]:
    """bubblewrap arguments that show `root` as the sandbox's root: each
    top-level entry bound read-only (symlinks as symlinks), the mount points
    as empty folders of bubblewrap's own root, so that mounts can be made
    under them."""
    a: list[str] = []
    for name in sorted(os.listdir(root)):
        path = root / name
        if path.is_symlink():
            a += ["--symlink", os.readlink(path), f"/{name}"]
        elif name in MOUNT_POINTS:
            a += ["--dir", f"/{name}"]
        elif path.is_dir():
            a += ["--ro-bind", str(path), f"/{name}"]
    for name in ALWAYS:
        if not (root / name).exists():
            a += ["--dir", f"/{name}"]
    return a


def unpack(r: ImageRecipe, client, log: Callable[[str], None] = print, force: bool = False) -> Path:
    """Unpack the image of recipe `r` (one layer: `docker import` made it)
    under the cache, once. Returns the root folder."""
    d = tree_dir(r)
    if not force:
        try:
            return rootfs(f"recipe:{r.name}")
        except RuntimeUnavailable:
            pass
    d.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(d.parent, 0o755)
    # (`sandgym gc` removes a killed unpack's folder: runtimes/tempdirs.py)
    work = Path(tempfile.mkdtemp(prefix=f".tmp-{os.getpid()}-", dir=d.parent))
    try:
        log(f"{r.tag}: unpacking the root filesystem for the local runtime into {d}")
        saved = work / "image.tar"
        with open(saved, "wb") as f:
            for chunk in client.images.get(r.tag).save(named=False):
                f.write(chunk)
        root = work / "root"
        root.mkdir()
        with tarfile.open(saved) as outer:
            manifest = json.load(outer.extractfile("manifest.json"))  # type: ignore[arg-type]
            layers = manifest[0]["Layers"]
            if len(layers) != 1:
                raise RuntimeUnavailable(f"{r.tag} has {len(layers)} layers; sandgym's images have one")
            layer = outer.extractfile(layers[0])
            assert layer is not None
            # GNU tar, as root keeping owners and modes: the image is ours
            # (built here from Debian packages), and its absolute symlinks
            # (/etc/alternatives) are refused by tarfile's safe filters.
            with tempfile.TemporaryFile() as err:
                p = subprocess.Popen(
                    ["tar", "-x", "--numeric-owner", "-p", "-C", str(root)], stdin=subprocess.PIPE, stderr=err
                )
                assert p.stdin is not None
                with p.stdin:
                    shutil.copyfileobj(layer, p.stdin, 1 << 20)
                if p.wait() != 0:
                    err.seek(0)
                    raise RuntimeUnavailable(f"unpacking {r.tag} failed: {err.read().decode(errors='replace')[-500:]}")
        saved.unlink()
        for name in MOUNT_POINTS:
            path = root / name
            if path.is_dir() and not path.is_symlink() and any(path.iterdir()):
                # A sandbox covers these; the image's files there would go unseen.
                # (Debian's /run holds only a lock folder and a mount table.)
                shutil.rmtree(path)
                path.mkdir(mode=0o755)
        for name in ETC_OWN:
            if not (root / "etc" / name).exists():
                (root / "etc" / name).touch()
        os.chmod(root, 0o755)
        os.chmod(work, 0o755)  # (mkdtemp's 0700 would keep the sandboxes' user out)
        (work / STAMP).write_text(r.digest + "\n")
        if d.exists():  # (--force) out of the way first: sandboxes may still hold it
            old = Path(tempfile.mkdtemp(prefix=f".tmp-{os.getpid()}-", dir=d.parent)) / "old"
            os.rename(d, old)
            shutil.rmtree(old.parent, ignore_errors=True)
        os.rename(work, d)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    log(f"{r.tag}: root filesystem at {d / 'root'}")
    return d / "root"
