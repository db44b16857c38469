"""Host side of the in-sandbox agent's framed protocol."""

from __future__ import annotations

import json
import os
import select
import socket
import threading
import time
from typing import Mapping, Sequence

from .agent.agent import FRAME, MAX_HEADER, encode_frame
from .base import ExecResult, SandboxError

# Extra time the host grants the agent beyond a command's own timeout
# before it declares the sandbox broken.
REPLY_GRACE_S = 15.0


class AgentChannel:
    """One request, one reply over a pair of file descriptors."""

    def __init__(self, write_fd: int, read_fd: int, describe: str, sock: socket.socket | None = None):
        self._w = write_fd
        self._r = read_fd
        self._describe = describe
        # A socket channel can carry file descriptors (the zygote hands
        # over new sandboxes' channels that way).
        self._sock = sock
        self._lock = threading.Lock()
        self.broken: str | None = None
        self.received_fd: int | None = None

    def _read_exact(self, n: int, deadline: float) -> bytes:
        chunks = []
        while n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise SandboxError(f"{self._describe}: no reply from the in-sandbox agent in time")
            ready, _, _ = select.select([self._r], [], [], left)
            if not ready:
                continue
            chunk = os.read(self._r, min(n, 1 << 20))
            if not chunk:
                raise SandboxError(f"{self._describe}: the in-sandbox agent exited")
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

    def request(self, header: dict, body: bytes = b"", timeout: float = 60.0) -> tuple[dict, bytes]:
        with self._lock:
            if self.broken:
                raise SandboxError(self.broken)
            try:
                data = encode_frame(header, body)
                view = memoryview(data)
                while view:
                    view = view[os.write(self._w, view):]
                reply, payload = self.read_reply(timeout)
                if reply.get("fd_follows") and self._sock is not None:
                    _, fds, _, _ = socket.recv_fds(self._sock, 1, 1)
                    if not fds:
                        raise SandboxError(f"{self._describe}: no descriptor came with the reply")
                    self.received_fd = fds[0]
            except (OSError, SandboxError, ValueError) as e:
                self.broken = e.args[0] if isinstance(e, SandboxError) else f"{self._describe}: {e}"
                raise SandboxError(self.broken) from e
            if not reply.get("ok"):
                raise SandboxError(f"{self._describe}: {reply.get('error', 'agent error')}")
            return reply, payload


def exec_request(
    channel: AgentChannel,
    cmd: Sequence[str] | str,
    timeout: float | None,
    stdin: bytes | None,
    env: Mapping[str, str] | None,
    cwd: str | None,
    max_output: int,
    python_fork: bool = False,
) -> ExecResult:
    argv = ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
    if not argv:
        raise ValueError("cmd is empty: pass a program and its arguments, or a shell string")
    header = {"op": "exec", "argv": argv, "timeout": timeout, "env": dict(env or {}),
              "cwd": cwd, "max_output": max_output, "stdin_len": len(stdin or b""),
              "python_fork": python_fork}
    wait = (timeout if timeout is not None else 24 * 3600) + REPLY_GRACE_S
    reply, body = channel.request(header, stdin or b"", timeout=wait)
    n_out = reply["stdout_len"]
    return ExecResult(
        exit_code=reply["exit_code"],
        stdout=body[:n_out],
        stderr=body[n_out:],
        duration_s=reply["duration_s"],
        timed_out=reply["timed_out"],
        truncated=reply["truncated"],
    )

