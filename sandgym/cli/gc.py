"""`sandgym gc`: what crashed or killed runs left behind, on every backend."""

from __future__ import annotations

import typer

from .shared import console, fail, shown


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
    On the Ray clusters RAY_ADDRESS and the written-down runner addresses
    name: the warm runners no run holds (`--all`: every one; `--owner`:
    those that process claimed last) and the addresses that no longer hold.
    """
    from ..runtimes import RuntimeUnavailable, SandboxError
    from ..runtimes.backends import collectors, load

    # One collector per backend (the backend table) plus the shared one:
    # each says what it removed, one line per collector.
    # The Ray runners first: the sandboxes of one that cannot close its envs are then orphans, collected below.
    for label, target in [("ray", "sandgym.cluster.leaks:collect"), *collectors()]:
        try:
            found = load(target)(include_live=all_, owner=owner)
        except RuntimeUnavailable as e:
            console().print(f"{label}: skipped ({shown(str(e)[:200])})", highlight=False, soft_wrap=True)
            continue
        except SandboxError as e:
            fail(str(e))
        for leaks in found:
            names = ", ".join(shown(i) for i in leaks.items[:20]) + (" ..." if len(leaks.items) > 20 else "")
            console().print(
                f"{label}: {leaks.verb} {len(leaks.items)} {leaks.kind}(s)" + (f": {names}" if names else ""),
                highlight=False,
                soft_wrap=True,
            )
