"""Metrics, traces, cost and capacity planning, with real components.

A real Prometheus (Debian's `prometheus`, started here on loopback with its
data in tmp_path) scrapes a running `sandgym serve` and a running
`sandgym eval --metrics-port`; its HTTP API must give the counts the
records (or the client) saw. Traces are checked with the SDK's
InMemorySpanExporter, and once over OTLP/HTTP to a receiver started here (a
loopback HTTP server decoding the protobuf requests with opentelemetry-proto).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from sandgym.capacity import erlang_c, littles_law, simulate_queue
from sandgym.runs import load_run
from sandgym.specs import TaskSet, bundled_task_set
from sandgym.specs.code_function import CodeTaskPair
from tests.core.test_server import Server, fence, free_port

PROMETHEUS = shutil.which("prometheus")
needs_prometheus = pytest.mark.skipif(PROMETHEUS is None, reason="prometheus not installed (scripts/setup.sh)")
VENV_BIN = Path(sys.executable).parent
ENV = "sandgym/CodeFunction-v0"


class Prometheus:
    """Prometheus on 127.0.0.1, scraping `targets` every second."""

    def __init__(self, tmp: Path, targets: list[str]):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = tmp / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
            "scrape_configs:\n  - job_name: sandgym\n    static_configs:\n"
            f"      - targets: {json.dumps(targets)}\n"
        )
        self.log = open(tmp / "prometheus.log", "wb")
        self.proc = subprocess.Popen(
            [
                str(PROMETHEUS),
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--web.console.templates=/etc/prometheus/consoles",
                "--web.console.libraries=/etc/prometheus/console_libraries",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self.wait(lambda: httpx.get(f"{self.url}/-/ready", timeout=2).status_code == 200, "prometheus ready")

    def wait(self, check, what: str, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if check():
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise AssertionError(f"timed out waiting for {what}")

    def query(self, expr: str) -> dict[str, float]:
        """An instant query; {label values joined by ',': value}."""
        r = httpx.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=10).json()
        assert r["status"] == "success", r
        out = {}
        for item in r["data"]["result"]:
            labels = {k: v for k, v in item["metric"].items() if k not in ("__name__", "instance", "job")}
            out[",".join(f"{k}={v}" for k, v in sorted(labels.items()))] = float(item["value"][1])
        return out

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.log.close()


@needs_prometheus
def test_prometheus_scrapes_eval_and_counts_match_records(tmp_path):
    port = free_port()
    prom = Prometheus(tmp_path, [f"127.0.0.1:{port}"])
    out = tmp_path / "run"
    try:
        eval_ = subprocess.run(
            [
                str(VENV_BIN / "sandgym"),
                "eval",
                "--env",
                ENV,
                "--policy",
                "oracle",
                "-j",
                "2",
                "--limit",
                "12",
                "--out",
                str(out),
                "--metrics-port",
                str(port),
                "--metrics-hold",
                "120",  # the run waits for Prometheus to take the final counts
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert eval_.returncode == 0, eval_.stderr
        records = load_run(out).records
        # The target is gone now: its series are stale, the range keeps their last samples.
        episodes = prom.query("last_over_time(sandgym_episodes_total[10m])")
        want: dict[str, float] = {}
        for r in records:
            key = f"family=code_function,outcome={r.outcome}"
            want[key] = want.get(key, 0) + 1
        assert {k: v for k, v in episodes.items() if v} == want
        verified = prom.query("last_over_time(sandgym_verified_successes_total[10m])")
        assert verified == {"family=code_function": sum(r.outcome == "passed" for r in records)}
        scored = prom.query("last_over_time(sandgym_scored_episodes_total[10m])")
        assert scored == {"family=code_function": sum(r.reward is not None for r in records)}
        phases = prom.query("last_over_time(sandgym_episode_phase_seconds_count[10m])")
        for phase in ("queue", "create", "exec", "verify"):
            assert phases[f"family=code_function,phase={phase}"] == len(records)
        created = prom.query("last_over_time(sandgym_sandboxes_created_total[10m])")
        closed = prom.query("last_over_time(sandgym_sandboxes_closed_total[10m])")
        assert created["backend=local,isolation=namespaces"] >= len(records)
        assert closed == created  # every sandbox closed by the end of the run
        leaked = prom.query("last_over_time(sandgym_sandboxes_leaked_total[10m])")
        assert sum(leaked.values()) == 0
    finally:
        prom.stop()


@needs_prometheus
def test_prometheus_scrapes_serve(tmp_path):
    task = CodeTaskPair.of(TaskSet.load(bundled_task_set("code_function")).get("basic/second-largest"))
    server = Server(tmp_path / "serve.log", "--session-timeout", "60")
    prom = None
    try:
        server.wait_healthy(time.monotonic() + 120)
        prom = Prometheus(tmp_path, [f"127.0.0.1:{server.port}"])
        rewards = []
        with server.client() as env:
            for code in (task.hidden.reference_solution, "def second_largest(nums):\n    return max(nums)\n") * 2:
                env.reset(task_id=task.id)
                rewards.append(env.step({"text": fence(code)}).reward)
        assert rewards == [1.0, 0.0, 1.0, 0.0]

        def counted() -> bool:
            got = prom.query("sandgym_episodes_total")
            return got.get("family=code_function,outcome=passed") == 2 and sum(got.values()) == 4

        prom.wait(counted, "Prometheus to scrape the served episodes")
        assert prom.query("sandgym_verified_successes_total") == {"family=code_function": 2}
        assert prom.query("sandgym_scored_episodes_total") == {"family=code_function": 4}
        assert prom.query("sandgym_episodes_total")["family=code_function,outcome=failed"] == 2
        text = httpx.get(f"{server.url}/metrics", timeout=10).text
        assert "sandgym_episode_phase_seconds_bucket" in text and "sandgym_pool_hit_ratio" in text
    finally:
        if prom is not None:
            prom.stop()
        server.stop()


def _traced_run(tmp_path, exporter, n=4, concurrency=1):
    from sandgym.harness import EvalRun
    from sandgym.observability.run import Observing
    from sandgym.policies import make_policy
    from sandgym.runtimes import get_runtime

    rt = get_runtime("local")
    observing = Observing(ENV, rt, span_exporter=exporter, use_env=False)
    try:
        run = EvalRun(ENV, None, make_policy("oracle"), observing.runtime, "local", tmp_path / "run", concurrency)
        run.observer = observing.observer
        ids = run.task_set.ids[:n]
        t0 = time.perf_counter()
        run.run(ids)
        wall = time.perf_counter() - t0
        observing.finish()
    finally:
        rt.close()
        observing.close()
    return run.records, wall


def test_one_trace_per_episode_in_memory(tmp_path):
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    records, wall = _traced_run(tmp_path, exporter)
    spans = exporter.get_finished_spans()
    traces: dict[int, list] = {}
    for s in spans:
        traces.setdefault(s.context.trace_id, []).append(s)
    assert len(traces) == len(records) == 4
    by_task = {}
    for trace in traces.values():
        names = {s.name for s in trace}
        assert {"episode", "queue", "create", "step 0", "verify", "verify attempt 0"} <= names, names
        root = next(s for s in trace if s.name == "episode")
        assert all(s.parent is None for s in trace if s.name == "episode")
        for s in trace:
            assert s.attributes["sandgym.family"] == "code_function"
            assert s.attributes["sandgym.backend"] == "local"
            assert s.attributes["sandgym.outcome"] == "passed"
            assert s.attributes["sandgym.task_id"] == root.attributes["sandgym.task_id"]
        attempt = next(s for s in trace if s.name == "verify attempt 0")
        verify = next(s for s in trace if s.name == "verify")
        assert attempt.parent.span_id == verify.context.span_id
        by_task[root.attributes["sandgym.task_id"]] = trace
    for r in records:
        queue = next(s for s in by_task[r.task_id] if s.name == "queue")
        assert abs((queue.end_time - queue.start_time) / 1e9 - r.timings.queue_s) < 1e-3
    # queue_s is each episode's own wait: with one worker the waits are
    # disjoint stretches of the run (not the time since it began).
    assert sum(r.timings.queue_s for r in records) <= wall


class _OTLPReceiver:
    """An OTLP/HTTP traces endpoint on loopback that decodes what it gets."""

    def __init__(self):
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
            ExportTraceServiceResponse,
        )

        self.spans: list = []
        received = self.spans
        lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # http.server's method name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                assert self.path == "/v1/traces" and self.headers["Content-Type"] == "application/x-protobuf"
                req = ExportTraceServiceRequest()
                req.ParseFromString(body)
                with lock:
                    for rs in req.resource_spans:
                        for ss in rs.scope_spans:
                            received.extend(ss.spans)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_traces_exported_over_otlp_http(tmp_path):
    receiver = _OTLPReceiver()
    try:
        out = tmp_path / "run"
        r = subprocess.run(
            [str(VENV_BIN / "sandgym"), "eval", "--env", ENV, "--limit", "3", "--out", str(out)],
            capture_output=True,
            text=True,
            timeout=600,
            env={**__import__("os").environ, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url},
        )
        assert r.returncode == 0, r.stderr
    finally:
        receiver.close()
    records = load_run(out).records
    roots = [s for s in receiver.spans if s.name == "episode"]
    assert len(roots) == len(records) == 3
    assert len({s.trace_id for s in receiver.spans}) == 3

    def attrs(span):
        return {a.key: a.value.string_value or a.value.int_value for a in span.attributes}

    assert sorted(attrs(s)["sandgym.task_id"] for s in roots) == sorted(r.task_id for r in records)
    names = {s.name for s in receiver.spans}
    assert {"queue", "create", "step 0", "verify", "verify attempt 0"} <= names


def test_capacity_textbook_case(tmp_path):
    assert littles_law(120, 30) == 60
    r = subprocess.run(
        [str(VENV_BIN / "sandgym"), "capacity", "--rate", "120", "--occupancy-s", "30", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    plan = json.loads((tmp_path / "capacity.json").read_text())
    assert plan["littles_law"] == 60
    assert "60.0" in r.stdout
    # Poisson arrivals and no queue: the simulated mean is Little's law's, the tail above it.
    assert abs(plan["sim_mean"] - 60) < 3
    assert plan["sim_p95"] > plan["sim_mean"] and plan["sim_p99"] >= plan["sim_p95"]
    assert (tmp_path / "capacity.svg").read_text().startswith("<svg")


def test_capacity_simulation_matches_erlang_c():
    """M/M/5 at offered load 4: Erlang C gives the waiting probability, and L_q = C x a / (c - a)."""
    c, rate_per_min, mean_s = 5, 240.0, 1.0
    a = rate_per_min / 60 * mean_s
    want = erlang_c(c, a)
    got = simulate_queue(rate_per_min, mean_s, c, n_arrivals=200000, seed=1)
    assert abs(got["p_wait"] - want) < 0.02, (got, want)
    lq = want * a / (c - a)
    assert abs(got["lq"] - lq) / lq < 0.1, (got, lq)


def test_capacity_from_a_real_run(tmp_path):
    out = tmp_path / "run"
    r = subprocess.run(
        [str(VENV_BIN / "sandgym"), "eval", "--env", ENV, "--limit", "10", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    summary = json.loads((out / "summary.json").read_text())
    cost = summary["cost"]
    assert cost["n_verified_successes"] == summary["outcomes"]["passed"] == 10
    assert cost["sandbox_s_per_verified_success"] == pytest.approx(cost["sandbox_s"] / 10)
    assert cost["cpu_s"] is None  # no backend reports CPU time yet
    r = subprocess.run(
        [str(VENV_BIN / "sandgym"), "capacity", str(out), "--rate", "600"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    plan = json.loads((out / "capacity.json").read_text())
    assert plan["source"] == "records" and plan["rate_per_min"] == 600
    assert plan["littles_law"] == pytest.approx(600 / 60 * plan["occupancy_s"])
    assert plan["sim_p95"] >= plan["sim_p50"]
    assert "simulated P95" in r.stdout and "Little's law" in r.stdout
    assert (out / "capacity.svg").exists()
    report = subprocess.run([str(VENV_BIN / "sandgym"), "report", str(out)], capture_output=True, text=True)
    assert report.returncode == 0, report.stderr
    assert 'id="cost"' in (out / "report.html").read_text()
