"""Prometheus metrics of a run (`sandgym eval --metrics-port`) or a server (`sandgym serve`, /metrics).

Every `SandgymMetrics` has its own `CollectorRegistry` (never the global
default one), so tests and several runs in one process do not collide.
Names follow Prometheus conventions: units in the name, `_total` on
counters (prometheus_client adds it), labels from bounded sets (family
names from the family table, outcome names, phases, backend names).

| metric | labels | what |
|---|---|---|
| `sandgym_episodes_total` | family, outcome | episodes recorded |
| `sandgym_verified_successes_total` | family | episodes whose verifier passed |
| `sandgym_scored_episodes_total` | family | episodes with a reward (the success rate's denominator) |
| `sandgym_env_error_episodes_total` | family | left out of it: env_error |
| `sandgym_not_executed_episodes_total` | family | left out of it: not_executed |
| `sandgym_episode_retries_total` | family | extra tries after env_error |
| `sandgym_episodes_in_progress` | family | episodes a worker is playing |
| `sandgym_episode_phase_seconds` | family, phase | histogram: queue, create, exec, verify, total |
| `sandgym_verifier_attempts_total` | family, outcome | verifier attempts |
| `sandgym_verifier_attempt_seconds` | family, outcome | histogram: the verifier's waits |
| `sandgym_sandbox_seconds_total` | family | sandbox occupancy (see `cost.py`) |
| `sandgym_sandboxes_created_total`, `_closed_total` | backend, isolation | sandboxes by backend |
| `sandgym_sandboxes_live` | backend, isolation | open now |
| `sandgym_sandbox_create_seconds` | backend, pool | histogram; pool = cold (on demand) or warm (ahead) |
| `sandgym_sandbox_lifetime_seconds` | backend | histogram |
| `sandgym_sandboxes_leaked_total` | backend | still open when the run ended |
| `sandgym_sandboxes_memory_limit_bytes` | backend | memory limits of the live sandboxes |
| `sandgym_sandboxes_cpu_limit_cores` | backend | CPU shares of the live sandboxes (no backend reports usage) |
| `sandgym_pool_*` | | warm pools: idle, in use, creating, hit ratio |
| `sandgym_pool_events_total` | event | hit, miss, replenished, reused, reaped, create_failure, leaked |
| `sandgym_sandbox_claim_seconds` | backend, launch_type | histogram: a caller's wait; warm: from a warm pool |
| `sandgym_sandbox_creation_seconds` | backend | histogram: one sandbox until its agent answered |
| `sandgym_warm_pool_*_sandboxes` | backend | a backend's warm pool: ready, starting, in_use, target |
| `sandgym_warm_pool_hit_ratio` | backend | claims served warm |
| `sandgym_warm_pool_events_total` | backend, event | started, start_failed, discarded |
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from sandgym.outcomes import Outcome
from sandgym.runtimes import pool as pool_module
from sandgym.runtimes import stock as stock_module
from sandgym.runtimes.base import Runtime, Sandbox, SandboxSpec

from . import RunObserver, family_of

SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)
PHASES = ("queue", "create", "exec", "verify", "total")


class _NoCreated(Collector):
    """A registry's metrics with their `<name>_created` samples left out."""

    def __init__(self, registry: CollectorRegistry):
        self.registry = registry

    def collect(self) -> Iterator[Any]:
        for metric in self.registry.collect():
            metric.samples = [s for s in metric.samples if s.name != metric.name + "_created"]
            yield metric


