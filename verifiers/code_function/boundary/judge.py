"""The verifier's judge: one code submission, inside a fresh sandbox.

Forks the candidate's side first (candidate_host.py: new user, PID and
mount namespaces), then reads one JSON payload on stdin (the hidden tests
never touch the sandbox's disk nor the candidate's memory), calls the
entry point over a pipe pair, and compares
the plain values that come back here, in a process that never imports the
candidate's code. Writes one JSON record on stdout carrying the host's
nonce; the host reads nothing else from this sandbox.

Payload: {"nonce", "entry_point", "context_code", "code", "timeout_s",
"float_tolerance", and either "tests": [{"name","args","kwargs","expected"}]
or "check_code"}. SANDGYM_CANDIDATE_ISOLATION=process skips the namespaces
(for backends whose syscall filter forbids them); the record says which.

Standard library only.
"""

import collections
import io
import json
import os
import select
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # -I leaves it out
import candidate_host
import plainvalues

MAX_REPLY = 64 << 20
MAX_OUTPUT = 64 << 10
PR_SET_DUMPABLE = 4


def make_undumpable():
    """No other process of this uid may read this one's memory or fds.

    Fail closed: a judge whose hidden tests and nonce would be readable
    must not run (the host then sees no record: an infrastructure error).
    """
    import ctypes

    if candidate_host._libc().prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


class InfraError(Exception):
    """The boundary could not be set up: not the candidate's doing."""


class CandidateGone(Exception):
    pass


class CallTimeout(BaseException):
    """Out of time; a BaseException so that check code cannot swallow it."""


