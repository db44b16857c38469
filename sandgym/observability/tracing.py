"""One OpenTelemetry trace per episode.

Off unless asked for: `sandgym eval --otlp-endpoint URL`, or the standard
`OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`
variables. When off, the CLI never imports this module, so the SDK is not
loaded and the run pays nothing.

A trace's root span `episode` (from when the episode was queued to when it
ended) holds `queue` (waiting for a worker), `create` (the sandbox, at
reset), one `step N` span per action (its exec), and `verify` with one
`verify attempt N` span per verifier attempt. Every span carries
`sandgym.task_id`, `sandgym.family`, `sandgym.backend` and
`sandgym.outcome` (plus the epoch and episode id on the root). The step
spans are timed as they happen; the others are placed from the record's
timings: `create` at the start of the episode, `verify` at the end of the
last step (the submission), its attempts one after another inside it.
The spans go through the SDK's own `TracerProvider` (not the global one),
exported over OTLP/HTTP (protobuf) in batches, or to any exporter given.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter
from opentelemetry.trace import Status, StatusCode, set_span_in_context

from sandgym.outcomes import Outcome

from . import RunObserver, family_of

ENV_VARS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


def endpoint_from_env() -> str | None:
    """The OTLP endpoint the standard variables name (None: tracing off)."""
    for name in ENV_VARS:
        value = os.environ.get(name, "").strip()
        if value:
            return value if name == ENV_VARS[0] else traces_url(value)
    return None


def traces_url(endpoint: str) -> str:
    """OTLP/HTTP's traces path on a collector's base URL (kept when already given)."""
    endpoint = endpoint.rstrip("/")
    return endpoint if endpoint.endswith("/v1/traces") else endpoint + "/v1/traces"


class EpisodeTracer(RunObserver):
    """Turns a run's episodes into traces. `exporter` (e.g. the SDK's
    InMemorySpanExporter) is used as it is, span by span; otherwise spans
    are batched to the OTLP/HTTP `endpoint`."""

    def __init__(self, env_id: str, backend: str, endpoint: str | None = None, exporter: SpanExporter | None = None):
        self.family = family_of(env_id)
        self.backend = backend
        self.env_id = env_id
        if exporter is None:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            if endpoint is None:
                raise ValueError("tracing needs an OTLP endpoint or an exporter")
            exporter = OTLPSpanExporter(endpoint=traces_url(endpoint))
            processor: Any = BatchSpanProcessor(exporter)
        else:
            processor = SimpleSpanProcessor(exporter)
        self.provider = TracerProvider(resource=Resource.create({"service.name": "sandgym", "sandgym.env": env_id}))
        self.provider.add_span_processor(processor)
        self.tracer = self.provider.get_tracer("sandgym")
        self._wall0 = time.time_ns()
        self._perf0 = time.perf_counter()
        self._lock = threading.Lock()
        self._episodes: dict[tuple[str, int], dict[str, Any]] = {}

    def _ns(self, perf: float) -> int:
        return self._wall0 + int((perf - self._perf0) * 1e9)

    def started(self, key: tuple[str, int], queued: float, started: float) -> None:
        with self._lock:
            self._episodes[key] = {"started": started, "steps": []}

    def step(self, key: tuple[str, int], step: Any, start: float) -> None:
        with self._lock:
            ep = self._episodes.get(key)
            if ep is not None:
                ep["steps"].append((step.index, start, start + step.duration_s, step.tool))

    def recorded(self, record: Any) -> None:
        key = (record.task_id, record.epoch)
        with self._lock:
            ep = self._episodes.pop(key, None)
        t = record.timings
        now = time.perf_counter()
        if ep is None:  # recorded without a start seen (abandoned before it began)
            started = now - t.total_s
            ep = {"started": started, "steps": []}
        # The queue span is the record's own queue_s, before the start seen
        # here: the trace and the record then tell one figure, not two clocks.
        started = ep["started"]
        queued = started - t.queue_s
        end = max(started + t.total_s, max((s[2] for s in ep["steps"]), default=started))
        attrs = {
            "sandgym.task_id": record.task_id,
            "sandgym.family": self.family,
            "sandgym.backend": self.backend,
            "sandgym.outcome": record.outcome,
        }
        root = self.tracer.start_span(
            "episode",
            start_time=self._ns(queued),
            attributes={
                **attrs,
                "sandgym.env_id": self.env_id,
                "sandgym.epoch": record.epoch,
                "sandgym.episode_id": record.episode_id,
                "sandgym.retries": len(record.retries),
                **({"sandgym.reward": float(record.reward)} if record.reward is not None else {}),
            },
        )
        ctx = set_span_in_context(root)

        def child(name: str, a: float, b: float, parent: Any = ctx, **more: Any) -> Any:
            span = self.tracer.start_span(name, context=parent, start_time=self._ns(a), attributes={**attrs, **more})
            span.end(end_time=self._ns(max(a, b)))
            return span

        child("queue", queued, started)
        # 0 s: the env kept its sandbox from the episode before (nothing created)
        child("create", started, started + t.create_s, **{"sandgym.created": bool(t.create_s)})
        for index, a, b, tool in ep["steps"]:
            child(f"step {index}", a, b, **{"sandgym.step": index, "sandgym.tool": tool})
        if t.verify_s or record.attempts:
            v_end = ep["steps"][-1][2] if ep["steps"] else end
            v_start = max(started, v_end - t.verify_s)
            verify = self.tracer.start_span(
                "verify",
                context=ctx,
                start_time=self._ns(v_start),
                attributes={**attrs, "sandgym.attempts": len(record.attempts)},
            )
            vctx = set_span_in_context(verify)
            a = v_start
            for n, attempt in enumerate(record.attempts):
                d = float(attempt.get("duration_s") or 0.0)
                child(
                    f"verify attempt {n}",
                    a,
                    a + d,
                    vctx,
                    **{"sandgym.attempt": n, "sandgym.attempt_outcome": str(attempt.get("outcome", "?"))},
                )
                a += d
            verify.end(end_time=self._ns(max(v_end, a)))
        if record.outcome == Outcome.ENV_ERROR.value:
            root.set_status(Status(StatusCode.ERROR, (record.error or "env_error")[:200]))
        root.end(end_time=self._ns(end))

    def close(self) -> None:
        self.provider.shutdown()  # flushes what is batched
