"""Imports point one way (DESIGN.md): envs -> runtimes, verifiers; verifiers
never import envs; runtimes import neither; a backend folder
(runtimes/<name>/) imports no other backend; the core imports no module of
a family (only the contracts envs.base and verifiers.models): it reaches a
family through the family table's import strings.

Every import statement of the tree (relative ones resolved, imports inside
functions and TYPE_CHECKING blocks included) is checked against the rules.
Three more rules: in-sandbox code (folders named `boundary/`) imports only
the standard library; no family imports another family's modules; no
private name is imported (or used as `module._name`) outside its module.
"""

from __future__ import annotations

import ast
import functools
import sys
from pathlib import Path

import pytest

from sandgym.runtimes.backends import BACKENDS

ROOT = Path(__file__).resolve().parents[2]
# Top-level folders and the package each one is installed as (pyproject.toml).
PACKAGES = {
    "sandgym": "sandgym",
    "envs": "sandgym.envs",
    "verifiers": "sandgym.verifiers",
    "runtimes": "sandgym.runtimes",
}
# The core's floor: what every layer may import. It imports nothing above it.
FLOOR = (
    "sandgym.errors",
    "sandgym.outcomes",
    "sandgym.spaces",
    "sandgym.specs",
    "sandgym.families",
    "sandgym.safe_files",  # reading hostile files, atomic writes (stdlib only)
    "sandgym.terminal",  # shown(): text from data made safe to print
    "sandgym.task_specs",
    "sandgym.fusion.languages",  # the /run_code language table (data): stdio tasks are judged in it
)
# The declared contracts the core is typed against: the only modules of
# envs/ and verifiers/ the core imports. It reaches a family only through
# the family table's import strings (sandgym/families.py).
CONTRACTS = ("sandgym.envs.base", "sandgym.verifiers.models")