class Candidate:
    """One candidate process and the pipe pair to it."""

    def __init__(self, isolation):
        self.isolation = isolation
        self.payload: dict = {}  # set by the runner once the candidate side is forked
        self.deadline = 0.0
        self.output = bytearray()
        self.pid: int | None = None
        self.w: int | None = None
        self.r: int | None = None
        self.status = None
        self.load_error = None
        self.pending: collections.deque = collections.deque()  # request lines sent ahead, not yet answered

    def start(self):
        """Fork the candidate's side. Called before the payload is read."""
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        out_r, out_w = os.pipe()
        isolate = self.isolation == "pidns"
        pid, cloned = candidate_host.spawn(isolate)
        if pid == 0:  # the candidate's side
            code = 1
            try:
                # A session of its own: kill(0, ...) stays in it.
                os.setsid()
                null = os.open(os.devnull, os.O_RDONLY)
                os.dup2(null, 0)  # the payload arrives on the runner's stdin: never readable here
                os.dup2(out_w, 1)
                os.dup2(out_w, 2)
                os.dup2(to_child_r, 3)
                os.dup2(from_child_w, 4)
                os.closerange(5, 1 << 16)
                # Streams on those fds: the judge's own may be in memory (a
                # runner run in the agent's interpreter, Sandbox.run_python(last=True)).
                sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
                sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=True)
                sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), write_through=True)
                candidate_host.confine(isolate, cloned)
                candidate_host.serve(3, 4)
                code = 0
            except BaseException:
                import traceback  # only here: it imports tokenize (milliseconds)

                traceback.print_exc()
            finally:
                os._exit(code)
        for fd in (to_child_r, from_child_w, out_w):
            os.close(fd)
        # Writes never block (a candidate that stops reading cannot hold
        # the runner past its deadline); output is read while waiting.
        os.set_blocking(to_child_w, False)
        os.set_blocking(out_r, False)
        self.pid, self.w, self.r, self.buf = pid, to_child_w, from_child_r, bytearray()
        self.out_r: int | None = out_r

    def load(self, calls=()):
        """Send the code, and after it the calls in `calls` (encoded request
        lines, answered in order: see call()), all at once; raises
        InfraError if the candidate's side never came up."""
        try:
            self._write(self._line({k: self.payload[k] for k in ("context_code", "code", "entry_point")}))
            if calls:
                self.pending.extend(calls)
                self._write(b"".join(calls))
        except (CandidateGone, CallTimeout):
            # Whose fault that is shows in what it said first (read below):
            # nothing, if it never came up.
            self.pending.clear()
        # The candidate's side speaks before it reads any of that, so before
        # any candidate code runs: silence here means the boundary failed.
        try:
            first = self._recv()
        except CandidateGone:
            raise InfraError("the candidate process did not start: " + self.output_text()[-500:]) from None
        except CallTimeout:
            raise InfraError("the candidate process did not start in time") from None
        if first != {"ready": True}:
            raise InfraError(f"unexpected first message from the candidate process: {first!r}")
        reply = self._recv()
        if "load_error" in reply:
            self.load_error = str(reply["load_error"])
            self.pending.clear()  # it answers no call now

    def _drain(self):
        """Read what the candidate printed so far (its pipe is non-blocking)."""
        while self.out_r is not None:
            try:
                chunk = os.read(self.out_r, 1 << 16)
            except BlockingIOError:
                return
            if not chunk:
                os.close(self.out_r)
                self.out_r = None
                return
            room = MAX_OUTPUT - len(self.output)
            if room > 0:
                self.output += chunk[:room]

    def _wait(self, writing):
        """Wait until the reply pipe is readable (or, `writing`, the request
        pipe writable), reading the candidate's output meanwhile (and,
        `writing`, its replies, so that neither side can block the other).
        Returns whether it is; raises CallTimeout at the deadline."""
        r, w = self.r, self.w
        if r is None or w is None:  # stopped
            raise CandidateGone()
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise CallTimeout()
        fds = [r] if self.out_r is None else [r, self.out_r]
        readable, writable, _ = select.select(fds, [w] if writing else [], [], left)
        if self.out_r is not None and self.out_r in readable:
            self._drain()
        if not writing:
            return r in readable
        if r in readable:
            self._read_replies()
        return w in writable

    def _read_replies(self):
        """Read what the reply pipe holds into the buffer; CandidateGone at its end."""
        if self.r is None:  # stopped
            raise CandidateGone()
        chunk = os.read(self.r, 1 << 20)
        if not chunk:
            raise CandidateGone()
        self.buf += chunk
        if len(self.buf) > MAX_REPLY:
            raise ValueError("the candidate's reply is larger than 64 MiB")

    def output_text(self):
        return bytes(self.output).decode("utf-8", "replace")

    @staticmethod
    def _line(obj):
        return (json.dumps(obj, separators=(",", ":"), allow_nan=False) + "\n").encode()

    def _write(self, data):
        if self.w is None:  # stopped
            raise CandidateGone()
        view = memoryview(data)
        while view:
            if not self._wait(writing=True):
                continue
            try:
                view = view[os.write(self.w, view) :]
            except BlockingIOError:
                continue
            except OSError:  # EPIPE: it is gone
                raise CandidateGone() from None

    def _recv(self):
        # A bytearray grows in amortized O(1) and only new bytes are scanned:
        # a flood of junk costs linear time, not quadratic.
        if self.r is None:  # stopped
            raise CandidateGone()
        end = self.buf.find(b"\n")
        while end < 0:
            if not self._wait(writing=False):
                continue
            scanned = len(self.buf)
            self._read_replies()
            end = self.buf.find(b"\n", scanned)
        line = bytes(self.buf[:end])
        del self.buf[: end + 1]
        msg = json.loads(line)
        if type(msg) is not dict:
            raise ValueError("malformed reply from the candidate process")
        return msg

    @staticmethod
    def request(args, kwargs):
        """The request line for a call (its arguments as they are now)."""
        return Candidate._line({"args": plainvalues.encode(list(args)), "kwargs": plainvalues.encode(dict(kwargs))})

    def call(self, args, kwargs):
        """('value', v) | ('error', text); raises CallTimeout or CandidateGone.

        A call sent ahead (load(calls)) is answered from the reply stream
        when it is the next one queued; any other call first reads and
        drops what is still queued (its answers are not this call's), then
        goes out on its own.
        """
        line = self.request(args, kwargs)
        if self.pending and self.pending[0] == line:
            self.pending.popleft()
        else:
            while self.pending:
                self.pending.popleft()
                try:
                    self._recv()
                except ValueError:
                    pass  # an unreadable answer to a call nobody asked for
            self._write(line)
        reply = self._recv()
        if "value" in reply:
            return "value", plainvalues.decode(reply["value"])
        return "error", str(reply.get("error", "no value returned"))[:2000]

    def exited(self):
        if self.status is None and self.pid:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = os.waitstatus_to_exitcode(status)
        return self.status is not None

    def exit_detail(self):
        for _ in range(100):  # it is exiting: give it a moment to be reaped
            if self.exited():
                break
            time.sleep(0.01)
        return f"the candidate process exited (code {self.status}) before returning"

    def stop(self):
        for fd in (self.w, self.r):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.w = self.r = None
        if self.pid and not self.exited():
            # Not waited for: the kernel tears it down while this process
            # writes the record (0.3 ms of a verification's critical path).
            # The sandbox's agent reaps it, or its end takes it along.
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._drain()  # what it printed last (a process it left behind may hold the pipe: no waiting)


