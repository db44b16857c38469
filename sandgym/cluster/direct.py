"""An eval that reaches warm runners over their own RPC (`runner_rpc.py`),
with no `import ray` in its process.

The first eval on a cluster goes through Ray (`fleet.Fleet`): it starts or
claims the runners and writes down where each listens, per `--ray-address`
(`remember`; addresses only, no secret). A later eval with that address
connects to them (`DirectFleet.try_start`): each proves it holds the
cluster's token, names its node and the cluster's live nodes. The eval
takes this path only when it finds a runner on every live node with CPUs,
all of its sandgym version and all free; anything else (a runner gone
idle, a node added or lost, another run holding one) and it goes through
Ray as the first eval did, which writes the addresses anew.

Episodes are then streamed: each seat's `play` goes out as the seat takes
it (two per seat in flight, as on the Ray path), each record comes back
on the runner's connection when it is made. A connection that breaks
(the runner's node died, or its machine left: keepalive) fails every
episode in flight there with `NodeLost`, and `Fleet.play` plays them
again on other nodes, as it does for a Ray actor that died.
"""

from __future__ import annotations

import itertools
import json
import os
import pickle
import socket
import threading
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any

from sandgym.records import EpisodeRecord

from .fleet import Fleet, Job, NodeLost, Pending, Runner, Seat, split_seats
from .plan import RunPlan
from .wire import Channel, WireError, cluster_token, connect

HELLO_S = 10.0
CLAIM_S = 120.0  # a claim may close the seats' envs of another env first
RELEASE_S = 10.0


CACHE_ENV = "SANDGYM_RAY_RUNNERS"  # the folder of the addresses written down (tests give their own)


def cache_dir() -> Path:
    default = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sandgym" / "ray-runners"
    return Path(os.environ.get(CACHE_ENV) or default)


def cache_file(address: str) -> Path:
    return cache_dir() / ("".join(c if c.isalnum() or c in ".-" else "_" for c in address) + ".json")


def remember(address: str, runners: list[Runner]) -> None:
    """Where `runners` listen, for the next eval on `address` (nothing when one has no RPC)."""
    path = cache_file(address)
    entries = [{"node": r.node, "rpc": r.rpc, "cluster": address} for r in runners]  # cluster: for `sandgym gc`
    try:
        if not entries or not all(r.rpc for r in runners):
            path.unlink(missing_ok=True)
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(entries) + "\n")
        os.replace(tmp, path)
    except OSError:  # an unwritable cache only costs the next eval Ray's start
        pass


def recall(address: str) -> list[dict[str, str]]:
    return read_entries(cache_file(address))


def read_entries(path: Path) -> list[dict[str, str]]:
    """The runners written down in `path` ([] when it is missing or not of that shape)."""
    try:
        entries = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    ok = isinstance(entries, list) and all(isinstance(e, dict) and {"node", "rpc"} <= e.keys() for e in entries)
    return entries if ok else []


def listening(address: str, timeout: float = 0.5) -> bool:
    """Does something accept connections at HOST:PORT (no handshake: a first look)?"""
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except (OSError, ValueError):
        return False
    return True


class Link:
    """One runner's connection: requests out, replies matched to them by id on a reader thread."""

    def __init__(self, ch: Channel, address: str):
        self.ch = ch
        self.address = address
        self.ids = itertools.count()
        self.waiting: dict[int, Future[Any]] = {}
        self.lock = threading.Lock()
        self.broken = ""
        threading.Thread(target=self._read, name="sandgym-runner-link", daemon=True).start()

    def request(self, kind: str, *args: Any) -> Future[Any]:
        fut: Future[Any] = Future()
        with self.lock:
            if self.broken:
                fut.set_exception(NodeLost(self.broken))
                return fut
            rid = next(self.ids)
            self.waiting[rid] = fut
        try:
            self.ch.send(kind, rid, *args)
        except WireError as e:
            self._break(str(e))
        return fut

    def post(self, kind: str, *args: Any) -> None:
        try:
            self.ch.send(kind, *args)
        except WireError:  # its node is gone: the episode is lost with it
            pass

    def close(self) -> None:
        self._break("closed")
        self.ch.close()

    def _read(self) -> None:
        while True:
            try:
                kind, rid, payload = self.ch.recv()
            except (WireError, ValueError) as e:
                self._break(f"its connection broke ({e})")
                return
            with self.lock:
                fut = self.waiting.pop(rid, None)
            if fut is None:
                continue
            if kind == "failed":
                fut.set_exception(payload)
            else:
                fut.set_result(payload)

    def _break(self, why: str) -> None:
        with self.lock:
            if self.broken:
                return
            self.broken = why
            waiting, self.waiting = self.waiting, {}
        for fut in waiting.values():
            fut.set_exception(NodeLost(f"runner {self.address}: {why}"))