class SandgymMetrics:
    """The metrics of one run or one server, in a registry of their own."""

    def __init__(self, registry: CollectorRegistry | None = None):
        r = self.registry = registry or CollectorRegistry()
        fam = ["family"]
        self.episodes = Counter("sandgym_episodes", "Episodes recorded.", ["family", "outcome"], registry=r)
        self.verified = Counter("sandgym_verified_successes", "Episodes whose verifier passed.", fam, registry=r)
        self.scored = Counter(
            "sandgym_scored_episodes", "Episodes with a reward (the success rate's denominator).", fam, registry=r
        )
        self.env_errors = Counter(
            "sandgym_env_error_episodes", "Episodes that ended in env_error (not scored).", fam, registry=r
        )
        self.not_executed = Counter(
            "sandgym_not_executed_episodes", "Episodes that did not run (not scored).", fam, registry=r
        )
        self.retries = Counter("sandgym_episode_retries", "Tries played again after env_error.", fam, registry=r)
        self.in_progress = Gauge("sandgym_episodes_in_progress", "Episodes being played.", fam, registry=r)
        self.phase = Histogram(
            "sandgym_episode_phase_seconds",
            "Seconds an episode spent per phase (queue: waiting for a worker).",
            ["family", "phase"],
            buckets=SECONDS,
            registry=r,
        )
        self.attempts = Counter(
            "sandgym_verifier_attempts", "Verifier attempts, by outcome.", ["family", "outcome"], registry=r
        )
        self.attempt_s = Histogram(
            "sandgym_verifier_attempt_seconds",
            "Seconds per verifier attempt (the verifier's wait).",
            ["family", "outcome"],
            buckets=SECONDS,
            registry=r,
        )
        self.sandbox_s = Counter(
            "sandgym_sandbox_seconds", "Sandbox-seconds used by episodes (sandgym.observability.cost).", fam, registry=r
        )
        sb = ["backend", "isolation"]
        self.created = Counter("sandgym_sandboxes_created", "Sandboxes created.", sb, registry=r)
        self.closed = Counter("sandgym_sandboxes_closed", "Sandboxes closed.", sb, registry=r)
        self.live = Gauge("sandgym_sandboxes_live", "Sandboxes open now.", sb, registry=r)
        self.create_s = Histogram(
            "sandgym_sandbox_create_seconds",
            "Seconds to create a sandbox; pool=cold: made on demand, warm: made ahead by a warm pool.",
            ["backend", "pool"],
            buckets=SECONDS,
            registry=r,
        )
        self.lifetime_s = Histogram(
            "sandgym_sandbox_lifetime_seconds", "Seconds a sandbox was open.", ["backend"], buckets=SECONDS, registry=r
        )
        self.leaked = Counter(
            "sandgym_sandboxes_leaked", "Sandboxes still open when the run ended.", ["backend"], registry=r
        )
        self.memory_limit = Gauge(
            "sandgym_sandboxes_memory_limit_bytes", "Memory limit summed over live sandboxes.", ["backend"], registry=r
        )
        self.cpu_limit = Gauge(
            "sandgym_sandboxes_cpu_limit_cores", "CPU share summed over live sandboxes.", ["backend"], registry=r
        )
        self.pool_events = Counter(
            "sandgym_pool_events",
            "Warm-pool events: hit, miss, replenished, reused, reaped (destroyed), create_failure, leaked.",
            ["event"],
            registry=r,
        )
        self.claim_s = Histogram(
            "sandgym_sandbox_claim_seconds",
            "Seconds a caller waited for a sandbox; launch_type=warm: from a backend's warm pool, cold: made then.",
            ["backend", "launch_type"],
            buckets=SECONDS,
            registry=r,
        )
        self.creation_s = Histogram(
            "sandgym_sandbox_creation_seconds",
            "Seconds to create one sandbox until its agent answered (warm-pool refills and cold claims).",
            ["backend"],
            buckets=SECONDS,
            registry=r,
        )
        self.warm_events = Counter(
            "sandgym_warm_pool_events",
            "Warm-pool events of a backend: started, start_failed, discarded.",
            ["backend", "event"],
            registry=r,
        )
        self.registry.register(_PoolCollector())
        self.registry.register(_WarmPoolCollector())
        self._lock = threading.Lock()
        pool_module.add_listener(self._pool_event)
        stock_module.add_observer(self._stock_event)

    # -- episodes -------------------------------------------------------------------

    def episode_started(self, family: str, queue_s: float | None = None) -> None:
        self.in_progress.labels(family).inc()

    def episode_ended(self, family: str, in_progress: bool = True) -> None:
        if in_progress:
            self.in_progress.labels(family).dec()

    def observe_record(self, rec: Any, family: str) -> None:
        """Count one episode record (sandgym.records.EpisodeRecord)."""
        from .cost import episode_sandbox_s

        self.episodes.labels(family, rec.outcome).inc()
        if rec.outcome == Outcome.PASSED.value:
            self.verified.labels(family).inc()
        if rec.reward is not None:
            self.scored.labels(family).inc()
        if rec.outcome == Outcome.ENV_ERROR.value:
            self.env_errors.labels(family).inc()
        if rec.outcome == Outcome.NOT_EXECUTED.value:
            self.not_executed.labels(family).inc()
        if rec.retries:
            self.retries.labels(family).inc(len(rec.retries))
        t = rec.timings
        for phase in PHASES:
            self.phase.labels(family, phase).observe(max(0.0, float(getattr(t, f"{phase}_s"))))
        self.sandbox_s.labels(family).inc(episode_sandbox_s(rec))
        for a in rec.attempts:
            outcome = str(a.get("outcome", "?"))
            self.attempts.labels(family, outcome).inc()
            self.attempt_s.labels(family, outcome).observe(float(a.get("duration_s") or 0.0))

    def observe_episode(self, family: str, outcome: str, reward: float | None, timings: dict[str, float]) -> None:
        """Count an episode played through the server (no record: the env's verdict and timings)."""
        self.episodes.labels(family, outcome).inc()
        if outcome == Outcome.PASSED.value:
            self.verified.labels(family).inc()
        if reward is not None:
            self.scored.labels(family).inc()
        if outcome == Outcome.ENV_ERROR.value:
            self.env_errors.labels(family).inc()
        if outcome == Outcome.NOT_EXECUTED.value:
            self.not_executed.labels(family).inc()
        for phase in ("create", "exec", "verify"):
            if f"{phase}_s" in timings:
                self.phase.labels(family, phase).observe(max(0.0, float(timings[f"{phase}_s"])))

    # -- sandboxes ----------------------------------------------------------------------

    def sandbox_created(self, backend: str, isolation: str, create_s: float, spec: SandboxSpec) -> None:
        self.created.labels(backend, isolation).inc()
        self.live.labels(backend, isolation).inc()
        # A warm pool's replenishing threads (runtimes/pool.py) create ahead of need.
        warm = threading.current_thread().name == "sandgym-pool"
        self.create_s.labels(backend, "warm" if warm else "cold").observe(create_s)
        self.memory_limit.labels(backend).inc(spec.memory_mb * 1024 * 1024)
        self.cpu_limit.labels(backend).inc(spec.cpus)

    def sandbox_closed(self, backend: str, isolation: str, lifetime_s: float, spec: SandboxSpec) -> None:
        self.closed.labels(backend, isolation).inc()
        self.live.labels(backend, isolation).dec()
        self.lifetime_s.labels(backend).observe(lifetime_s)
        self.memory_limit.labels(backend).dec(spec.memory_mb * 1024 * 1024)
        self.cpu_limit.labels(backend).dec(spec.cpus)

    def _stock_event(self, backend: str, event: str, value: float) -> None:
        if event in ("claim_warm", "claim_cold"):
            self.claim_s.labels(backend, event.removeprefix("claim_")).observe(value)
        elif event in ("started", "created"):
            self.creation_s.labels(backend).observe(value)
        if event in ("started", "start_failed", "discarded"):
            self.warm_events.labels(backend, event).inc()

    def _pool_event(self, event: str, value: float) -> None:
        name = {"destroyed": "reaped"}.get(event, event)
        self.pool_events.labels(name).inc(value if event == "leaked" else 1)

    # -- exposition ----------------------------------------------------------------------

    def exposition(self) -> tuple[bytes, str]:
        """The text format, without the `_created` series prometheus_client
        adds to every counter and histogram (a timestamp per label set that
        doubles the series and that scrapers do not need). Dropped here, per
        registry, not with prometheus_client's process-wide switch, which would
        change the metrics of a program that embeds sandgym."""
        return generate_latest(_NoCreated(self.registry)), CONTENT_TYPE_LATEST

    def close(self) -> None:
        pool_module.remove_listener(self._pool_event)
        stock_module.remove_observer(self._stock_event)


