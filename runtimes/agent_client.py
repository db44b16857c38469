"""Host side of the in-sandbox agent's framed protocol."""

from __future__ import annotations

import json
import os
import select
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from .base import ExecResult, Sandbox, SandboxError, SandboxInfo, SandboxSpec
from .boundary.agent import FRAME, MAX_HEADER, encode_frame

# Extra time the host grants the agent beyond a command's own timeout
# before it declares the sandbox broken.
REPLY_GRACE_S = 15.0
# The same for a job run in the agent's own process: the agent does nothing
# after it (no tree to kill), so only delivery delays count.
IN_PLACE_GRACE_S = 2.0


class ReplyTimeout(SandboxError):
    """The agent did not answer in time."""


# Where every backend mounts the agent, and the PATH its commands get.
AGENT_DIR = "/opt/sandgym/agent"
# The agent's files in runtimes/boundary/, which AGENT_DIR holds.
AGENT_FILES = ("agent.py", "nest.py")
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"


def agent_config(spec: SandboxSpec) -> dict:
    """The agent's start-up configuration for a sandbox of `spec` (any backend)."""
    mb = 1024 * 1024
    return {
        "role": "sandbox",
        "workdir": spec.workdir,
        "sockets": spec.network != "no-sockets",
        "lifetime_s": spec.wall_timeout_s,
        "env": {
            "PATH": SANDBOX_PATH,
            "HOME": spec.workdir,
            "LANG": "C.UTF-8",
            "TMPDIR": "/tmp",
            "USER": "sandbox",
            "PYTHONDONTWRITEBYTECODE": "1",
            **dict(spec.env),
        },
        "limits": {
            **(
                {
                    "memory_bytes": spec.memory_mb * mb,
                    "pids": spec.pids,
                    "file_size_bytes": spec.file_size_mb * mb,
                    "open_files": spec.open_files,
                }
                if spec.process_limits
                else {}
            ),
            "cpu_seconds": spec.cpu_seconds,
        },
    }


