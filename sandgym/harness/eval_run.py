"""`EvalRun`: one evaluation, a policy on every task of a set, records on
disk. It checks the settings, then runs the stages of the package: the run
folder (`run_folder`), the worker threads (`workers`) playing episodes
(`episode`) under the supervisor (`supervisor`), and the summary.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium

from sandgym.envs.base import SandgymEnv
from sandgym.families import check_env_id
from sandgym.policies import Policy
from sandgym.records import EpisodeRecord, RecordWriter, Summary, episode_key
from sandgym.runtimes import Runtime
from sandgym.specs import TaskPair, TaskSet

from .episode import Episode, EpisodePlayer
from .executor import Executor, LocalExecutor
from .identity import RunIdentity
from .run_folder import RunFolder
from .supervisor import Supervisor
from .workers import EpisodeQueue

DEFAULT_EPISODE_TIMEOUT_S = 1800.0  # an episode's wall-clock deadline, all its tries included
RETRY_BACKOFF_S = 2.0  # the first episode retry waits 1-2 s, the next 2-4 s, ... (jittered)
ABORT_GRACE_S = 30.0  # after its env is killed, how long a worker may take to come back


class RunInterrupted(KeyboardInterrupt):
    """The run was stopped by Ctrl-C or SIGTERM; the finished episodes are on disk."""

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.signum = signum


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
        executor: Executor | None = None,
    ):
        """`task_set` None: the env's own default set (each family bundles one).
        An episode that ends in `env_error` is played again up to
        `episode_retries` times (every try kept in the record), after a
        backoff (`retry_backoff_s`, doubling, jittered). `epochs` plays every
        task that many times (epoch e resets with seed + e), for pass@k.
        `episode_timeout_s` (None: no deadline) bounds an episode's wall
        clock, tries included; past it the episode is `env_error` and its env
        is killed. Bad env options raise here (SandgymError, ValueError or
        TypeError), before any episode. `executor` says where episodes are
        played (None: worker threads of this process; the caller closes it)."""
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
        self.executor: Executor = executor or LocalExecutor()
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
        self.run_id = uuid.uuid4().hex[:12]  # a resumed run takes over the earlier run's id
        self.records: list[EpisodeRecord] = []
        self.stuck_workers: list[threading.Thread] = []  # workers that never came back from a killed env
        self._log: Callable[[str], None] = lambda message: None
        # Told when an episode starts, steps and is recorded (sandgym.observability.RunObserver).
        self.observer: Any = None

    def _identity(self) -> RunIdentity:
        return RunIdentity(
            self.run_id,
            self.env_id,
            self.task_set,
            self.env_kwargs,
            self.runtime,
            self.runtime_name,
            self.policy,
            self.seed,
        )

    def _player(self) -> EpisodePlayer:
        return EpisodePlayer(self._identity(), self.episode_retries, self.retry_backoff_s, self.observer)

    def run_episode(
        self,
        task: TaskPair,
        index: int,
        submitted_at: float,
        slot: dict[str, Any] | None = None,
        epoch: int = 0,
        episode: Episode | None = None,
    ) -> EpisodeRecord:
        """One episode, played again (up to `episode_retries` times, after a
        backoff) while it ends in an infrastructure error; earlier tries are
        kept in `retries`. `slot` holds an env between episodes (None: a
        fresh env, closed at the end)."""
        ep = episode or Episode(task, index, epoch, submitted_at, slot={} if slot is None else slot)
        return self._player().run_episode(ep, slot)

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
        folder = RunFolder(self.out_dir, self._log)
        folder.prepare(resume)
        try:
            return self._run(folder, task_ids, on_record, resume)
        finally:
            folder.release()

    def _run(
        self,
        folder: RunFolder,
        task_ids: list[str] | None,
        on_record: Callable[[EpisodeRecord], None] | None,
        resume: bool,
    ) -> Summary:
        back = folder.read_back(self._identity()) if resume else None
        if back is not None:
            self.run_id = back.run_id or self.run_id
            self.records += back.finished
        done = {episode_key(r) for r in self.records}
        chosen = [self.task_set.get(t) for t in task_ids] if task_ids else list(self.task_set.tasks)
        index = {t.id: i for i, t in enumerate(self.task_set.tasks)}
        t0 = time.perf_counter()
        todo = EpisodeQueue()
        queued: set[tuple[str, int]] = set()
        for epoch in range(self.epochs):
            for t in chosen:
                if (t.id, epoch) not in done:
                    earlier = back.replay.get((t.id, epoch), []) if back is not None else []
                    todo.put(Episode(t, index[t.id], epoch, t0, retries=list(earlier)))
                    queued.add((t.id, epoch))
        if back is not None:  # env_error records of episodes this run does not play stay as they are
            self.records += [r for key, r in back.last_errors.items() if key not in queued]
        player = self._player()
        if not todo.empty():
            self.executor.start(player, min(self.concurrency, todo.qsize()), self._log)
        with RecordWriter(folder.records_path) as writer:
            supervisor = Supervisor(
                player,
                todo,
                writer,
                self.records,
                concurrency=self.concurrency,
                episode_timeout_s=self.episode_timeout_s,
                abort_grace_s=self.abort_grace_s,
                log=self._log,
                on_record=on_record,
                executor=self.executor,
            )
            try:
                supervisor.run()
            finally:
                self.stuck_workers += supervisor.stuck_workers
        if supervisor.signals_seen:
            signum = supervisor.signals_seen[-1]
            missing = len(queued) - sum(1 for r in self.records if episode_key(r) in queued)
            raise RunInterrupted(
                f"interrupted: {len(self.records)} episode records are in {folder.records_path}"
                + (f"; {missing} episodes did not run" if missing > 0 else "")
                + "; `sandgym eval --resume` with the same settings finishes the run",
                signum,
            )
        if back is not None and back.superseded:
            folder.compact(self.records)
        summary = self.summary(time.perf_counter() - t0)
        folder.write_summary(summary)
        return summary

    def summary(self, wall_s: float) -> Summary:
        """The run's summary over the records so far."""
        return self._identity().summary(self.records, wall_s)
