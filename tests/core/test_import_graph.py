"""The real import graph of a light core: what `import sandgym` loads, read
from `sys.modules` in a fresh interpreter (test_layers.py reads only the
source text, which cannot see what registration imports at run time).

`import sandgym` registers every env id by its entry point's import string,
with the defaults of the family's options model: no env, verifier or
runtime module is loaded (package `__init__`s included) until an env is made.
"""

from __future__ import annotations

import inspect
import json
import subprocess
import sys

import gymnasium
import pytest

import sandgym  # noqa: F401  (registers the envs)
from sandgym.families import FAMILIES, load, spec_kwargs

HEAVY = ("sandgym.envs", "sandgym.verifiers", "sandgym.runtimes")

# Prints the sandgym modules loaded after running the given code.
PROBE = """
import json, sys
{code}
print(json.dumps(sorted(m for m in sys.modules if m == "sandgym" or m.startswith("sandgym."))))
"""


def loaded_after(code: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", PROBE.format(code=code)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


def heavy(modules: list[str]) -> list[str]:
    return [m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY)]


@pytest.mark.parametrize(
    "code",
    [
        "import sandgym",
        "import sandgym.errors",
        "from sandgym.families import FAMILIES, check_env_id; check_env_id('sandgym/MiniWoB-click-button-v0')",
        # gymnasium.make's own path up to the env's construction: it imports the
        # module before the colon, then looks the id up in its registry.
        "import gymnasium; from gymnasium.envs.registration import _find_spec; "
        "s = _find_spec('sandgym:sandgym/CodeFunction-v0'); assert s.kwargs['mode'] == 'single'",
        "import gymnasium, sandgym; gymnasium.pprint_registry(disable_print=True); "
        "assert gymnasium.spec('sandgym/MiniWoB-click-button-v0').kwargs['task'] == 'click-button'",
    ],
)
def test_registration_loads_no_env_verifier_or_runtime(code):
    modules = loaded_after(code)
    assert "sandgym.families" in modules  # the probe ran
    assert heavy(modules) == [], f"{code!r} loaded {heavy(modules)}"


def test_making_an_env_loads_its_family_only_then():
    # The import graph test above must not pass by never registering: making
    # the env imports it, through the entry point's string.
    modules = loaded_after(
        "import gymnasium, sandgym\nenv = gymnasium.make('sandgym/CodeFunction-v0', runtime='local')\nenv.close()"
    )
    assert "sandgym.envs.code_function.env" in modules
    assert not [m for m in modules if m.startswith(("sandgym.envs.swe_repo", "sandgym.envs.browser_form"))]


def test_every_family_registers_its_options_defaults_and_the_env_takes_them():
    """The options model is the one list of an env's make() kwargs: the spec
    shows its defaults, and the constructor's own defaults agree with them."""
    for f in FAMILIES.values():
        model = load(f.options)
        spec = gymnasium.spec(f.env_id)
        assert spec.entry_point == f.entry_point
        assert spec.kwargs == spec_kwargs(model, tasks=f"{f.name}/{f.default_task_set}")
        params = inspect.signature(load(f.entry_point)).parameters.values()
        defaults = {p.name: p.default for p in params if p.default is not inspect.Parameter.empty}
        assert defaults == spec_kwargs(model), f.name
