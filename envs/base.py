"""The env contract: what the harness, the policies and the server rely on.

Every sandgym env is a Gymnasium env with text observations (`task`,
`feedback`) and these parts besides. A family's env subclasses
`SandgymEnv` and provides the abstract ones; the rest have defaults.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any, TypeVar

import gymnasium as gym
from gymnasium.wrappers import PassiveEnvChecker
from pydantic import BaseModel, ValidationError

from sandgym.errors import SandgymError
from sandgym.specs import TaskSet
from sandgym.specs.options import DEFAULT_MAX_ACTION_CHARS as DEFAULT_MAX_ACTION_CHARS  # re-exported
from sandgym.verifiers.models import Verdict

Action = str | dict[str, Any]


class EnvOptionError(SandgymError, ValueError):
    """An env option (a make() kwarg, `-o KEY=VALUE`) is invalid; the message
    names the option, the value and what it accepts."""


_Options = TypeVar("_Options", bound=BaseModel)


def check_options(model: type[_Options], **values: Any) -> _Options:
    """`values` validated by `model` (the env's options model, an
    `EnvOptions` of `sandgym/specs/<family>_options.py`, strict: "abc" is no
    number, 1 no bool), or EnvOptionError in one line."""
    try:
        return model.model_validate(values)
    except ValidationError as e:
        err = e.errors()[0]
        name = ".".join(str(x) for x in err["loc"]) or "(options)"
        if err["type"] == "extra_forbidden":
            valid = ", ".join(sorted(n for n in model.model_fields if n not in ("tasks", "runtime")))
            raise EnvOptionError(f"unknown env option {name!r}; this env takes: {valid}") from None
        shown = repr(err.get("input"))
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        default = model.model_fields[name].default if name in model.model_fields else None
        example = (
            ""
            if default is None
            else f"; e.g. -o {name}={str(default).lower() if isinstance(default, bool) else default}"
        )
        raise EnvOptionError(f"env option {name}={shown}: {err['msg']}{example}") from None


def action_problem(action: Any, limit: int) -> tuple[str, bool] | None:
    """Why an action cannot be taken at all, and whether that ends the
    episode: too long (ends it), not text, or text that is not valid Unicode
    (a lone surrogate). None: it is text of a usable size."""
    if not isinstance(action, str):
        return f"an action is text (a str), not {type(action).__name__}", False
    if len(action) > limit:
        return (
            f"the action is {len(action):,} characters long; the limit is {limit:,} "
            "(env option max_action_chars): the episode ends here",
            True,
        )
    try:
        action.encode("utf-8")
    except UnicodeEncodeError as e:
        return f"the action is not valid Unicode text ({e.reason} at character {e.start})", False
    return None


class EnvChecker(PassiveEnvChecker):
    """gymnasium's PassiveEnvChecker (the checks `gymnasium.make` adds), except
    that a first reset or step that raises leaves it unchecked, as before.

    gymnasium's own checker counts a reset that raised (an unknown task id)
    as its checked first reset and keeps no data from it; the next step then
    fails in the checker itself (`cannot unpack non-iterable NoneType`), for
    good. sandgym registers its envs with this checker instead
    (`sandgym.families.REGISTRATION`).

    `gymnasium.make` puts it outside the TimeLimit wrapper it adds for
    `max_episode_steps`; it tells the env that limit (`time_limit`), so the
    env's last step within it is verified instead of cut off unscored."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        limit = getattr(env.spec, "max_episode_steps", None)  # a TimeLimit inside sets it
        if isinstance(env.unwrapped, SandgymEnv):
            env.unwrapped.time_limit = limit

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        first = not self.checked_reset
        try:
            return super().reset(seed=seed, options=options)
        except BaseException:
            if first:
                self.checked_reset = False
            raise

    def step(self, action: Any):
        first = not self.checked_step
        try:
            return super().step(action)
        except BaseException:
            if first:
                self.checked_step = False
            raise

    @property
    def spec(self):  # type: ignore[override]
        # As any recorded wrapper's: `spec.make()` applies this checker again.
        return gym.Wrapper.spec.fget(self)  # type: ignore[attr-defined]


class NoReference(SandgymError, LookupError):
    """The env has no scripted reference solution for its task."""


class SandgymEnv(gym.Env, abc.ABC):
    """Base of every sandgym env.

    After `reset`: `task_set` is the set episodes are drawn from. After the
    episode ends: `last_verdict` is the verifier's verdict (None: nothing
    was submitted), `artifact` what it judged, `timings` the seconds spent
    creating sandboxes, executing actions and verifying.
    """

    task_set: TaskSet
    reward_scheme: str = "binary"  # a RewardScheme, or an env's own (MiniWoB: "raw")
    last_verdict: Verdict | None = None
    artifact: str | None = None
    timings: dict[str, float]
    # A TimeLimit wrapper's max_episode_steps (set by EnvChecker when
    # gymnasium.make adds one); None: no such wrapper. The env owns the step
    # limit: it ends an episode, verified, after `step_limit(own limit)` steps.
    time_limit: int | None = None

    def step_limit(self, own: int) -> int:
        """The steps an episode may take: the env's own limit (max_steps,
        max_turns), or the TimeLimit wrapper's if that is lower, so that the
        step the wrapper truncates is the one the env verifies."""
        return own if self.time_limit is None else min(own, self.time_limit)

    @property
    @abc.abstractmethod
    def config(self) -> dict[str, Any]:
        """The settings that shape episodes, as make() kwargs (for records)."""

    # Sequence (covariant): an env may return its own kind of action (list[str]).
    @abc.abstractmethod
    def oracle_actions(self) -> Sequence[Action]:
        """The current task's reference solution, as actions (the oracle policy plays them)."""

    @abc.abstractmethod
    def null_actions(self) -> Sequence[Action]:
        """Actions that do nothing useful and end the episode: every task must score 0 on them."""

    def chat_tools(self) -> list[dict[str, Any]] | None:
        """Tool schemas (OpenAI function-calling format) a chat model may call; None: replies are text."""
        return None

    def tool_action(self, name: str, arguments: dict[str, Any]) -> Action:
        """The action for one tool call of `chat_tools()` (default: a dict action)."""
        return {"tool": name, **arguments}

    def abort(self) -> None:
        """Kill what the current episode runs (sandboxes, a browser) so that a
        `step` or `reset` blocked in it returns (with `env_error`). Called
        from another thread (the harness's supervisor, at an episode's
        deadline or a second Ctrl-C): it must be thread-safe and must not
        wait for the env's own thread. The env's thread closes the env
        afterwards. Default: nothing to kill."""
        return None
