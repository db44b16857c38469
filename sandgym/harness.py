"""The evaluation harness: a policy on every task of a set, records on disk.

Episodes run on worker threads, each with one env reset per task
(sandboxes and browsers do the heavy work in their own processes). The
calling thread supervises: workers hand each finished episode to it over
a queue, and it alone writes records (`sandgym.records.RecordWriter`: one
whole-line append per record, fsynced), so an interrupted run keeps what
it finished and never a torn record. A failure inside one episode is
recorded on that episode as `env_error`, never a crash of the run; an
episode that ends in `env_error` is played again after a backoff.

Shutdown. Ctrl-C (SIGINT) stops handing out episodes and lets the running
ones finish; a second Ctrl-C (or SIGTERM) abandons them: their envs are
killed from the supervising thread (`SandgymEnv.abort()`) and each is
recorded as `env_error` with the error "interrupted". Workers report their
end explicitly (a message on the queue), never through join timeouts, and
are not daemon threads: none is left running inside Playwright when the
interpreter exits. Every episode has a wall-clock deadline
(`episode_timeout_s`): past it the episode is `env_error` and its env is
killed the same way.

`--resume` cuts off an unterminated last line (a record whose write was
interrupted), keeps every finished episode and plays the missing ones and
those that ended in `env_error` (the earlier tries kept in the new
record's `retries`).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import gymnasium

from sandgym.envs.base import SandgymEnv
from sandgym.errors import SandgymError
from sandgym.families import check_env_id

from . import __version__
from .outcomes import Outcome, retry_delay
from .policies import Policy
from .records import (
    EpisodeRecord,
    OutputError,
    RecordWriter,
    StepRecord,
    Summary,
    Timings,
    clean_strings,
    encode_record,
    episode_key,
    output_error,
    summarize,
)
from .runtimes import Runtime
from .specs import TaskPair, TaskSet

TRAJECTORIES = "trajectories.jsonl"
SUMMARY = "summary.json"
DEFAULT_EPISODE_TIMEOUT_S = 1800.0  # an episode's wall-clock deadline, all its tries included
RETRY_BACKOFF_S = 2.0  # the first episode retry waits 1-2 s, the next 2-4 s, ... (jittered)
RETRY_BACKOFF_CAP_S = 60.0
ABORT_GRACE_S = 30.0  # after its env is killed, how long a worker may take to come back
INTERRUPTED = "interrupted"
# Recorded actions longer than the env's limit (which the env refused) keep only their start.
KEPT_OF_OVERSIZED_ACTION = 4096


def _env_version(env_id: str) -> str:
    return env_id.rsplit("-v", 1)[1] if "-v" in env_id else "0"


class RunInterrupted(KeyboardInterrupt):
    """The run was stopped by Ctrl-C or SIGTERM; the finished episodes are on disk."""

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.signum = signum


def _now() -> str:
    return datetime.now(UTC).isoformat()


@dataclass(eq=False)
class _Episode:
    """One episode (a task and an epoch) as the supervisor sees it."""

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


@dataclass(eq=False)
class _Worker:
    n: int
    thread: threading.Thread | None = None
    episode: _Episode | None = None
    slot: dict[str, Any] = field(default_factory=dict)


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
        episode_timeout_s: float | None = DEFAULT_EPISODE_TIMEOUT_S,
        retry_backoff_s: float = RETRY_BACKOFF_S,
        abort_grace_s: float = ABORT_GRACE_S,
    ):
        """`task_set` None: the env's own default set (each family bundles one).
        An episode that ends in `env_error` is played again up to
        `episode_retries` times (every try kept in the record), after a
        backoff (`retry_backoff_s`, doubling, jittered). `epochs` plays every
        task that many times (epoch e resets with seed + e), for pass@k.
        `episode_timeout_s` (None: no deadline) bounds an episode's wall
        clock, tries included; past it the episode is `env_error` and its env
        is killed. Bad env options raise here (SandgymError, ValueError or
        TypeError), before any episode."""
        self.env_id = check_env_id(env_id)
        if concurrency < 1:
            raise ValueError(f"--concurrency must be at least 1, got {concurrency}")
        if epochs < 1:
            raise ValueError(f"--epochs must be at least 1, got {epochs}")
        self.epochs = epochs
        if episode_retries < 0:
            raise ValueError(f"--episode-retries must be 0 or more, got {episode_retries}")
        if episode_timeout_s is not None and not episode_timeout_s > 0:
            raise ValueError(f"--episode-timeout must be positive seconds, got {episode_timeout_s}")
        self.episode_retries = episode_retries
        self.episode_timeout_s = episode_timeout_s
        self.retry_backoff_s = max(0.0, retry_backoff_s)
        self.abort_grace_s = abort_grace_s
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
        # A policy that names tasks (a replay file) is checked against the set now.
        check_tasks = getattr(policy, "check_tasks", None)
        if callable(check_tasks):
            check_tasks(self.task_set)
        self.run_id = uuid.uuid4().hex[:12]
        self._lock = threading.Lock()
        self.records: list[EpisodeRecord] = []
        self.stuck_workers: list[threading.Thread] = []  # workers that never came back from a killed env
        self._log: Callable[[str], None] = lambda message: None
        self._signals_seen: list[int] = []
        self._superseded = False  # the records file holds records a resume replaces (rewritten at the end)
        self._pending_errors: dict[tuple[str, int], EpisodeRecord] = {}
        # Told when an episode starts, steps and is recorded (sandgym.observability.RunObserver).
        self.observer: Any = None
        self._take_lock = threading.Lock()
        self._head_since = 0.0  # when the episode now at the head of the queue got there

    # -- the run folder ---------------------------------------------------------------

    def _prepare_out_dir(self, resume: bool) -> Path:
        try:
            self.out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise output_error(self.out_dir, e, "create the folder") from None
        path = self.out_dir / TRAJECTORIES
        if path.exists() and path.stat().st_size > 0 and not resume:
            raise FileExistsError(
                f"{path} already holds a run's records; pass --resume to finish that run, "
                "or choose another --out folder"
            )
        for tmp in self.out_dir.glob(".*.tmp"):  # left by a run killed while replacing a file
            owner = tmp.name.rsplit(".", 2)[-2] if tmp.name.count(".") >= 3 else ""
            if not owner.isdigit() or not os.path.exists(f"/proc/{owner}"):
                tmp.unlink(missing_ok=True)
        return path

    def _resume_from(self, path: Path) -> dict[tuple[str, int], list[dict[str, Any]]]:
        """Take over the finished episodes of an interrupted run with the same
        settings. Returns the episodes to play again (those whose last record
        is `env_error`) with their earlier tries."""
        if not path.exists():
            return {}
        try:
            data = path.read_bytes()
        except OSError as e:
            raise output_error(path, e, "read") from None
        if data and not data.endswith(b"\n"):
            keep = data.rfind(b"\n") + 1
            try:
                os.truncate(path, keep)
            except OSError as e:
                raise output_error(path, e, "cut off the unterminated last line of") from None
            self._log(
                f"{path}: cut off an unterminated last line ({len(data) - keep} bytes: a record whose "
                "write was interrupted); its episode runs again"
            )
            data = data[:keep]
        mine = {
            "env_id": self.env_id,
            "task_set_hash": self.task_set.hash,
            "env_kwargs": self.env_kwargs,
            "policy": {"name": self.policy.name, **self.policy.config},
        }
        by_key: dict[tuple[str, int], list[EpisodeRecord]] = {}
        for n, raw in enumerate(data.split(b"\n"), 1):
            if not raw.strip():
                continue
            try:
                rec = EpisodeRecord.model_validate_json(raw)
            except ValueError as e:
                first = str(e).splitlines()[0]
                raise ValueError(f"{path}:{n}: not an episode record ({first}); move the file aside") from None
            for key, value in {**mine, "seed": self._seed(rec.epoch)}.items():
                if getattr(rec, key) != value:
                    raise ValueError(
                        f"--resume: {path} was made with {key}={getattr(rec, key)!r}, "
                        f"this run has {value!r}; use the same settings or another --out"
                    )
            self.run_id = rec.run_id
            by_key.setdefault(episode_key(rec), []).append(rec)
        replay: dict[tuple[str, int], list[dict[str, Any]]] = {}
        self._superseded = sum(len(recs) for recs in by_key.values()) > len(by_key)
        self._pending_errors = {}
        for episode, recs in by_key.items():
            final = [r for r in recs if r.outcome != Outcome.ENV_ERROR.value]
            if final:
                self.records.append(final[-1])
                continue
            earlier: list[dict[str, Any]] = []
            for r in recs:  # every try of every earlier run, in order
                earlier += [t for t in r.retries if t not in earlier]
                earlier.append(self._try_of(r))
            replay[episode] = earlier
            self._pending_errors[episode] = recs[-1]
        self._superseded = self._superseded or bool(replay)
        return replay

    @staticmethod
    def _try_of(rec: EpisodeRecord) -> dict[str, Any]:
        return rec.model_dump(include={"started_at", "outcome", "error", "attempts", "steps", "timings"}, mode="json")

    def _seed(self, epoch: int) -> int | None:
        """The seed of an epoch's resets: the run's seed plus the epoch."""
        return None if self.seed is None else self.seed + epoch

    # -- one episode -------------------------------------------------------------------

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
        self,
        task: TaskPair,
        index: int,
        submitted_at: float,
        slot: dict[str, Any] | None = None,
        epoch: int = 0,
        episode: _Episode | None = None,
    ) -> EpisodeRecord:
        """One episode, played again (up to `episode_retries` times, after a
        backoff) while it ends in an infrastructure error; earlier tries are
        kept in `retries`. `slot` holds this worker thread's env between
        episodes (None: a fresh env, closed at the end)."""
        own = slot is None
        slot = {} if slot is None else slot
        ep = episode or _Episode(task, index, epoch, submitted_at, slot=slot)
        prior = list(ep.retries)
        tries: list[dict[str, Any]] = []
        try:
            while True:
                rec = self._play(task, index, submitted_at, slot, epoch, ep)
                if tries:  # a try played again: the episode's wait for a worker is its first try's
                    rec.timings.queue_s = tries[0]["timings"]["queue_s"]
                if rec.outcome != Outcome.ENV_ERROR.value or len(tries) >= self.episode_retries:
                    break
                if ep.cancel.is_set():
                    break
                tries.append(self._try_of(rec))
                ep.retries = prior + tries
                self._drop_env(slot)  # the next try starts from a fresh env
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
                self._drop_env(slot)

    @staticmethod
    def _drop_env(slot: dict[str, Any]) -> None:
        env = slot.pop("env", None)
        if env is not None:
            try:
                env.close()
            except Exception:  # a broken env still must not stop the run
                pass

    @staticmethod
    def _recorded_action(action: Any, inner: SandgymEnv) -> str:
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

    @staticmethod
    def _policy_data(agent: Any) -> dict[str, Any]:
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

    def _play(
        self,
        task: TaskPair,
        index: int,
        submitted_at: float,
        slot: dict[str, Any],
        epoch: int = 0,
        ep: _Episode | None = None,
    ) -> EpisodeRecord:
        started = _now()
        policy = self.policy
        if epoch and hasattr(policy, "reseeded"):  # a sampling policy draws each epoch with its own seed
            policy = policy.reseeded(self._seed(epoch))
        t0 = time.perf_counter()
        timings = Timings(queue_s=t0 - submitted_at)
        steps: list[StepRecord] = []
        if ep is not None:
            ep.steps = steps  # the supervisor reads them if it must record the episode itself
        agent: Any = None
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
                if ep is not None and ep.cancel.is_set():
                    raise _Cancelled(ep.why or INTERRUPTED)
                action = agent.act(obs, info)
                if action is None:
                    break
                s0 = time.perf_counter()
                obs, reward, terminated, truncated, info = env.step(action)
                steps.append(
                    StepRecord(
                        index=len(steps),
                        action=self._recorded_action(action, inner),
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
                    policy_data=self._policy_data(agent),
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
                policy_data=self._policy_data(agent),
            )
        except Exception as e:  # one episode's failure is that episode's record
            self._drop_env(slot)  # whatever broke may live in the env
            timings.total_s = time.perf_counter() - t0
            if isinstance(e, _Cancelled) or (ep is not None and ep.cancel.is_set()):
                error = ep.why if ep is not None and ep.why else str(e)
            else:
                error = f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=5)}"
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
                error=error,
                policy_data=self._policy_data(agent),
            )

    # -- the run ------------------------------------------------------------------------

    def run(
        self,
        task_ids: list[str] | None = None,
        on_record: Callable[[EpisodeRecord], None] | None = None,
        resume: bool = False,
        log: Callable[[str], None] | None = None,
    ) -> Summary:
        """Run every task not yet recorded. Each record is written as its
        episode ends. Ctrl-C: the running episodes finish and are kept, then
        RunInterrupted is raised; a second Ctrl-C abandons them (recorded as
        `env_error`, "interrupted"). `resume=True` later runs what is missing
        or ended in `env_error`. `log` gets one-line notes for the operator
        (an interrupt, a deadline, a line cut off). Raises OutputError when
        the folder cannot be written.

        `concurrency` worker threads each keep one env, reset per task, and
        close it in the thread that made it (Playwright's sync API is bound
        to its thread)."""
        if log is not None:
            self._log = log
        self._superseded = False
        self._pending_errors = {}
        path = self._prepare_out_dir(resume)
        replay = self._resume_from(path) if resume else {}
        done = {episode_key(r) for r in self.records}
        chosen = [self.task_set.get(t) for t in task_ids] if task_ids else list(self.task_set.tasks)
        index = {t.id: i for i, t in enumerate(self.task_set.tasks)}
        t0 = time.perf_counter()
        todo: queue.SimpleQueue[_Episode] = queue.SimpleQueue()
        queued: set[tuple[str, int]] = set()
        for epoch in range(self.epochs):
            for t in chosen:
                if (t.id, epoch) not in done:
                    todo.put(_Episode(t, index[t.id], epoch, t0, retries=list(replay.get((t.id, epoch), []))))
                    queued.add((t.id, epoch))
        # env_error records of episodes this run does not play stay as they are.
        self.records += [r for key, r in self._pending_errors.items() if key not in queued]
        with RecordWriter(path) as writer:
            self._supervise(writer, todo, on_record)
        if self._signals_seen:
            signum = self._signals_seen[-1]
            missing = len(queued) - sum(1 for r in self.records if episode_key(r) in queued)
            raise RunInterrupted(
                f"interrupted: {len(self.records)} episode records are in {path}"
                + (f"; {missing} episodes did not run" if missing > 0 else "")
                + "; `sandgym eval --resume` with the same settings finishes the run",
                signum,
            )
        if self._superseded:
            self._compact(path)
        summary = self.summary(time.perf_counter() - t0)
        self._replace(self.out_dir / SUMMARY, (json.dumps(summary.model_dump(), indent=2) + "\n").encode())
        return summary

    def _replace(self, target: Path, data: bytes) -> None:
        """Write `data` aside, fsync, rename over `target`: a crash never leaves half a file."""
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, target)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            raise output_error(target, e) from None

    def _compact(self, path: Path) -> None:
        """Rewrite the records file without the `env_error` records a resume superseded."""
        self._replace(path, b"".join(encode_record(r) for r in self.records))

    def _supervise(
        self,
        writer: RecordWriter,
        todo: queue.SimpleQueue[_Episode],
        on_record: Callable[[EpisodeRecord], None] | None,
    ) -> None:
        """Start the workers, write what they hand back, enforce deadlines and
        interrupts, and return once every worker has ended (or was given up on)."""
        results: queue.SimpleQueue[tuple[str, _Worker, Any]] = queue.SimpleQueue()
        stop = threading.Event()
        live: list[_Worker] = []
        failures: list[BaseException] = []
        output_failed: list[OutputError] = []
        abandoned = False
        announced = 0
        given_up_at: float | None = None

        def start_worker(n: int) -> None:
            w = _Worker(n)
            w.thread = threading.Thread(
                target=self._worker, args=(w, todo, results, stop), name=f"sandgym-episode-{n}", daemon=False
            )
            live.append(w)
            w.thread.start()

        def keep(rec: EpisodeRecord) -> None:
            if output_failed:
                return
            try:
                writer.write(rec)
            except OutputError as e:
                output_failed.append(e)
                return
            self.records.append(rec)
            if self.observer is not None:
                try:
                    self.observer.recorded(rec)
                except Exception as e:  # an observer's bug ends the run, in order
                    failures.append(e)
            if on_record is not None:
                try:
                    on_record(rec)
                except Exception as e:  # the caller's bug ends the run, in order
                    failures.append(e)

        def abandon(why: str) -> None:
            """Kill every running episode's env and record the episode as env_error."""
            nonlocal abandoned
            abandoned = True
            stop.set()
            for w in live:
                ep = w.episode
                if ep is None or ep.closed:
                    continue
                self._cancel(ep, why)
                ep.closed = True
                keep(self._record_unfinished(ep, why))

        n_workers = min(self.concurrency, max(todo.qsize(), 1))
        with self._signal_handlers():
            for n in range(n_workers):
                start_worker(n)
            next_n = n_workers
            while live:
                wait = 0.5
                now = time.monotonic()
                for w in live:
                    ep = w.episode
                    if ep is not None and ep.deadline is not None and not ep.cancel.is_set():
                        wait = min(wait, max(0.01, ep.deadline - now))
                try:
                    kind, w, payload = results.get(timeout=wait)
                except queue.Empty:
                    kind, w, payload = "", None, None  # type: ignore[assignment]
                if kind == "record":
                    ep, rec = payload
                    if not ep.closed:
                        ep.closed = True
                        keep(rec)
                elif kind == "error":
                    failures.append(payload)
                elif kind == "exit":
                    if w in live:
                        live.remove(w)
                    if w.thread is not None:
                        w.thread.join()  # it has returned from its work: this join is immediate
                # Signals: 1st stop handing out episodes, 2nd (or SIGTERM) abandon the running ones.
                sigints = self._signals_seen.count(signal.SIGINT)
                if self._signals_seen and announced == 0:
                    announced = 1
                    stop.set()
                    running = sum(1 for w in live if w.episode is not None)
                    if signal.SIGTERM not in self._signals_seen:
                        self._log(
                            f"Ctrl-C: no new episodes; waiting for {running} running episode(s) to finish "
                            "(Ctrl-C again abandons them)"
                        )
                if (sigints >= 2 or signal.SIGTERM in self._signals_seen) and not abandoned:
                    abandon(f"{INTERRUPTED}: abandoned by a second Ctrl-C (or SIGTERM); its env was killed")
                    self._log(
                        "abandoned the running episodes: their envs were killed and they are recorded as "
                        f"env_error ({INTERRUPTED})"
                    )
                    given_up_at = time.monotonic() + self.abort_grace_s
                if output_failed and not abandoned:
                    abandon(f"{INTERRUPTED}: the records could not be written")
                    given_up_at = time.monotonic() + self.abort_grace_s
                if failures and not stop.is_set():
                    stop.set()
                # Deadlines.
                now = time.monotonic()
                for w in list(live):
                    ep = w.episode
                    if ep is None or ep.closed:
                        continue
                    if ep.deadline is not None and now >= ep.deadline and not ep.cancel.is_set():
                        why = (
                            f"deadline: the episode ran longer than {self.episode_timeout_s:g} s "
                            "(--episode-timeout); its env was killed"
                        )
                        self._cancel(ep, why)
                        self._log(f"task {ep.task.id}: {why}")
                    if ep.aborted_at is not None and now - ep.aborted_at >= self.abort_grace_s and not ep.closed:
                        # Its worker did not come back from the killed env: record
                        # the episode now, give up on that worker, start another.
                        ep.closed = True
                        keep(self._record_unfinished(ep, f"{ep.why}; the worker did not return"))
                        live.remove(w)
                        if w.thread is not None:
                            self.stuck_workers.append(w.thread)
                        self._log(f"task {ep.task.id}: its worker did not return after its env was killed")
                        if not stop.is_set() and not todo.empty():
                            start_worker(next_n)
                            next_n += 1
                if (
                    given_up_at is not None
                    and time.monotonic() >= given_up_at
                    or self._signals_seen.count(signal.SIGINT) >= 3
                ):
                    self.stuck_workers += [w.thread for w in live if w.thread is not None and w.thread.is_alive()]
                    break
        if output_failed:
            raise output_failed[0]
        if failures:
            raise failures[0]

    def _cancel(self, ep: _Episode, why: str) -> None:
        """Stop an episode from the supervising thread: no more steps or
        tries, and its env killed (`SandgymEnv.abort()`) so that a step
        blocked in it returns."""
        if not ep.why:
            ep.why = why
        ep.cancel.set()
        ep.aborted_at = time.monotonic()
        env = ep.slot.get("env")
        if env is None:
            return
        inner = getattr(env, "unwrapped", None)
        try:
            if isinstance(inner, SandgymEnv):
                inner.abort()
        except Exception:  # best effort: the record says what happened
            pass

    def _record_unfinished(self, ep: _Episode, why: str) -> EpisodeRecord:
        """The record of an episode the supervisor ends itself (abandoned, or
        its worker never came back): env_error, with the steps taken so far."""
        return self._record(
            ep.task,
            ep.index,
            ep.started_at or _now(),
            max(0.0, ep.t0 - ep.submitted) if ep.t0 else 0.0,
            ep.epoch,
            steps=list(ep.steps),
            outcome=Outcome.ENV_ERROR.value,
            reward=None,
            timings=Timings(
                queue_s=max(0.0, ep.t0 - ep.submitted) if ep.t0 else 0.0,
                total_s=time.perf_counter() - ep.t0 if ep.t0 else 0.0,
            ),
            error=why,
            retries=list(ep.retries),
        )

    def _worker(
        self,
        w: _Worker,
        todo: queue.SimpleQueue[_Episode],
        results: queue.SimpleQueue[tuple[str, _Worker, Any]],
        stop: threading.Event,
    ) -> None:
        """Play episodes until the queue is empty or the run stops; hand each
        record to the supervisor; always end with an "exit" message."""
        try:
            while not stop.is_set():
                with self._take_lock:
                    try:
                        ep = todo.get_nowait()
                    except queue.Empty:
                        return
                    # Its wait began when it reached the head of the queue: a worker could have taken it then.
                    ep.submitted, self._head_since = max(ep.submitted, self._head_since), time.perf_counter()
                ep.slot = w.slot
                ep.started_at = _now()
                ep.t0 = time.perf_counter()
                if self.observer is not None:
                    self.observer.started((ep.task.id, ep.epoch), ep.submitted, ep.t0)
                if self.episode_timeout_s is not None:
                    ep.deadline = time.monotonic() + self.episode_timeout_s
                w.episode = ep
                try:
                    rec = self.run_episode(ep.task, ep.index, ep.submitted, w.slot, ep.epoch, ep)
                finally:
                    w.episode = None
                results.put(("record", w, (ep, rec)))
                if ep.cancel.is_set():
                    self._drop_env(w.slot)  # it was killed: the next episode gets a fresh one
        except BaseException as e:  # re-raised in the supervising thread
            results.put(("error", w, e))
        finally:
            self._drop_env(w.slot)
            results.put(("exit", w, None))

    @contextlib.contextmanager
    def _signal_handlers(self) -> Iterator[None]:
        """SIGINT and SIGTERM become notes the supervisor acts on (never an
        exception raised in the middle of writing a record)."""
        self._signals_seen = []
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def note(signum: int, frame: object) -> None:
            self._signals_seen.append(signum)

        old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
        for s in old:
            signal.signal(s, note)
        try:
            yield
        finally:
            for s, handler in old.items():
                signal.signal(s, handler)

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


class _Cancelled(SandgymError, RuntimeError):
    """The supervisor stopped the episode (its deadline passed, or the run was abandoned)."""
