"""Trainer adapters: a family's verifier as a single-turn reward for RL trainers.

Every score comes from a real verification, through the hooks of the task
set's family in the family table: `trainer_reward` judges one completion
(the code family: its code read with the env's action grammar, then judged
by the hidden tests in a fresh sandbox, exactly as `sandgym/CodeFunction-v0`
judges a single-turn episode) and `trainer_prompt` renders a task's prompt.
Tasks default to the bundled set of the first family that has these hooks
(today the code family). An infrastructure failure (`env_error`, after
retries) is not the model's score and is never turned into 0.0 here; each
adapter maps it to what its trainer allows.

- `TaskReward` (also named `CodeReward`): the scorer. `score(task_id, text)`
  and `score_many(pairs)` (a thread pool runs the verifications in
  parallel, order preserved).
- `trl_reward_func(...)`: a callable for TRL's `GRPOTrainer(reward_funcs=...)`.
- `compute_score(...)`: a module-level function for verl's
  `custom_reward_function` (and `compute_score_batch` for verl's `batch`
  reward manager).
- `trl_rows(...)`, `verl_rows(...)`: dataset rows for the bundled (or any)
  task set in the shape each trainer reads.

This module uses absolute imports on purpose: verl loads
`custom_reward_function.path` as a stand-alone file, so pointing it at this
file works (see `examples/verl_reward.py`).
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from sandgym.errors import SandgymError
from sandgym.families import FAMILIES, Family, family, load
from sandgym.outcomes import Outcome
from sandgym.runtimes import Runtime, get_runtime
from sandgym.specs import TaskPair, TaskSet, bundled_task_set
from sandgym.verifiers.models import RewardScheme, Verdict

log = logging.getLogger("sandgym.adapters.trainers")

SCHEMES = ("binary", "pass_rate")


class VerificationUnavailable(SandgymError, RuntimeError):
    """The sandbox failed (env_error) after every retry: there is no score to give."""


# -- families and task sets ------------------------------------------------------


def trainer_family(task_set: TaskSet | None = None) -> Family:
    """The family whose hooks score `task_set` (None: the first family of the
    table with a trainer reward, whose bundled set is the default tasks)."""
    if task_set is not None:
        fam = family(task_set.meta.family)
        if fam.trainer_reward is None or fam.trainer_prompt is None:
            with_hooks = [f.name for f in FAMILIES.values() if f.trainer_reward and f.trainer_prompt]
            raise ValueError(
                f"task set {task_set.meta.name!r} is of family {fam.name!r}, which has no single-turn trainer "
                f"reward; families with one: {', '.join(with_hooks) or 'none'} (for multi-turn training of "
                f"any family see sandgym.adapters.trl_env and verl_tools)"
            )
        return fam
    for fam in FAMILIES.values():
        if fam.trainer_reward and fam.trainer_prompt:
            return fam
    raise ValueError("no family of the table has a single-turn trainer reward")


def _default_task_set() -> Path:
    return bundled_task_set(trainer_family().name)


def task_prompt(task: TaskPair, task_set: TaskSet) -> str:
    """The single-turn prompt of `task`, as its family renders it (`trainer_prompt`)."""
    render: Callable[[TaskPair], str] = load(str(trainer_family(task_set).trainer_prompt))
    return render(task)


_task_sets: dict[str, TaskSet] = {}
_task_sets_lock = threading.Lock()


def load_tasks(tasks: str | Path | TaskSet | None = None) -> TaskSet:
    """A task set by folder (None: the default one, see `trainer_family`), read
    once per process and resolved path, so that a dataset builder and a reward
    function share it."""
    if isinstance(tasks, TaskSet):
        return tasks
    path = str(Path(tasks if tasks is not None else _default_task_set()).resolve())
    with _task_sets_lock:
        if path not in _task_sets:
            _task_sets[path] = TaskSet.load(path)
        return _task_sets[path]


# -- completions -----------------------------------------------------------------


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}, ...]
        return "".join(
            p if isinstance(p, str) else str(p.get("text") or "") for p in content if isinstance(p, (str, dict))
        )
    raise TypeError(f"a message's content must be a string or a list of parts, got {type(content).__name__}")


def completion_text(completion: Any) -> str:
    """The text of one completion: a string, or (TRL's conversational format)
    a list of chat messages `{"role", "content"}`, of which the assistant
    messages count, joined in order."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Mapping):
        completion = [completion]
    if isinstance(completion, (list, tuple)) and all(isinstance(m, Mapping) for m in completion):
        assistant = [m for m in completion if m.get("role", "assistant") == "assistant"]
        return "\n\n".join(_content_text(m.get("content")) for m in (assistant or completion))
    raise TypeError(
        "a completion must be a string or a list of chat messages like "
        f"[{{'role': 'assistant', 'content': '...'}}], got {type(completion).__name__}"
    )


# -- the scorer ------------------------------------------------------------------


class TaskReward:
    """Scores completions of a task set's tasks with its family's real verifier
    (the family table's `trainer_reward`).

    tasks: a task-set folder, a `TaskSet`, or None for the default set
        (folders are read once per process: `load_tasks`).
    runtime: `"local"` or a `Runtime` (None: a `LocalRuntime` this object
        owns and closes in `close()`; a runtime passed in is left open).
    reward: `"binary"` (1.0 when every hidden test passes) or `"pass_rate"`.
    max_workers: verifications run at once by `score_many` (default: CPU count).
    retries: extra attempts after an infrastructure error (as the env's
        `verifier_retries`).

    `score` returns None for `env_error`: an infrastructure failure is not a
    score. A completion with nothing to verify (no usable code) scores 0.0
    without a sandbox. Thread-safe; `counts` tallies outcomes (`no_code`,
    such a completion, apart from `failed`).
    """

    def __init__(
        self,
        tasks: str | Path | TaskSet | None = None,
        *,
        runtime: str | Runtime | None = None,
        reward: RewardScheme = "binary",
        max_workers: int | None = None,
        retries: int = 2,
    ):
        if reward not in SCHEMES:
            raise ValueError(f"reward must be one of {', '.join(map(repr, SCHEMES))}, got {reward!r}")
        if max_workers is not None and (not isinstance(max_workers, int) or max_workers < 1):
            raise ValueError(f"max_workers must be a positive int (or None for the CPU count), got {max_workers!r}")
        if not isinstance(retries, int) or retries < 0:
            raise ValueError(f"retries must be an int >= 0, got {retries!r}")
        self.tasks = load_tasks(tasks)
        self._judge: Callable[[TaskPair, str, Runtime, int], Verdict] = load(
            str(trainer_family(self.tasks).trainer_reward)
        )
        self.reward_scheme: RewardScheme = reward
        self.max_workers = max_workers or os.cpu_count() or 1
        self.retries = retries
        self._owns_runtime = not isinstance(runtime, Runtime)
        self.runtime: Runtime = runtime if isinstance(runtime, Runtime) else get_runtime(runtime or "local")
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._closed = False

    # verdicts ---------------------------------------------------------------

    def verdict(self, task_id: str, completion: Any) -> Verdict:
        """The whole verdict (outcome, per-test results, attempts) for one completion."""
        self._check_open()
        task = self.tasks.get(task_id)  # KeyError naming the choices
        verdict = self._judge(task, completion_text(completion), self.runtime, self.retries)
        # No attempt: the family found nothing to verify and started no sandbox.
        self._count(verdict.outcome.value if verdict.attempts else "no_code")
        if verdict.outcome == Outcome.ENV_ERROR:
            log.warning(
                "sandgym: verification of a completion for %s failed in the infrastructure after "
                "%d attempt(s); it gets no score: %s",
                task_id,
                len(verdict.attempts),
                verdict.detail[:300],
            )
        return verdict

    def verdicts(self, pairs: Iterable[tuple[str, Any]]) -> list[Verdict]:
        """Verdicts for (task_id, completion) pairs, in parallel, in input order.
        Every task id is checked before any sandbox starts."""
        self._check_open()
        items = list(pairs)
        for i, item in enumerate(items):
            if not (isinstance(item, (tuple, list)) and len(item) == 2):
                raise TypeError(f"item {i} must be a (task_id, completion) pair, got {item!r:.80}")
            self.tasks.get(item[0])
        if len(items) <= 1 or self.max_workers == 1:
            return [self.verdict(t, c) for t, c in items]
        return list(self._executor().map(lambda item: self.verdict(*item), items))

    # rewards ----------------------------------------------------------------

    def score(self, task_id: str, completion: Any) -> float | None:
        """The reward of one completion; None for an infrastructure failure."""
        return self.verdict(task_id, completion).reward(self.reward_scheme)

    def score_many(self, pairs: Iterable[tuple[str, Any]]) -> list[float | None]:
        """Rewards of (task_id, completion) pairs, verified in parallel, in input order."""
        return [v.reward(self.reward_scheme) for v in self.verdicts(pairs)]

    # lifecycle --------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
        if self._owns_runtime:
            self.runtime.close()

    def __enter__(self) -> TaskReward:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(tasks={self.tasks.meta.name!r} ({len(self.tasks)} tasks), "
            f"reward={self.reward_scheme!r}, runtime={getattr(self.runtime, 'name', '?')!r}, "
            f"max_workers={self.max_workers})"
        )

    def _count(self, key: str) -> None:
        with self._lock:
            self.counts[key] += 1

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"this {type(self).__name__} is closed; make a new one")

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._closed:
                raise RuntimeError(f"this {type(self).__name__} is closed; make a new one")
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.max_workers, thread_name_prefix="sandgym-reward")
            return self._pool


