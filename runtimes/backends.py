"""The backend table: every sandbox backend sandgym ships.

Like the family table (sandgym/families.py), one entry per backend names,
as import strings, what lives in its folder `runtimes/<name>/`: its
runtime class, the runtime names it accepts (`docker:runsc`, `k8s:gvisor`,
...), its side of the browser sandbox, and its leak collector (what
`sandgym gc` calls). `get_runtime`, `RUNTIME_NAMES` (runtimes/__init__.py)
and `open_browser_sandbox` (runtimes/browser.py) loop over this table and
never branch on a backend's name; the table itself imports none of them.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Backend:
    name: str  # its folder under runtimes/, and its runtime's `name`
    runtime: str  # "module:Class" of its Runtime
    # Runtime name -> the runtime class's one argument (its isolation), or
    # None: the class takes none. The bare name is the backend's default.
    variants: Mapping[str, str | None]
    # "module:Class" of its BrowserSandbox subclass, made as
    # Class(app, runtime, limits); None: the browser envs do not run on it.
    browser: str | None = None
    # The runtime names of `variants` whose sandboxes run the browser envs.
    browser_variants: tuple[str, ...] = ()
    # "module:function(include_live: bool, owner: int | None) -> list[leaks.Leaks]":
    # removes what processes that are gone (or, with include_live, any other
    # process; with owner, that pid) left of this backend; raises
    # RuntimeUnavailable when the backend's service does not answer. None:
    # the backend leaves nothing a process's death does not take along.
    collector: str | None = None


BACKENDS: dict[str, Backend] = {
    b.name: b
    for b in (
        Backend(
            name="local",
            runtime="sandgym.runtimes.local.runtime:LocalRuntime",
            variants={"local": None},
            browser="sandgym.runtimes.local.browser:LocalBrowserSandbox",
            browser_variants=("local",),
            collector="sandgym.runtimes.local.leaks:collect",
        ),
        Backend(
            name="docker",
            runtime="sandgym.runtimes.docker.runtime:DockerRuntime",
            variants={"docker": "runc", "docker:runsc": "runsc", "docker:kata": "kata"},
            browser="sandgym.runtimes.docker.browser:ContainerBrowserSandbox",
            browser_variants=("docker", "docker:runsc"),
            collector="sandgym.runtimes.docker.leaks:collect",
        ),
        Backend(
            name="k8s",
            runtime="sandgym.runtimes.k8s.runtime:KubernetesRuntime",
            variants={"k8s": "runc", "k8s:gvisor": "runsc", "k8s:kata": "kata"},
            browser="sandgym.runtimes.k8s.browser:PodBrowserSandbox",
            browser_variants=("k8s", "k8s:gvisor"),
            collector="sandgym.runtimes.k8s.leaks:collect",
        ),
        # Sandboxes made of what Docker's default profile allows: the backend
        # of the OpenEnv server image (run with a plain `docker run`), not of a host.
        Backend(
            name="jail",
            runtime="sandgym.runtimes.jail.runtime:JailRuntime",
            variants={"jail": None},
        ),
    )
}

# What `sandgym gc` collects that belongs to no one backend: temporary folders
# and browser-sandbox processes of any backend (same signature as `collector`).
SHARED_COLLECTOR = "sandgym.runtimes.leaks:collect"


def load(target: str) -> Any:
    """The object an import string "module:attribute" names."""
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def backend_of(runtime_name: str) -> Backend | None:
    """The backend that accepts this runtime name (`docker:runsc`: docker), or None."""
    return next((b for b in BACKENDS.values() if runtime_name in b.variants), None)


def collectors() -> list[tuple[str, str]]:
    """(label, import string) of every leak collector, the shared one first."""
    return [("host", SHARED_COLLECTOR)] + [(b.name, b.collector) for b in BACKENDS.values() if b.collector]
