"""The runners' own small RPC: how an eval reaches warm runners without
importing Ray (about 2 s of a short eval's start).

A warm runner listens on its node's address (`runner_rpc.py`); the eval
connects (`direct.py`). Both prove they hold the cluster's token before
anything else crosses: a mutual HMAC challenge on fixed-size messages, so
nothing is unpickled from a peer that has not proved it. The token is
Ray's own (token authentication, `RAY_AUTH_MODE=token`): whoever may join
the cluster may talk to its runners, and nobody else. A cluster without
token authentication gets no listener (the eval goes through Ray).

After the handshake, each message is a pickled tuple in a frame: 8 bytes
of length, then the bytes. TCP keepalive on both ends notices a peer whose
machine went away without closing its socket.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import pickle
import secrets
import socket
import struct
import threading
from pathlib import Path
from typing import Any

MAGIC = b"SGRUN1"
NONCE = 32
MAX_FRAME = 256 * 1024 * 1024  # a record with its steps is well under this
HANDSHAKE_S = 5.0
HEADER = struct.Struct("!Q")


class WireError(ConnectionError):
    """The peer is gone, or it failed the handshake."""


def cluster_token() -> bytes | None:
    """The Ray cluster's token, where Ray's own clients look for it; None
    when the cluster takes no token (no listener then: it would be open)."""
    if os.environ.get("RAY_AUTH_MODE", "").lower() != "token":
        return None
    if tok := os.environ.get("RAY_AUTH_TOKEN", "").strip():
        return tok.encode()
    path = Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token")
    try:
        tok = path.read_text().strip()
    except OSError:
        return None
    return tok.encode() or None


def _mac(token: bytes, role: bytes, nonce: bytes) -> bytes:
    return hmac.new(token, role + nonce, hashlib.sha256).digest()


def keepalive(sock: socket.socket) -> None:
    """Notice a peer whose machine is gone in about 10 s (no FIN ever comes from it)."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for opt, value in (("TCP_KEEPIDLE", 5), ("TCP_KEEPINTVL", 2), ("TCP_KEEPCNT", 3)):
        if hasattr(socket, opt):
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, opt), value)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise WireError("the peer closed the connection")
        buf += chunk
    return bytes(buf)


def server_handshake(sock: socket.socket, token: bytes) -> None:
    """Raise WireError unless the client proves the token (then prove it back)."""
    sock.settimeout(HANDSHAKE_S)
    mine = secrets.token_bytes(NONCE)
    sock.sendall(MAGIC + mine)
    answer = recv_exact(sock, 32 + NONCE)
    if not hmac.compare_digest(answer[:32], _mac(token, b"client", mine)):
        raise WireError("a client without the cluster's token")
    sock.sendall(_mac(token, b"runner", answer[32:]))
    sock.settimeout(None)


def client_handshake(sock: socket.socket, token: bytes) -> None:
    sock.settimeout(HANDSHAKE_S)
    head = recv_exact(sock, len(MAGIC) + NONCE)
    if head[: len(MAGIC)] != MAGIC:
        raise WireError("not a sandgym runner")
    mine = secrets.token_bytes(NONCE)
    sock.sendall(_mac(token, b"client", head[len(MAGIC) :]) + mine)
    if not hmac.compare_digest(recv_exact(sock, 32), _mac(token, b"runner", mine)):
        raise WireError("the runner does not hold the cluster's token")
    sock.settimeout(None)


class Channel:
    """Framed messages over an authenticated socket; `send` from any thread."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.send_lock = threading.Lock()

    def send(self, *msg: Any) -> None:
        data = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
        with self.send_lock:
            try:
                self.sock.sendall(HEADER.pack(len(data)) + data)
            except OSError as e:
                raise WireError(f"the peer is gone ({e})") from None

    def recv(self) -> tuple[Any, ...]:
        try:
            (n,) = HEADER.unpack(recv_exact(self.sock, HEADER.size))
            if n > MAX_FRAME:
                raise WireError(f"a frame of {n} bytes (at most {MAX_FRAME})")
            msg = pickle.loads(recv_exact(self.sock, n))
        except OSError as e:
            raise WireError(f"the peer is gone ({e})") from None
        if not isinstance(msg, tuple) or not msg:
            raise WireError("a malformed message")
        return msg

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def connect(address: str, token: bytes, timeout: float = 3.0) -> Channel:
    """An authenticated channel to the runner at HOST:PORT (WireError if it cannot be had)."""
    host, _, port = address.rpartition(":")
    try:
        sock = socket.create_connection((host, int(port)), timeout=timeout)
    except (OSError, ValueError) as e:
        raise WireError(f"{address}: {e}") from None
    try:
        keepalive(sock)
        client_handshake(sock, token)
    except OSError as e:
        sock.close()
        raise WireError(f"{address}: {e}") from None
    return Channel(sock)
