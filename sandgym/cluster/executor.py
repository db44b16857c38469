"""`sandgym eval --executor ray`: the harness's worker threads hand their
episodes to seats on Ray nodes (`fleet.Fleet`) instead of playing them.

The eval process keeps everything else: the queue, the supervisor (the only
writer of records), deadlines and Ctrl-C (passed on to the node through
the slot's `abort`), `--resume`, the progress bar, metrics and the summary.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from sandgym.harness.episode import Episode, EpisodePlayer
from sandgym.records import EpisodeRecord

from .direct import DirectFleet, listening, recall, remember
from .fleet import DEFAULT_IDLE_S, ClusterError, Fleet, Job
from .plan import RunPlan
from .wire import cluster_token

# Passed to the runners' processes when set here (a chat policy's key).
FORWARDED_ENV = ("OPENAI_API_KEY",)


def plan_of(player: EpisodePlayer) -> RunPlan:
    """What the nodes need of `player`'s run."""
    r = player.run
    return RunPlan(
        run_id=r.run_id,
        env_id=r.env_id,
        task_set=r.task_set,
        env_kwargs=r.env_kwargs,
        runtime_name=r.runtime_name,
        policy=r.policy,
        seed=r.seed,
        episode_retries=player.episode_retries,
        retry_backoff_s=player.retry_backoff_s,
        env_vars={k: os.environ[k] for k in FORWARDED_ENV if os.environ.get(k)},
    )


class RayExecutor:
    """Episodes played on the seats of a Ray cluster's nodes."""

    kind = "ray"
    # Each seat gets its next episode while it plays one: the node starts it
    # without waiting for a round trip to this process (its wait there is in
    # its queue_s; its deadline runs from when it was handed out).
    in_flight = 2

    def __init__(self, address: str | None = None, idle_s: float = DEFAULT_IDLE_S):
        self.address = address or os.environ.get("RAY_ADDRESS") or None
        self.fleet: Fleet = Fleet(address, idle_s=idle_s)
        # Warm runners written down for this address: reached without Ray (direct.py), tried first.
        self.direct = DirectFleet(address, idle_s=idle_s) if self._may_go_direct(idle_s) else None
        if self.direct is None:
            self.fleet.connect_soon()  # Ray's import and the join, while the eval loads its tasks

    def _may_go_direct(self, idle_s: float) -> bool:
        """Runners written down for this address, each still listening (a port closed: they ended)."""
        if idle_s <= 0 or self.address is None or cluster_token() is None:
            return False
        entries = recall(self.address)
        return bool(entries) and all(listening(e["rpc"]) for e in entries)

    def start(self, player: EpisodePlayer, concurrency: int, log: Callable[[str], None]) -> None:
        plan = plan_of(player)
        if self.direct is not None:
            self.direct.log = log
            if self.direct.try_start(plan, concurrency, self.in_flight):
                self.fleet = self.direct
                return
        self.fleet.log = log
        if not self.fleet.runners:
            self.fleet.start(plan, concurrency, self.in_flight)
            if self.address is not None and self.fleet.idle_s > 0:
                remember(self.address, self.fleet.runners)  # for the next eval: direct.py

    def run_episode(self, player: EpisodePlayer, ep: Episode, slot: dict[str, Any]) -> EpisodeRecord:
        job = Job(ep.task.id, ep.index, ep.epoch, ep.submitted, retries=list(ep.retries))

        def on_seat(abort: Any) -> None:
            if abort is None:
                slot.pop("abort", None)
            else:
                slot["abort"] = abort
                if ep.cancel.is_set():  # aborted before it reached its seat
                    abort(ep.why)

        try:
            rec, _ = self.fleet.play(job, cancelled=ep.cancel.is_set, closed=lambda: ep.closed, on_seat=on_seat)
        finally:
            ep.retries = list(job.retries)  # the tries lost with their nodes, for a record made here
        if rec is None:  # the supervisor recorded it, or it was stopped after losing its node
            return player.record_unfinished(ep, ep.why or "interrupted")
        return rec

    def close(self) -> None:
        self.fleet.close()


__all__ = ["ClusterError", "RayExecutor"]