class DirectFleet(Fleet):
    """`Fleet` over the runners' own RPC: Ray is never imported here."""

    def try_start(self, plan: RunPlan, concurrency: int, in_flight: int) -> bool:
        """Claim the runners written down for this address; False (nothing held) when that cannot be done whole."""
        token = cluster_token()
        entries = recall(self.address or "")
        if token is None or not entries:
            return False
        links: list[Link] = []
        try:
            return self._claim_all(plan, concurrency, in_flight, token, entries, links)
        except Exception:  # unreachable, refused, a plan that does not pickle, a claim that failed there:
            return False  # the Ray path then, which says what is wrong if it is wrong there too
        finally:
            if not self.runners:
                for link in links:
                    link.close()

    def _claim_all(
        self,
        plan: RunPlan,
        concurrency: int,
        in_flight: int,
        token: bytes,
        entries: list[dict[str, str]],
        links: list[Link],
    ) -> bool:
        from sandgym import __version__

        for e in entries:
            links.append(Link(connect(e["rpc"], token), e["rpc"]))
        hellos = [h.result(HELLO_S) for h in [link.request("hello") for link in links]]
        cpus = hellos[0]["nodes"]
        if any(h["version"] != __version__ or h["nodes"] != cpus for h in hellos):
            return False
        by_node = {h["node"]: link for link, h in zip(links, hellos, strict=True)}
        if set(by_node) != set(cpus):  # a node without a runner written down (added since, or another's)
            return False
        seats = split_seats(cpus, concurrency)
        pickle.dumps(plan)  # a policy that only Ray's pickler takes: that path then
        claims = {n: by_node[n].request("claim", self.claim_id, plan, k) for n, k in seats.items()}
        infos = {n: f.result(CLAIM_S) for n, f in claims.items()}
        if any(i is None for i in infos.values()):  # another run holds one
            for n, i in infos.items():
                if i is not None:
                    by_node[n].request("release").result(RELEASE_S)
            return False
        self.runners = [
            Runner(by_node[n], i["node"], i["host"], i["seats"], warm=True, kept_envs=i["kept_envs"], rpc=i["rpc"])
            for n, i in infos.items()
        ]
        for link in links:
            if all(r.handle is not link for r in self.runners):
                link.close()  # a node given no seat (fewer seats than nodes)
        self.log(
            f"Ray: {sum(r.seats for r in self.runners)} seats on {len(self.runners)} nodes ("
            + ", ".join(f"{r.node[:12]}: {r.seats}" for r in self.runners)
            + f"); {len(self.runners)} of {len(self.runners)} runners warm from an earlier run, reached directly"
        )
        self.queue_seats(in_flight)
        return True

    def send(self, seat: Seat, job: Job) -> Pending:
        fut = seat.runner.handle.request("play", seat.index, job.payload())

        def pending(timeout: float) -> EpisodeRecord | None:
            try:
                rec: EpisodeRecord = fut.result(timeout)
            except FutureTimeout:
                return None
            return rec

        return pending

    def abort(self, runner: Runner, key: str, why: str) -> None:
        runner.handle.post("abort", key, why)

    def close(self) -> None:
        """Release the runners (each waits `idle_s` for the next eval) and hang up."""
        self.closing.set()
        done = [r.handle.request("release") for r in self.runners if not r.lost]
        for f in done:
            try:
                f.result(RELEASE_S)
            except (NodeLost, FutureTimeout):
                pass  # hanging up releases the claim all the same
        for r in self.runners:
            r.handle.close()
        self.runners = []
