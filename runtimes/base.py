"""The runtime contract: what every sandbox backend offers.

A `Runtime` turns a `SandboxSpec` into a running `Sandbox`; a sandbox runs
commands (`exec`) and moves files in and out (`put_files`, `get_files`).
Backends differ in how they isolate, never in this interface.
"""

from __future__ import annotations

import abc
import io
import ipaddress
import tarfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from sandgym.errors import SandgymError

Isolation = Literal["namespaces", "runc", "runsc", "kata"]
# "none": no network but the sandbox's own loopback. "no-sockets": no socket
# can be made at all (a syscall filter, on every backend), which lets the
# local runtime skip the sandbox's own network namespace (see install_seccomp
# in runtimes/boundary/agent.py); for verifiers whose code needs no sockets.
Network = Literal["none", "loopback", "no-sockets"]

WORKDIR = "/workspace"
# Host /etc entries that carry no secrets and that programs need: what the
# backends that build a sandbox's root from the host's system (local, jail)
# show of the host's /etc.
ETC_ALLOWED = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "alternatives",
    "python3",
    "python3.11",
    "mime.types",
)


class SandboxError(SandgymError, RuntimeError):
    """The sandbox itself failed (infrastructure), not the code inside it."""


class RuntimeUnavailable(SandboxError):
    """A backend cannot run on this machine; the message says how to fix it."""