# The scorer's first name, from when only the code family had a trainer reward.
CodeReward = TaskReward

# -- TRL -------------------------------------------------------------------------


def trl_reward_func(
    task_id_column: str = "task_id",
    *,
    name: str | None = None,
    scorer: TaskReward | None = None,
    **code_reward_kwargs: Any,
) -> Callable[..., list[float | None]]:
    """A reward function for TRL's `GRPOTrainer(reward_funcs=...)`.

    The call shape is that of TRL's documented contract, as read in the
    GRPO Trainer docs ("Using a custom reward function",
    docs/source/grpo_trainer.md, main branch, TRL 1.1.0.dev0) and the
    GRPOTrainer docstring: the trainer calls `f(prompts=[...],
    completions=[...], completion_ids=[...], trainer_state=..., **columns)`
    with every extra dataset column as a keyword argument holding one value
    per completion, and takes back one reward per completion. Completions
    are strings, or (conversational datasets) lists of messages
    `{"role", "content"}`.

    `task_id_column` names the dataset column that holds each prompt's
    sandgym task id. The other keyword arguments build the `TaskReward`
    (tasks, runtime, reward, max_workers, retries), or pass `scorer=` to
    share one. The function's `__name__` (what TRL logs as
    `rewards/<name>/mean`) is `name` or `sandgym_code_<scheme>`; it carries
    `.scorer` and `.close()`.

    env_error -> None, not NaN: TRL documents None as "reward not
    applicable to this sample" (GRPOTrainer docstring; docs Example 4,
    multi-task rewards). The trainer turns None into NaN itself and leaves
    that function out of the sample's reward (`nansum`). When this is the
    only reward function, TRL then warns "All reward functions returned
    None" and the sample's summed reward is 0.0: a limit of TRL, which has
    no way to drop a sample from the group.
    """
    if scorer is not None and code_reward_kwargs:
        raise TypeError(f"pass either scorer= or TaskReward arguments, not both (got {sorted(code_reward_kwargs)})")
    scorer = scorer or TaskReward(**code_reward_kwargs)

    def reward_func(
        prompts: Sequence[Any] | None = None, completions: Sequence[Any] | None = None, **kwargs: Any
    ) -> list[float | None]:
        if completions is None:
            raise TypeError("the reward function needs completions=[...] (TRL passes them by keyword)")
        if task_id_column not in kwargs:
            raise KeyError(
                f"no dataset column {task_id_column!r} reached the reward function (columns passed: "
                f"{', '.join(sorted(k for k in kwargs if k not in ('completion_ids', 'trainer_state'))) or 'none'}); "
                f"add a column with each prompt's sandgym task id, or pass task_id_column= to trl_reward_func"
            )
        task_ids = list(kwargs[task_id_column])
        if len(task_ids) != len(completions):
            raise ValueError(f"{len(completions)} completions but {len(task_ids)} values in column {task_id_column!r}")
        return scorer.score_many(zip(task_ids, completions, strict=True))

    reward_func.__name__ = reward_func.__qualname__ = name or f"sandgym_code_{scorer.reward_scheme}"
    reward_func.scorer = scorer  # type: ignore[attr-defined]
    reward_func.close = scorer.close  # type: ignore[attr-defined]
    return reward_func


