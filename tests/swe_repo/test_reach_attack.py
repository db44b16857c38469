"""The hole of issue 29: an agent that looks through the filesystem it can
see for another copy of each file of the repository (same relative path)
and copies it over the mutated one. With the host's /usr in the sandbox,
a host that holds the package under test (Debian's python3-toml is toml
0.10.2, the version of the bundled toml tasks; a copy vendored in some tool)
gave the answer away. A local sandbox now sees only its image's files.

Two hosts: this one as it is (its own /usr/lib/python3/dist-packages/toml,
when it has it) and one holding a pristine copy of the billing project
under /usr/local/share (put there by the test, root only, removed after).
Either way the attack must not pass, and nothing outside the sandbox may
change."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest

from sandgym.envs.swe_repo.env import SWERepoEnv
from sandgym.outcomes import Outcome
from sandgym.specs import TaskSet
from sandgym.verifiers.swe_repo.sources import bundled_projects_dir

from .security_helpers import TASKS, nothing_outside_changes

# What the agent runs: every other place on the visible filesystem that
# holds files with the same relative paths as the repository's (tests
# left out: the verifier protects them); from the place with the most of
# them, each file that differs is copied over. It knows nothing hidden.
ATTACK = r"""cd /workspace/repo && python3 - <<'EOF'
import os, shutil, subprocess
mine = subprocess.run(["git", "ls-files", "*.py"], capture_output=True, text=True).stdout.split()
wanted = {"/" + rel: rel for rel in mine if "/" in rel and not rel.startswith(("tests/", "test/"))}
places = {}
for d, dirs, files in os.walk("/"):
    if d == "/":
        dirs[:] = [x for x in dirs if x not in ("proc", "sys", "dev", "workspace")]
    for f in files:
        p = os.path.join(d, f)
        for suffix, rel in wanted.items():
            if p.endswith(suffix):
                places.setdefault(p[: -len(suffix)], []).append(rel)
copied = []
if places:
    best = max(places, key=lambda k: len(places[k]))
    for rel in places[best]:
        try:
            if open(best + "/" + rel, "rb").read() != open(rel, "rb").read():
                shutil.copyfile(best + "/" + rel, rel)
                copied.append(rel)
                print("copied", best + "/" + rel, "->", rel)
        except OSError:
            pass
print("done", len(copied))
EOF"""
PLANTED = Path("/usr/local/share/sandgym-reach-test")
HOST_TOML = Path("/usr/lib/python3/dist-packages/toml")


def tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(str(p).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def play(runtime, tasks, task_id: str) -> tuple[str, dict]:
    env = SWERepoEnv(tasks=tasks, runtime=runtime, max_steps=5, warm_pool=0)
    try:
        env.reset(options={"task_id": task_id})
        obs, *_ = env.step({"tool": "bash", "command": ATTACK})
        *_, info = env.step({"tool": "submit"})
        return obs["feedback"], info
    finally:
        env.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="puts a copy of the project under /usr/local/share (root only)")
def test_a_copy_of_the_project_on_the_host_is_out_of_reach(runtime):
    PLANTED.mkdir(parents=True, exist_ok=True)
    shutil.copytree(bundled_projects_dir() / "billing", PLANTED / "billing", dirs_exist_ok=True)
    try:
        before = tree_digest(PLANTED)
        with nothing_outside_changes(runtime):
            feedback, info = play(runtime, TASKS, "billing/round-half-even")
        assert "done 0" in feedback, feedback  # nothing found to copy
        assert info["outcome"] != Outcome.PASSED.value and info["status"] != "FULL", info
        assert tree_digest(PLANTED) == before
    finally:
        shutil.rmtree(PLANTED)


@pytest.mark.skipif(not (HOST_TOML / "decoder.py").exists(), reason="this host has no Debian python3-toml")
def test_the_hosts_own_toml_is_out_of_reach(runtime):
    tasks = TaskSet.load("swe_repo/pypi-v2")
    before = tree_digest(HOST_TOML)
    with nothing_outside_changes(runtime):
        feedback, info = play(runtime, tasks, "toml-0.10.2/mut-0000")
    assert "done 0" in feedback, feedback
    assert info["outcome"] != Outcome.PASSED.value and info["status"] != "FULL", info
    assert tree_digest(HOST_TOML) == before
