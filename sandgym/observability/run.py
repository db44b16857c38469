"""Observing one `sandgym eval` run: metrics on a loopback port, traces over OTLP.

Both are off by default. Metrics (`metrics_port`) wrap the runtime so its
sandboxes are counted and serve /metrics on 127.0.0.1 while the run lasts;
traces (`otlp_endpoint`, or the standard OTEL_EXPORTER_OTLP_* variables)
import the OpenTelemetry SDK only when on.
"""

from __future__ import annotations

from typing import Any

from . import Observers, RunObserver


class Observing:
    """What a run is observed with; `close()` flushes traces and stops the metrics server."""

    def __init__(
        self,
        env_id: str,
        runtime: Any,
        metrics_port: int | None = None,
        otlp_endpoint: str | None = None,
        use_env: bool = True,
        span_exporter: Any = None,
        metrics_host: str = "127.0.0.1",
    ):
        self.runtime = runtime
        self.metrics: Any = None
        self.server: Any = None
        observers: list[RunObserver] = []
        if metrics_port is not None:
            from .metrics import MeteredRuntime, MetricsObserver, SandgymMetrics, serve_metrics

            self.metrics = SandgymMetrics()
            self.runtime = MeteredRuntime(runtime, self.metrics)
            observers.append(MetricsObserver(self.metrics, env_id))
            self.server = serve_metrics(self.metrics, metrics_port, metrics_host)
        endpoint = otlp_endpoint
        if endpoint is None and use_env and span_exporter is None:
            from os import environ

            if any(
                environ.get(v, "").strip()
                for v in ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
            ):
                from .tracing import endpoint_from_env

                endpoint = endpoint_from_env()
        self.tracer: Any = None
        if endpoint is not None or span_exporter is not None:
            from .tracing import EpisodeTracer

            self.tracer = EpisodeTracer(env_id, getattr(runtime, "name", "?"), endpoint, span_exporter)
            observers.append(self.tracer)
        self.observer: RunObserver | None = Observers(*observers) if observers else None

    @property
    def port(self) -> int | None:
        return None if self.server is None else self.server.port

    def finish(self, hold_s: float = 0.0) -> None:
        """The run ended: count the sandboxes still open as leaked, flush
        traces, and (`hold_s`) wait up to that long for a scraper to take the
        final counts."""
        if self.metrics is not None and hasattr(self.runtime, "leaked"):
            self.runtime.leaked()
        if self.observer is not None:
            self.observer.close()
        if self.server is not None and hold_s > 0:
            self.server.wait_for_scrape(hold_s)

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server = None
        if self.metrics is not None:
            self.metrics.close()
