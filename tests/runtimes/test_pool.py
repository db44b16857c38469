"""The warm pool, on every backend: hits, verified resets, replacement, cleanup."""

from __future__ import annotations

import time

import pytest

from sandgym.runtimes import get_runtime
from sandgym.runtimes.pool import SandboxPool


@pytest.fixture(scope="module", params=["local", "docker", "docker:runsc"])
def rt(request):
    runtime = get_runtime(request.param)
    yield runtime
    runtime.close()


def wait_idle(pool, n, timeout=60):
    deadline = time.monotonic() + timeout
    while pool.metrics()["idle"] < n and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pool.metrics()["idle"] >= n


def test_acquire_release_and_verified_reset(rt):
    with SandboxPool(rt, size=2) as pool:
        wait_idle(pool, 2)
        sb = pool.acquire()
        assert pool.metrics()["hits"] == 1
        sb.exec(
            [
                "sh",
                "-c",
                "echo secret > /workspace/a; mkdir -p /workspace/d/e; echo t > /tmp/t; "
                "echo s > /dev/shm/s; sleep 300 &",
            ]
        )
        pool.release(sb, reuse=True)
        m = pool.metrics()
        assert m["reused"] == 1 and m["in_use"] == 0
        # Whoever gets it next finds nothing of the last user.
        again = [pool.acquire() for _ in range(2)]
        assert any(s is sb for s in again)
        # (python, not ls: this gVisor build answers coreutils' statx with EINVAL)
        listing = sb.exec(
            [
                "python3",
                "-c",
                "import os; print(os.listdir('/workspace') + os.listdir('/tmp') + os.listdir('/dev/shm'))",
            ]
        )
        assert listing.stdout == b"[]\n"
        assert b"sleep" not in sb.exec(["sh", "-c", "cat /proc/[0-9]*/cmdline"]).stdout
        for s in again:
            pool.release(s)
        assert pool.metrics()["destroyed"] == 2


def test_a_sandbox_that_wrote_into_dev_is_not_reused(rt):
    with SandboxPool(rt, size=1) as pool:
        sb = pool.acquire()
        made = sb.exec(["python3", "-c", "open('/dev/left-behind', 'w').write('x')"])
        pool.release(sb, reuse=True)
        if made.exit_code == 0:  # /dev is the sandbox's own tmpfs on this backend
            assert pool.metrics()["reused"] == 0 and pool.metrics()["destroyed"] == 1
        else:
            assert pool.metrics()["reused"] == 1


def test_broken_sandbox_is_replaced_not_reused(rt):
    with SandboxPool(rt, size=1) as pool:
        wait_idle(pool, 1)
        sb = pool.acquire()
        sb.close()  # dies in use
        pool.release(sb, reuse=True)
        assert pool.metrics()["destroyed"] == 1 and pool.metrics()["reused"] == 0
        wait_idle(pool, 1)
        fresh = pool.acquire()
        assert fresh is not sb and fresh.exec(["true"]).exit_code == 0
        pool.release(fresh)


def test_misses_when_empty_and_metrics(rt):
    with SandboxPool(rt, size=0) as pool:
        sb = pool.acquire()
        pool.release(sb)
        m = pool.metrics()
        assert m["misses"] == 1 and m["hit_rate"] == 0.0 and m["create_ms_p50"] > 0 and m["acquire_ms_p95"] > 0
        kept = pool.acquire()
    assert pool.metrics()["leaked"] == 1  # still out when the pool closed
    kept.close()