class AgentChannel:
    """One request, one reply over a stream socket to the agent.

    `demux`: the socket is a Docker attach stream, where the agent's stdout
    arrives in Docker's multiplexed frames (8-byte header: stream, size).
    """

    def __init__(self, sock: socket.socket, describe: str, demux: bool = False):
        self._sock = sock
        self._describe = describe
        self._demux = demux
        self._raw = bytearray()  # demux: bytes not yet split into frames
        self._out = bytearray()  # demux: the agent's stdout, in order
        self.stderr_tail = bytearray()  # demux: the agent's stderr, last 64 KiB
        self._lock = threading.Lock()
        self.broken: str | None = None
        self._ready_pending: tuple[str, float] | None = None

    def _recv_chunk(self, n: int, deadline: float) -> bytes:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ReplyTimeout(f"{self._describe}: no reply from the in-sandbox agent in time")
            ready, _, _ = select.select([self._sock], [], [], left)
            if not ready:
                continue
            chunk = self._sock.recv(n)
            if not chunk:
                raise SandboxError(f"{self._describe}: the in-sandbox agent exited")
            return chunk

    def _recv_some(self, n: int, deadline: float) -> bytes:
        if not self._demux:
            return self._recv_chunk(min(n, 1 << 20), deadline)
        while not self._out:
            self._raw += self._recv_chunk(1 << 20, deadline)
            while len(self._raw) >= 8:
                stream, size = self._raw[0], int.from_bytes(self._raw[4:8], "big")
                if len(self._raw) < 8 + size:
                    break
                payload = bytes(self._raw[8 : 8 + size])
                del self._raw[: 8 + size]
                if stream == 1:
                    self._out += payload
                else:
                    self.stderr_tail = (self.stderr_tail + payload)[-(64 << 10) :]
        chunk = bytes(self._out[:n])
        del self._out[:n]
        return chunk

    def _read_exact(self, n: int, deadline: float) -> bytes:
        chunks = []
        while n:
            chunk = self._recv_some(n, deadline)
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def read_reply(self, timeout: float) -> tuple[dict, bytes]:
        deadline = time.monotonic() + timeout
        hlen, blen = FRAME.unpack(self._read_exact(FRAME.size, deadline))
        if hlen > MAX_HEADER:
            raise SandboxError(f"{self._describe}: malformed reply from the in-sandbox agent")
        header = json.loads(self._read_exact(hlen, deadline))
        body = self._read_exact(blen, deadline) if blen else b""
        return header, body

    def expect_ready(self, failure: str, timeout: float) -> None:
        """The agent's `ready` has not been read yet: the first request goes
        out at once, while the agent may still be setting up, and its reply
        is read after `ready` (one round trip less). A start that fails
        reads as `failure`: what went wrong."""
        self._ready_pending = (failure, timeout)

    def _read_ready(self) -> None:
        if self._ready_pending is None:
            return
        (failure, timeout), self._ready_pending = self._ready_pending, None
        try:
            self.read_reply(timeout)
        except (SandboxError, OSError) as e:  # (a timeout too: no job of the request's ran)
            raise SandboxError(f"{failure}: {e.args[0] if isinstance(e, SandboxError) else e}") from e

    def abort(self) -> None:
        """From any thread, without the lock: mark the channel broken and shut
        the socket down, so a request blocked on it returns at once (the fd
        stays open until close, so it cannot be reused under the reader)."""
        if not self.broken:
            self.broken = f"{self._describe}: aborted (the episode's deadline passed, or the run was interrupted)"
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def notify(self, header: dict) -> bool:
        """Send a request whose answer nobody waits for; whether it went out."""
        with self._lock:
            if self.broken:
                return False
            try:
                self._sock.sendall(encode_frame(header))
                return True
            except OSError as e:
                self.broken = f"{self._describe}: {e}"
                return False

    def request(self, header: dict, body: bytes = b"", timeout: float = 60.0) -> tuple[dict, bytes]:
        reply, payload, fds = self.request_fds(header, body, timeout)
        for fd in fds:  # not asked for: do not leak them
            os.close(fd)
        return reply, payload

    def request_fds(self, header: dict, body: bytes = b"", timeout: float = 60.0) -> tuple[dict, bytes, list[int]]:
        """request(), plus the descriptors the agent passed with its reply
        (`fd_follows`: how many), taken under the channel's lock so that
        concurrent requests cannot swap descriptors."""
        fds: list[int] = []
        with self._lock:
            if self.broken:
                raise SandboxError(self.broken)
            try:
                try:
                    self._sock.sendall(encode_frame(header, body))
                    unsent = None
                except OSError as e:
                    if self._ready_pending is None:
                        raise
                    unsent = e  # an agent that failed to start may be gone: say so first
                self._read_ready()
                if unsent is not None:
                    raise unsent
                reply, payload = self.read_reply(timeout)
                want = int(reply.get("fd_follows") or 0)
                if want and self._sock is not None:
                    _, fds, _, _ = socket.recv_fds(self._sock, 1, want)
                    if len(fds) != want:
                        for fd in fds:
                            os.close(fd)
                        raise SandboxError(f"{self._describe}: {want} descriptors should have come with the reply")
            except (OSError, SandboxError, ValueError) as e:
                self.broken = e.args[0] if isinstance(e, SandboxError) else f"{self._describe}: {e}"
                raise (ReplyTimeout if isinstance(e, ReplyTimeout) else SandboxError)(self.broken) from e
            if not reply.get("ok"):
                for fd in fds:
                    os.close(fd)
                raise SandboxError(f"{self._describe}: {reply.get('error', 'agent error')}")
            return reply, payload, fds


def exec_request(
    channel: AgentChannel,
    cmd: Sequence[str] | str,
    timeout: float | None,
    stdin: bytes | None,
    env: Mapping[str, str] | None,
    cwd: str | None,
    max_output: int,
    python_fork: bool = False,
    in_place: bool = False,
    end: bool = False,
) -> ExecResult:
    """One command through the agent. `in_place`: a Python script run as the
    sandbox's last job in the agent's own process (op_exec_in_place); the
    agent cannot time that out, so the host does: no reply within `timeout`
    (and the grace) reads as a timed-out command, and the channel is left
    broken, so the sandbox takes nothing more. `end` (with `in_place`): the
    agent exits once the reply is out, which ends the sandbox while the
    host reads the reply."""
    argv = ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
    if not argv:
        raise ValueError("cmd is empty: pass a program and its arguments, or a shell string")
    header = {
        "op": "exec",
        "argv": argv,
        "timeout": timeout,
        "env": dict(env or {}),
        "cwd": cwd,
        "max_output": max_output,
        "stdin_len": len(stdin or b""),
        "python_fork": python_fork,
        "in_place": in_place,
        "end": in_place and end,
    }
    wait = (timeout if timeout is not None else 24 * 3600) + (IN_PLACE_GRACE_S if in_place else REPLY_GRACE_S)
    try:
        reply, body = channel.request(header, stdin or b"", timeout=wait)
    except ReplyTimeout:
        if not in_place:
            raise
        return ExecResult(exit_code=128 + 9, stdout=b"", stderr=b"", duration_s=wait, timed_out=True, truncated=False)
    n_out = reply["stdout_len"]
    return ExecResult(
        exit_code=reply["exit_code"],
        stdout=body[:n_out],
        stderr=body[n_out:],
        duration_s=reply["duration_s"],
        timed_out=reply["timed_out"],
        truncated=reply["truncated"],
    )


