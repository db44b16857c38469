"""One episode's play: a policy on an env for one task, each step recorded,
played again after a backoff while it ends in `env_error`.

A failure inside an episode is recorded on that episode as `env_error`,
never a crash of the run. The supervisor may stop an episode from its own
thread (`Episode.abort`): no more steps or tries, and its env killed
(`SandgymEnv.abort()`) so that a step blocked in it returns.
"""

from __future__ import annotations

import json
import threading
import time
import traceback
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import gymnasium

from sandgym.envs.base import SandgymEnv
from sandgym.errors import SandgymError
from sandgym.outcomes import Outcome, retry_delay
from sandgym.records import EpisodeRecord, StepRecord, Timings, clean_strings
from sandgym.specs import TaskPair

from .identity import RunIdentity

RETRY_BACKOFF_CAP_S = 60.0
INTERRUPTED = "interrupted"
# Recorded actions longer than the env's limit (which the env refused) keep only their start.
KEPT_OF_OVERSIZED_ACTION = 4096


def now() -> str:
    return datetime.now(UTC).isoformat()


def try_of(rec: EpisodeRecord) -> dict[str, Any]:
    """An ended try of an episode as a later record's `retries` keeps it."""
    kept = rec.model_dump(include={"started_at", "outcome", "error", "attempts", "steps", "timings"}, mode="json")
    if rec.executor is not None:  # where the try ran (a Ray node), when not in this process
        kept["executor"] = dict(rec.executor)
    return kept


def drop_env(slot: dict[str, Any]) -> None:
    """Close the env a worker keeps in `slot`, if any; the next episode makes a fresh one."""
    env = slot.pop("env", None)
    if env is not None:
        try:
            env.close()
        except Exception:  # a broken env still must not stop the run
            pass


def recorded_action(action: Any, inner: SandgymEnv) -> str:
    """The action as the record keeps it: text, or a mapping as JSON;
    one longer than the env's limit (which the env refused) only in part."""
    try:
        text = action if isinstance(action, str) else json.dumps(action, default=repr)
    except (ValueError, TypeError, RecursionError) as e:
        text = f"<an action that is not JSON data: {type(e).__name__}: {e}>"[:2000]
    limit = getattr(inner, "max_action_chars", None)
    if isinstance(limit, int) and len(text) > limit:
        text = f"{text[:KEPT_OF_OVERSIZED_ACTION]}\n[... the action had {len(text)} characters; limit {limit}]"
    return clean_strings(text)


def policy_data(agent: Any) -> dict[str, Any]:
    """The agent's `record_extras()` for the record, when it has them; a
    broken hook costs the extras, never the episode."""
    extras = getattr(agent, "record_extras", None)
    if not callable(extras):
        return {}
    try:
        data = extras()
        json.dumps(data)
    except Exception as e:  # the record says what happened
        return {"error": f"record_extras() failed: {type(e).__name__}: {e}"[:2000]}
    return clean_strings(data) if isinstance(data, dict) else {"value": clean_strings(data)}


class Cancelled(SandgymError, RuntimeError):
    """The supervisor stopped the episode (its deadline passed, or the run was abandoned)."""


@dataclass(eq=False)
class Episode:
    """One episode (a task and an epoch), shared by its worker and the supervisor."""

    task: TaskPair
    index: int
    epoch: int
    submitted: float  # perf_counter when it was queued
    retries: list[dict[str, Any]] = field(default_factory=list)  # earlier tries that ended in env_error
    started_at: str = ""
    t0: float = 0.0
    deadline: float | None = None  # monotonic
    steps: list[StepRecord] = field(default_factory=list)  # the current try's, so far
    slot: dict[str, Any] = field(default_factory=dict)  # the worker's env
    cancel: threading.Event = field(default_factory=threading.Event)
    why: str = ""  # why it was cancelled: the deadline, an interrupt
    aborted_at: float | None = None
    closed: bool = False  # its record was written by the supervisor: the worker's is dropped

    def abort(self, why: str) -> None:
        """Stop the episode from the supervising thread: no more steps or
        tries, and its env killed (`SandgymEnv.abort()`) so that a step
        blocked in it returns."""
        if not self.why:
            self.why = why
        self.cancel.set()
        self.aborted_at = time.monotonic()
        remote = self.slot.get("abort")  # an executor that plays the episode elsewhere passes it on
        if callable(remote):
            try:
                remote(why)
            except Exception:  # best effort, as below
                pass
        env = self.slot.get("env")
        if env is None:
            return
        inner = getattr(env, "unwrapped", None)
        try:
            if isinstance(inner, SandgymEnv):
                inner.abort()
        except Exception:  # best effort: the record says what happened
            pass


