"""TRL's environment interface for any sandgym env: `GRPOTrainer(environment_factory=...)`.

The contract, as read in TRL 1.16 (`trl/trainer/grpo_trainer.py`, the
`environment_factory` docstring and `_generate_and_score_completions` /
`_tool_call_loop`; docs/source/openenv.md "How environment_factory works"):

- the factory is called with no arguments, once per concurrent rollout, and
  its instances are pooled and reused: `reset(**row)` is called with every
  dataset column at the start of each episode; a returned string is
  appended to the prompt's last user message;
- every public function of the instance's *class* other than `reset` (and
  `get_reward`) is a tool: its name, type hints and Google-style docstring
  (`Args:`) become the tool schema (transformers' `get_json_schema`); the
  trainer calls it with the model's arguments as keywords, and an exception
  goes back to the model as `{"error": ...}`;
- reward functions receive `environments=[...]`, one instance per completion.

`trl_environment(env_id, ...)` builds such a class from the env's
`chat_tools()` (generic: no family is named here); its `reward_func` reads
each episode's verdict and its `counts.metrics()` tallies outcomes.
"""

from __future__ import annotations

import inspect
import re
import weakref
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar, Literal, Union

from sandgym.specs import TaskSet

from .episodes import Episode, OutcomeCounts, ToolSpec, make_env_factory

_JSON_TYPES: dict[str, Any] = {"string": str, "integer": int, "number": float, "boolean": bool, "object": dict}


def _python_type(schema: Mapping[str, Any]) -> Any:
    """The Python annotation transformers' get_json_schema turns back into `schema`."""
    kind = schema.get("type")
    if kind == "array":
        items = schema.get("items")
        return list[_python_type(items)] if isinstance(items, Mapping) else list  # type: ignore[misc]
    variants = schema.get("anyOf")
    if isinstance(variants, list) and variants and all(isinstance(v, Mapping) for v in variants):
        return Union[tuple(_python_type(v) for v in variants)]  # noqa: UP007 (a runtime-built union)
    enum = schema.get("enum")
    if isinstance(enum, list) and enum and all(isinstance(v, str) for v in enum):
        return Literal[tuple(enum)]
    return _JSON_TYPES.get(str(kind), str)


def _tool_method(spec: ToolSpec) -> Callable[..., str]:
    """A method named after the tool, with a signature, annotations and a
    Google-style docstring made from its JSON schema."""
    props: Mapping[str, Any] = spec.parameters.get("properties") or {}
    required = set(spec.parameters.get("required") or ())
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {}
    doc_args = []
    for arg, schema in props.items():
        kind = _python_type(schema)
        if arg in required:
            params.append(inspect.Parameter(arg, inspect.Parameter.KEYWORD_ONLY, annotation=kind))
        else:
            kind = kind | None
            params.append(inspect.Parameter(arg, inspect.Parameter.KEYWORD_ONLY, annotation=kind, default=None))
        annotations[arg] = kind
        text = " ".join(str(schema.get("description") or f"The {arg}.").split())
        doc_args.append(f"    {arg}: {text}")
    annotations["return"] = str
    name = spec.name

    def tool(self: SandgymToolEnv, **arguments: Any) -> str:
        return self._episode.call(name, {k: v for k, v in arguments.items() if v is not None})

    tool.__name__ = tool.__qualname__ = name
    tool.__signature__ = inspect.Signature(params, return_annotation=str)  # type: ignore[attr-defined]
    tool.__annotations__ = annotations
    doc = (spec.description or f"The {name} tool.").strip()
    if doc_args:
        doc += "\n\nArgs:\n" + "\n".join(doc_args)
    tool.__doc__ = doc + "\n\nReturns:\n    The environment's feedback."
    return tool