class _PoolCollector(Collector):
    """Gauges of the warm pools alive in this process, read at scrape time."""

    def collect(self) -> Iterator[Any]:
        pools = pool_module.live_pools()
        stats = [p.metrics() for p in pools]
        hits = sum(s["hits"] for s in stats)
        total = hits + sum(s["misses"] for s in stats)
        yield GaugeMetricFamily("sandgym_pools", "Warm pools open.", value=len(stats))
        for key, help_ in (
            ("idle", "Idle sandboxes in warm pools."),
            ("in_use", "Pool sandboxes handed out."),
            ("creating", "Pool sandboxes being created (replenishment)."),
        ):
            yield GaugeMetricFamily(f"sandgym_pool_{key}_sandboxes", help_, value=sum(s[key] for s in stats))
        yield GaugeMetricFamily(
            "sandgym_pool_hit_ratio",
            "Acquires served from the open pools' idle sandboxes.",
            value=hits / total if total else 0.0,
        )


class _WarmPoolCollector(Collector):
    """Gauges of the backends' warm pools (runtimes/stock.py) alive in this process, read at scrape time."""

    def collect(self) -> Iterator[Any]:
        stats = [s.metrics() for s in stock_module.live_stocks()]
        by_backend: dict[str, dict[str, float]] = {}
        for st in stats:
            acc = by_backend.setdefault(st["name"], {})
            for key in ("ready", "starting", "in_use", "target", "hits", "misses"):
                acc[key] = acc.get(key, 0) + st[key]
        for key, help_ in (
            ("ready", "Sandboxes waiting in a backend's warm pool."),
            ("starting", "Warm-pool sandboxes being created."),
            ("in_use", "Warm-pool sandboxes handed out and not closed."),
            ("target", "Sandboxes the warm pool wants waiting or being made (config and observed demand)."),
        ):
            g = GaugeMetricFamily(f"sandgym_warm_pool_{key}_sandboxes", help_, labels=["backend"])
            for backend, acc in sorted(by_backend.items()):
                g.add_metric([backend], acc[key])
            yield g
        g = GaugeMetricFamily("sandgym_warm_pool_hit_ratio", "Claims served from the warm pool.", labels=["backend"])
        for backend, acc in sorted(by_backend.items()):
            taken = acc["hits"] + acc["misses"]
            g.add_metric([backend], acc["hits"] / taken if taken else 0.0)
        yield g


