"""A local sandbox sees the files of its image, and nothing of the host's
own system: the tree `sandgym images build` unpacked (runtimes/rootfs.py)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from sandgym.runtimes import RuntimeUnavailable, SandboxSpec
from sandgym.runtimes.local.runtime import LocalRuntime
from sandgym.runtimes.rootfs import ALWAYS, MOUNT_POINTS, rootfs

# Lists a folder tree from inside: (path, kind, size or link target), and
# the folders the sandbox user may not list.
LISTER = r"""
import json, os, stat, sys
out, closed = [], []
for top in sys.argv[1:]:
    for d, dirs, files in os.walk(top, onerror=lambda e: closed.append(e.filename)):
        dirs.sort()
        for n in sorted(dirs + files):
            p = os.path.join(d, n)
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                out.append([p, "l", os.readlink(p)])
            elif stat.S_ISDIR(st.st_mode):
                out.append([p, "d", ""])
            else:
                out.append([p, "f", str(st.st_size)])
print(json.dumps({"entries": out, "closed": closed}))
"""
# The files the runtime binds over the image's /etc (sizes differ).
ETC_OWN = {"/etc/passwd", "/etc/group", "/etc/hosts", "/etc/hostname", "/etc/nsswitch.conf"}


def inside(sandbox, tops: list[str]) -> tuple[set[tuple[str, str, str]], list[str]]:
    r = sandbox.exec(["/usr/bin/python3", "-I", "-S", "-c", LISTER, *tops], max_output=64 << 20)
    assert r.exit_code == 0, r.text("stderr")
    data = json.loads(r.stdout)
    return {tuple(e) for e in data["entries"]}, data["closed"]


def on_disk(root: Path, tops: list[str], closed: list[str]) -> set[tuple[str, str, str]]:
    out = set()
    for top in tops:
        for d, dirs, files in os.walk(root / top.lstrip("/")):
            rel = "/" + os.path.relpath(d, root)
            if rel in closed:
                dirs[:] = []
                continue
            for n in dirs + files:
                p = os.path.join(d, n)
                st = os.lstat(p)
                where = f"{rel}/{n}"
                if stat.S_ISLNK(st.st_mode):
                    out.add((where, "l", os.readlink(p)))
                elif stat.S_ISDIR(st.st_mode):
                    out.add((where, "d", ""))
                else:
                    out.add((where, "f", str(st.st_size)))
    return out


def without_own_sizes(entries: set[tuple[str, str, str]]) -> set[tuple[str, str, str]]:
    return {(p, k, "" if p in ETC_OWN else v) for p, k, v in entries}


@pytest.mark.parametrize("zygote", [True, False], ids=["zygote", "bwrap"])
@pytest.mark.parametrize("image", ["host", "recipe:python-git"])
def test_the_sandbox_sees_exactly_the_images_files(runtime, bwrap_runtime, zygote, image):
    rt = runtime if zygote else bwrap_runtime
    root = rootfs(image)
    with rt.create(SandboxSpec(image=image)) as sb:
        tops = ["/usr", "/etc", "/var"]
        seen, closed = inside(sb, tops)
        assert without_own_sizes(seen) == without_own_sizes(on_disk(root, tops, closed))
        top_level = sb.exec(["/usr/bin/python3", "-I", "-S", "-c", "import os; print(sorted(os.listdir('/')))"])
    image_top = set(os.listdir(root))
    assert set(json.loads(top_level.stdout.decode().replace("'", '"'))) == image_top | set(ALWAYS)
    for name in MOUNT_POINTS:  # each is empty in the tree: nothing of the image goes unseen
        path = root / name
        assert not path.is_dir() or path.is_symlink() or not any(path.iterdir()), name


def test_nothing_of_the_hosts_own_system_shows(runtime):
    root = rootfs("host")
    # Host files the default image lacks: bubblewrap itself, and whatever
    # Debian packages of Python this host has that the image has not.
    host_only = [p for p in ("/usr/bin/bwrap", "/usr/bin/git", "/usr/lib/python3/dist-packages") if os.path.exists(p)]
    host_only = [p for p in host_only if not (root / p.lstrip("/")).exists()]
    assert "/usr/bin/bwrap" in host_only  # setup.sh installs it on the host only
    with runtime.create() as sb:
        r = sb.exec(["/bin/sh", "-c", " ; ".join(f"test -e {p} && echo {p}" for p in host_only) + "; true"])
    assert r.stdout == b"", r.stdout
    # The image of the SWE family holds git; the default one does not.
    with runtime.create(SandboxSpec(image="recipe:python-git")) as sb:
        assert sb.exec(["/usr/bin/git", "--version"]).exit_code == 0


def test_a_missing_tree_names_the_command_that_makes_it(tmp_path, monkeypatch):
    monkeypatch.setenv("SANDGYM_CACHE", str(tmp_path))
    rt = LocalRuntime()
    try:
        with pytest.raises(RuntimeUnavailable, match=r"sandgym images build python-git"):
            rt.create(SandboxSpec(image="recipe:python-git"))
        with pytest.raises(RuntimeUnavailable, match=r"runs only sandgym's own images"):
            rt.create(SandboxSpec(image="debian:bookworm"))
    finally:
        rt.close()
