"""Runs inside the browser sandbox: the web app, Chromium, or both. Stdlib only.

Playwright starts Chromium through a wrapper (bubblewrap's, `docker
exec` into a container, or a relay over a pod's exec stream) as if it were the browser, with the browser's
arguments and its pipe fds 3 and 4. `cfg["mode"]` says what this process
becomes:

- `combined` (one bubblewrap sandbox): bind the app's listening socket on
  loopback *before* Chromium exists (a request queues in the backlog until
  the app accepts it, so no one polls), fork the app onto it, hide the
  state folder from the browser (a mount namespace of its own with an
  empty tmpfs over it), then exec Chromium. When Chromium exits,
  bubblewrap's PID namespace ends and takes the app along.
- `app`: bind the socket and serve the app in this process. It runs as
  its own user, the only one that can open the state folder. With
  `log_stdio` its output stays on stdout and stderr (a pod's container log)
  instead of app.log in the state folder.
- `browser`: wait until the app accepts connections, then exec Chromium.
  With `stdio`, Playwright's pipes arrive as stdin and stdout (a `docker
  exec` or pod exec stream carries only those) and are moved to fds 3 and 4.
"""

from __future__ import annotations

import ctypes
import importlib
import json
import os
import socket
import sys
import time

CHROMIUM = "/usr/lib/chromium/chromium"
CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
MS_NOSUID, MS_NODEV, MS_NOEXEC = 2, 4, 8
PR_SET_DUMPABLE = 4


def run_app(cfg: dict, sock: socket.socket) -> None:
    os.umask(0o077)
    # Not dumpable: a process of another user namespace (Chromium's), even
    # with this uid, can then neither ptrace this one nor open its /proc
    # files (memory, fds, environment).
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    if not cfg.get("log_stdio"):  # else the app's output is its container's log
        log = os.open(os.path.join(cfg["state_dir"], "app.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(log, 1)
        os.dup2(log, 2)
    sys.path[:0] = cfg["python_path"]
    os.environ.update(cfg.get("app_env", {}))
    module_name, _, attr = cfg["app"].partition(":")
    import uvicorn

    app = getattr(importlib.import_module(module_name), attr)
    config = uvicorn.Config(
        app,
        http="h11",
        loop="asyncio",
        lifespan="off",
        log_level="warning",
        access_log=False,
        ws="none",
        interface="asgi3",
    )
    uvicorn.Server(config).run(sockets=[sock])


def isolate(hide_paths: list[str], new_pid_ns: bool) -> None:
    """Chromium's own user and mount namespaces nested in the sandbox's, with
    an empty tmpfs over each of `hide_paths`, and with `new_pid_ns` a PID
    namespace in which the app does not exist (this process forks: its
    child is the namespace's first process and goes on; it waits).

    The mounts bubblewrap made are locked in its user namespace; a nested
    user namespace may still mount over them, which is all this needs.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    uid, gid = os.getuid(), os.getgid()
    flags = CLONE_NEWUSER | CLONE_NEWNS | (CLONE_NEWPID if new_pid_ns else 0)
    if libc.unshare(flags) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWUSER|CLONE_NEWNS|CLONE_NEWPID)")
    with open("/proc/self/setgroups", "w") as f:
        f.write("deny")
    with open("/proc/self/uid_map", "w") as f:
        f.write(f"{uid} {uid} 1")
    with open("/proc/self/gid_map", "w") as f:
        f.write(f"{gid} {gid} 1")
    for path in hide_paths:
        if libc.mount(b"none", path.encode(), b"tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, b"size=4k,mode=500") != 0:
            raise OSError(ctypes.get_errno(), f"mount tmpfs over {path}")
    if not new_pid_ns:
        return
    child = os.fork()
    if child == 0:
        # A /proc of the new namespace, where it can be mounted; without it
        # the app's pid is still out of reach (signals name pids of this
        # namespace) and its /proc files are closed (it is not dumpable).
        libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
        return
    # The parent holds nothing of the browser's: its pipes are the child's.
    for fd in (0, 1, 3, 4):
        try:
            os.close(fd)
        except OSError:
            pass
    _, status = os.waitpid(child, 0)
    os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


def listen(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(256)
    return sock


def wait_for_app(port: int, timeout_s: float) -> None:
    """Until the app (another process, maybe another user) listens on `port`."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit(f"launcher: the app did not listen on port {port} in {timeout_s:.0f} s") from None
            time.sleep(0.01)


def exec_chromium(cfg: dict, chrome_args: list[str]) -> None:
    if cfg.get("stdio"):
        # Playwright writes to fd 3 and reads fd 4; here they came as stdin and stdout.
        os.dup2(0, 3)
        os.dup2(1, 4)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(2, 1)
        os.close(null)
    if cfg.get("hide") or cfg.get("isolate_browser"):
        isolate(cfg.get("hide", []), bool(cfg.get("isolate_browser")))
    for arg in chrome_args:
        # Playwright names a profile folder on the host's /tmp; make it here.
        if arg.startswith("--user-data-dir="):
            os.makedirs(arg.split("=", 1)[1], exist_ok=True)
    os.execv(CHROMIUM, [CHROMIUM, *chrome_args])


def main() -> None:
    cfg = json.loads(sys.argv[1])
    chrome_args = sys.argv[2:]
    mode = cfg.get("mode", "combined")
    if mode == "app":
        run_app(cfg, listen(cfg["port"]))
        return
    if mode == "browser":
        wait_for_app(cfg["port"], cfg.get("app_timeout_s", 30.0))
        exec_chromium(cfg, chrome_args)
        return
    sock = listen(cfg["port"])
    if os.fork() == 0:
        try:
            # Playwright's pipes belong to Chromium alone.
            for fd in (3, 4):
                os.close(fd)
            run_app(cfg, sock)
        finally:
            os._exit(1)
    sock.close()
    exec_chromium(cfg, chrome_args)


if __name__ == "__main__":
    main()