class AgentSandbox(Sandbox):
    """A sandbox reached through its in-sandbox agent: every backend's.

    `closer(clean)` ends whatever holds the sandbox (a bubblewrap process,
    a zygote child, a container); `clean` says the agent shut down when
    asked. `diagnose()` gives what the backend knows when the agent is gone.
    `wait_on_close=False`: close() asks the agent to shut down without
    waiting for its answer (for agents whose exit ends their sandbox at
    once, as PID 1 of it: the host moves on while the kernel tears it down).
    `end_with_last_job` (such agents too): the agent exits as soon as it has
    answered a last job (run_python(last=True)), so the sandbox's teardown
    runs while the caller reads the result; close() then asks nothing more.
    """

    def __init__(
        self,
        channel: AgentChannel,
        spec: SandboxSpec,
        info: SandboxInfo,
        closer: Callable[[bool], None],
        diagnose: Callable[[], str],
        wait_on_close: bool = True,
        end_with_last_job: bool = False,
    ):
        self._wait_on_close = wait_on_close
        self._end_with_last_job = end_with_last_job
        self._ended = False  # the agent answered its last job and exited
        self._channel = channel
        self._spec = spec
        self.info = info
        self._closer = closer
        self._diagnose = diagnose
        self._closed = False

    @property
    def alive(self) -> bool:
        return not self._closed and not self._channel.broken

    def _check(self) -> None:
        if self._closed:
            raise SandboxError(f"sandbox {self.info.id} is closed")
        if self._ended:
            raise SandboxError(f"sandbox {self.info.id} ran its last job in place: create a new one")

    def _exec(self, cmd, timeout, stdin, env, cwd, max_output, python_fork, in_place=False) -> ExecResult:
        self._check()
        end = in_place and self._end_with_last_job
        try:
            result = exec_request(self._channel, cmd, timeout, stdin, env, cwd, max_output, python_fork, in_place, end)
            if in_place and result.timed_out:
                self.close()  # the job still runs in the agent: only the sandbox's end stops it
            elif end:
                self._ended = True
            return result
        except SandboxError as e:
            if self._channel.broken:
                detail = self._diagnose()
                self.close()
                raise SandboxError(f"{e}{': ' + detail if detail else ''}") from e
            raise

    def exec(
        self,
        cmd: Sequence[str] | str,
        timeout: float | None = None,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        max_output: int = 1 << 20,
    ) -> ExecResult:
        return self._exec(cmd, timeout, stdin, env, cwd, max_output, False)

    def run_python(
        self, script, args=(), timeout=None, stdin=None, env=None, cwd=None, max_output=1 << 20, last=False
    ) -> ExecResult:
        return self._exec([script, *args], timeout, stdin, env, cwd, max_output, True, last)

    def put_archive(self, tar_bytes: bytes, dest: str | None = None) -> None:
        self._check()
        self._channel.request({"op": "put", "dest": dest or self._spec.workdir}, tar_bytes)

    def get_archive(self, paths: Sequence[str]) -> bytes:
        self._check()
        return self._channel.request({"op": "get", "paths": list(paths)})[1]

    def abort(self) -> None:
        self._channel.abort()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        clean = False
        if self._ended:
            clean = True  # the agent has exited already
        elif not self._wait_on_close:
            clean = self._channel.notify({"op": "shutdown"})
        elif not self._channel.broken:
            try:
                self._channel.request({"op": "shutdown"}, timeout=2.0)
                clean = True
            except SandboxError:
                pass
        self._closer(clean)
