"""`sandgym serve`: an env served to OpenEnv clients over WebSocket."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from .shared import env_options, err_console, fail


def serve_cmd(
    env: str = typer.Option(..., "--env", help="Registered env id to serve."),
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
    """Serve an env to OpenEnv clients (WebSocket /ws; /health, /schema, /metadata)."""
    from sandgym.families import check_env_id

    from ..runtimes import RuntimeUnavailable, get_runtime

    try:
        check_env_id(env)
        env_kwargs = env_options(env_option, mode=mode, max_turns=max_turns, reward=reward)
        rt = get_runtime(runtime)
    except (ValueError, RuntimeUnavailable) as e:
        fail(str(e))
    # openenv imports its Gradio web UI eagerly (seconds, ~80 MB) even though
    # build_app never mounts it; this process does without it.
    if "gradio" not in sys.modules:
        sys.modules["gradio"] = None  # type: ignore[assignment]
    try:
        import uvicorn

        from ..server import build_app
    except ImportError as e:
        rt.close()
        fail(f"sandgym serve needs OpenEnv ({e}): pip install 'sandgym[serve]'")

    env_kwargs["runtime"] = rt
    if tasks is not None:
        env_kwargs["tasks"] = tasks
    try:
        api = build_app(
            env, env_kwargs, max_sessions=max_sessions, session_timeout=session_timeout or None, close_runtime=True
        )
    except (ValueError, TypeError, RuntimeUnavailable) as e:  # TaskSpecError is a ValueError
        rt.close()
        fail(str(e))
    err_console().print(
        f"serving {env} on http://{host}:{port} (WebSocket /ws) · max {max_sessions} sessions · "
        f"session timeout {session_timeout or 'none'} s · runtime {runtime}",
        highlight=False,
    )
    try:
        uvicorn.run(api, host=host, port=port, log_level=log_level)
    finally:
        rt.close()  # normally closed already at app shutdown; closing twice is harmless