class EpisodePlayer:
    """Plays episodes of one run and makes their records."""

    def __init__(self, run: RunIdentity, episode_retries: int, retry_backoff_s: float, observer: Any = None):
        self.run = run
        self.episode_retries = episode_retries
        self.retry_backoff_s = retry_backoff_s
        self.observer = observer  # sandgym.observability.RunObserver: told of each step

    def make_env(self) -> Any:
        r = self.run
        return gymnasium.make(r.env_id, tasks=r.task_set, runtime=r.runtime, **r.env_kwargs)

    def run_episode(self, ep: Episode, slot: dict[str, Any] | None = None) -> EpisodeRecord:
        """One episode, played again (up to `episode_retries` times, after a
        backoff) while it ends in an infrastructure error; earlier tries are
        kept in `retries`. `slot` holds this worker thread's env between
        episodes (None: a fresh env, closed at the end)."""
        own = slot is None
        if slot is None:
            slot = ep.slot = {}
        prior = list(ep.retries)
        tries: list[dict[str, Any]] = []
        try:
            while True:
                rec = self.play(ep, slot)
                if tries:  # a try played again: the episode's wait for a worker is its first try's
                    rec.timings.queue_s = tries[0]["timings"]["queue_s"]
                if rec.outcome != Outcome.ENV_ERROR.value or len(tries) >= self.episode_retries:
                    break
                if ep.cancel.is_set():
                    break
                tries.append(try_of(rec))
                ep.retries = prior + tries
                drop_env(slot)  # the next try starts from a fresh env
                # A backoff: a backend that is briefly down gets time to come back.
                if ep.cancel.wait(retry_delay(len(tries) - 1, self.retry_backoff_s, RETRY_BACKOFF_CAP_S)):
                    tries.pop()
                    break
            if ep.cancel.is_set() and ep.why:
                rec.outcome, rec.reward, rec.pass_rate, rec.status = Outcome.ENV_ERROR.value, None, None, None
                rec.error = ep.why
            if prior or tries:
                rec.retries = prior + tries
            return rec
        finally:
            if own:
                drop_env(slot)

    def play(self, ep: Episode, slot: dict[str, Any]) -> EpisodeRecord:
        """One try of the episode, on the env in `slot` (made there if missing)."""
        task, epoch = ep.task, ep.epoch
        started = now()
        policy: Any = self.run.policy
        if epoch and hasattr(policy, "reseeded"):  # a sampling policy draws each epoch with its own seed
            policy = policy.reseeded(self.run.seed_of(epoch))
        t0 = time.perf_counter()
        timings = Timings(queue_s=t0 - ep.submitted)
        steps: list[StepRecord] = []
        ep.steps = steps  # the supervisor reads them if it must record the episode itself

        def record(**fields: Any) -> EpisodeRecord:
            return self.run.record(task, ep.index, started, epoch, timings=timings, **fields)

        agent: Any = None
        try:
            if "env" not in slot:
                # One env per worker, reset for each task: a browser or a
                # zygote is started once, not per episode.
                slot["env"] = self.make_env()
            env = slot["env"]
            inner = env.unwrapped
            if not isinstance(inner, SandgymEnv):
                raise TypeError(f"{self.run.env_id} is not a sandgym env (envs.base.SandgymEnv)")
            obs, info = env.reset(seed=self.run.seed_of(epoch), options={"task_id": task.id})
            agent = policy.begin(task, inner)
            if agent is None:
                return record(
                    outcome=Outcome.NOT_EXECUTED.value, reward=None, error="the policy has no actions for this task"
                )
            terminated = False
            while not terminated:
                if ep.cancel.is_set():
                    raise Cancelled(ep.why or INTERRUPTED)
                action = agent.act(obs, info)
                if action is None:
                    break
                s0 = time.perf_counter()
                obs, reward, terminated, truncated, info = env.step(action)
                steps.append(
                    StepRecord(
                        index=len(steps),
                        action=recorded_action(action, inner),
                        observation=clean_strings(str(obs["feedback"])),
                        tool=str(info.get("tool", "")),
                        reward=float(reward),
                        duration_s=time.perf_counter() - s0,
                    )
                )
                if self.observer is not None:
                    self.observer.step((task.id, epoch), steps[-1], s0)
                terminated = terminated or truncated
            timings.create_s = inner.timings.get("create_s", 0.0)
            timings.exec_s = inner.timings.get("exec_s", 0.0)
            timings.verify_s = inner.timings.get("verify_s", 0.0)
            timings.total_s = time.perf_counter() - t0
            verdict = inner.last_verdict
            if verdict is None:  # the policy stopped before submitting
                return record(
                    steps=steps,
                    outcome=Outcome.NOT_EXECUTED.value,
                    reward=None,
                    error="the policy stopped before submitting",
                    policy_data=policy_data(agent),
                )
            # An env's own scheme (MiniWoB's "raw") scores its verdict as binary.
            reward = verdict.reward("pass_rate" if inner.reward_scheme == "pass_rate" else "binary")
            return record(
                steps=steps,
                artifact=inner.artifact,
                verifier_version=verdict.verifier_version,
                outcome=verdict.outcome.value,
                reward=reward,
                status=getattr(verdict, "status", None),
                pass_rate=verdict.pass_rate if verdict.tests else None,
                tests=[t.model_dump() for t in verdict.tests],
                violations=verdict.violations,
                attempts=[a.model_dump(mode="json") for a in verdict.attempts],
                error=verdict.detail[:2000] if verdict.outcome == Outcome.ENV_ERROR else None,
                policy_data=policy_data(agent),
            )
        except Exception as e:  # one episode's failure is that episode's record
            drop_env(slot)  # whatever broke may live in the env
            timings.total_s = time.perf_counter() - t0
            if isinstance(e, Cancelled) or ep.cancel.is_set():
                error = ep.why or str(e)
            else:
                error = f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=5)}"
            return record(
                steps=steps,
                outcome=Outcome.ENV_ERROR.value,
                reward=None,
                error=error,
                policy_data=policy_data(agent),
            )

    def record_unfinished(self, ep: Episode, why: str) -> EpisodeRecord:
        """The record of an episode the supervisor ends itself (abandoned, or
        its worker never came back): env_error, with the steps taken so far."""
        queue_s = max(0.0, ep.t0 - ep.submitted) if ep.t0 else 0.0
        return self.run.record(
            ep.task,
            ep.index,
            ep.started_at or now(),
            ep.epoch,
            steps=list(ep.steps),
            outcome=Outcome.ENV_ERROR.value,
            reward=None,
            timings=Timings(queue_s=queue_s, total_s=time.perf_counter() - ep.t0 if ep.t0 else 0.0),
            error=why,
            retries=list(ep.retries),
        )
