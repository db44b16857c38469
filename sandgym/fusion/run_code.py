"""Run one program, SandboxFusion's way: compile it (if its language is
compiled) and run it in ONE sandbox of the `polyglot` image, on any
runtime, with no network.

The request and response carry the field names and statuses of
SandboxFusion's `/run_code` as its client package (sandbox-fusion 0.3.7)
reads them:

- `status`: Success (every command exited 0 in time), Failed (one did not:
  a compile error, a non-zero exit, a time limit), SandboxError (the
  sandbox itself failed; the client raises on it);
- `compile_result` (compiled languages only) and `run_result` (absent
  when compilation failed), each with `status` Finished (the process
  exited, whatever its code), TimeLimitExceeded or Error (it could not be
  run), `execution_time`, `return_code`, `stdout`, `stderr`;
- `files`: the `fetch_files` the program left, base64.

Everything the request names is data: the code and `files` are written
into the sandbox's working folder (relative paths only), commands are the
language table's argument lists, and nothing the program writes leaves
the sandbox except the fetched files, bounded.
"""

from __future__ import annotations

import base64
import binascii
import math
import posixpath
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field

from sandgym.runtimes.base import WORKDIR, ExecResult, Runtime, SandboxError, SandboxSpec, read_tar
from sandgym.runtimes.images import image_for

from .compile_cache import CompileCache, CompiledEntry, cache_key, produced_files
from .languages import BASE_ENV, IMAGE, Language, language

MAX_TIMEOUT_S = 300.0
MAX_OUTPUT = 1 << 20  # bytes of stdout + stderr kept per command
MAX_FETCHED = 32 << 20  # bytes of fetched files per response
MAX_FILES = 256
DEFAULT_MEMORY_MB = 2048
MAX_MEMORY_MB = 8192


class CommandRunResult(BaseModel):
    status: str  # Finished | Error | TimeLimitExceeded
    execution_time: float | None = None
    return_code: int | None = None
    stdout: str | None = None
    stderr: str | None = None


class RunCodeRequest(BaseModel):
    # The client sends every field of its own model; fields sandgym has no
    # use for are ignored rather than refused.
    model_config = ConfigDict(extra="ignore")

    code: str
    language: str
    compile_timeout: float = Field(10, gt=0, le=MAX_TIMEOUT_S)
    run_timeout: float = Field(10, gt=0, le=MAX_TIMEOUT_S)
    stdin: str | None = None
    files: dict[str, str | None] = Field(default_factory=dict, max_length=MAX_FILES)
    fetch_files: list[str] = Field(default_factory=list, max_length=MAX_FILES)
    # verl's SandboxFusion reward sends it (the name is the wire's): the
    # sandbox's memory, in MB.
    memory_limit_MB: int | None = Field(None, ge=64, le=MAX_MEMORY_MB)


class RunCodeResponse(BaseModel):
    status: str  # Success | Failed | SandboxError
    message: str = ""
    compile_result: CommandRunResult | None = None
    run_result: CommandRunResult | None = None
    executor_pod_name: str | None = None
    files: dict[str, str] = Field(default_factory=dict)


class RunCodeError(ValueError):
    """The request is malformed (an HTTP 4xx); the message names the field."""


def workspace_path(field: str, path: str) -> str:
    """`path` as a relative path inside the working folder, or RunCodeError."""
    norm = posixpath.normpath(path) if path else ""
    if not path or path.startswith("/") or norm == "." or norm.split("/")[0] == ".." or "\0" in path:
        raise RunCodeError(
            f"{field}: {path!r} is not a relative path inside the working folder; "
            "name files as 'data.txt' or 'dir/data.txt'"
        )
    return norm


def request_files(req: RunCodeRequest, lang: Language) -> dict[str, bytes]:
    """The files the sandbox starts with: the request's `files`, then the
    language's own and the source (which win over a same-named file)."""
    out: dict[str, bytes] = {}
    for name, data in req.files.items():
        path = workspace_path("files", name)
        if data is None:
            continue
        try:
            out[path] = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise RunCodeError(f"files[{name!r}]: not base64; send the file's bytes base64-encoded") from None
    for name, text in lang.extra_files.items():
        out[name] = text.encode()
    out[lang.source_for(req.code)] = req.code.encode()
    return out


