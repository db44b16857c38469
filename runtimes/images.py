"""Container images built here, from Debian packages, with no registry.

`debootstrap` makes a minimal Debian root filesystem with Python, `docker
import` turns it into an image, tagged by a content hash of everything
that decides its contents (suite, variant, packages, this recipe's
version), so a build is skipped when the same image exists. The image's
one layer is also unpacked on disk (runtimes/rootfs.py): the local
runtime's sandboxes run on the same files.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass

from .base import RuntimeUnavailable

RECIPE_VERSION = 1
REPOSITORY = "sandgym/base"
LABEL = "sandgym.image"


@dataclass(frozen=True)
class ImageRecipe:
    name: str  # says what the image holds
    suite: str = "bookworm"
    variant: str = "minbase"
    # python3 in full: the agent and the verifier's judge need json,
    # subprocess, tarfile and ctypes, which python3-minimal lacks.
    packages: tuple[str, ...] = ("python3",)
    # Installed with apt inside the new root after debootstrap, from the
    # suite, its updates and its security archive: debootstrap reads only
    # the suite itself, and some packages (Chromium) are kept current only
    # in the security archive.
    updated_packages: tuple[str, ...] = ()

    @property
    def digest(self) -> str:
        canon = json.dumps(
            {"recipe": RECIPE_VERSION, "suite": self.suite, "variant": self.variant, "packages": sorted(self.packages)}
            | ({"updated_packages": sorted(self.updated_packages)} if self.updated_packages else {}),
            sort_keys=True,
        )
        return hashlib.sha256(canon.encode()).hexdigest()[:16]

    @property
    def tag(self) -> str:
        return f"{REPOSITORY}:{self.name}-{self.digest}"


# Recipes are named by what they hold; the family table (sandgym.families)
# names the recipe each family's sandboxes run on.
RECIPES = {
    r.name: r
    for r in (
        ImageRecipe("python"),
        # Applying diffs, and an agent that uses git; `patch` for SWE-bench's
        # own apply chain (the red team's swebench target); gettext for the
        # projects whose tests run xgettext/msgfmt (humanize), which the
        # local runtime no longer takes from the host.
        ImageRecipe("python-git", packages=("python3", "git", "patch", "gettext")),
        # The base of the OpenEnv server image (sandgym/serve_image.py): its
        # sessions' sandboxes are bubblewrap namespaces inside the container.
        ImageRecipe("python-bwrap", packages=("python3", "bubblewrap")),
        # The browser family: Debian's Chromium with the host's fonts (the
        # same glyphs lay pages out as on the local runtime), and Python for
        # the web app and the launcher.
        # `/run_code` (sandgym/fusion/): the toolchains of SandboxFusion's
        # languages, Debian's own. Installed with apt, which resolves their
        # dependencies (debootstrap's --include only roughly does).
        ImageRecipe(
            "polyglot",
            packages=("python3",),
            updated_packages=(
                "g++",
                "nodejs",
                "node-typescript",
                "golang-go",
                "default-jdk-headless",
                "rustc",
                "php-cli",
                "ruby",
                "lua5.4",
                "perl",
                "gdc",
                # More of SandboxFusion's languages that Debian serves: R, C#
                # (Mono), Scala 2.11 (on the JDK above) and Racket.
                "r-base-core",
                "mono-mcs",
                "mono-runtime",
                "scala",
                "racket",
                # SandboxFusion's test modes: pytest, JUnit 5 (its console
                # launcher) and Jest; go_test needs only golang-go.
                "python3-pytest",
                "junit5",
                "jest",
            ),
        ),
        ImageRecipe(
            "chromium",
            packages=("python3", "ca-certificates"),
            updated_packages=("chromium", "fonts-dejavu-core", "fonts-liberation"),
        ),
    )
}
DEFAULT_RECIPE = "python"


def default_image() -> str:
    return RECIPES[DEFAULT_RECIPE].tag


def recipe(name: str) -> ImageRecipe:
    try:
        return RECIPES[name]
    except KeyError:
        raise ValueError(f"unknown image recipe {name!r}; choices: {', '.join(RECIPES)}") from None


def image_for(name: str, default: str) -> str:
    """The image tag a SandboxSpec's `image` names: 'host' -> `default`,
    'recipe:NAME' -> that recipe's image, anything else is a tag."""
    if name == "host":
        return default
    if name.startswith("recipe:"):
        return recipe(name.split(":", 1)[1]).tag
    return name


IMAGE_IO_TIMEOUT_S = 1800


