"""The backend table (runtimes/backends.py) and the folder rules it stands on:
every entry's import strings resolve; names are looked up in the table, not
branched on; a backend folder imports only the shared modules and itself;
the in-sandbox code imports only the standard library; importing
sandgym.runtimes imports no backend."""

from __future__ import annotations

import ast
import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest

from sandgym.runtimes import RUNTIME_NAMES, Runtime, get_runtime
from sandgym.runtimes.backends import BACKENDS, SHARED_COLLECTOR, backend_of, collectors, load
from sandgym.runtimes.browser import BROWSER_RUNTIMES, AppSpec, BrowserSandbox, open_browser_sandbox

RUNTIMES = Path(__file__).resolve().parents[2] / "runtimes"


def test_every_entry_resolves():
    for name, b in BACKENDS.items():
        assert (RUNTIMES / name / "__init__.py").is_file(), name
        cls = load(b.runtime)
        assert issubclass(cls, Runtime) and cls.name == name
        assert b.variants and all(v == name or v.startswith(name + ":") for v in b.variants)
        assert set(b.browser_variants) <= set(b.variants)
        if b.browser is not None:
            assert issubclass(load(b.browser), BrowserSandbox)
        else:
            assert not b.browser_variants
        if b.collector is not None:
            params = list(inspect.signature(load(b.collector)).parameters)
            assert params == ["include_live", "owner"], b.collector
    assert callable(load(SHARED_COLLECTOR))
    assert [label for label, _ in collectors()] == ["host", "local", "docker", "k8s"]


def test_runtime_names_come_from_the_table():
    assert RUNTIME_NAMES == tuple(n for b in BACKENDS.values() for n in b.variants)
    for name in ("local", "docker", "docker:runsc", "docker:kata", "k8s", "k8s:gvisor", "k8s:kata", "jail"):
        assert name in RUNTIME_NAMES
        backend = backend_of(name)
        assert backend is not None and backend.name == name.split(":")[0]
    assert BROWSER_RUNTIMES == ("local", "docker", "docker:runsc", "k8s", "k8s:gvisor")


def test_unknown_names_list_the_choices():
    with pytest.raises(ValueError, match="choices: local, docker.*jail"):
        get_runtime("docker:nope")
    with pytest.raises(ValueError, match="cannot run the browser envs; supported: local, docker"):
        open_browser_sandbox("jail", AppSpec("app:app", Path("/nonexistent")))
    # docker's browser sandbox needs the runtime object, not its name
    with pytest.raises(ValueError, match="needs a docker Runtime object"):
        open_browser_sandbox("docker", AppSpec("app:app", Path("/nonexistent")))


def _imports(path: Path, package: str) -> list[tuple[int, str]]:
    """(line, absolute module) of every import in a file of `package`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = parts[: len(parts) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if node.level and not node.module:  # `from . import runtime`
                found += [(node.lineno, f"{target}.{a.name}") for a in node.names]
            else:
                found.append((node.lineno, target))
    return found


def test_a_backend_folder_imports_no_other_backend():
    wrong = []
    for name in BACKENDS:
        package = f"sandgym.runtimes.{name}"
        for path in sorted((RUNTIMES / name).glob("*.py")):
            for line, module in _imports(path, package):
                for other in BACKENDS:
                    theirs = f"sandgym.runtimes.{other}"
                    if other != name and (module == theirs or module.startswith(theirs + ".")):
                        wrong.append(f"runtimes/{name}/{path.name}:{line} imports {module}")
    assert wrong == []


# Besides the standard library: the agent's files, which sit next to it in the
# sandbox (nest.py; jail_launch.py runs agent.py), and the server of the
# browser sandbox's app, from the site.zip mounted with it.
SANDBOX_PROVIDED = ("__future__", "agent", "nest", "uvicorn")


def test_the_in_sandbox_code_imports_only_the_standard_library():
    files = sorted((RUNTIMES / "boundary").glob("*.py"))
    assert {p.name for p in files} >= {"agent.py", "nest.py", "launcher.py", "jail_launch.py"}
    wrong = []
    for path in files:
        for line, module in _imports(path, "sandgym.runtimes.boundary"):
            top = module.split(".")[0]
            if top not in sys.stdlib_module_names and top not in SANDBOX_PROVIDED:
                wrong.append(f"runtimes/boundary/{path.name}:{line} imports {module}")
    assert wrong == []


# Imports sandgym.runtimes with sandgym's own __init__ skipped (it registers
# the envs, which use backends): what the runtimes package itself pulls in.
PROBE = """
import importlib.util, json, sys, types
spec = importlib.util.find_spec("sandgym")
bare = types.ModuleType("sandgym")
bare.__path__ = list(spec.submodule_search_locations)
sys.modules["sandgym"] = bare
import sandgym.runtimes, sandgym.runtimes.browser
print(json.dumps(sorted(m for m in sys.modules if m.startswith("sandgym."))))
"""


def test_importing_the_runtimes_imports_no_backend():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    loaded = json.loads(out.stdout)
    assert "sandgym.runtimes.backends" in loaded
    assert [m for m in loaded if m.split(".")[2:3] and m.split(".")[2] in BACKENDS] == []