def trl_rows(
    tasks: str | Path | TaskSet | None = None, *, conversational: bool = False, task_id_column: str = "task_id"
) -> list[dict[str, Any]]:
    """One row per task for `datasets.Dataset.from_list`: `prompt` (the
    single-turn env's prompt; a one-message list if `conversational`) and
    the task id column."""
    ts = load_tasks(tasks)
    rows = []
    for t in ts.tasks:
        text = task_prompt(t, ts)
        rows.append({"prompt": [{"role": "user", "content": text}] if conversational else text, task_id_column: t.id})
    return rows


# -- verl ------------------------------------------------------------------------

_verl_scorers: dict[tuple[str, str], TaskReward] = {}
_verl_lock = threading.Lock()
_verl_pid = os.getpid()


def _verl_scorer(task_set: str | Path | None, reward: str) -> TaskReward:
    global _verl_pid
    path = str(Path(task_set if task_set else _default_task_set()).resolve())
    with _verl_lock:
        if os.getpid() != _verl_pid:
            # Forked (verl's prime manager scores in a process pool): the parent's
            # runtime and threads are not ours to use or close. Start afresh.
            # (This works when the parent has not started a sandbox before the
            # fork: LocalRuntime's spawner thread does not survive a fork.)
            _verl_scorers.clear()
            _verl_pid = os.getpid()
        key = (path, reward)
        if key not in _verl_scorers:
            _verl_scorers[key] = TaskReward(path, reward=reward)  # type: ignore[arg-type]
        return _verl_scorers[key]


