"""Which paths a diff may touch.

An agent's diff may change the package's own source and nothing that
steers the test run: not the task's tests or any test file or folder,
conftest.py, sitecustomize.py, *.pth, pytest configuration, bytecode,
native extensions or .git; no symlinks; and no new top-level module that
would shadow one of the standard library, the test venv or the verifier.
`filter_diff` drops the sections that break this before anything runs;
`tree_violations` checks what the applied tree changed, whatever the diff
text said. `start_info` reads a start state's files once per task.
"""

from __future__ import annotations

import io
import sys
import tarfile
import threading
from dataclasses import dataclass
from pathlib import PurePosixPath

from sandgym.specs.swe_repo import SWEHidden, TestEnvironment
from sandgym.verifiers.swe_repo.checkout import StartState
from sandgym.verifiers.swe_repo.diffs import split_diff
from sandgym.verifiers.swe_repo.sources import test_venv

PROTECTED_NAMES = {
    "conftest.py",
    "sitecustomize.py",
    "usercustomize.py",
    "pytest.ini",
    "tox.ini",
    "setup.cfg",
    "pyproject.toml",
    ".pytest.ini",
    # pytest collects neither by default, but a package's own config may
    # (jsonpointer's and voluptuous's suites are a top-level tests.py).
    "tests.py",
    "test.py",
}
PROTECTED_DIRS = {"tests", "test", "testing"}
# Native code runs in the tests' process beyond the reach of any audit hook.
NATIVE_SUFFIXES = (".so", ".pyd", ".dylib", ".dll")


def protected_reason(path: str, test_files: frozenset[str] = frozenset()) -> str | None:
    """Why the verifier keeps the agent's hands off `path`, or None.
    `test_files`: the files a task's tests are in, whatever their names."""
    parts = PurePosixPath(path).parts
    if not parts:
        return None
    name = parts[-1]
    if path in test_files:
        return f"{path}: the task's tests are in it"
    if name in PROTECTED_NAMES:
        return f"{path}: {name} configures or hooks into the test run"
    if name.endswith(".pth"):
        return f"{path}: .pth files run code at interpreter start"
    if (name.startswith("test_") or name.endswith("_test.py")) and name.endswith(".py"):
        return f"{path}: a test file"
    if any(p in PROTECTED_DIRS for p in parts[:-1]):
        return f"{path}: under a test folder"
    if "__pycache__" in parts or name.endswith((".pyc", ".pyo")):
        return f"{path}: bytecode would run instead of the source"
    if name.endswith(NATIVE_SUFFIXES) or ".so." in name:
        return f"{path}: native code is not accepted in a diff"
    if any(p.lower() == ".git" for p in parts):
        return f"{path}: inside .git"
    return None


_SHADOW_CACHE: dict[str, frozenset[str]] = {}
_SHADOW_LOCK = threading.Lock()


def shadowed_names(environment: TestEnvironment) -> frozenset[str]:
    """Top-level module names of the standard library, the test venv and the verifier."""
    venv = test_venv(environment)
    with _SHADOW_LOCK:
        if str(venv) not in _SHADOW_CACHE:
            names = set(sys.stdlib_module_names) | {"pytest", "_pytest", "pluggy", "py"}
            names |= {"sandgym_swe_records", "sandgym_swe_guard", "pytest_child", "runner"}
            for site in venv.glob("lib/python3*/site-packages"):
                for p in site.iterdir():
                    if p.name.endswith((".dist-info", ".egg-info", ".pth")) or p.name.startswith((".", "__")):
                        continue
                    names.add(p.name.split(".", 1)[0])
            _SHADOW_CACHE[str(venv)] = frozenset(names)
        return _SHADOW_CACHE[str(venv)]


