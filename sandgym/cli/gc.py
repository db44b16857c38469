"""`sandgym gc`: what crashed or killed runs left behind, on every backend."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from .shared import console, fail


def gc_cmd(
    all_: bool = typer.Option(False, "--all", help="Also remove what belongs to live processes."),
    owner: int | None = typer.Option(
        None, "--owner", min=1, help="Only what the process with this pid left (e.g. a run you killed)."
    ),
):
    """Remove what crashed or killed runs left behind, for every backend.

    Local sandboxes (bubblewrap processes) and browser-sandbox processes
    whose owner is gone, temporary folders named after a process that is
    gone (browser sandboxes, database snapshots, staging copies
    half-written), and (when the Docker Engine is there) sandbox containers
    whose owner died or whose expiry passed; likewise sandbox pods on the
    Kubernetes cluster KUBECONFIG names (namespace: SANDGYM_K8S_NAMESPACE).
    """
    from ..runtimes.browser import reap_cgroups, reap_orphans
    from ..runtimes.local import reap_sandboxes, reap_tempdirs

    sandboxes = reap_sandboxes(include_live=all_, owner=owner)
    killed = reap_orphans(include_live=all_, owner_pid=owner)
    groups = reap_cgroups(include_live=all_, owner_pid=owner)
    folders = reap_tempdirs(include_live=all_, owner=owner)
    console().print(
        f"killed {len(sandboxes)} orphaned local sandbox(es) and {len(killed)} browser-sandbox process(es); "
        f"removed {len(groups)} browser cgroup(s); removed {len(folders)} temporary folder(s)"
        + (": " + ", ".join(str(p) for p in folders[:20]) + (" ..." if len(folders) > 20 else "") if folders else ""),
        highlight=False,
        soft_wrap=True,
    )
    if owner is not None:
        return  # containers and pods carry their owner too, but are reaped by liveness only
    _gc_docker(all_)
    _gc_k8s(all_)


def _gc_docker(all_: bool) -> None:
    from ..runtimes import RuntimeUnavailable

    try:
        from ..runtimes.docker import reap
    except ImportError as e:
        console().print(f"docker: skipped ({e})", highlight=False, soft_wrap=True)
        return
    for attempt in range(3):
        try:
            removed = reap(include_live_owners=all_)
            break
        except RuntimeUnavailable as e:
            console().print(f"docker: skipped ({' '.join(str(e).split())[:200]})", highlight=False, soft_wrap=True)
            return
        except Exception as e:  # noqa: BLE001 - a container that went away while listed: list again
            if attempt == 2:
                fail(f"docker: could not list sandgym's containers ({' '.join(str(e).split())[:300]}); try again")
    console().print(f"removed {len(removed)} sandbox container(s)" + (f": {', '.join(removed)}" if removed else ""))


def _gc_k8s(all_: bool) -> None:
    """Pods, when a cluster is configured (a kubeconfig, or inside a pod)."""
    configured = os.environ.get("KUBECONFIG") or os.environ.get("KUBERNETES_SERVICE_HOST")
    if not configured and not Path("~/.kube/config").expanduser().exists():
        return
    from ..runtimes import RuntimeUnavailable
    from ..runtimes.k8s import reap as reap_pods

    try:
        pods = reap_pods(include_live_owners=all_)
    except RuntimeUnavailable as e:
        console().print(f"k8s: skipped ({' '.join(str(e).split())[:200]})", highlight=False, soft_wrap=True)
        return
    console().print(f"removed {len(pods)} sandbox pod(s)" + (f": {', '.join(pods)}" if pods else ""))