class MetricsObserver(RunObserver):
    """Feeds a run's metrics from the harness's observer calls."""

    def __init__(self, metrics: SandgymMetrics, env_id: str):
        self.metrics = metrics
        self.family = family_of(env_id)
        self._started: set[tuple[str, int]] = set()
        self._lock = threading.Lock()

    def started(self, key: tuple[str, int], queued: float, started: float) -> None:
        with self._lock:
            self._started.add(key)
        self.metrics.episode_started(self.family)

    def recorded(self, record: Any) -> None:
        key = (record.task_id, record.epoch)
        with self._lock:
            was = key in self._started
            self._started.discard(key)
        self.metrics.episode_ended(self.family, in_progress=was)
        self.metrics.observe_record(record, self.family)


class MeteredSandbox(Sandbox):
    """A sandbox that reports its creation and closing; everything else is the backend's."""

    def __init__(self, inner: Sandbox, runtime: MeteredRuntime, spec: SandboxSpec, backend: str, isolation: str):
        self._inner = inner
        self._runtime = runtime
        self._spec = spec
        self._labels = (backend, isolation)
        self._born = time.monotonic()
        self._closed = False
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def exec(self, cmd: Sequence[str] | str, *args: Any, **kwargs: Any) -> Any:
        return self._inner.exec(cmd, *args, **kwargs)

    # Every method of the contract goes to the backend's own (a backend may
    # do better than the base class: the local one forks run_python from a zygote).
    def run_python(self, script: str, *args: Any, **kwargs: Any) -> Any:
        return self._inner.run_python(script, *args, **kwargs)

    def put_files(self, files: Any, *args: Any, **kwargs: Any) -> None:
        self._inner.put_files(files, *args, **kwargs)

    def get_files(self, paths: Sequence[str]) -> dict[str, bytes]:
        return self._inner.get_files(paths)

    def put_archive(self, tar_bytes: bytes, *args: Any, **kwargs: Any) -> None:
        self._inner.put_archive(tar_bytes, *args, **kwargs)

    def get_archive(self, paths: Sequence[str]) -> bytes:
        return self._inner.get_archive(paths)

    def abort(self) -> None:
        self._inner.abort()

    @property
    def alive(self) -> bool:
        return self._inner.alive

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            with self._lock:
                first, self._closed = not self._closed, True
            if first:
                self._runtime._closed(self)

    def __enter__(self) -> MeteredSandbox:
        return self


