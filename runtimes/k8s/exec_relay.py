"""A host-side relay between Playwright's browser pipes and a process in a pod.

Playwright starts "the browser" with its pipes on fds 3 (it writes) and 4
(it reads). On the k8s runtimes the browser runs in a pod, so the wrapper
Playwright runs execs this module, which opens one exec stream (a
websocket through the API server, channel-framed: 0 stdin, 1 stdout,
2 stderr, 3 the exit status) to the pod's browser container and moves
bytes: fd 3 -> the exec's stdin, its stdout -> fd 4, its stderr -> fd 2.

It ends when either side does: when the stream closes (the process in the
pod exited, or the pod died) Playwright's pipes close with it, so it sees
the browser gone; when Playwright closes fd 3 the stream is closed, and the
browser, its pipe at end of file, exits.

    python -m sandgym.runtimes.k8s.exec_relay '{"pod":..., "namespace":..., "container":...,
        "command": [...], "kubeconfig": null}' [arguments appended to the command]
"""

from __future__ import annotations

import json
import os
import sys
import threading

STDIN, STDOUT, STDERR, ERROR = 0, 1, 2, 3
CHUNK = 1 << 20


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def relay(ws, fd_in: int, fd_out: int, fd_err: int) -> int:
    """Move bytes until one side ends; returns the exit code to report."""
    from websocket import ABNF

    done = threading.Event()
    status = bytearray()

    def up() -> None:  # Playwright -> pod
        try:
            while True:
                data = os.read(fd_in, CHUNK)
                if not data:
                    break
                ws.send_binary(bytes([STDIN]) + data)
        except Exception:
            pass
        finally:
            done.set()

    threading.Thread(target=up, name="relay-up", daemon=True).start()
    try:
        while not done.is_set():
            opcode, frame = ws.recv_data_frame(True)
            if opcode == ABNF.OPCODE_CLOSE:
                break
            data = frame.data
            if not data:
                continue
            if data[0] == STDOUT:
                _write_all(fd_out, data[1:])
            elif data[0] == STDERR:
                _write_all(fd_err, data[1:])
            elif data[0] == ERROR:
                status += data[1:]
    except Exception:  # the stream broke (the pod or the API server went away) or a pipe closed
        pass
    try:
        ws.close()
    except Exception:
        pass
    from .api import exec_status

    return exec_status(bytes(status)) if status else 1


def main(argv: list[str]) -> int:
    cfg = json.loads(argv[1])
    from kubernetes import client

    from .api import load_client, pod_stream

    core = client.CoreV1Api(load_client(cfg.get("kubeconfig")))
    try:
        ws = pod_stream(core, cfg["pod"], cfg["namespace"], cfg["container"], [*cfg["command"], *argv[2:]])
    except Exception as e:
        print(f"sandgym relay: cannot exec in pod {cfg['pod']}: {e}", file=sys.stderr)
        return 1
    code = relay(ws, 3, 4, 2)
    return code if 0 <= code < 256 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