def run_cases(cand, payload):
    tol = payload.get("float_tolerance")
    results = []
    gone = ""
    for i, case in enumerate(payload["tests"]):
        name = case.get("name") or f"test_{i}"
        t0 = time.monotonic()
        status, detail = "failed", ""
        if cand.r is None:
            # It exited on an earlier call; one process serves all calls.
            results.append({"name": name, "status": "failed", "detail": gone})
            continue
        try:
            kind, value = cand.call(case.get("args", []), case.get("kwargs", {}))
            if kind == "error":
                status, detail = "error", value
            elif plainvalues.same(case.get("expected"), value, tol):
                status = "passed"
            else:
                detail = f"expected {case.get('expected')!r}, got {value!r}"[:2000]
        except CallTimeout:
            status, detail = "timeout", "out of time"
        except CandidateGone:
            detail = gone = cand.exit_detail()
            cand.stop()
        except (ValueError, TypeError, RecursionError, OverflowError) as e:  # unreadable reply
            detail = f"the candidate's reply could not be read: {e}"[:2000]
        results.append(
            {"name": name, "status": status, "detail": detail, "duration_s": round(time.monotonic() - t0, 6)}
        )
        if status == "timeout":
            # Nothing is left of the time budget: the rest cannot run.
            for j, rest in enumerate(payload["tests"][i + 1 :], start=i + 1):
                results.append(
                    {"name": rest.get("name") or f"test_{j}", "status": "timeout", "detail": "not run: out of time"}
                )
            break
    return results


# Calls sent ahead of their turn (see calls_ahead): at most so many, so many
# bytes, and so much time spent finding them in check code.
AHEAD_CALLS = 256
AHEAD_BYTES = 1 << 20
AHEAD_CHECK_S = 0.05


class _Enough(BaseException):
    pass


class _Anything:
    """What a call returns in a dry run of check code (calls_ahead): equal
    to, and in range of, anything, so that the check runs on to its next
    call. Nothing judged ever sees one."""

    def _self(self, *args, **kwargs):
        return self

    def _true(self, other):
        return True

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __contains__ = _true
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _self
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = _self
    __pow__ = __rpow__ = __neg__ = __pos__ = __abs__ = __round__ = __call__ = __getitem__ = _self
    __hash__ = object.__hash__

    def __bool__(self):
        return True

    def __float__(self):
        return 0.0

    def __int__(self):
        return 0

    __index__ = __int__

    def __len__(self):
        return 0

    def __iter__(self):
        return iter(())


def calls_ahead(payload):
    """Request lines for the calls the judging will make, in order, so that
    they reach the candidate in one write (each answered in turn, see
    Candidate.call): a test list's own calls; for check code, those of a
    dry run of it (in this process, with _Anything for every result and
    `random` put back as it was), up to its first call that depends on a
    result. A wrong guess only costs time: a call not guessed goes out on
    its own."""
    if not payload.get("check_code"):
        lines, size = [], 0
        for t in payload["tests"][:AHEAD_CALLS]:
            try:
                lines.append(Candidate.request(t.get("args", []), t.get("kwargs", {})))
            except (TypeError, ValueError, RecursionError):
                break  # judged as it always was, when its turn comes
            size += len(lines[-1])
            if size > AHEAD_BYTES:
                break
        return lines
    import random

    state = random.getstate()
    lines = []
    size = 0

    def record(*args, **kwargs):
        nonlocal size
        lines.append(Candidate.request(args, kwargs))
        size += len(lines[-1])
        if len(lines) >= AHEAD_CALLS or size > AHEAD_BYTES:
            raise _Enough()
        return _Anything()

    def out_of_time(signum, frame):
        raise _Enough()

    previous = signal.signal(signal.SIGALRM, out_of_time)
    try:
        try:
            signal.setitimer(signal.ITIMER_REAL, AHEAD_CHECK_S)
            namespace: dict = {"__name__": "__check__"}
            exec(payload["compiled_check"], namespace)
            namespace[payload["entry_point"]] = record
            namespace["check"](record)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except BaseException:  # whatever ends the dry run ends the list there
        pass
    signal.signal(signal.SIGALRM, previous)
    random.setstate(state)
    return lines