class MeteredRuntime(Runtime):
    """A runtime whose sandboxes are counted by backend (created, live,
    closed, create and lifetime seconds, limits). Everything else is the
    wrapped runtime's (attributes are looked up on it)."""

    def __init__(self, inner: Runtime, metrics: SandgymMetrics):
        self._inner = inner
        self._metrics = metrics
        self._open: set[MeteredSandbox] = set()
        self._lock = threading.Lock()
        self.name = inner.name
        self.isolation = inner.isolation

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def create(self, spec: SandboxSpec | None = None) -> Sandbox:
        spec = spec or SandboxSpec()
        t0 = time.perf_counter()
        sb = self._inner.create(spec)
        create_s = time.perf_counter() - t0
        isolation = str(spec.isolation or self._inner.isolation)
        metered = MeteredSandbox(sb, self, spec, self._inner.name, isolation)
        with self._lock:
            self._open.add(metered)
        self._metrics.sandbox_created(self._inner.name, isolation, create_s, spec)
        return metered

    def _closed(self, sb: MeteredSandbox) -> None:
        with self._lock:
            self._open.discard(sb)
        self._metrics.sandbox_closed(*sb._labels, time.monotonic() - sb._born, sb._spec)

    def leaked(self) -> int:
        """Count the sandboxes still open as leaked (at the end of a run)."""
        with self._lock:
            open_ = list(self._open)
        for sb in open_:
            self._metrics.leaked.labels(sb._labels[0]).inc()
        return len(open_)

    def warm_up(self) -> None:
        self._inner.warm_up()

    def close(self) -> None:
        self._inner.close()


class MetricsServer:
    """/metrics over HTTP on a loopback port, on a thread of its own; counts its scrapes."""

    def __init__(self, metrics: SandgymMetrics, port: int, host: str = "127.0.0.1"):
        from wsgiref.simple_server import WSGIRequestHandler, make_server

        from prometheus_client import make_wsgi_app
        from prometheus_client.exposition import ThreadingWSGIServer

        inner = make_wsgi_app(metrics.registry)
        self.begun = 0  # scrapes started
        self.newest_done = -1  # the latest start index among the scrapes answered
        self._scraped = threading.Condition()

        def app(environ: dict[str, Any], start_response: Any) -> Any:
            with self._scraped:
                n = self.begun
                self.begun += 1
            body = inner(environ, start_response)
            with self._scraped:
                self.newest_done = max(self.newest_done, n)
                self._scraped.notify_all()
            return body

        class Quiet(WSGIRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = make_server(host, port, app, ThreadingWSGIServer, handler_class=Quiet)
        self.port = int(self.httpd.server_address[1])
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="sandgym-metrics", daemon=True)
        self.thread.start()

    def wait_for_scrape(self, timeout_s: float) -> bool:
        """Wait (up to `timeout_s`) for a scrape begun after this call: the final counts are taken."""
        with self._scraped:
            first = self.begun  # a scrape begun from now on reads the final counts
            return self._scraped.wait_for(lambda: self.newest_done >= first, timeout=timeout_s)

    def shutdown(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def serve_metrics(metrics: SandgymMetrics, port: int, host: str = "127.0.0.1") -> MetricsServer:
    """A loopback HTTP server for /metrics while a run lasts (`.shutdown()` stops it)."""
    return MetricsServer(metrics, port, host)


def mount_metrics(app: Any, env_id: str) -> SandgymMetrics:
    """A /metrics route on a FastAPI app (`sandgym serve`), with its own registry."""
    from starlette.requests import Request
    from starlette.responses import Response

    metrics = SandgymMetrics()

    async def route(request: Request) -> Response:
        body, kind = metrics.exposition()
        return Response(body, media_type=kind)

    app.add_route("/metrics", route, methods=["GET"], include_in_schema=False)
    return metrics


class ServeObserver:
    """What a server's sessions call when an episode ends."""

    def __init__(self, metrics: SandgymMetrics, env_id: str):
        self.metrics = metrics
        self.family = family_of(env_id)

    def episode_done(self, inner: Any) -> None:
        verdict = getattr(inner, "last_verdict", None)
        timings = dict(getattr(inner, "timings", {}) or {})
        if verdict is None:
            self.metrics.observe_episode(self.family, Outcome.NOT_EXECUTED.value, None, timings)
            return
        scheme = "pass_rate" if getattr(inner, "reward_scheme", "binary") == "pass_rate" else "binary"
        try:
            reward: float | None = verdict.reward(scheme)
        except Exception:  # the count matters more than the reward
            reward = None
        self.metrics.observe_episode(self.family, verdict.outcome.value, reward, timings)
