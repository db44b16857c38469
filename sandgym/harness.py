"""The evaluation harness: a policy on every task of a set, records on disk.

Episodes run on worker threads, each with one env reset per task
(sandboxes and browsers do the heavy work in their own processes). Each
finished episode is appended to `trajectories.jsonl` at once, so an
interrupted run keeps what it finished; a failure inside one episode is
recorded on that episode as `env_error`, never a crash of the run.
"""

from __future__ import annotations

import json
import os
import queue
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import gymnasium

from sandgym.envs.base import SandgymEnv
from sandgym.families import check_env_id

from . import __version__
from .outcomes import Outcome
from .policies import Policy
from .records import EpisodeRecord, StepRecord, Summary, Timings, summarize
from .runtimes import Runtime
from .specs import TaskPair, TaskSet

TRAJECTORIES = "trajectories.jsonl"
SUMMARY = "summary.json"


def _env_version(env_id: str) -> str:
    return env_id.rsplit("-v", 1)[1] if "-v" in env_id else "0"


class EvalRun:
    """One evaluation: its settings, its output folder and its records."""

    def __init__(
        self,
        env_id: str,
        task_set: TaskSet | str | Path | None,
        policy: Policy,
        runtime: Runtime,
        runtime_name: str,
        out_dir: str | Path,
        concurrency: int = 1,
        seed: int | None = 0,
        env_kwargs: dict[str, Any] | None = None,
        episode_retries: int = 1,
        epochs: int = 1,
    ):
        """`task_set` None: the env's own default set (each family bundles one).
        An episode that ends in `env_error` is played again up to
        `episode_retries` times (every try kept in the record). `epochs`
        plays every task that many times (epoch e resets with seed + e), for
        pass@k."""
        self.env_id = check_env_id(env_id)
        if concurrency < 1:
            raise ValueError(f"--concurrency must be at least 1, got {concurrency}")
        if epochs < 1:
            raise ValueError(f"--epochs must be at least 1, got {epochs}")
        self.epochs = epochs
        if episode_retries < 0:
            raise ValueError(f"--episode-retries must be 0 or more, got {episode_retries}")
        self.episode_retries = episode_retries
        self.policy = policy
        self.runtime = runtime
        self.runtime_name = runtime_name
        self.out_dir = Path(out_dir)
        self.concurrency = concurrency
        self.seed = seed
        self.env_kwargs = dict(env_kwargs or {})
        # Bad env options fail here, before any episode, not as N env_errors;
        # records carry the env's effective settings, defaults included.
        probe = gymnasium.make(self.env_id, tasks=task_set, runtime=runtime, **self.env_kwargs)
        try:
            inner = probe.unwrapped
            if not isinstance(inner, SandgymEnv):
                raise TypeError(f"{self.env_id} is not a sandgym env (envs.base.SandgymEnv)")
            self.task_set: TaskSet = inner.task_set
            self.env_kwargs = {**inner.config, **self.env_kwargs}
        finally:
            probe.close()
        self.run_id = uuid.uuid4().hex[:12]
        self._lock = threading.Lock()
        self.records: list[EpisodeRecord] = []

    def _prepare_out_dir(self, resume: bool) -> Path:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        path = self.out_dir / TRAJECTORIES
        if path.exists() and path.stat().st_size > 0 and not resume:
            raise FileExistsError(
                f"{path} already holds a run's records; pass --resume to finish that run, "
                "or choose another --out folder"
            )
        return path

    def _resume_from(self, path: Path) -> None:
        """Take over the finished episodes of an interrupted run with the same settings."""
        if not path.exists():
            return
        mine = {
            "env_id": self.env_id,
            "task_set_hash": self.task_set.hash,
            "env_kwargs": self.env_kwargs,
            "policy": {"name": self.policy.name, **self.policy.config},
        }
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                rec = EpisodeRecord.model_validate_json(line)
            except ValueError as e:
                raise ValueError(f"{path}:{n}: not an episode record: {e}") from None
            for key, value in {**mine, "seed": self._seed(rec.epoch)}.items():
                if getattr(rec, key) != value:
                    raise ValueError(
                        f"--resume: {path} was made with {key}={getattr(rec, key)!r}, "
                        f"this run has {value!r}; use the same settings or another --out"
                    )
            self.run_id = rec.run_id
            self.records.append(rec)

    def _seed(self, epoch: int) -> int | None:
        """The seed of an epoch's resets: the run's seed plus the epoch."""
        return None if self.seed is None else self.seed + epoch

    def _record(
        self, task: TaskPair, index: int, started: str, queued_s: float, epoch: int = 0, **fields: Any
    ) -> EpisodeRecord:
        return EpisodeRecord(
            run_id=self.run_id,
            episode_id=f"{self.run_id}-{index:05d}" + (f"-{epoch}" if epoch else ""),
            task_id=task.id,
            task_version=task.visible.version,
            task_set=self.task_set.meta.name,
            task_set_hash=self.task_set.hash,
            env_id=self.env_id,
            env_version=_env_version(self.env_id),
            env_kwargs=self.env_kwargs,
            runtime={"backend": self.runtime.name, "isolation": self.runtime.isolation, "name": self.runtime_name},
            policy={"name": self.policy.name, **self.policy.config},
            seed=self._seed(epoch),
            epoch=epoch,
            started_at=started,
            **fields,
        )

    def run_episode(
        self, task: TaskPair, index: int, submitted_at: float, slot: dict[str, Any] | None = None, epoch: int = 0
    ) -> EpisodeRecord:
        """One episode, played again (up to `episode_retries` times) while it
        ends in an infrastructure error; earlier tries are kept in `retries`.
        `slot` holds this worker thread's env between episodes (None: a
        fresh env, closed at the end)."""
        own = slot is None
        slot = {} if slot is None else slot
        earlier: list[dict[str, Any]] = []
        try:
            while True:
                rec = self._play(task, index, submitted_at, slot, epoch)
                if rec.outcome != Outcome.ENV_ERROR.value or len(earlier) >= self.episode_retries:
                    break
                earlier.append(
                    rec.model_dump(
                        include={"started_at", "outcome", "error", "attempts", "steps", "timings"}, mode="json"
                    )
                )
                self._drop_env(slot)  # the next try starts from a fresh env
            if earlier:
                rec.retries = earlier
            return rec
        finally:
            if own:
                self._drop_env(slot)

    @staticmethod
    def _drop_env(slot: dict[str, Any]) -> None:
        env = slot.pop("env", None)
        if env is not None:
            try:
                env.close()
            except Exception:  # noqa: BLE001 - a broken env still must not stop the run
                pass

    def _play(
        self, task: TaskPair, index: int, submitted_at: float, slot: dict[str, Any], epoch: int = 0
    ) -> EpisodeRecord:
        started = datetime.now(UTC).isoformat()
        policy = self.policy
        if epoch and hasattr(policy, "reseeded"):  # a sampling policy draws each epoch with its own seed
            policy = policy.reseeded(self._seed(epoch))
        t0 = time.perf_counter()
        timings = Timings(queue_s=t0 - submitted_at)
        steps: list[StepRecord] = []
        try:
            if "env" not in slot:
                # One env per worker, reset for each task: a browser or a
                # zygote is started once, not per episode.
                slot["env"] = gymnasium.make(self.env_id, tasks=self.task_set, runtime=self.runtime, **self.env_kwargs)
            env = slot["env"]
            inner = env.unwrapped
            if not isinstance(inner, SandgymEnv):
                raise TypeError(f"{self.env_id} is not a sandgym env (envs.base.SandgymEnv)")
            obs, info = env.reset(seed=self._seed(epoch), options={"task_id": task.id})
            agent = policy.begin(task, inner)
            if agent is None:
                return self._record(
                    task,
                    index,
                    started,
                    timings.queue_s,
                    epoch,
                    outcome=Outcome.NOT_EXECUTED.value,
                    reward=None,
                    timings=timings,
                    error="the policy has no actions for this task",
                )
            terminated = False
            while not terminated:
                action = agent.act(obs, info)
                if action is None:
                    break
                s0 = time.perf_counter()
                obs, reward, terminated, truncated, info = env.step(action)
                steps.append(
                    StepRecord(
                        index=len(steps),
                        action=action if isinstance(action, str) else json.dumps(action),
                        observation=obs["feedback"],
                        tool=info.get("tool", ""),
                        reward=reward,
                        duration_s=time.perf_counter() - s0,
                    )
                )
                terminated = terminated or truncated
            timings.create_s = inner.timings.get("create_s", 0.0)
            timings.exec_s = inner.timings.get("exec_s", 0.0)
            timings.verify_s = inner.timings.get("verify_s", 0.0)
            timings.total_s = time.perf_counter() - t0
            verdict = inner.last_verdict
            if verdict is None:  # the policy stopped before submitting
                return self._record(
                    task,
                    index,
                    started,
                    timings.queue_s,
                    epoch,
                    steps=steps,
                    outcome=Outcome.NOT_EXECUTED.value,
                    reward=None,
                    timings=timings,
                    error="the policy stopped before submitting",
                )
            # An env's own scheme (MiniWoB's "raw") scores its verdict as binary.
            reward = verdict.reward("pass_rate" if inner.reward_scheme == "pass_rate" else "binary")
            return self._record(
                task,
                index,
                started,
                timings.queue_s,
                epoch,
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
                timings=timings,
                error=verdict.detail[:2000] if verdict.outcome == Outcome.ENV_ERROR else None,
            )
        except Exception as e:  # one episode's failure is that episode's record
            self._drop_env(slot)  # whatever broke may live in the env
            timings.total_s = time.perf_counter() - t0
            return self._record(
                task,
                index,
                started,
                timings.queue_s,
                epoch,
                steps=steps,
                outcome=Outcome.ENV_ERROR.value,
                reward=None,
                timings=timings,
                error=f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=5)}",
            )

    def run(
        self,
        task_ids: list[str] | None = None,
        on_record: Callable[[EpisodeRecord], None] | None = None,
        resume: bool = False,
    ) -> Summary:
        """Run every task not yet recorded. Each record is written as its
        episode ends; on Ctrl-C the running episodes finish and are kept,
        and `resume=True` later runs only what is missing.

        `concurrency` worker threads each keep one env, reset per task, and
        close it in the thread that made it (Playwright's sync API is bound
        to its thread)."""
        path = self._prepare_out_dir(resume)
        if resume:
            self._resume_from(path)
        done = {(r.task_id, r.epoch) for r in self.records}
        chosen = [self.task_set.get(t) for t in task_ids] if task_ids else list(self.task_set.tasks)
        index = {t.id: i for i, t in enumerate(self.task_set.tasks)}
        todo: queue.SimpleQueue[tuple[TaskPair, int]] = queue.SimpleQueue()
        for epoch in range(self.epochs):
            for t in chosen:
                if (t.id, epoch) not in done:
                    todo.put((t, epoch))
        t0 = time.perf_counter()
        stop = threading.Event()
        failures: list[BaseException] = []
        with open(path, "a", encoding="utf-8") as out:

            def worker() -> None:
                slot: dict[str, Any] = {}
                try:
                    while not stop.is_set():
                        try:
                            task, epoch = todo.get_nowait()
                        except queue.Empty:
                            return
                        rec = self.run_episode(task, index[task.id], t0, slot, epoch)
                        with self._lock:
                            out.write(rec.model_dump_json() + "\n")
                            out.flush()
                            self.records.append(rec)
                        if on_record:
                            on_record(rec)
                except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
                    failures.append(e)
                    stop.set()
                finally:
                    self._drop_env(slot)

            threads = [
                threading.Thread(target=worker, name=f"sandgym-episode-{i}", daemon=True)
                for i in range(min(self.concurrency, max(todo.qsize(), 1)))
            ]
            for th in threads:
                th.start()
            try:
                for th in threads:
                    while th.is_alive():
                        th.join(0.2)  # wakes up for Ctrl-C
            finally:
                # On an interrupt, queued episodes are dropped and running ones finish.
                stop.set()
                for th in threads:
                    th.join()
        if failures:
            raise failures[0]
        summary = self.summary(time.perf_counter() - t0)
        # Written aside, then renamed: a crash never leaves half a summary.
        tmp = self.out_dir / f".{SUMMARY}.tmp"
        tmp.write_text(json.dumps(summary.model_dump(), indent=2) + "\n")
        os.replace(tmp, self.out_dir / SUMMARY)
        return summary

    def summary(self, wall_s: float) -> Summary:
        return summarize(
            self.records,
            wall_s,
            __version__,
            run_id=self.run_id,
            env_id=self.env_id,
            task_set=self.task_set.meta.name,
            task_set_hash=self.task_set.hash,
            policy={"name": self.policy.name, **self.policy.config},
            runtime=self.runtime_name,
            seed=self.seed,
        )
