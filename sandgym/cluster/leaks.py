"""`sandgym gc` on Ray: the warm runners (runner.py) that runs left, and the
runner addresses written down for evals (direct.py) that no longer hold.

The clusters: $RAY_ADDRESS and every cluster an address file names. On
each, every sandgym runner is asked to `end`, and decides under its own
lock (a run claiming it at that moment keeps it): by default a runner ends
when no run holds it (a claim made through Ray lapses 60 s after its
driver died, one over the runners' own RPC when its connection closes);
with `--all`, every runner; with `--owner PID`, those whose last claim was
made by that process on this host. An address file is removed once a
runner it names has ended or no longer listens (an eval would pass it over).
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

from sandgym.runtimes import RuntimeUnavailable
from sandgym.runtimes.leaks import Leaks

from .direct import cache_dir, listening, read_entries
from .fleet import NAMESPACE, RUNNER_PREFIX
from .plan import driver_of

ANSWER_S = 30.0  # for a runner to answer `end`
GONE_S = 90.0  # for the ended runners to close their envs and go


class Unreachable(Exception):
    """The cluster cannot be joined (down, or this process lacks its token)."""


def collect(include_live: bool = False, owner: int | None = None) -> list[Leaks]:
    files = sorted(cache_dir().glob("*.json"))
    named = os.environ.get("RAY_ADDRESS", "").strip()
    clusters = {e.get("cluster", "") for f in files for e in read_entries(f)} | {named}
    clusters.discard("")
    if not clusters and not files:
        raise RuntimeUnavailable("no Ray cluster named ($RAY_ADDRESS) and no warm runners written down")
    ended: list[str] = []
    ended_rpc: set[str] = set()
    cannot: list[str] = []
    if clusters:
        try:
            import ray  # noqa: F401
        except ImportError:
            if named:
                raise RuntimeUnavailable(
                    "RAY_ADDRESS is set but Ray is not installed: pip install 'sandgym[ray]'"
                ) from None
            clusters = set()
    for address in sorted(clusters):
        try:
            for name, rpc in end_runners(address, include_live, None if owner is None else driver_of(owner)):
                ended.append(name)
                ended_rpc.add(rpc)
        except Unreachable as e:
            cannot.append(f"{address}: {e}")
    removed = [str(f) for f in files if stale(f, ended_rpc) and _unlink(f)]
    # A cluster that is down took its runners along (their files went as stale above); a live one
    # this process cannot join keeps them: say so, with what was done.
    left = [c for c in cannot if c.split(": ", 1)[0] == named or _listed_live(files, c.split(": ", 1)[0])]
    if left:
        done = f"ended {len(ended)} runner(s), removed {len(removed)} address file(s); "
        raise RuntimeUnavailable(
            done + "cannot join " + "; ".join(left) + " (a cluster with token authentication also needs "
            "RAY_AUTH_MODE=token and RAY_AUTH_TOKEN_PATH or RAY_AUTH_TOKEN)"
        )
    return [Leaks("Ray runner", ended, "ended"), Leaks("runner address file", removed)]


def end_runners(address: str, include_claimed: bool, driver: str | None) -> list[tuple[str, str]]:
    """(name, rpc address) of the runners on `address` that `end` ended, once they are gone."""
    import ray

    if not listening(address, timeout=2.0):  # down: its GCS port is closed (ray.init would wait a minute)
        raise Unreachable("nothing listens there")
    try:
        ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False, include_dashboard=False)
    except (ConnectionError, RuntimeError, ValueError, ray.exceptions.RayError) as e:
        raise Unreachable(str(e).splitlines()[0] if str(e) else type(e).__name__) from None
    try:
        asked: dict[str, tuple[Any, Any]] = {}
        for name in runner_names():
            try:
                handle = ray.get_actor(name, namespace=NAMESPACE)
                asked[name] = (handle, handle.end.remote(include_claimed, driver))
            except ValueError:  # it ended meanwhile
                continue
            except AttributeError:  # a runner of an older sandgym, without `end`: ended by hand only with --all
                if include_claimed and driver is None:
                    ray.kill(handle, no_restart=True)
                    asked[name] = (handle, None)
        ended: dict[str, str] = {}
        for name, (handle, ref) in asked.items():
            if ref is None:
                ended[name] = ""
                continue
            try:
                answer = ray.get(ref, timeout=ANSWER_S)
            except ray.exceptions.RayActorError:  # it ended on its own meanwhile
                continue
            except ray.exceptions.RayError:  # it does not answer: only --all ends it, by force
                answer = {"rpc": ""} if include_claimed and driver is None else None
                if answer is not None:
                    ray.kill(handle, no_restart=True)
            if answer is not None:
                ended[name] = answer["rpc"]
                if ref is not None:
                    _taken(handle)
        deadline = time.monotonic() + GONE_S
        while set(ended) & set(runner_names()) and time.monotonic() < deadline:
            time.sleep(0.5)
        for name in set(ended) & set(runner_names()):  # one that could not close its envs: its process goes
            try:
                ray.kill(ray.get_actor(name, namespace=NAMESPACE), no_restart=True)
            except ValueError:
                pass
        return sorted(ended.items())
    finally:
        ray.shutdown()


def _taken(handle: Any) -> None:
    """Tell a runner that `end` ended that its answer arrived: it kills itself only then, lest the
    answer be lost with it (and the runner not counted, as one that ended on its own)."""
    try:
        handle.answer_taken.remote()
    except AttributeError:  # a runner of an older sandgym does not wait for it
        pass


def runner_names() -> list[str]:
    import ray

    return sorted(
        a["name"]
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a["namespace"] == NAMESPACE and a["name"].startswith(RUNNER_PREFIX)
    )


def stale(path: Path, ended_rpc: set[str]) -> bool:
    """Does the address file name a runner that ended, or that no longer listens (or nothing at all)?"""
    entries = read_entries(path)
    return not entries or any(e["rpc"] in ended_rpc or not listening(e["rpc"]) for e in entries)


def _listed_live(files: list[Path], address: str) -> bool:
    return any(e.get("cluster") == address for f in files if f.exists() for e in read_entries(f))


def _unlink(path: Path) -> bool:
    try:
        path.unlink()
    except OSError:
        return False
    return True
