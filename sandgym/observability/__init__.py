"""Operating sandgym: live metrics (Prometheus), traces (OpenTelemetry) and cost.

The harness and the server call an observer at a few points of an
episode's life (`RunObserver`); the metrics and the tracer are observers.
Nothing here is imported unless a run asks for it: `prometheus_client`
when metrics are on, the OpenTelemetry SDK only when traces are exported.
`cost.py` is plain Python (the run summary uses it).
"""

from __future__ import annotations

from typing import Any


class RunObserver:
    """What `sandgym.harness.EvalRun` calls (set `run.observer`); every
    method is a no-op here. Times are `time.perf_counter()` values; keys are
    `(task_id, epoch)`. Called from worker threads (started, step) and the
    supervising thread (recorded): implementations must be thread-safe."""

    def started(self, key: tuple[str, int], queued: float, started: float) -> None:
        """A worker took the episode: it had waited since `queued`."""

    def step(self, key: tuple[str, int], step: Any, start: float) -> None:
        """A step (a `StepRecord`) that began at `start` ended."""

    def recorded(self, record: Any) -> None:
        """The episode's record was written (every episode ends here, once)."""

    def close(self) -> None:
        """The run ended."""


class Observers(RunObserver):
    """Several observers as one."""

    def __init__(self, *observers: RunObserver | None):
        self.observers = [o for o in observers if o is not None]

    def started(self, key: tuple[str, int], queued: float, started: float) -> None:
        for o in self.observers:
            o.started(key, queued, started)

    def step(self, key: tuple[str, int], step: Any, start: float) -> None:
        for o in self.observers:
            o.step(key, step, start)

    def recorded(self, record: Any) -> None:
        for o in self.observers:
            o.recorded(record)

    def close(self) -> None:
        for o in self.observers:
            o.close()


def family_of(env_id: str) -> str:
    """The family an env id belongs to (a bounded label: the family table's
    names, or "other")."""
    from sandgym.families import FAMILIES

    for f in FAMILIES.values():
        if f.env_id == env_id:
            return f.name
    try:
        import gymnasium

        entry = gymnasium.spec(env_id).entry_point
    except Exception:  # an unregistered id
        return "other"
    for f in FAMILIES.values():
        if isinstance(entry, str) and entry.split(":")[0].startswith(f.entry_point.split(":")[0].rsplit(".", 1)[0]):
            return f.name
    return "other"