def sandbox_spec(req: RunCodeRequest) -> SandboxSpec:
    longest = max(req.compile_timeout, req.run_timeout)
    return SandboxSpec(
        image=IMAGE,
        network="none",
        cpu_seconds=math.ceil(longest) + 1,
        memory_mb=req.memory_limit_MB or DEFAULT_MEMORY_MB,
        # Per-process limits stay on: the local runtime's sandboxes have no
        # cgroup, so its address-space and process bounds are the only ones.
        process_limits=True,
        pids=64,
        disk_mb=512,
        exec_workspace=True,  # compiled programs run from the workspace
        wall_timeout_s=req.compile_timeout + req.run_timeout + 60,
    )


def command_result(r: ExecResult) -> CommandRunResult:
    return CommandRunResult(
        status="TimeLimitExceeded" if r.timed_out else "Finished",
        execution_time=round(r.duration_s, 6),
        return_code=r.exit_code,
        stdout=r.stdout.decode("utf-8", "replace"),
        stderr=r.stderr.decode("utf-8", "replace"),
    )


def _passed(r: CommandRunResult) -> bool:
    return r.status == "Finished" and r.return_code == 0


def image_tag() -> str:
    """The tag of the image IMAGE names (it names the toolchains)."""
    return image_for(IMAGE, IMAGE)


def run_code(runtime: Runtime, req: RunCodeRequest, cache: CompileCache | None = None) -> RunCodeResponse:
    """Compile and run `req` in one sandbox of `runtime`. Raises
    RunCodeError for a malformed request; a failure of the sandbox itself
    is a SandboxError response. With `cache`, a request with no `files`
    reuses an earlier compile of the same source (compile_cache.py)."""
    lang = language(req.language)  # ValueError names the supported ones
    files = request_files(req, lang)
    source = lang.source_for(req.code)
    fetch = [workspace_path("fetch_files", p) for p in req.fetch_files]
    env: Mapping[str, str] = {**BASE_ENV, **lang.env}
    key = cache_key(lang, req.code, image_tag()) if cache is not None and lang.compile and not req.files else None
    try:
        with runtime.create(sandbox_spec(req)) as box:
            box.put_files(files)
            compiled = None
            hit = cache.get(key) if cache is not None and key else None
            if hit is not None:
                box.put_archive(hit.archive)
                compiled = CommandRunResult(
                    status="Finished",
                    execution_time=hit.execution_time,
                    return_code=0,
                    stdout=hit.stdout,
                    stderr=hit.stderr,
                )
            elif lang.compile is not None:
                compiled = command_result(
                    box.exec(
                        lang.argv(lang.compile, source), timeout=req.compile_timeout, env=env, max_output=MAX_OUTPUT
                    )
                )
                if cache is not None and key and _passed(compiled):
                    # Taken now: nothing of the request has run yet, only the compiler.
                    archive = produced_files(box.get_archive([WORKDIR]), set(files))
                    if archive is not None:
                        cache.put(
                            key,
                            CompiledEntry(
                                archive, compiled.stdout or "", compiled.stderr or "", compiled.execution_time or 0.0
                            ),
                        )
                if not _passed(compiled):
                    fetched, note = _fetched(box, fetch)
                    return RunCodeResponse(status="Failed", message=note, compile_result=compiled, files=fetched)
            stdin = req.stdin.encode() if req.stdin is not None else None
            ran = command_result(
                box.exec(
                    lang.argv(lang.run, source), timeout=req.run_timeout, stdin=stdin, env=env, max_output=MAX_OUTPUT
                )
            )
            fetched, note = _fetched(box, fetch)
            return RunCodeResponse(
                status="Success" if _passed(ran) else "Failed",
                message=note,
                compile_result=compiled,
                run_result=ran,
                files=fetched,
            )
    except SandboxError as e:
        return RunCodeResponse(status="SandboxError", message=str(e))


def _fetched(box, paths: list[str]) -> tuple[dict[str, str], str]:
    """The regular files among `paths`, base64 (missing ones are left
    out), at most MAX_FETCHED bytes in all; and a note of what was left
    out for size."""
    out: dict[str, str] = {}
    total = 0
    dropped = []
    for path in paths:
        try:
            got = read_tar(box.get_archive([f"{WORKDIR}/{path}"]))
        except SandboxError:
            continue  # absent, or not readable
        for data in got.values():
            if total + len(data) > MAX_FETCHED:
                dropped.append(path)
            else:
                total += len(data)
                out[path] = base64.b64encode(data).decode()
            break
    note = f"fetch_files: left out {', '.join(dropped)}: over {MAX_FETCHED >> 20} MiB in all" if dropped else ""
    return out, note