class Mount(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str = Field(description="Host path.")
    target: str = Field(description="Absolute path inside the sandbox.")
    read_only: bool = True
    preload: tuple[str, ...] = Field(
        default=(),
        description="Modules of this folder a runtime may import ahead, in a warm interpreter its "
        "sandboxes are forked from (the local zygote): `import NAME` in a sandbox that mounts the "
        "folder then finds them imported. Only for read-only staged folders; other backends ignore it.",
    )

    @field_validator("target")
    @classmethod
    def _absolute(cls, v: str) -> str:
        if not v.startswith("/"):
            raise ValueError(f"mount target must be an absolute path, got {v!r}")
        return v

    @field_validator("preload")
    @classmethod
    def _module_names(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for name in v:
            if not all(part.isidentifier() for part in name.split(".")):
                raise ValueError(f"preload takes module names such as 'judge' or 'pkg.mod', got {name!r}")
        return v


class Egress(BaseModel):
    """One destination a sandbox may reach (an egress allowlist entry): an
    address or CIDR and its ports. Only backends that enforce network
    policy honour it (k8s: a NetworkPolicy); the others refuse a spec that
    has any, since they give sandboxes no network at all."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str = Field(description="An IP address or CIDR (10.0.0.5, 10.0.0.0/24): a NetworkPolicy cannot name hosts.")
    ports: tuple[int, ...] = Field(min_length=1, description="Destination ports, 1-65535.")
    protocol: Literal["TCP", "UDP"] = "TCP"

    @field_validator("host")
    @classmethod
    def _address(cls, v: str) -> str:
        try:
            return str(ipaddress.ip_network(v, strict=False))
        except ValueError:
            raise ValueError(
                f"egress host must be an IP address or CIDR such as 10.0.0.5 or 10.0.0.0/24 "
                f"(a NetworkPolicy cannot name hosts), got {v!r}"
            ) from None

    @field_validator("ports")
    @classmethod
    def _ports(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        bad = [p for p in v if not 1 <= p <= 65535]
        if bad:
            raise ValueError(f"egress ports must be 1-65535, got {bad[0]}")
        return tuple(sorted(set(v)))


def refuse_egress(spec: SandboxSpec, runtime: str) -> None:
    """A backend that gives sandboxes no network cannot honour an egress allowlist: say so."""
    if spec.egress:
        raise RuntimeUnavailable(
            f"this sandbox may reach {spec.egress[0].host} (an egress allowlist), but runtime {runtime!r} gives "
            "sandboxes no network: run it on k8s, whose NetworkPolicy lets exactly that through"
        )


class SandboxSpec(BaseModel):
    """What a sandbox is made of and what it may use."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    image: str = Field(
        "host",
        description=(
            "Root filesystem: 'host' (the backend's default: the host's read-only system dirs, or the "
            "image of the default recipe), 'recipe:NAME' (the image sandgym builds from that recipe, "
            "runtimes/images.py; local sandboxes use the host's dirs, which hold what every recipe "
            "holds), or an image tag."
        ),
    )
    isolation: Isolation | None = Field(None, description="None: the backend's default.")
    cpu_seconds: int = Field(60, gt=0, description="RLIMIT_CPU of each command.")
    cpus: float = Field(1.0, gt=0, description="CPU share (backends with cgroups).")
    memory_mb: int = Field(1024, gt=0, description="Address space (local) or memory limit (containers).")
    pids: int = Field(
        256, gt=0, description="Processes (tasks) the sandbox may hold; at most 64 under gVisor (runtimes/gvisor.py)."
    )
    disk_mb: int = Field(256, gt=0, description="Size of the writable workspace and /tmp.")
    file_size_mb: int = Field(64, gt=0, description="Largest file a command may write.")
    open_files: int = Field(256, gt=0)
    process_limits: bool = Field(
        True,
        description=(
            "Per-process rlimits on what runs inside (address space, processes of the uid, file size, open "
            "files). Off for programs such as Chromium, which reserves far more address space than it uses "
            "and runs hundreds of threads: the sandbox-wide memory, pids and disk limits hold either way."
        ),
    )
    wall_timeout_s: float = Field(3600, gt=0, description="Lifetime of the sandbox.")
    exec_workspace: bool = Field(
        False,
        description="Programs written in the workspace and /tmp may be executed (a compiler's output): "
        "off, docker mounts both noexec; the local runtime's are executable either way.",
    )
    network: Network = "none"
    egress: tuple[Egress, ...] = Field(
        (), description="Destinations the sandbox may reach, on backends that enforce network policy (k8s)."
    )
    mounts: tuple[Mount, ...] = ()
    env: Mapping[str, str] = Field(default_factory=dict)
    workdir: str = WORKDIR
    labels: Mapping[str, str] = Field(default_factory=dict)


@dataclass(frozen=True)
class ExecResult:
    exit_code: int
    stdout: bytes
    stderr: bytes
    duration_s: float
    timed_out: bool = False
    oom_killed: bool = False
    truncated: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    def text(self, stream: Literal["stdout", "stderr"] = "stdout") -> str:
        return getattr(self, stream).decode("utf-8", "replace")


@dataclass
class SandboxInfo:
    """What a record needs to know about where something ran."""

    backend: str
    isolation: str
    id: str
    create_s: float
    labels: dict[str, str] = field(default_factory=dict)


class Sandbox(abc.ABC):
    info: SandboxInfo

    @abc.abstractmethod
    def exec(
        self,
        cmd: Sequence[str] | str,
        timeout: float | None = None,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        max_output: int = 1 << 20,
    ) -> ExecResult:
        """Run a command; a string runs through `/bin/sh -c`."""

    def run_python(
        self,
        script: str,
        args: Sequence[str] = (),
        timeout: float | None = None,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        max_output: int = 1 << 20,
        last: bool = False,
    ) -> ExecResult:
        """Run a Python script inside the sandbox. Backends with a warm
        interpreter fork it instead of starting a new one; either way the
        script starts before it can see `stdin`.

        `last`: the sandbox's last command (a single-use sandbox's). Such
        backends then run the script in that interpreter itself, with no
        fork: only its sys.stdout and sys.stderr are captured, and the
        sandbox takes no other command afterwards."""
        return self.exec(["python3", "-I", "-S", script, *args], timeout, stdin, env, cwd, max_output)

    @abc.abstractmethod
    def put_archive(self, tar_bytes: bytes, dest: str = WORKDIR) -> None:
        """Unpack a tar stream (regular files and dirs only) under `dest`."""

    @abc.abstractmethod
    def get_archive(self, paths: Sequence[str]) -> bytes:
        """A tar stream of the given paths (files or dirs)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Destroy the sandbox and everything running in it. Idempotent."""

    def abort(self) -> None:
        """Cut the sandbox off from any thread, without waiting: a call blocked
        on it returns with SandboxError, later calls fail, and `close()` (from
        the thread that uses it) ends what is left. Default: nothing to cut."""
        return None

    @property
    @abc.abstractmethod
    def alive(self) -> bool: ...

    # Conveniences over the tar stream.
    def put_files(self, files: Mapping[str, bytes | str], dest: str = WORKDIR) -> None:
        self.put_archive(make_tar(files), dest)

    def get_files(self, paths: Sequence[str]) -> dict[str, bytes]:
        return read_tar(self.get_archive(paths))

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Runtime(abc.ABC):
    name: str
    isolation: str
    # Whether code in a sandbox may create user namespaces (the verifier
    # then puts the candidate in PID/user/mount namespaces of its own).
    nested_namespaces: bool = True

    @abc.abstractmethod
    def create(self, spec: SandboxSpec | None = None) -> Sandbox: ...

    def close(self) -> None:  # noqa: B027 (a hook: a runtime that holds nothing need not override it)
        """Release what the runtime holds (pools, temp dirs)."""

    def warm_up(self) -> None:  # noqa: B027 (a hook: a runtime with nothing to start ahead need not override it)
        """Start now what the first `create()` would start (the local
        runtime's zygote), so that it is ready when the first sandbox is
        asked for; meant to run on a thread of its own while the caller does
        other work (`sandgym eval` reads the task set meanwhile). Never
        raises: a failure is left to `create()`, which tries again and
        reports it. After `close()` it starts nothing. Default: nothing."""

    def __deepcopy__(self, memo: dict) -> Runtime:
        # A runtime is a shared handle: gymnasium.make deep-copies env
        # kwargs into env.spec, and every copy must mean this same runtime.
        return self


def make_tar(files: Mapping[str, bytes | str]) -> bytes:
    buf = io.BytesIO()
    now = time.time()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            raw = data.encode() if isinstance(data, str) else data
            info = tarfile.TarInfo(name.lstrip("/"))
            info.size = len(raw)
            info.mode = 0o644
            info.mtime = int(now)
            tar.addfile(info, io.BytesIO(raw))
    return buf.getvalue()


def read_tar(tar_bytes: bytes) -> dict[str, bytes]:
    """Regular files of an untrusted tar stream, read in memory, never extracted."""
    out: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(tar_bytes), mode="r:") as tar:
        for member in tar:
            if member.isfile():
                f = tar.extractfile(member)
                out[member.name] = f.read() if f else b""
    return out
