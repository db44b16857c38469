"""The attach websocket of a pod's first process seen as a stream socket,
for the agent channel (runtime.py)."""

from __future__ import annotations

import socket
import threading


class AttachBridge:
    """The attach websocket seen as a stream socket: the agent channel
    reads and writes one end of a socketpair; two threads move bytes
    between the other end and the websocket's stdin/stdout channels."""

    STDIN, STDOUT, STDERR, ERROR = 0, 1, 2, 3

    def __init__(self, ws, describe: str):
        self.ws = ws
        self.host_end, self._far = socket.socketpair()
        self.stderr_tail = bytearray()
        self._describe = describe
        self._lock = threading.Lock()
        self._running = 2  # the two threads below; the last one out frees the websocket
        threading.Thread(target=self._down, name=f"sandgym-k8s-down-{describe}", daemon=True).start()
        threading.Thread(target=self._up, name=f"sandgym-k8s-up-{describe}", daemon=True).start()

    def _down(self) -> None:  # pod -> host
        from websocket import ABNF

        try:
            while True:
                opcode, frame = self.ws.recv_data_frame(True)
                if opcode == ABNF.OPCODE_CLOSE:
                    break
                data = frame.data
                if not data:
                    continue
                if data[0] == self.STDOUT:
                    self._far.sendall(data[1:])
                elif data[0] in (self.STDERR, self.ERROR):
                    self.stderr_tail = (self.stderr_tail + data[1:])[-(64 << 10) :]
        except Exception:
            pass
        finally:
            self._shut()
            self._done()

    def _up(self) -> None:  # host -> pod
        try:
            while True:
                data = self._far.recv(1 << 20)
                if not data:
                    break
                self.ws.send_binary(bytes([self.STDIN]) + data)
        except Exception:
            pass
        finally:
            self._shut()
            self._done()

    def _shut(self) -> None:
        # Shut down, never close, while a thread may still use a socket: a
        # closed descriptor's number is reused at once (by any other
        # connection of this process), and a thread reading the old number
        # would take that connection's bytes.
        for sock in (self._far, getattr(self.ws, "sock", None)):
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def _done(self) -> None:
        """One thread out; the last one frees the websocket and its end of the pair."""
        with self._lock:
            self._running -= 1
            last = self._running == 0
        if last:
            try:
                self.ws.shutdown()
            except Exception:
                pass
            self._far.close()

    def close(self) -> None:
        self._shut()
        self.host_end.close()
