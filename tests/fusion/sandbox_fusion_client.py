"""SandboxFusion's own client (sandbox-fusion 0.3.7 from PyPI) in a venv of
its own, driving a `/run_code` server that sandgym serves on loopback.

The client is never imported here: a script runs in its venv, sends the
requests through `sandbox_fusion.run_code` and prints, per request, the
parsed response and the client's own summary of it
(`summary_run_code_result`), or the exception the client raised."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

VERSION = "0.3.7"
VENV = Path(os.environ.get("SANDGYM_SANDBOX_FUSION_VENV", f"/var/cache/sandgym/sandbox-fusion-{VERSION}"))

CLIENT_SCRIPT = """
import json, sys
from sandbox_fusion import RunCodeRequest, SummaryMapping, run_code, summary_run_code_result

mapping = SummaryMapping(
    CompileFailed="CompileFailed", CompileTimeout="CompileTimeout", RunFailed="RunFailed", RunTimeout="RunTimeout"
)
out = []
for r in json.load(sys.stdin):
    try:
        resp = run_code(RunCodeRequest(**r), endpoint=sys.argv[1], max_attempts=1)
        out.append({"response": json.loads(resp.json()), "summary": summary_run_code_result(resp, mapping)})
    except Exception as e:
        out.append({"error": f"{type(e).__name__}: {e}"})
print(json.dumps(out))
"""


SUBMIT_SCRIPT = """
import json, sys
from sandbox_fusion import SubmitRequest, submit

out = []
for r in json.load(sys.stdin):
    try:
        out.append({"result": json.loads(submit(SubmitRequest(**r), endpoint=sys.argv[1], max_attempts=1).json())})
    except Exception as e:
        out.append({"error": f"{type(e).__name__}: {e}"})
print(json.dumps(out))
"""


def client_python() -> Path:
    """The client venv's interpreter; the venv is made (once, under a lock)
    when absent. scripts/setup.sh makes it too."""
    py = VENV / "bin" / "python"
    VENV.parent.mkdir(parents=True, exist_ok=True)
    with open(VENV.parent / f".sandbox-fusion-{VERSION}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        ok = py.exists() and subprocess.run([py, "-c", "import sandbox_fusion"], capture_output=True).returncode == 0
        if not ok:
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True)
            subprocess.run(
                [py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", f"sandbox-fusion=={VERSION}"],
                check=True,
            )
    return py


def run_client(endpoint: str, requests: list[dict[str, Any]], script: str = CLIENT_SCRIPT) -> list[dict[str, Any]]:
    """Each request sent by the real client (`run_code`, or `submit` with
    SUBMIT_SCRIPT); its results, in order."""
    done = subprocess.run(
        [client_python(), "-c", script, endpoint],
        input=json.dumps(requests),
        capture_output=True,
        text=True,
        timeout=900,
        check=True,
    )
    return json.loads(done.stdout)


@contextlib.contextmanager
def serving(app: Any) -> Iterator[str]:
    """`app` served by uvicorn on a free loopback port, in a thread; yields
    its base URL."""
    import uvicorn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the /run_code server did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)
