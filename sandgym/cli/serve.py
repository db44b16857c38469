"""`sandgym serve`: an env served to OpenEnv clients over WebSocket, and/or
SandboxFusion's `/run_code` (sandgym/fusion/)."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from .shared import env_options, err_console, fail

APIS = ("openenv", "sandbox-fusion")


def serve_cmd(
    env: str | None = typer.Option(None, "--env", help="Registered env id to serve (the openenv API)."),
    api: list[str] | None = typer.Option(
        None,
        "--api",
        help="openenv (default) | sandbox-fusion (SandboxFusion's POST /run_code); repeat to serve both.",
    ),
    concurrency: int = typer.Option(
        4, "--run-code-concurrency", min=1, help="/run_code requests run at once (sandbox-fusion API)."
    ),
    compile_cache: bool = typer.Option(
        True, "--compile-cache/--no-compile-cache", help="/run_code reuses compiles of the same source (in memory)."
    ),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind (the default accepts local clients only)."),
    port: int = typer.Option(8000, "--port", min=0, max=65535, help="Port to bind."),
    max_sessions: int = typer.Option(
        8, "--max-sessions", "--max-concurrent-envs", min=1, help="Concurrent WebSocket sessions (one env each)."
    ),
    session_timeout: float = typer.Option(
        600.0,
        "--session-timeout",
        min=0.0,
        help="Seconds without a reset/step after which a session is closed (0: never). "
        "Keep it above the longest step plus the agent's thinking time.",
    ),
    tasks: Path | None = typer.Option(None, "--tasks", help="Task-set folder (default: the env's bundled set)."),
    mode: str | None = typer.Option(None, "--mode", help="single | multi (code-function family; default single)."),
    max_turns: int | None = typer.Option(
        None, "--max-turns", min=1, help="Turns per episode in multi mode (code-function family)."
    ),
    reward: str | None = typer.Option(None, "--reward", help="binary | pass_rate (code-function family)."),
    env_option: list[str] | None = typer.Option(
        None, "--env-option", "-o", help="KEY=VALUE passed to the env (repeatable; VALUE is read as YAML)."
    ),
    runtime: str = typer.Option(
        "local",
        "--runtime",
        help="Sandbox backend: local | docker | docker:runsc | docker:kata | k8s | k8s:gvisor | k8s:kata",
    ),
    log_level: str = typer.Option("info", "--log-level", help="uvicorn log level."),
):
    """Serve an env to OpenEnv clients (WebSocket /ws; /health, /schema, /metadata) and/or
    SandboxFusion's POST /run_code (--api sandbox-fusion)."""
    from sandgym.families import check_env_id

    from ..runtimes import RuntimeUnavailable, get_runtime

    apis = list(dict.fromkeys(api or ["openenv"]))
    for name in apis:
        if name not in APIS:
            fail(f"--api {name!r}: choose from {', '.join(APIS)}")
    if "openenv" in apis and env is None:
        fail("--env is required with --api openenv (serve --api sandbox-fusion alone needs no env)")
    try:
        if env is not None and "openenv" in apis:
            check_env_id(env)
        env_kwargs = env_options(env_option, mode=mode, max_turns=max_turns, reward=reward)
        rt = get_runtime(runtime)
    except (ValueError, RuntimeUnavailable) as e:
        fail(str(e))
    # openenv imports its Gradio web UI eagerly (seconds, ~80 MB) even though
    # build_app never mounts it; this process does without it.
    if "gradio" not in sys.modules:
        sys.modules["gradio"] = None  # type: ignore[assignment]
    if "openenv" not in apis:
        _serve_run_code(rt, host, port, concurrency, runtime, log_level, compile_cache)
        return
    try:
        import uvicorn

        from ..server import build_app
    except ImportError as e:
        rt.close()
        fail(f"sandgym serve needs OpenEnv ({e}): pip install 'sandgym[serve]'")

    assert env is not None  # (checked above: openenv needs --env)
    env_kwargs["runtime"] = rt
    if tasks is not None:
        env_kwargs["tasks"] = tasks
    try:
        app = build_app(
            env, env_kwargs, max_sessions=max_sessions, session_timeout=session_timeout or None, close_runtime=True
        )
    except (ValueError, TypeError, RuntimeUnavailable) as e:  # TaskSpecError is a ValueError
        rt.close()
        fail(str(e))
    also = ""
    if "sandbox-fusion" in apis:
        from ..fusion.api import mount_run_code

        mount_run_code(app, rt, concurrency, compile_cache)
        also = " + POST /run_code"
    err_console().print(
        f"serving {env} on http://{host}:{port} (WebSocket /ws{also}) · max {max_sessions} sessions · "
        f"session timeout {session_timeout or 'none'} s · runtime {runtime}",
        highlight=False,
    )
    try:
        uvicorn.run(app, host=host, port=port, log_level=log_level)
    finally:
        rt.close()  # normally closed already at app shutdown; closing twice is harmless


def _serve_run_code(
    rt, host: str, port: int, concurrency: int, runtime: str, log_level: str, compile_cache: bool
) -> None:
    """SandboxFusion's /run_code alone."""
    try:
        import uvicorn

        from ..fusion.api import build_run_code_app
    except ImportError as e:
        rt.close()
        fail(f"sandgym serve needs FastAPI and uvicorn ({e}): pip install 'sandgym[serve]'")
    from ..fusion.languages import LANGUAGES

    app = build_run_code_app(rt, concurrency=concurrency, compile_cache=compile_cache)
    err_console().print(
        f"serving SandboxFusion's POST /run_code on http://{host}:{port} · {len(LANGUAGES)} languages · "
        f"{concurrency} at once · runtime {runtime}",
        highlight=False,
    )
    try:
        uvicorn.run(app, host=host, port=port, log_level=log_level)
    finally:
        rt.close()