def shadow_reason(path: str, import_root: str, shadowed: frozenset[str], existing: frozenset[str]) -> str | None:
    """A new top-level module, at the repository root or the import root, that
    would be imported instead of one of the standard library or the test venv."""
    parts = PurePosixPath(path).parts
    root = () if import_root in ("", ".") else PurePosixPath(import_root).parts
    for base in {(), root}:
        rel = parts[len(base) :]
        if parts[: len(base)] != base or not rel:
            continue
        if len(rel) == 1 and not rel[0].endswith(".py"):
            continue
        top = rel[0][:-3] if len(rel) == 1 else rel[0]
        present = any(f == "/".join((*base, top)) or f.startswith("/".join((*base, top)) + "/") for f in existing)
        if top in shadowed and not present and "/".join((*base, top + ".py")) not in existing:
            return f"{path}: a new module named like {top!r} of the standard library or the test venv"
    return None


def filter_diff(
    diff: str,
    import_root: str = ".",
    shadowed: frozenset[str] = frozenset(),
    existing: frozenset[str] = frozenset(),
    test_files: frozenset[str] = frozenset(),
) -> tuple[str, list[str]]:
    """(the diff without protected or unreadable sections, one line per dropped section)."""
    kept, dropped = [], []
    for section in split_diff(diff):
        if section.problem:
            dropped.append(f"unreadable diff section ({section.problem}): never applied")
            continue
        reasons = [r for p in section.paths if (r := protected_reason(p, test_files))]
        if section.symlink:
            reasons.append(f"{', '.join(section.paths)}: symlinks are not accepted in a diff")
        if section.adds_file and shadowed:
            reasons += [r for p in section.paths if (r := shadow_reason(p, import_root, shadowed, existing))]
        if reasons:
            dropped.extend(reasons)
        else:
            kept.append(section.text if section.text.endswith("\n") else section.text + "\n")
    return "".join(kept), dropped


def task_test_files(hidden: SWEHidden) -> frozenset[str]:
    """The files the task's tests are in (from their node ids)."""
    files = (t.split("::", 1)[0] for t in (*hidden.FAIL_TO_PASS, *hidden.PASS_TO_PASS))
    return frozenset(f for f in files if f.endswith(".py"))


def tree_violations(
    changes: list, environment: TestEnvironment, existing: frozenset[str], test_files: frozenset[str] = frozenset()
) -> list[str]:
    """What the applied diff changed that it must not have, whatever its text said."""
    shadowed = shadowed_names(environment)
    out = []
    for rel, what in changes:
        if what in ("symlink", "special"):
            out.append(f"{rel}: the applied diff made a {what} file")
        elif reason := protected_reason(rel, test_files):
            out.append(f"{reason} (changed in the applied tree)")
        elif what == "added" and (reason := shadow_reason(rel, environment.import_root, shadowed, existing)):
            out.append(f"{reason} (added in the applied tree)")
    return out


# -- the start state, read once per task --------------------------------------------------


@dataclass(frozen=True)
class StartInfo:
    """A start state's files as the policy sees them."""

    files: frozenset[str]
    protected: tuple[str, ...]
    texts: dict[str, str]  # the .py files that are not protected


_INFO: dict[str, StartInfo] = {}
_INFO_LOCK = threading.Lock()


def start_info(state: StartState) -> StartInfo:
    """The files of `state`'s tree, the protected ones, and the source texts
    (kept for the scan); cached per start state."""
    with _INFO_LOCK:
        if state.key in _INFO:
            return _INFO[state.key]
    files, texts = set(), {}
    with tarfile.open(fileobj=io.BytesIO(state.tree_tar)) as tar:
        for m in tar.getmembers():
            if not m.isfile() or not m.name.startswith("repo/"):
                continue
            rel = m.name[len("repo/") :]
            files.add(rel)
            if rel.endswith(".py") and protected_reason(rel) is None:
                f = tar.extractfile(m)
                texts[rel] = f.read().decode("utf-8", "replace") if f else ""
    info = StartInfo(frozenset(files), tuple(sorted(p for p in files if protected_reason(p))), texts)
    with _INFO_LOCK:
        while len(_INFO) > 64:
            _INFO.pop(next(iter(_INFO)))
        _INFO[state.key] = info
    return info
