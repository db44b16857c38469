"""The SWE verifier's runner: runs pytest once and hands back its records.

Started by the host inside the verifier's sandbox with the job as JSON on
stdin: {nonce, repo, python, import_root, tests, args, timeout_s}. It
makes itself non-dumpable (the tests run as the same user and must not
read its memory or open its descriptors through /proc), starts pytest in
a new session with the write end of a pipe for the records plugin, reads
the records until pytest is done or the time is up, and prints one JSON
line carrying the nonce: the child's exit code, whether it timed out, the
raw records and the tail of pytest's output. The host scores; this only
carries. Standard library only.
"""

import ctypes
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MAX_RECORDS = 64 << 20
OUTPUT_TAIL = 6000
# After pytest exits, how long a forked grandchild may keep the pipe open.
DRAIN_S = 2.0
PR_SET_DUMPABLE = 4


def not_dumpable():
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def test_files(repo, tests):
    """The files holding `tests` (node ids), those that exist, in order."""
    seen = []
    for t in tests:
        path = t.split("::", 1)[0]
        if path not in seen and os.path.exists(os.path.join(repo, path)):
            seen.append(path)
    return seen


def kill_group(pid):
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def main():
    job = json.loads(sys.stdin.buffer.read())
    not_dumpable()
    repo, tests = job["repo"], job.get("tests")
    work = tempfile.mkdtemp(prefix="sg-run-")
    args = [
        "-p",
        "sandgym_swe_records",
        "-p",
        "no:cacheprovider",
        "-c",
        os.path.join(HERE, "pytest.ini"),
        "--rootdir",
        repo,
        "--confcutdir",
        repo,
        "--continue-on-collection-errors",
        "-q",
        "--tb=short",
        "-rfE",
        *job.get("args", []),
    ]
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/tmp"),
        "LANG": "C.UTF-8",
        "TMPDIR": os.environ.get("TMPDIR", "/tmp"),
        "PYTHONNOUSERSITE": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        "PYTHONHASHSEED": "0",
    }
    if tests is not None:
        select_path = os.path.join(work, "select.json")
        with open(select_path, "w") as f:
            json.dump(list(tests), f)
        env["SANDGYM_SWE_SELECT"] = select_path
        # With no listed file left, the whole suite is collected and every item
        # deselected: zero collected, an invalid log.
        args += test_files(repo, tests)
    rfd, wfd = os.pipe()
    env["SANDGYM_SWE_RECORD_FD"] = str(wfd)
    log_path = os.path.join(work, "output.log")
    argv = [job["python"], "-I", os.path.join(HERE, "pytest_child.py"), repo, job.get("import_root", "."), *args]
    start = time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            argv,
            cwd=repo,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            pass_fds=(wfd,),
            start_new_session=True,
        )
    os.close(wfd)
    records = bytearray()
    timed_out = False
    deadline = start + float(job["timeout_s"])
    exited_at = None
    while True:
        now = time.monotonic()
        if now >= deadline:
            timed_out = proc.poll() is None
            break
        if exited_at is None and proc.poll() is not None:
            exited_at = now
        if exited_at is not None and now - exited_at > DRAIN_S:
            break
        ready, _, _ = select.select([rfd], [], [], min(0.2, deadline - now))
        if ready:
            chunk = os.read(rfd, 1 << 16)
            if not chunk:
                break  # every writer is gone
            if len(records) < MAX_RECORDS:
                records += chunk
    kill_group(proc.pid)
    exit_code = proc.wait()
    os.close(rfd)
    with open(log_path, "rb") as f:
        f.seek(max(0, os.path.getsize(log_path) - OUTPUT_TAIL))
        tail = f.read().decode("utf-8", "replace")
    out = {
        "nonce": job["nonce"],
        "exit_code": exit_code,
        "timed_out": timed_out,
        "duration_s": round(time.monotonic() - start, 3),
        "records": records.decode("utf-8", "replace"),
        "output": tail,
    }
    sys.stdout.write("\n" + json.dumps(out) + "\n")
    sys.stdout.flush()


main()