@atexit.register
def _close_verl_scorers() -> None:
    with _verl_lock:
        scorers = list(_verl_scorers.values()) if os.getpid() == _verl_pid else []
        _verl_scorers.clear()
    for s in scorers:
        try:
            s.close()
        except Exception:  # exiting anyway
            pass


def _task_id_of(ground_truth: Any) -> str:
    if isinstance(ground_truth, Mapping) and "task_id" in ground_truth:
        ground_truth = ground_truth["task_id"]
    if not isinstance(ground_truth, str):
        ground_truth = str(ground_truth)  # e.g. a numpy string from a parquet column
    return ground_truth


def _verl_result(
    verdict: Verdict, scheme: RewardScheme, task_id: str, env_error_score: float | None, return_dict: bool
) -> float | dict[str, float]:
    score = verdict.reward(scheme)
    env_error = score is None
    if score is None:
        if env_error_score is None:
            raise VerificationUnavailable(
                f"sandgym could not verify a completion for task {task_id!r}: the sandbox failed "
                f"(env_error) after {len(verdict.attempts)} attempt(s): {verdict.detail[:500]}. "
                "verl has no 'no score' value, and 0.0 or NaN would be wrong; set "
                "custom_reward_function.reward_kwargs.env_error_score to score such samples anyway"
            )
        score = float(env_error_score)
    if return_dict:
        return {"score": float(score), "pass_rate": verdict.pass_rate, "env_error": float(env_error)}
    return float(score)


