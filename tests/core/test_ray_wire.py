"""The warm runners' own RPC (`sandgym.cluster.wire`): the handshake both
ends must pass before anything is unpickled, and the frames after it.
Real sockets, no Ray (test_ray.py plays it on a real cluster)."""

from __future__ import annotations

import json
import pickle
import socket
import threading
from pathlib import Path

import pytest

from sandgym.cluster.direct import recall
from sandgym.cluster.wire import HEADER, MAX_FRAME, Channel, WireError, client_handshake, server_handshake

TOKEN = b"a" * 64


def handshake(server_token: bytes, client_token: bytes) -> tuple[BaseException | None, BaseException | None]:
    """Both ends of a real socket pair; what each raised (None: it passed)."""
    a, b = socket.socketpair()
    raised: dict[str, BaseException | None] = {"server": None}

    def serve() -> None:
        try:
            server_handshake(a, server_token)
        except OSError as e:
            raised["server"] = e
            a.close()  # as the runner hangs up on a stranger

    t = threading.Thread(target=serve)
    t.start()
    try:
        client_handshake(b, client_token)
        client = None
    except OSError as e:
        client = e
    t.join()
    a.close()
    b.close()
    return raised["server"], client


def test_both_ends_holding_the_token_pass() -> None:
    assert handshake(TOKEN, TOKEN) == (None, None)


def test_a_client_without_the_token_is_refused_and_learns_nothing() -> None:
    server, client = handshake(TOKEN, b"b" * 64)
    assert isinstance(server, WireError) and "without the cluster's token" in str(server)
    assert isinstance(client, WireError)


def test_a_frame_is_unpickled_only_after_the_handshake_and_within_its_size(tmp_path: Path) -> None:
    a, b = socket.socketpair()
    marker = tmp_path / "unpickled"

    class Bomb:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (marker.write_text, ("x",))

    # Sent in place of the handshake's answer: read as 64 bytes of a wrong answer, never unpickled.
    payload = pickle.dumps(("hello", 0, Bomb()))
    b.sendall(HEADER.pack(len(payload)) + payload)
    with pytest.raises(WireError):
        server_handshake(a, TOKEN)
    assert not marker.exists()
    a.close()
    b.close()
    a, b = socket.socketpair()
    b.sendall(HEADER.pack(MAX_FRAME + 1))
    with pytest.raises(WireError, match="a frame of"):
        Channel(a).recv()
    Channel(b).send("record", 3, {"reward": 1.0})
    assert Channel(a).recv() == ("record", 3, {"reward": 1.0})
    a.close()
    b.close()


def test_a_broken_list_of_runners_is_no_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDGYM_RAY_RUNNERS", str(tmp_path))
    assert recall("h:1") == []
    (tmp_path / "h_1.json").write_text("{not json")
    assert recall("h:1") == []
    (tmp_path / "h_1.json").write_text(json.dumps([{"node": "n"}]))
    assert recall("h:1") == []
    (tmp_path / "h_1.json").write_text(json.dumps([{"node": "n", "rpc": "h:2"}]))
    assert recall("h:1") == [{"node": "n", "rpc": "h:2"}]
