"""The task bound of gVisor sandboxes, shared by the backends that run it
(docker:runsc, k8s:gvisor): why a runsc sandbox holds at most
RUNSC_MAX_PIDS tasks, and what that costs in host tasks."""

from __future__ import annotations

# gVisor (scripts/gvisor.sh builds it) runs on its systrap platform
# (scripts/docker-engine.sh; KVM needs hardware virtualisation these hosts
# lack). On ptrace, the old default, each address space's host stub gets
# one traced thread per sentry thread that ever ran it, never freed: n
# tasks cost up to n x 2 x (2n + 16) host tasks, a fork bomb of 64 peaked
# at 1,620 (Debian's 2022 runsc) and 2,849 (this one on ptrace) in 3 s,
# and when the pids cgroup refuses one the sentry panics and the sandbox
# is gone, agent included. Under systrap n tasks cost about 2n + 200 host
# tasks: a fork bomb peaked at 239 (n = 64), 457 (n = 128) and 953
# (n = 256). The pids cgroup allows more than twice that, or ptrace's
# worst case when the registered runsc names another platform or none.
# What bounds n now is memory: each task costs the sandbox about 5 MB
# (4.6 MB per idle forked python3, 0.25 MB under runc), all charged to the
# container's memory cgroup, and an OOM there kills the sentry, the whole
# sandbox with the agent. In the code verifier's 1 GB a fork bomb of 64
# tasks ended as expected 20/20; of 128, 6/20 (14 OOM); of 256 in the SWE
# family's 2 GB, 15/20; 128 and 256 held 20/20 only with 6 MB per task
# more memory. So runsc sandboxes hold at most RUNSC_MAX_PIDS tasks
# (gVisor enforces the agent's RLIMIT_NPROC).
RUNSC_MAX_PIDS = 64


def runsc_host_tasks(n: int, platform: str = "systrap") -> int:
    """Host tasks a runsc sandbox of n tasks may need at worst (see above)."""
    if platform == "systrap":
        return 4 * n + 1024
    return n * 2 * (2 * n + 64) + 1024
