"""SandboxFusion's HTTP API over sandgym's runtimes: `POST /run_code`.

`mount_run_code(app, runtime)` adds the routes to any FastAPI app (beside
OpenEnv's, in `sandgym serve --api openenv --api sandbox-fusion`);
`build_run_code_app(runtime)` is an app with them alone.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse

from sandgym.runtimes import Runtime
from sandgym.specs import TaskSet

from .compile_cache import CompileCache
from .languages import RUNNABLE
from .run_code import RunCodeRequest, RunCodeResponse, run_code
from .submit import EvalResult, SubmitRequest, submit

# Requests run at once; more wait their turn (each holds a sandbox and,
# while compiling, a compiler's memory).
DEFAULT_CONCURRENCY = 4
# The stdio task sets `POST /submit` serves by name.
DEFAULT_DATASETS = ("code_function/stdio-v1",)


def mount_run_code(
    app: FastAPI,
    runtime: Runtime,
    concurrency: int = DEFAULT_CONCURRENCY,
    compile_cache: bool = True,
    datasets: tuple[str, ...] = DEFAULT_DATASETS,
) -> None:
    """Add `POST /run_code`, `POST /submit`, `GET /v1/ping` and `GET
    /languages` to `app`; each program runs in a sandbox of `runtime`.
    `compile_cache`: compiles of the same source are reused
    (compile_cache.py), held in this app's memory. `datasets`: the stdio
    task sets `/submit` judges by name (submit.py), loaded when first asked."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    cache = CompileCache() if compile_cache else None
    app.state.compile_cache = cache
    # A thread semaphore, not an asyncio one: the app may serve from any
    # event loop (uvicorn's, a test client's).
    slots = threading.BoundedSemaphore(concurrency)

    def run_bounded(req: RunCodeRequest) -> RunCodeResponse:
        with slots:
            return run_code(runtime, req, cache)

    @app.post("/run_code", response_model=RunCodeResponse, response_model_exclude_none=False)
    async def run_code_route(req: RunCodeRequest) -> Any:
        if req.language not in RUNNABLE:
            return JSONResponse(
                status_code=400,
                content={"detail": f"language {req.language!r} is not supported; supported: {', '.join(RUNNABLE)}"},
            )
        try:
            return await asyncio.to_thread(run_bounded, req)
        except ValueError as e:  # RunCodeError: a malformed field, named in the message
            return JSONResponse(status_code=400, content={"detail": str(e)})

    loaded: dict[str, TaskSet] = {}
    load_lock = threading.Lock()

    def served_sets() -> dict[str, TaskSet]:
        with load_lock:
            for name in datasets:
                if name not in loaded:
                    loaded[name] = TaskSet.load(name)
            return loaded

    def submit_bounded(req: SubmitRequest) -> EvalResult:
        with slots:
            return submit(runtime, req, served_sets(), cache)

    @app.post("/submit", response_model=EvalResult)
    async def submit_route(req: SubmitRequest) -> Any:
        try:
            return await asyncio.to_thread(submit_bounded, req)
        except ValueError as e:  # SubmitError, RunCodeError: the message names the field
            return JSONResponse(status_code=400, content={"detail": str(e)})

    @app.get("/v1/ping")
    async def ping() -> str:
        return "pong"

    @app.get("/languages")
    async def languages() -> list[str]:
        return list(RUNNABLE)


def build_run_code_app(
    runtime: Runtime,
    concurrency: int = DEFAULT_CONCURRENCY,
    close_runtime: bool = True,
    max_body_bytes: int = 16 << 20,
    compile_cache: bool = True,
) -> FastAPI:
    """An app serving SandboxFusion's `/run_code` alone. The runtime is
    closed at shutdown when `close_runtime`."""
    from sandgym.server import BodyLimit

    app = FastAPI(title="sandgym: SandboxFusion /run_code")
    mount_run_code(app, runtime, concurrency, compile_cache)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "healthy"}

    if close_runtime:

        async def close() -> None:
            await asyncio.to_thread(runtime.close)

        app.router.on_shutdown.append(close)
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    return app
