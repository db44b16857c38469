"""A warm runner's own listener (`wire.py`): the eval that finds it there
claims it and plays episodes on its seats without Ray in between.

One connection is one claim: the claim holds while the connection is
open and lapses when it closes (the eval ended, or was killed; keepalive
tells a vanished machine), so no lease by time is needed. Episodes are
streamed: the eval sends each `play` as a seat takes it, and each record
goes back as soon as it is made, in whatever order they finish.

Messages (eval -> runner): ("hello", rid), ("claim", rid, claim_id,
plan, seats), ("play", rid, seat, job), ("abort", key, why), ("release",
rid). Replies, each naming its request: ("hello", rid, info), ("claimed",
rid, info | None), ("record", rid, record), ("failed", rid, error),
("released", rid, None).
"""

from __future__ import annotations

import pickle
import socket
import threading
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from .wire import Channel, WireError, cluster_token, keepalive, server_handshake

if TYPE_CHECKING:
    from .runner import NodeRunner


def serve(runner: NodeRunner, host: str) -> str:
    """Listen on `host` for evals (a thread); HOST:PORT, or "" when the cluster has no token."""
    token = cluster_token()
    if token is None:
        return ""
    sock = socket.create_server((host, 0))
    threading.Thread(target=_accept, args=(runner, sock, token), name="sandgym-runner-rpc", daemon=True).start()
    return f"{host}:{sock.getsockname()[1]}"


def _accept(runner: NodeRunner, sock: socket.socket, token: bytes) -> None:
    while True:
        conn, _ = sock.accept()
        threading.Thread(target=_session, args=(runner, conn, token), name="sandgym-runner-conn", daemon=True).start()


def live_nodes() -> dict[str, float]:
    """The cluster's live nodes with CPUs (the eval checks its runners cover them all)."""
    import ray

    return {
        n["NodeID"]: float(n["Resources"].get("CPU", 0.0))
        for n in ray.nodes()
        if n.get("Alive") and n.get("Resources", {}).get("CPU", 0.0) > 0
    }


def _session(runner: NodeRunner, conn: socket.socket, token: bytes) -> None:
    try:
        keepalive(conn)
        server_handshake(conn, token)
    except OSError:  # WireError included: a stranger, or a client gone before proving itself
        conn.close()
        return
    ch = Channel(conn)
    claim = ""
    try:
        while True:
            kind, *args = ch.recv()
            if kind == "hello":
                from sandgym import __version__

                ch.send("hello", args[0], {"node": runner.node_id, "version": __version__, "nodes": live_nodes()})
            elif kind == "claim":
                rid, claim_id, plan, seats = args
                info = runner.take_claim(claim_id, plan, seats, held=True)
                claim = claim_id if info is not None else claim
                ch.send("claimed", rid, info)
            elif kind == "play":
                rid, seat, job = args
                _play(runner, ch, claim, rid, seat, job)
            elif kind == "abort":
                runner.abort_now(*args)
            elif kind == "release":
                runner.release_now(claim)
                claim = ""
                ch.send("released", args[0], None)
    except (WireError, ValueError, TypeError):  # gone, or a message of another shape
        pass
    finally:
        runner.release_now(claim)  # a killed eval's claim ends with its connection
        ch.close()


def _play(runner: NodeRunner, ch: Channel, claim: str, rid: int, seat: int, job: dict[str, Any]) -> None:
    try:
        fut = runner.start_play(claim, seat, job)
    except Exception as e:  # StaleClaim, a seat it does not have
        _send_quietly(ch, "failed", rid, _portable(e))
        return

    def reply(f: Future[Any]) -> None:
        err = f.exception()
        if err is None:
            _send_quietly(ch, "record", rid, f.result())
        else:
            _send_quietly(ch, "failed", rid, _portable(err))

    fut.add_done_callback(reply)


def _send_quietly(ch: Channel, *msg: Any) -> None:
    try:
        ch.send(*msg)
    except WireError:  # the eval is gone: its claim ends with the connection
        pass


def _portable(e: BaseException) -> BaseException:
    """`e` if it pickles, else a RuntimeError that says what it was."""
    try:
        pickle.dumps(e)
        return e
    except Exception:
        return RuntimeError(f"{type(e).__name__}: {e}")