def _prompt_text(prompt: Any) -> str:
    """The text of a dataset row's prompt: a string, or the last message of a chat prompt."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, Sequence) and prompt and isinstance(prompt[-1], Mapping):
        content = prompt[-1].get("content")
        if isinstance(content, list):
            return "".join(str(p.get("text") or "") for p in content if isinstance(p, Mapping))
        return str(content or "")
    return ""


class EpisodeReward:
    """A reward function for `GRPOTrainer(reward_funcs=...)` that reads each
    rollout's verdict from its environment (`environments=`).

    An episode the model left open (it stopped calling tools, or ran out of
    `max_completion_length`) is ended with the env's null actions, which
    submit the work as it stands. env_error -> None: TRL's "not applicable"
    (the code adapter's rule: an infrastructure failure is never a 0)."""

    def __init__(self, counts: OutcomeCounts, name: str, max_workers: int = 8):
        self.counts = counts
        self.__name__ = name  # what TRL logs: rewards/<name>/mean
        self.max_workers = max_workers

    def __call__(self, prompts: Any = None, completions: Any = None, **kwargs: Any) -> list[float | None]:
        envs = kwargs.get("environments")
        if envs is None:
            raise TypeError(
                "this reward function reads the environments: pass the class from trl_environment() "
                "as GRPOTrainer(environment_factory=...) so that TRL passes environments=[...]"
            )
        for env in envs:
            if not isinstance(env, SandgymToolEnv):
                raise TypeError(f"environments must come from trl_environment(), got {type(env).__name__}")
        if len(envs) <= 1:
            return [env._score() for env in envs]
        # Verifications run at once, each on its env's own thread.
        with ThreadPoolExecutor(min(self.max_workers, len(envs)), thread_name_prefix="sandgym-score") as pool:
            return list(pool.map(lambda env: env._score(), envs))

    def __repr__(self) -> str:
        return f"EpisodeReward({self.__name__!r})"


class SandgymToolEnv:
    """Base of the classes `trl_environment` makes: one sandgym env per
    instance, one episode per `reset`. The only public names besides
    `reset` and the tools (as few as can be, since a tool may not share a
    name with them): the `episode` property (`task_id`, `done`, `outcome`,
    `reward`, `verdict`: TRL does not take properties for tools), the class
    attributes `env_id`, `task_id_column`, `tool_specs`, `counts`,
    `reward_func`, and `close_all()` (a classmethod: not a tool either)."""

    env_id: ClassVar[str]
    task_id_column: ClassVar[str]
    tool_specs: ClassVar[tuple[ToolSpec, ...]]
    counts: ClassVar[OutcomeCounts]
    reward_func: ClassVar[EpisodeReward]
    _make: ClassVar[Callable[[], Any]]
    _spare: ClassVar[list[Episode]]
    _instances: ClassVar[weakref.WeakSet[SandgymToolEnv]]

    def __init__(self) -> None:
        cls = type(self)
        self._episode = cls._spare.pop() if cls._spare else Episode(cls._make)
        cls._instances.add(self)

    def reset(self, **kwargs: Any) -> str:
        """Start an episode on the row's task (column `task_id_column`; absent:
        the env draws one, seeded by a `seed` column if there is one). Returns
        the env's first feedback, preceded by the task's text when the row
        brings no prompt of its own."""
        task_id = kwargs.get(self.task_id_column)
        seed = kwargs.get("seed")
        obs = self._episode.start(None if task_id is None else str(task_id), None if seed is None else int(seed))
        feedback = str(obs.get("feedback") or "")
        if _prompt_text(kwargs.get("prompt")).strip():
            return feedback
        return f"{obs.get('task', '')}\n\n{feedback}".strip()

    @property
    def episode(self) -> Episode:
        """The episode being played: `task_id`, `done`, `turns`, `outcome`, `reward`, `verdict`."""
        return self._episode

    @classmethod
    def close_all(cls) -> None:
        """Close the env of every instance (sandboxes, browsers); also done at exit."""
        for inst in list(cls._instances):
            inst._episode.close()
        for ep in cls._spare:
            ep.close()
        cls._spare.clear()

    def _score(self) -> float | None:
        ep = self._episode
        if ep.finish() is None:
            raise RuntimeError("this environment was never reset: there is no episode to score")
        if not ep.scored:
            ep.scored = True
            self.counts.add(str(ep.outcome))
        return ep.reward


def metrics_callback(counts: OutcomeCounts, prefix: str = "sandgym/") -> Any:
    """A transformers `TrainerCallback` adding the outcome counts since the last
    log to every log line (`on_log`). transformers calls the reporting
    callbacks (wandb, tensorboard, ...) before the ones you add, so put it
    first for them to see the numbers:
    `trainer.callback_handler.callbacks.insert(0, metrics_callback(Env.counts))`."""
    try:
        from transformers import TrainerCallback
    except ImportError:
        raise ImportError("metrics_callback needs transformers (installed with trl)") from None

    class OutcomeMetricsCallback(TrainerCallback):  # type: ignore[misc,unused-ignore]
        def on_log(
            self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any
        ) -> None:
            if logs is not None:
                logs.update(counts.metrics(prefix, reset=True))

    return OutcomeMetricsCallback()


# Names TRL reads itself, or that the class uses: a tool may not take them.
_RESERVED = {"reset", "get_reward"} | {n for n in dir(SandgymToolEnv) if not n.startswith("_")}


def trl_environment(
    env_id: str,
    *,
    tasks: str | Path | TaskSet | None = None,
    runtime: Any = "local",
    task_id_column: str = "task_id",
    class_name: str | None = None,
    reward_name: str | None = None,
    **env_kwargs: Any,
) -> type[SandgymToolEnv]:
    """A class for `GRPOTrainer(environment_factory=...)` playing `env_id`.

    tasks: the task set (folder, `TaskSet`; None: the env's default).
    runtime: a runtime name (each env makes its own) or a `Runtime` shared by
        every env (then yours to close). env_kwargs: the env's options.
    task_id_column: the dataset column with each row's task id
        (`sandgym tasks export --format hf` writes `task_id`).

    One env is made here to read its tools; it serves the trainer's first
    instance. Pass `cls.reward_func` as `reward_funcs`; log
    `cls.counts.metrics()`; `cls.close_all()` when done (also at exit)."""
    make = make_env_factory(env_id, tasks, runtime, **env_kwargs)
    probe = Episode(make)
    try:
        specs = tuple(probe.tools)
        taken = sorted(s.name for s in specs if s.name in _RESERVED)
        if taken:
            raise ValueError(f"{env_id}: tool name(s) {', '.join(taken)} clash with the TRL adapter's own names")
    except BaseException:
        probe.close()
        raise
    base = re.sub(r"\W+", "_", env_id.rpartition("/")[2]).strip("_")
    counts = OutcomeCounts()
    namespace: dict[str, Any] = {s.name: _tool_method(s) for s in specs}
    namespace.update(
        env_id=env_id,
        task_id_column=task_id_column,
        tool_specs=specs,
        counts=counts,
        reward_func=EpisodeReward(counts, reward_name or f"sandgym_{base.lower()}"),
        _make=staticmethod(make),
        _spare=[probe],
        _instances=weakref.WeakSet(),
        __doc__=f"TRL environment for {env_id}: tools {', '.join(s.name for s in specs)}.",
        __module__=__name__,
    )
    return type(class_name or f"{base}ToolEnv", (SandgymToolEnv,), namespace)


__all__ = ["EpisodeReward", "SandgymToolEnv", "metrics_callback", "trl_environment"]
