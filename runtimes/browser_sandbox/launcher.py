"""Runs inside the browser sandbox: starts the web app, then becomes Chromium.

Playwright starts this (through the bubblewrap wrapper) as if it were the
browser, with the browser's arguments and its pipe fds 3 and 4. Stdlib only.

1. Bind the app's listening socket on loopback *before* Chromium exists:
   a request queues in the backlog until the app accepts it, so no one has
   to poll for the app to come up.
2. Fork the app (an ASGI app under uvicorn) onto that socket.
3. Hide the state folder from the browser (a mount namespace of its own
   with an empty tmpfs over it), then exec Chromium with Playwright's args.
When Chromium exits, bubblewrap's PID namespace ends and takes the app along.
"""

from __future__ import annotations

import ctypes
import importlib
import json
import os
import socket
import sys

CHROMIUM = "/usr/lib/chromium/chromium"
CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
MS_NOSUID, MS_NODEV, MS_NOEXEC = 2, 4, 8


def run_app(cfg: dict, sock: socket.socket) -> None:
    # Playwright's pipes belong to Chromium alone.
    for fd in (3, 4):
        try:
            os.close(fd)
        except OSError:
            pass
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


def hide(paths: list[str]) -> None:
    """An empty tmpfs over each path, in a mount namespace only Chromium sees.

    The mounts bubblewrap made are locked in its user namespace; a nested
    user namespace may still mount over them, which is all this needs.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWUSER|CLONE_NEWNS)")
    with open("/proc/self/setgroups", "w") as f:
        f.write("deny")
    with open("/proc/self/uid_map", "w") as f:
        f.write(f"{uid} {uid} 1")
    with open("/proc/self/gid_map", "w") as f:
        f.write(f"{gid} {gid} 1")
    for path in paths:
        if libc.mount(b"none", path.encode(), b"tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, b"size=4k,mode=500") != 0:
            raise OSError(ctypes.get_errno(), f"mount tmpfs over {path}")


def main() -> None:
    cfg = json.loads(sys.argv[1])
    chrome_args = sys.argv[2:]
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", cfg["port"]))
    sock.listen(256)
    if os.fork() == 0:
        try:
            run_app(cfg, sock)
        finally:
            os._exit(1)
    sock.close()
    hide(cfg["hide"])
    for arg in chrome_args:
        # Playwright names a profile folder on the host's /tmp; make it here.
        if arg.startswith("--user-data-dir="):
            os.makedirs(arg.split("=", 1)[1], exist_ok=True)
    os.execv(CHROMIUM, [CHROMIUM, *chrome_args])


if __name__ == "__main__":
    main()
