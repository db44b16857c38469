"""The backend table (runtimes/backends.py) and the folder rules it stands on:
every entry's import strings resolve; names are looked up in the table, not
branched on; importing sandgym.runtimes imports no backend. (That a
backend folder imports only the shared modules and itself, and that
runtimes/boundary/ imports only the standard library, are rules of
tests/core/test_layers.py.)"""

from __future__ import annotations

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


# What the runtimes package itself pulls in (`import sandgym` loads no
# runtimes module: tests/core/test_import_graph.py).
PROBE = """
import json, sys
import sandgym.runtimes, sandgym.runtimes.browser
print(json.dumps(sorted(m for m in sys.modules if m.startswith("sandgym."))))
"""


def test_importing_the_runtimes_imports_no_backend():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    loaded = json.loads(out.stdout)
    assert "sandgym.runtimes.backends" in loaded
    assert [m for m in loaded if m.split(".")[2:3] and m.split(".")[2] in BACKENDS] == []