def under(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def layer(module: str) -> str:
    for name in ("envs", "verifiers", "runtimes"):
        if under(module, (f"sandgym.{name}",)):
            return name
    return "floor" if under(module, FLOOR) else "core"


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = [PACKAGES[rel.parts[0]], *rel.parts[1:]]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(source: str, module: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, absolute module) of every sandgym import in `source`."""
    package = module if is_package else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            # `from sandgym.envs import swe_repo` imports the submodule.
            found += [(node.lineno, f"{target}.{a.name}") for a in node.names]
    return [(line, m) for line, m in found if m == "sandgym" or m.startswith("sandgym.")]


def backend_of(module: str) -> str | None:
    """The backend folder (runtimes/<name>/, the backend table's names) `module` is in, if any."""
    return next((b for b in BACKENDS if under(module, (f"sandgym.runtimes.{b}",))), None)


def wrong_way(importer: str, imported: str) -> str | None:
    """Why `importer` may not import `imported` (None: it may)."""
    src, dst = layer(importer), layer(imported)
    if under(imported, CONTRACTS) and src in ("core", "envs"):
        return None
    if src == "runtimes" and dst not in ("runtimes",) and not under(imported, ("sandgym.errors",)):
        return "runtimes import only runtimes and sandgym.errors"
    mine, theirs = backend_of(importer), backend_of(imported)
    if mine and theirs and mine != theirs:
        return "a backend folder imports the shared runtimes modules and itself, never another backend"
    if src == "verifiers" and dst in ("envs", "core"):
        return "verifiers import verifiers, runtimes and the core's floor only"
    if src == "envs" and dst == "core":
        return "envs import envs, verifiers, runtimes and the core's floor only"
    if src == "floor" and dst != "floor":
        return "the core's floor (errors, outcomes, spaces, specs, families) imports only itself"
    if src == "core" and dst in ("envs", "verifiers"):
        return "the core reaches a family only through the family table's import strings"
    return None


def violations(files: dict[str, str]) -> list[str]:
    """{module name + ('/' if a package): source} -> the wrong-way imports, one line each."""
    out = []
    for key, source in files.items():
        module, is_package = key.rstrip("/"), key.endswith("/")
        for line, imported in imports_of(source, module, is_package):
            why = wrong_way(module, imported)
            if why:
                out.append(f"{module}:{line} imports {imported}: {why}")
    return out


def tree_sources() -> dict[str, str]:
    files = {}
    for top in PACKAGES:
        for path in sorted((ROOT / top).rglob("*.py")):
            key = module_name(path) + ("/" if path.name == "__init__.py" else "")
            files[key] = path.read_text(encoding="utf-8")
    return files


def test_the_tree_imports_one_way():
    files = tree_sources()
    assert len(files) > 50  # the walk found the tree
    assert violations(files) == []


# -- in-sandbox code, families, private names ---------------------------------------------------
#
# Three more rules, over every .py file of sandgym/, envs/, runtimes/,
# verifiers/ and tests/; each finding names the file and the line.

# Code that runs inside a sandbox lives in folders named `boundary/`
# (runtimes/boundary/, verifiers/<family>/boundary/).
IN_SANDBOX_FOLDER = "boundary"
SCANNED = (*PACKAGES, "tests")
# The families: one folder each under envs/ (and verifiers/, sandgym/specs/, tests/).
FAMILY_NAMES = tuple(sorted(p.parent.name for p in (ROOT / "envs").glob("*/__init__.py")))

# In-sandbox modules that run inside a program besides Python itself and
# extend it (by file name): the SWE verifier's pytest plugin runs in the
# task's own test environment, whose pytest it extends; the browser
# sandbox's launcher serves the web app with the image's uvicorn.
SANDBOX_HOSTS = {
    "pytest_child.py": ("pytest",),
    "sandgym_swe_guard.py": ("pytest", "_pytest", "pluggy"),
    "sandgym_swe_records.py": ("pytest",),
    "launcher.py": ("uvicorn",),
}
# Tests may reach a module's private names (white-box checks of internals):
# the private-name rule covers the package only.
PRIVATE_RULE_SKIPS = ("tests",)


def sandbox_root(rel: Path) -> Path | None:
    """The in-sandbox folder `rel` (a path under ROOT) belongs to, if any."""
    if IN_SANDBOX_FOLDER in rel.parts[:-1]:
        return Path(*rel.parts[: rel.parts.index(IN_SANDBOX_FOLDER) + 1])
    return None


def file_module(rel: Path) -> str:
    parts = [PACKAGES.get(rel.parts[0], rel.parts[0]), *rel.with_suffix("").parts[1:]]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def family_of(module: str) -> str | None:
    """The family whose folder holds `module` (sandgym.envs.X, sandgym.verifiers.X, sandgym.specs.X, tests.X)."""
    parts = module.split(".")
    for prefix in (["sandgym", "envs"], ["sandgym", "verifiers"], ["sandgym", "specs"], ["tests"]):
        n = len(prefix)
        if parts[:n] == prefix and len(parts) > n and parts[n] in FAMILY_NAMES:
            return parts[n]
    return None


def private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def first_party(module: str) -> bool:
    return module.split(".")[0] in ("sandgym", "tests")


def resolve(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = (module if is_package else module.rpartition(".")[0]).split(".")
    base = base[: len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


class Checked:
    """One file under the three rules; `found` collects "line: what" findings."""

    def __init__(self, rel: Path, modules: set[str]):
        self.rel, self.modules = rel, modules
        self.module = file_module(rel)
        self.package = self.module if rel.name == "__init__.py" else self.module.rpartition(".")[0]
        self.box = sandbox_root(rel)
        # In a sandbox, the folder's modules import each other as top-level names.
        self.siblings = {p.stem for p in (ROOT / self.box).glob("*.py")} if self.box else set()
        self.hosts = SANDBOX_HOSTS.get(rel.name, ())
        self.family = family_of(self.module)
        self.private_rule = rel.parts[0] not in PRIVATE_RULE_SKIPS
        self.found: list[str] = []

    def imported(self, line: int, target: str, names: list[str], relative: bool) -> None:
        if self.box is not None:
            top = target.split(".")[0]
            inside = relative and target.startswith(file_module(self.box))
            if not (inside or top in sys.stdlib_module_names or top in self.siblings or top in self.hosts):
                self.found.append(f"{line}: imports {target}: in-sandbox code imports only the standard library")
        for full in [target, *(f"{target}.{n}" for n in names if f"{target}.{n}" in self.modules)]:
            other = family_of(full)
            if self.family and other and other != self.family:
                self.found.append(f"{line}: imports {full}: family {self.family} imports no other family's modules")
                break
        if not (self.private_rule and first_party(target)):
            return
        if any(private(p) for p in target.split(".")) and not self.package.startswith(target.rpartition(".")[0]):
            self.found.append(f"{line}: imports {target}: a private module, outside its package")
        for n in names:
            if private(n) and not (f"{target}.{n}" in self.modules and target == self.package):
                self.found.append(f"{line}: imports {n} from {target}: a private name, outside its module")

    def used(self, line: int, owner: str, name: str) -> None:
        if self.private_rule and owner in self.modules and owner != self.module:
            self.found.append(f"{line}: uses {owner}.{name}: a private name, outside its module")


@functools.cache
def tree_modules() -> set[str]:
    return {file_module(path.relative_to(ROOT)) for top in SCANNED for path in (ROOT / top).rglob("*.py")}


def more_findings(files: dict[Path, str]) -> list[tuple[str, str]]:
    """{path under ROOT: source} -> (file, "line: what") of every import that
    breaks the in-sandbox, family or private-name rule."""
    modules = {file_module(rel) for rel in files} | tree_modules()
    out: list[tuple[str, str]] = []
    for rel, source in files.items():
        checked = Checked(rel, modules)
        tree = ast.parse(source)
        bound: dict[str, str] = {}  # names bound to our modules -> the module
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    checked.imported(node.lineno, a.name, [], False)
                    if first_party(a.name):
                        bound[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom):
                target = resolve(node, checked.module, rel.name == "__init__.py")
                checked.imported(node.lineno, target, [a.name for a in node.names], bool(node.level))
                for a in node.names:
                    if f"{target}.{a.name}" in modules:
                        bound[a.asname or a.name] = f"{target}.{a.name}"
        # `mod._x` where `mod` names one of our modules.
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and private(node.attr):
                chain, inner = [], node.value
                while isinstance(inner, ast.Attribute):
                    chain.append(inner.attr)
                    inner = inner.value
                if isinstance(inner, ast.Name) and inner.id in bound:
                    checked.used(node.lineno, ".".join([bound[inner.id], *reversed(chain)]), node.attr)
        out += [(str(rel), what) for what in checked.found]
    return out


def scanned_files() -> dict[Path, str]:
    return {
        path.relative_to(ROOT): path.read_text(encoding="utf-8")
        for top in SCANNED
        for path in sorted((ROOT / top).rglob("*.py"))
    }


def test_in_sandbox_code_families_and_private_names():
    files = scanned_files()
    assert any(sandbox_root(rel) for rel in files)  # the walk found in-sandbox code
    found = more_findings(files)
    assert found == [], "\n".join(f"{f}:{what}" for f, what in found)


@pytest.mark.parametrize(
    "path,source,rule",
    [
        ("verifiers/code_function/boundary/judge.py", "import yaml\n", "standard library"),
        ("verifiers/code_function/boundary/judge.py", "from sandgym.errors import SandgymError\n", "standard library"),
        ("runtimes/boundary/agent.py", "def f():\n    import pydantic\n", "standard library"),
        ("envs/code_function/env.py", "from sandgym.verifiers.browser_form.host import verify\n", "family"),
        ("sandgym/specs/browser_form.py", "from sandgym.specs.code_function import CodeTask\n", "family"),
        ("tests/code_function/test_env.py", "from tests.swe_repo import test_env\n", "family"),
        ("envs/code_function/env.py", "from sandgym.verifiers import swe_repo\n", "family"),
        ("sandgym/report.py", "from sandgym.records import _private\n", "private name"),
        ("sandgym/report.py", "import sandgym.records\nsandgym.records._private()\n", "private name"),
        ("sandgym/report.py", "from sandgym import records as r\nr._private\n", "private name"),
    ],
)
def test_a_broken_rule_is_caught(path, source, rule):
    rel = Path(path)
    found = more_findings({rel: source})
    assert len(found) == 1 and found[0][0] == path and rule in found[0][1], found


def test_what_the_rules_allow():
    ok = {
        Path("verifiers/code_function/boundary/runner.py"): "import json, judge\nfrom typing import Any\n",
        Path("envs/code_function/env.py"): (
            "from sandgym.verifiers.code_function.host import verify\nfrom sandgym.envs.base import SandgymEnv\n"
        ),
        Path("tests/core/test_records.py"): "from ._faults import small_tmpfs\nfrom tests.helpers import make_task\n",
        Path("sandgym/report.py"): "import os\nos._exit\nfrom sandgym import records\nrecords.__name__\n",
    }
    assert more_findings(ok) == []


@pytest.mark.parametrize(
    "module,source",
    [
        ("sandgym.verifiers.swe_repo.host", "from sandgym.envs.swe_repo.env import SWERepoEnv\n"),
        ("sandgym.verifiers.swe_repo.host", "def f():\n    from ...envs.swe_repo import actions\n"),
        ("sandgym.runtimes.local.runtime", "from sandgym.verifiers.models import Verdict\n"),
        ("sandgym.runtimes.local.runtime", "from ...specs import TaskSet\n"),
        ("sandgym.envs.swe_repo.env", "from sandgym.harness import EvalRun\n"),
        ("sandgym.specs.base", "from sandgym.runtimes import get_runtime\n"),
        ("sandgym.harness", "from sandgym.verifiers.code_function.host import verify\n"),
        ("sandgym.report", "import sandgym.envs.code_function.env\n"),
        ("sandgym.harness", "from sandgym.envs import code_function\n"),
        ("sandgym.runtimes.k8s.runtime", "from sandgym.runtimes.docker.runtime import RUNSC_MAX_PIDS\n"),
        ("sandgym.runtimes.local.browser", "from ..docker import leaks\n"),
        ("sandgym.cli", "from sandgym.envs.code_function.humaneval import import_humaneval\n"),
        ("sandgym.adapters.trainers", "from sandgym.verifiers.code_function.host import verify\n"),
    ],
)
def test_a_wrong_way_import_is_caught(module, source):
    files = tree_sources()
    key = module if module in files else module + "/"
    files[key] = files[key] + "\n" + source
    found = violations(files)
    assert len(found) == 1 and module in found[0], found


def test_allowed_imports_pass():
    ok = {
        "sandgym.adapters.trainers": "from sandgym.verifiers.models import Verdict\n",
        "sandgym.harness": "from sandgym.envs.base import SandgymEnv\nfrom sandgym.runtimes import Runtime\n",
        "sandgym.envs.swe_repo.env": (
            "from sandgym.verifiers.swe_repo.host import verify\nfrom sandgym.specs import TaskSet\n"
        ),
        "sandgym.verifiers.code_function.host": (
            "from sandgym.runtimes.base import Runtime\nfrom ..models import Verdict\n"
        ),
        "sandgym.runtimes.base": "from sandgym.errors import SandgymError\nfrom .staging import stage_dir\n",
        "sandgym.runtimes.k8s.runtime": "from ..gvisor import RUNSC_MAX_PIDS\nfrom .pods import pod_manifest\n",
    }
    assert violations(ok) == []


# In-sandbox single-file programs, staged whole (docs/architecture.md).
LONG_FILES_ALLOWED = {
    "runtimes/boundary/agent.py",
    "verifiers/swe_repo/boundary/sandgym_swe_guard.py",
    "verifiers/swe_repo/boundary/swe_runner.py",
}
MAX_LINES = 800


def test_no_python_file_is_over_800_lines():
    """Files split along their seams stay split: a file past the bound
    names itself here, with its length."""
    long = {}
    for top in ("sandgym", "envs", "verifiers", "runtimes", "tests", "benchmarks", "examples", "scripts"):
        for path in (ROOT / top).rglob("*.py"):
            rel = path.relative_to(ROOT).as_posix()
            if ".venv" in path.parts or rel in LONG_FILES_ALLOWED:
                continue
            n = path.read_bytes().count(b"\n")
            if n > MAX_LINES:
                long[rel] = n
    assert not long, f"over {MAX_LINES} lines (split it along a seam): {long}"


def test_every_package_folder_is_installed():
    """A package folder missing from pyproject.toml's list works from the
    checkout (editable install) and is absent from the wheel and the serve
    image: the served env then fails on its first import."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    missing = []
    for top, package in PACKAGES.items():
        for init in (ROOT / top).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / top).parts
            if ".venv" in init.parts or "__pycache__" in rel:
                continue
            name = ".".join((package, *rel))
            if name not in listed:
                missing.append(name)
    assert not missing, f"add to [tool.setuptools] packages in pyproject.toml: {sorted(missing)}"
