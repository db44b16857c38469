"""The family table: every task family sandgym ships, and their registration with Gymnasium.

Like Gymnasium's registration table, one entry per family names, as import
strings, what lives in the family's folders: its env (`envs/<name>/`), its
spec models (`sandgym/specs/<name>.py`), its default bundled task set
(`task_specs/<name>/`) and the image recipe its sandboxes run on
(`runtimes/images.py`). The core loops over this table and never branches
on a family's name; nothing named here is imported until it is used.

Gymnasium 1.x loads no entry-point plugins: `import sandgym` registers the
envs, and `gymnasium.make("sandgym:sandgym/CodeFunction-v0")` imports
sandgym itself before looking the id up.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import gymnasium

from sandgym.errors import SandgymError


@dataclass(frozen=True)
class Family:
    name: str
    env_id: str
    entry_point: str  # "module:Class" of the env
    spec_module: str  # defines VISIBLE, HIDDEN, PAIR, LIST_COLUMNS and list_row()
    default_task_set: str  # a folder under task_specs/<name>/
    image_recipe: str | None  # runtimes.images.RECIPES key; None: the family runs on the local runtime only
    more_envs: str | None = None  # "module:function" that registers further env ids
    # "module:function(task, runtime) -> list of problems" that checks a task
    # directly; None: `sandgym tasks validate` plays oracle and null episodes.
    validator: str | None = None


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family(
            name="code_function",
            env_id="sandgym/CodeFunction-v0",
            entry_point="sandgym.envs.code_function.env:CodeFunctionEnv",
            spec_module="sandgym.specs.code_function",
            default_task_set="basic-v1",
            image_recipe="python",
            validator="sandgym.verifiers.code_function.host:validate_task",
        ),
        Family(
            name="swe_repo",
            env_id="sandgym/SWERepo-v0",
            entry_point="sandgym.envs.swe_repo.env:SWERepoEnv",
            spec_module="sandgym.specs.swe_repo",
            default_task_set="billing-v1",
            image_recipe="python-git",
        ),
        Family(
            name="browser_form",
            env_id="sandgym/BrowserForm-v0",
            entry_point="sandgym.envs.browser_form.env:BrowserFormEnv",
            spec_module="sandgym.specs.browser_form",
            default_task_set="basic-v1",
            image_recipe=None,
            # sandgym/MiniWoB-<task>-v0: one id per page of the installed miniwob wheel.
            more_envs="sandgym.envs.browser_form.miniwob:register_miniwob",
        ),
    )
}

# Every env id of a family's own (MiniWoB ids are registered by more_envs).
ENVS = {f.env_id: f.entry_point for f in FAMILIES.values()}


class UnknownFamily(SandgymError, ValueError):
    """A task set or option names a family that is not in the table."""


def family(name: str) -> Family:
    try:
        return FAMILIES[name]
    except KeyError:
        raise UnknownFamily(f"unknown family {name!r}; choices: {', '.join(FAMILIES)}") from None


def load(ref: str) -> Any:
    """The object an import string "module:attr" names."""
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)


def spec_module(name: str) -> Any:
    """The module holding a family's spec models (VISIBLE, HIDDEN, PAIR, ...)."""
    return importlib.import_module(family(name).spec_module)


def register_envs() -> None:
    for f in FAMILIES.values():
        if f.env_id not in gymnasium.registry:
            # Episode length is bounded by the env itself (max_turns): a
            # TimeLimit would cut an episode off before its verdict.
            gymnasium.register(id=f.env_id, entry_point=f.entry_point)
        if f.more_envs:
            load(f.more_envs)()


def check_env_id(env_id: str) -> str:
    if env_id not in ENVS:
        raise ValueError(f"unknown env id {env_id!r}; choices: {', '.join(ENVS)}")
    return env_id
