"""The browser-form envs' options, and the MiniWoB++ ids they register.

`BrowserFormOptions` are sandgym/BrowserForm-v0's make() kwargs,
`MiniWoBOptions` those of sandgym/MiniWoB-<task>-v0: one id per task page
of the installed `miniwob` wheel, listed from its files without importing
it (or the env), so that `import sandgym` registers them cheaply.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from sandgym.specs.options import DEFAULT_MAX_ACTION_CHARS, EnvOptions

DEFAULT_MAX_STEPS = 30
MINIWOB_ENTRY_POINT = "sandgym.envs.browser_form.miniwob:MiniWoBEnv"


class BrowserFormOptions(EnvOptions):
    """The env's options (make() kwargs, `-o KEY=VALUE`), checked strictly up front."""

    max_steps: int = Field(DEFAULT_MAX_STEPS, ge=1, le=10_000)
    verifier_retries: int = Field(2, ge=0, le=10)
    render_mode: Literal["ansi", "rgb_array"] | None = None
    screenshot: bool = False
    max_action_chars: int = Field(DEFAULT_MAX_ACTION_CHARS, ge=1)
    observation: Literal["text", "browsergym"] = "text"
    # The browser sandbox's limits: a BrowserLimits or a mapping of its fields
    # (checked by BrowserLimits.of); None: the defaults.
    limits: Any = None


class MiniWoBOptions(EnvOptions):
    """The env's options (make() kwargs, `-o KEY=VALUE`), checked strictly up front."""

    task: str
    max_steps: int = Field(20, ge=1, le=10_000)
    render_mode: Literal["ansi"] | None = None
    max_action_chars: int = Field(DEFAULT_MAX_ACTION_CHARS, ge=1)
    observation: Literal["text", "browsergym"] = "text"
    limits: Any = None  # as BrowserFormOptions.limits


def miniwob_html() -> Path:
    """The `html` folder of the installed miniwob wheel."""
    spec = importlib.util.find_spec("miniwob")  # found, not imported (its __init__ registers gym envs)
    if spec is None or not spec.submodule_search_locations:
        raise ValueError("the MiniWoB envs need the `miniwob` wheel: install sandgym[browser]")
    return Path(list(spec.submodule_search_locations)[0]) / "html"


def miniwob_tasks() -> list[str]:
    """The task pages of the installed miniwob wheel (none if it is not installed)."""
    try:
        return sorted(p.stem for p in (miniwob_html() / "miniwob").glob("*.html"))
    except ValueError:
        return []


def miniwob_env_id(task: str) -> str:
    return f"sandgym/MiniWoB-{task}-v0"


def register_miniwob() -> None:
    """One Gymnasium id per task page in the installed wheel (the family's `more_envs`)."""
    import gymnasium

    from sandgym.families import REGISTRATION, spec_kwargs

    defaults = spec_kwargs(MiniWoBOptions)
    for task in miniwob_tasks():
        if miniwob_env_id(task) not in gymnasium.registry:
            gymnasium.register(
                id=miniwob_env_id(task),
                entry_point=MINIWOB_ENTRY_POINT,
                kwargs={**defaults, "task": task},
                **REGISTRATION,
            )