def compute_score(
    data_source: Any = None,
    solution_str: str = "",
    ground_truth: Any = None,
    extra_info: Mapping[str, Any] | None = None,
    *,
    task_set: str | None = None,
    reward: str = "binary",
    env_error_score: float | None = None,
    return_dict: bool = False,
    scorer: TaskReward | None = None,
    **_: Any,
) -> float | dict[str, float]:
    """verl `custom_reward_function`: score one response.

    The call shape is that of verl's documented contract ("Implement Reward
    Function for Dataset", docs/preparation/reward_function.rst, "last
    updated 06/02/2025", main branch) and of the callers read in verl's
    sources (trainer/ppo/reward.py get_custom_reward_fn; the naive, batch
    and prime reward managers; the experimental reward loop):
    `fn(data_source, solution_str, ground_truth, extra_info=None)`, called
    by keyword by the naive and reward-loop managers and positionally by the
    prime manager, plus any `custom_reward_function.reward_kwargs` as
    keywords (so unknown keywords are accepted and ignored).

    `ground_truth` (the parquet's `reward_model.ground_truth`) is the sandgym
    task id; `extra_info` may hold `{"task_set": "/path/to/task/set"}`
    (default: the `task_set` reward kwarg, else the bundled set). One
    `TaskReward` per (task set, scheme) is cached for the process.

    Returns a float, which every verl reward manager accepts; with
    `return_dict=True` a dict `{"score", "pass_rate", "env_error"}` (all
    numbers), which the naive, batch and reward-loop managers accept (the
    extra keys become reward_extra_info) but the prime manager does not.
    The docs page itself shows only a float.

    env_error: verl has no "not applicable" reward (None cannot enter its
    reward tensor; NaN would turn the whole GRPO group's advantages into
    NaN), so this raises `VerificationUnavailable` unless `env_error_score`
    is set (then that score, and `env_error` = 1.0 in the dict).
    """
    info = extra_info if isinstance(extra_info, Mapping) else {}
    path = info.get("task_set") or task_set
    task_id = _task_id_of(ground_truth)
    s = scorer or _verl_scorer(path, reward)
    verdict = s.verdict(task_id, solution_str)
    return _verl_result(verdict, s.reward_scheme, task_id, env_error_score, return_dict)


def compute_score_batch(
    data_sources: Sequence[Any],
    solution_strs: Sequence[str],
    ground_truths: Sequence[Any],
    extra_infos: Sequence[Mapping[str, Any] | None] | None = None,
    *,
    task_set: str | None = None,
    reward: str = "binary",
    env_error_score: float | None = None,
    return_dict: bool = False,
    scorer: TaskReward | None = None,
    **_: Any,
) -> list[float | dict[str, float]]:
    """verl `custom_reward_function` for `reward_model.reward_manager=batch`,
    which calls `fn(data_sources=, solution_strs=, ground_truths=,
    extra_infos=)` once per batch: the responses are verified in parallel.
    Same meaning and env_error rule as `compute_score`."""
    n = len(solution_strs)
    if not (len(data_sources) == len(ground_truths) == n):
        raise ValueError(
            f"batch lengths differ: {len(data_sources)} data_sources, {n} solution_strs, "
            f"{len(ground_truths)} ground_truths"
        )
    infos = list(extra_infos) if extra_infos is not None else [None] * n
    task_ids = [_task_id_of(g) for g in ground_truths]
    groups: dict[int, tuple[TaskReward, list[int]]] = {}  # one parallel batch per task set
    for i, info in enumerate(infos):
        path = (info.get("task_set") if isinstance(info, Mapping) else None) or task_set
        s = scorer or _verl_scorer(path, reward)
        groups.setdefault(id(s), (s, []))[1].append(i)
    results: list[float | dict[str, float]] = [0.0] * n
    for s, idx in groups.values():
        for i, v in zip(idx, s.verdicts([(task_ids[i], solution_strs[i]) for i in idx]), strict=True):
            results[i] = _verl_result(v, s.reward_scheme, task_ids[i], env_error_score, return_dict)
    return results


def verl_rows(
    tasks: str | Path | TaskSet | None = None, *, data_source: str | None = None, split: str = "train"
) -> list[dict[str, Any]]:
    """One row per task in verl's parquet layout (docs/preparation/prepare_data.rst):
    `data_source` (default `sandgym/<family>`), chat `prompt`, `ability` (the
    family), `reward_model` {style, ground_truth: the task id} and
    `extra_info` {split, index, task_set}, as `sandgym tasks export --format hf`
    names them."""
    ts = load_tasks(tasks)
    root = str(ts.root.resolve()) if ts.root else None
    return [
        {
            "data_source": data_source or f"sandgym/{ts.meta.family}",
            "prompt": [{"role": "user", "content": task_prompt(t, ts)}],
            "ability": ts.meta.family,
            "reward_model": {"style": "rule", "ground_truth": t.id},
            "extra_info": {"split": split, "index": i, **({"task_set": root} if root else {})},
        }
        for i, t in enumerate(ts.tasks)
    ]


__all__ = [
    "CodeReward",
    "TaskReward",
    "VerificationUnavailable",
    "completion_text",
    "compute_score",
    "compute_score_batch",
    "load_tasks",
    "trl_reward_func",
    "trl_rows",
    "verl_rows",
]
