"""Imports point one way (DESIGN.md): envs -> runtimes, verifiers; verifiers
never import envs; runtimes import neither; the core imports a family's
envs and verifiers only through the family table, the CLI and the adapters.

Every import statement of the tree (relative ones resolved, imports inside
functions and TYPE_CHECKING blocks included) is checked against the rules.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

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
    "sandgym.task_specs",
)
# The core modules that may import a family's envs and verifiers.
GATES = ("sandgym.cli", "sandgym.families", "sandgym.adapters")
# The declared contracts the rest of the core is typed against.
CONTRACTS = ("sandgym.envs.base",)


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


def wrong_way(importer: str, imported: str) -> str | None:
    """Why `importer` may not import `imported` (None: it may)."""
    src, dst = layer(importer), layer(imported)
    if under(imported, CONTRACTS) and src in ("core", "envs"):
        return None
    if src == "runtimes" and dst not in ("runtimes",) and not under(imported, ("sandgym.errors",)):
        return "runtimes import only runtimes and sandgym.errors"
    if src == "verifiers" and dst in ("envs", "core"):
        return "verifiers import verifiers, runtimes and the core's floor only"
    if src == "envs" and dst == "core":
        return "envs import envs, verifiers, runtimes and the core's floor only"
    if src == "floor" and dst != "floor":
        return "the core's floor (errors, outcomes, spaces, specs, families) imports only itself"
    if src == "core" and dst in ("envs", "verifiers") and not under(importer, GATES):
        return "the core reaches families only through the family table, the CLI and the adapters"
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
        "sandgym.cli": "from sandgym.envs.code_function.humaneval import import_humaneval\n",
        "sandgym.harness": "from sandgym.envs.base import SandgymEnv\nfrom sandgym.runtimes import Runtime\n",
        "sandgym.envs.swe_repo.env": (
            "from sandgym.verifiers.swe_repo.host import verify\nfrom sandgym.specs import TaskSet\n"
        ),
        "sandgym.verifiers.code_function.host": (
            "from sandgym.runtimes.base import Runtime\nfrom ..models import Verdict\n"
        ),
        "sandgym.runtimes.base": "from sandgym.errors import SandgymError\nfrom .staging import stage_dir\n",
    }
    assert violations(ok) == []