def docker_client():
    import docker

    try:
        # Saving or importing an image of a few GB streams for minutes on a
        # loaded machine: the SDK's 60 s read timeout cut a setup short here.
        client = docker.from_env(timeout=IMAGE_IO_TIMEOUT_S)
        client.ping()
        return client
    except Exception as e:  # the SDK raises several kinds here
        raise RuntimeUnavailable(
            f"the Docker Engine does not answer ({type(e).__name__}): run scripts/setup.sh, which installs "
            "docker.io and starts `dockerd --bridge=none --iptables=false`"
        ) from None


def image_exists(client, tag: str) -> bool:
    import docker

    try:
        client.images.get(tag)
        return True
    except docker.errors.ImageNotFound:
        return False


def build(name: str = DEFAULT_RECIPE, force: bool = False, log: Callable[[str], None] = print) -> str:
    """Build (or find) the image of recipe `name`; returns its tag."""
    recipe_ = recipe(name)
    client = docker_client()
    if image_exists(client, recipe_.tag) and not force:
        log(f"{recipe_.tag}: up to date")
        _unpack(recipe_, client, log, force=False)
        return recipe_.tag
    if not shutil.which("debootstrap"):
        raise RuntimeUnavailable("building images needs debootstrap: run `apt-get install debootstrap`")
    if os.geteuid() != 0:
        raise RuntimeUnavailable("building images with debootstrap needs root")
    work = tempfile.mkdtemp(prefix="sandgym-image-")
    try:
        rootfs = os.path.join(work, "rootfs")
        log(f"{recipe_.tag}: debootstrap {recipe_.suite} ({recipe_.variant}, {', '.join(recipe_.packages)})")
        subprocess.run(
            [
                "debootstrap",
                f"--variant={recipe_.variant}",
                f"--include={','.join(recipe_.packages)}",
                recipe_.suite,
                rootfs,
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        if recipe_.updated_packages:
            log(f"{recipe_.tag}: apt-get install {', '.join(recipe_.updated_packages)} (with updates and security)")
            _apt_install(rootfs, recipe_.suite, recipe_.updated_packages)
        tarball = os.path.join(work, "rootfs.tar")
        subprocess.run(["tar", "-C", rootfs, "--numeric-owner", "-cf", tarball, "."], check=True)
        log(f"{recipe_.tag}: importing")
        repo, tag = recipe_.tag.split(":")
        client.api.import_image_from_file(
            tarball,
            repository=repo,
            tag=tag,
            changes=[
                f'LABEL {LABEL}="{recipe_.name}" sandgym.recipe="{recipe_.digest}"',
                "ENV LANG=C.UTF-8 PATH=/usr/local/bin:/usr/bin:/bin",
            ],
        )
    except subprocess.CalledProcessError as e:
        raise RuntimeUnavailable(f"building {recipe_.tag} failed: {e}") from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    log(f"{recipe_.tag}: built")
    _unpack(recipe_, client, log, force=True)
    return recipe_.tag


def _unpack(recipe_: ImageRecipe, client, log: Callable[[str], None], force: bool) -> None:
    # The local runtime's sandboxes run on the same files, unpacked.
    from .rootfs import unpack

    unpack(recipe_, client, log, force=force)


def _apt_install(rootfs: str, suite: str, packages: tuple[str, ...]) -> None:
    sources = (
        f"deb http://deb.debian.org/debian {suite} main\n"
        f"deb http://deb.debian.org/debian {suite}-updates main\n"
        f"deb http://deb.debian.org/debian-security {suite}-security main\n"
    )
    with open(os.path.join(rootfs, "etc/apt/sources.list"), "w") as f:
        f.write(sources)
    env = {"DEBIAN_FRONTEND": "noninteractive", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
    # Some maintainer scripts need /proc (the JDK's runs `java`); it is
    # mounted for the install only, and unmounted before the tree is packed.
    proc = os.path.join(rootfs, "proc")
    subprocess.run(["mount", "-t", "proc", "proc", proc], check=True)
    try:
        for cmd in (
            ["apt-get", "update", "-qq"],
            ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages],
            ["apt-get", "clean"],
        ):
            subprocess.run(["chroot", rootfs, *cmd], check=True, env=env, stdout=subprocess.DEVNULL)
    finally:
        subprocess.run(["umount", "--lazy", proc], check=True)
    shutil.rmtree(os.path.join(rootfs, "var/lib/apt/lists"), ignore_errors=True)


def list_images() -> list[dict]:
    client = docker_client()
    out = []
    for image in client.images.list(filters={"label": LABEL}):
        for tag in image.tags or ["<untagged>"]:
            out.append(
                {
                    "tag": tag,
                    "recipe": image.labels.get(LABEL, ""),
                    "id": image.short_id,
                    "size_mb": round(image.attrs.get("Size", 0) / 1e6, 1),
                    "created": image.attrs.get("Created", ""),
                }
            )
    return out