class CandidateError(Exception):
    pass


def run_check(cand, payload):
    def candidate(*args, **kwargs):
        try:
            kind, value = cand.call(args, kwargs)
        except CandidateGone:
            raise CandidateError(cand.exit_detail()) from None
        except (ValueError, TypeError, RecursionError, OverflowError) as e:
            raise CandidateError(f"the candidate's reply could not be read: {e}") from e
        if kind == "error":
            raise CandidateError(value)
        return value

    namespace: dict = {"__name__": "__check__"}
    t0 = time.monotonic()
    exec(payload["compiled_check"], namespace)
    # Checks may call the function by name (HumanEval/33 does): that name
    # is the candidate too, not the prompt's stub.
    namespace[payload["entry_point"]] = candidate
    try:
        namespace["check"](candidate)
        status, detail = "passed", ""
    except CallTimeout:
        status, detail = "timeout", "out of time"
    except AssertionError as e:
        status, detail = "failed", f"assertion failed{': ' + str(e) if str(e) else ''}"
    except CandidateError as e:
        status, detail = "error", str(e)
    except Exception as e:
        status, detail = "error", f"{type(e).__name__}: {e}"
    return [{"name": "check", "status": status, "detail": detail[:2000], "duration_s": round(time.monotonic() - t0, 6)}]


def main():
    make_undumpable()
    # Fork the candidate's side first, while this process holds nothing secret.
    isolation = os.environ.get("SANDGYM_CANDIDATE_ISOLATION", "pidns")
    cand = Candidate(isolation)
    cand.start()
    payload = json.loads(sys.stdin.buffer.read())
    record = {"nonce": payload["nonce"], "isolation": isolation}
    cand.payload = payload
    cand.deadline = time.monotonic() + float(payload["timeout_s"])
    names = (
        ["check"]
        if payload.get("check_code")
        else [t.get("name") or f"test_{i}" for i, t in enumerate(payload["tests"])]
    )
    if payload.get("check_code"):
        # The test code is the data set's, compiled before any candidate runs.
        payload["compiled_check"] = compile(payload["context_code"] + "\n" + payload["check_code"], "<check>", "exec")
    ahead = calls_ahead(payload)
    try:
        cand.load(ahead)
        if cand.load_error is not None:
            record["load_error"] = cand.load_error
            record["tests"] = [{"name": n, "status": "failed", "detail": cand.load_error} for n in names]
        elif payload.get("check_code"):
            record["tests"] = run_check(cand, payload)
        else:
            record["tests"] = run_cases(cand, payload)
    except InfraError as e:
        record["infra_error"] = str(e)
    except CallTimeout:
        record["load_error"] = "out of time while loading the code"
        record["tests"] = [{"name": n, "status": "timeout", "detail": "not run: out of time"} for n in names]
    except CandidateGone:
        record["load_error"] = cand.exit_detail() + " while loading"
        record["tests"] = [{"name": n, "status": "failed", "detail": record["load_error"]} for n in names]
    except Exception as e:
        # Past the handshake, whatever breaks the judge came from the
        # candidate's side (say, a reply nested too deep to parse): that is
        # the candidate's failure, never an infrastructure error it forced.
        record["load_error"] = f"the candidate's side sent what cannot be read ({type(e).__name__}: {str(e)[:200]})"
        record["tests"] = [{"name": n, "status": "failed", "detail": record["load_error"]} for n in names]
    finally:
        cand.stop()
    record["output"] = cand.output_text()
    # On a line of its own: whatever else reached this stdout (gVisor lets
    # any task open another's /proc/PID/fd) cannot run into the record.
    sys.stdout.write("\n" + json.dumps(record) + "\n")
    sys.stdout.flush()
