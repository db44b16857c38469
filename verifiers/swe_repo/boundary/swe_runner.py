"""The SWE verifier's runner (started through runner.py): prepares the tree, runs pytest once, hands back what it saw.

Started by the host inside the verifier's sandbox with the job as one JSON
line on stdin: {nonce, repo, python, import_root, tests, args, timeout_s,
isolation, readonly, prepare}, then optionally the start tree as a tar. It
makes itself non-dumpable, forks the launcher of the test process *before*
it reads the job (so no copy of the job is in that process), hands the
launcher its spec at once (the test process sets up, execs and imports
pytest meanwhile, then waits for its secrets), writes the tree, then:

1. with `prepare` (verification): hashes the tree, applies the agent's diff
   with `git apply` (or, for predictions, SWE-bench's chain of `git apply`
   and `patch --fuzz=5`), hashes again and reports every path that changed
   (the host judges them against the start state); removes what the test
   patch adds, applies the test patch, removes bytecode, appends the hidden
   sentinel tests, and hashes the protected files;
2. starts pytest (pytest_child.py) through the launcher: with isolation
   "pidns", in new user, PID and mount namespaces, with a /proc of its own,
   the repository bind-mounted read-only, /tmp and /workspace not
   executable, and no capabilities, so it can see and signal nothing
   outside; with "process" (no user namespaces here), in a session of its
   own with the repository's files made read-only;
3. passes the test process its secrets on a pipe once the tree is final
   (a fresh MAC key, the test files' hashes, the changed files, the test
   files to collect; nothing of the repository is read before) and reads
   the records channel,
   checking each line's sequence number and MAC: a line that fails is
   reported as forged, never used;
4. hashes the protected files again, and prints one JSON line carrying
   the nonce. It exits 0 whenever it printed; the host accepts nothing else.

The host scores; this only carries. Standard library only.
"""

import ctypes
import hashlib
import hmac
import json
import os
import secrets
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
MAX_RECORDS = 64 << 20
OUTPUT_TAIL = 6000
# After pytest exits, how long a forked grandchild may keep the channel open.
DRAIN_S = 2.0
GUARD_EXIT = 86  # sandgym_swe_guard.GUARD_EXIT: the records channel was tampered with
SETUP_EXIT = 70  # the launcher could not set the test process up
PR_SET_DUMPABLE, PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 4, 1, 24, 38
CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID = 0x00020000, 0x10000000, 0x20000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND = 1, 2, 4, 8, 32, 4096
MS_REC, MS_PRIVATE = 0x4000, 1 << 18
ST_LOCKED_FLAGS = {os.ST_NOSUID: MS_NOSUID, os.ST_NODEV: MS_NODEV, os.ST_NOEXEC: MS_NOEXEC, os.ST_RDONLY: MS_RDONLY}
LINUX_CAPABILITY_VERSION_3 = 0x20080522
GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "LANG": "C"}


class InfraError(Exception):
    """The runner could not do its job: not the tests' doing."""


# -- processes ---------------------------------------------------------------------------------


def libc():
    return ctypes.CDLL(None, use_errno=True)


def not_dumpable():
    try:
        libc().prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError):
        pass


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _check(ret, what):
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _remount(lib, path, add):
    """Remount the mount at `path` with `add` flags, keeping the ones that are locked."""
    keep = 0
    for st_flag, ms_flag in ST_LOCKED_FLAGS.items():
        if os.statvfs(path).f_flag & st_flag:
            keep |= ms_flag
    return lib.mount(None, path.encode(), None, MS_REMOUNT | MS_BIND | keep | add, None) == 0


def enter_namespaces(repo, noexec, readonly, report):
    """Become PID 1 of new user, PID and mount namespaces (the calling process
    stays outside as a relay, waits and exits with the inner status), with a
    /proc of its own, `repo` read-only, `noexec` paths not executable, no
    capabilities. `report(dict)` tells the runner how it went.

    (The code family's candidate_host.enter_namespaces does the same; the
    two boundary folders are mounted apart and cannot import each other.)"""
    lib = libc()
    _check(lib.unshare(CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS), "unshare")
    pid = os.fork()
    if pid:
        os.closerange(3, 1 << 16)  # the relay holds nothing of the run
        status = os.waitpid(pid, 0)[1]
        code = os.waitstatus_to_exitcode(status)
        os._exit(code if code >= 0 else 128 - code)
    _check(lib.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl")
    os.setsid()  # kill(0, ...) from inside reaches nothing outside
    done: dict = {"isolation": "pidns", "proc": False, "readonly": readonly, "noexec": []}
    # gVisor refuses some of these mounts; what could not be done is reported.
    if lib.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) == 0:
        done["proc"] = lib.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None) == 0
        if lib.mount(repo.encode(), repo.encode(), None, MS_BIND | MS_REC, None) == 0 and _remount(
            lib, repo, MS_RDONLY | MS_NOEXEC | MS_NOSUID | MS_NODEV
        ):
            done["readonly"] = "bind" if readonly == "none" else f"bind+{readonly}"
        for path in noexec:
            if os.path.ismount(path) and _remount(lib, path, MS_NOEXEC | MS_NOSUID | MS_NODEV):
                done["noexec"].append(path)
    _check(lib.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    for cap in range(64):
        if lib.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            break  # past the last capability this kernel knows
    _check(lib.capset(ctypes.byref(_CapHeader(LINUX_CAPABILITY_VERSION_3, 0)), (_CapData * 2)()), "capset")
    report(done)


class Launcher:
    """The process that becomes pytest. Forked before the job is read; it
    waits for its spec on a pipe, sets itself up and execs."""

    def __init__(self):
        self.spec_open = True
        self.spec_r, self.spec_w = os.pipe()
        self.status_r, self.status_w = os.pipe2(os.O_CLOEXEC)
        self.channel_r, self.channel_w = os.pipe()
        self.secrets_r, self.secrets_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            code = SETUP_EXIT
            try:
                self._child()
            except BaseException:
                try:
                    self._report({"error": traceback.format_exc()[-1500:]})
                except OSError:
                    pass
            finally:
                os._exit(code)
        for fd in (self.spec_r, self.status_w, self.channel_w, self.secrets_r):
            os.close(fd)
        # Readable once the launcher exits, so its end is seen at once (None: poll).
        self.exit_fd = None
        try:
            self.exit_fd = os.pidfd_open(self.pid)
        except (AttributeError, OSError):
            pass

    def wait(self, timeout):
        """The launcher's wait status once it exits within `timeout` s, else None."""
        until = time.monotonic() + timeout
        while True:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                return status
            left = until - time.monotonic()
            if left <= 0:
                return None
            if self.exit_fd is not None:
                select.select([self.exit_fd], [], [], left)
            else:
                time.sleep(min(0.002, left))

    def _report(self, obj):
        os.write(self.status_w, (json.dumps(obj) + "\n").encode())

    def _child(self):
        os.setsid()
        for fd in (self.spec_w, self.status_r, self.channel_r, self.secrets_w):
            os.close(fd)
        raw = b""
        while chunk := os.read(self.spec_r, 1 << 16):
            raw += chunk
        os.close(self.spec_r)
        if not raw:
            os._exit(0)  # nothing to run
        spec = json.loads(raw)
        null = os.open(os.devnull, os.O_RDONLY)
        log = os.open(spec["log"], os.O_WRONLY | os.O_APPEND)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.chdir(spec["cwd"])
        if spec["isolation"] == "pidns":
            enter_namespaces(spec["repo"], spec["noexec"], spec["readonly"], self._report)
        else:
            self._report({"isolation": "process", "proc": False, "readonly": spec["readonly"], "noexec": []})
        keep = sorted({self.channel_w, self.secrets_r, self.status_w})
        low = 3
        for fd in keep:
            os.closerange(low, fd)
            low = fd + 1
        os.closerange(low, 1 << 16)
        os.set_inheritable(self.channel_w, True)
        os.set_inheritable(self.secrets_r, True)
        env = dict(spec["env"], SANDGYM_SWE_CHANNEL_FD=str(self.channel_w), SANDGYM_SWE_SECRETS_FD=str(self.secrets_r))
        os.execve(spec["argv"][0], spec["argv"], env)

    def send(self, spec):
        """Let the test process start: it sets itself up, execs and imports
        pytest while the runner prepares the tree, then waits for its secrets."""
        data = json.dumps(spec).encode()
        while data:
            data = data[os.write(self.spec_w, data) :]
        os.close(self.spec_w)
        self.spec_open = False

    def started(self):
        """How the test process was set up, once it has exec'd."""
        report = b""
        while chunk := os.read(self.status_r, 1 << 16):
            report += chunk  # ends when the test process execs (close-on-exec) or dies
        os.close(self.status_r)
        messages = [json.loads(line) for line in report.decode("utf-8", "replace").splitlines() if line.strip()]
        for m in messages:
            if "error" in m:
                raise InfraError(f"the test process could not be set up: {m['error']}")
        if not messages:
            raise InfraError("the test process could not be set up: it said nothing")
        return messages[-1]

    def cancel(self):
        """No test run after all (the diff did not apply): the test process,
        which has no secrets yet and ran nothing of the repository, is ended."""
        if self.spec_open:
            os.close(self.spec_w)
            self.spec_open = False
        os.close(self.secrets_w)
        self.kill()
        os.waitpid(self.pid, 0)

    def kill(self):
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


# -- the tree ----------------------------------------------------------------------------------


def manifest(repo):
    """{relative path: signature} of every non-directory entry under `repo`.
    Only `git apply` (or GNU patch) changes the tree between two manifests, and
    each writes a changed file anew: type, mode, size, inode and mtime tell every change."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(repo):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            if stat.S_ISDIR(st.st_mode):
                continue
            kind = "file" if stat.S_ISREG(st.st_mode) else "symlink" if stat.S_ISLNK(st.st_mode) else "special"
            out[os.path.relpath(path, repo)] = (kind, st.st_mode, st.st_size, st.st_ino, st.st_mtime_ns)
    return out


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def inside(repo, rel):
    path = os.path.normpath(os.path.join(repo, rel))
    if not (path + "/").startswith(repo.rstrip("/") + "/") or path == repo.rstrip("/"):
        raise InfraError(f"path outside the repository: {rel!r}")
    return path


def _apply_cmd(repo, work, argv):
    env = dict(GIT_ENV, PATH=os.environ.get("PATH", "/usr/bin:/bin"), HOME=work)
    env["GIT_CEILING_DIRECTORIES"] = os.path.dirname(repo.rstrip("/"))
    r = subprocess.run(argv, cwd=repo, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=120)
    return r.returncode == 0, (r.stderr + r.stdout).decode("utf-8", "replace")[-2000:]


def _write_patch(work, patch, name):
    path = os.path.join(work, name)
    with open(path, "w", encoding="utf-8", errors="surrogateescape") as f:
        f.write(patch)
    return path


def git_apply(repo, work, patch, name):
    path = _write_patch(work, patch, name)
    return _apply_cmd(repo, work, ["git", "apply", "--verbose", "--whitespace=nowarn", path])


# SWE-bench's chain (swebench 5.0.2, harness/run_evaluation.py GIT_APPLY_CMDS),
# each command on the pristine tree; the first to exit 0 wins.
SWEBENCH_APPLY = (
    ("git", "apply", "--verbose"),
    ("git", "apply", "--verbose", "--3way"),
    ("git", "apply", "--verbose", "--reject"),
    ("patch", "--batch", "--forward", "--fuzz=5", "-p1", "-i"),
)


def swebench_apply(repo, work, patch, name):
    """Apply `patch` as SWE-bench does. `git apply` alone changes nothing when
    it fails; the fallbacks can leave half a patch (--3way, --reject) behind,
    so each is tried on a copy of the tree and only the winner is replayed
    on the tree itself. Nothing applied and the patch already in the tree
    (`git apply --check --reverse`) counts as applied, as in SWE-bench."""
    path = _write_patch(work, patch, name)
    logs = []
    for i, cmd in enumerate(SWEBENCH_APPLY):
        argv = [*cmd, path]
        if i == 0:
            ok, log = _apply_cmd(repo, work, argv)
        else:
            trial = os.path.join(tempfile.mkdtemp(prefix="sg-apply-", dir=work), "repo")
            shutil.copytree(repo, trial, symlinks=True)
            ok, log = _apply_cmd(trial, work, argv)
            shutil.rmtree(os.path.dirname(trial), ignore_errors=True)
            if ok:
                ok, log = _apply_cmd(repo, work, argv)
        logs.append(f"$ {' '.join(cmd)}\n{log}")
        if ok:
            return True, log
    ok, _ = _apply_cmd(repo, work, ["git", "apply", "--check", "--reverse", path])
    if ok:
        return True, "already applied (git apply --check --reverse)"
    return False, "\n".join(logs)[-2000:]


def unpack(tree, dest):
    """Write the start tree (a tar of folders and regular files from the host) under `dest`."""
    import io
    import tarfile

    try:
        with tarfile.open(fileobj=io.BytesIO(tree), mode="r:") as tar:
            for m in tar:
                path = inside(dest, m.name)
                if m.isdir():
                    os.makedirs(path, exist_ok=True)
                elif m.isfile():
                    os.makedirs(os.path.dirname(path), exist_ok=True)
                    src = tar.extractfile(m)
                    if src is None:
                        raise InfraError(f"the start tree's {m.name!r} cannot be read")
                    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                    os.fchmod(fd, m.mode & 0o755)
                    with open(fd, "wb") as f:
                        shutil.copyfileobj(src, f)
                else:
                    raise InfraError(f"the start tree holds {m.name!r}, which is not a file or folder")
    except (OSError, tarfile.TarError) as e:
        raise InfraError(f"the start tree could not be written: {e}") from None


def prepare(repo, work, prep, answer):
    """Apply the diff and the test patch, add the sentinels. False: do not run."""
    diff = prep.get("diff")
    legacy = prep.get("legacy", {})
    if diff:
        before = manifest(repo)
        apply = swebench_apply if prep.get("apply") == "swebench" else git_apply
        ok, log = apply(repo, work, diff, "agent.diff")
        if not ok:
            answer["apply_failed"] = {"which": "diff", "log": log}
            return False
        after = manifest(repo)
        changes = []
        for rel in sorted(set(before) | set(after)):
            old, new = before.get(rel), after.get(rel)
            if old == new:
                continue
            what = "added" if old is None else "removed" if new is None else "modified"
            if new is not None and new[0] != "file":
                what = new[0]  # a symlink or a special file
            changes.append([rel, what])
        answer["tree_changes"] = changes
        answer["changed"] = {os.path.join(repo, rel): legacy.get(rel, []) for rel, what in changes if what != "removed"}
    for rel in prep.get("remove", []):
        path = inside(repo, rel)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        elif os.path.lexists(path):
            os.unlink(path)
    if prep.get("test_patch"):
        ok, log = git_apply(repo, work, prep["test_patch"], "test.diff")
        if not ok:
            answer["apply_failed"] = {"which": "test", "log": log}
            return False
    # Stale bytecode would be run instead of the source the verifier applied.
    for dirpath, dirnames, filenames in os.walk(repo):
        if "__pycache__" in dirnames:
            shutil.rmtree(os.path.join(dirpath, "__pycache__"))
            dirnames.remove("__pycache__")
        for name in filenames:
            if name.endswith((".pyc", ".pyo")):
                os.unlink(os.path.join(dirpath, name))
    for sentinel in prep.get("sentinels", []):
        path = inside(repo, sentinel["file"])
        if os.path.isfile(path) and not os.path.islink(path):
            with open(path, "rb") as f:
                text = f.read()
            with open(path, "ab") as f:
                f.write((b"" if text.endswith(b"\n") or not text else b"\n") + sentinel["code"].encode())
    return True


def hash_files(repo, rels):
    out = {}
    for rel in rels:
        path = inside(repo, rel)
        if os.path.isfile(path) and not os.path.islink(path):
            out[path] = sha256_file(path)
    return out


def chmod_tree(repo, writable):
    """Take (or give back) write permission on the repository's files."""
    for dirpath, dirnames, filenames in os.walk(repo):
        for name in [*filenames, *dirnames, None]:
            path = dirpath if name is None else os.path.join(dirpath, name)
            if os.path.islink(path):
                continue
            mode = os.lstat(path).st_mode
            os.chmod(path, (mode | 0o200) if writable else (mode & ~0o222))


def test_files(repo, tests):
    """The files holding `tests` (node ids), those that exist, in order."""
    seen = []
    for t in tests:
        path = t.split("::", 1)[0]
        if path not in seen and os.path.exists(os.path.join(repo, path)):
            seen.append(path)
    return seen


# -- the records channel -----------------------------------------------------------------------


class Channel:
    """Reads the guard's lines and keeps those whose MAC and sequence check out."""

    def __init__(self, fd, key):
        self.fd, self.key = fd, key
        self.buf = bytearray()
        self.size = 0
        self.records = []
        self.problems = []
        self.seq = 0
        self.marks = {}  # when the first armed / collected / finish record arrived (for the phases)

    def feed(self, chunk):
        self.size += len(chunk)
        if self.size > MAX_RECORDS:
            if not any("larger than" in p for p in self.problems):
                self.problems.append(f"the records channel carried more than {MAX_RECORDS} bytes")
            return
        self.buf += chunk
        while (end := self.buf.find(b"\n")) >= 0:
            line = bytes(self.buf[:end])
            del self.buf[: end + 1]
            self._line(line)

    def _line(self, line):
        if self.problems:
            return  # after a bad line nothing on the channel is believed
        parts = line.split(b" ", 2)
        if len(parts) != 3:
            self.problems.append(f"an unsigned line on the records channel: {line[:200]!r}")
            return
        mac, seq, body = parts
        want = hashlib.blake2b(seq + b" " + body, key=self.key, digest_size=16).hexdigest().encode()
        if not hmac.compare_digest(mac, want):
            self.problems.append(f"a line with a wrong MAC on the records channel: {line[:200]!r}")
            return
        if seq != str(self.seq).encode():
            self.problems.append(f"record {seq!r} arrived where record {self.seq} was due")
            return
        self.seq += 1
        try:
            record = json.loads(body)
        except ValueError:
            self.problems.append("a signed record that is not JSON")
            return
        self.records.append(record)
        kind = record.get("kind") if isinstance(record, dict) else None
        if kind in ("armed", "collected", "finish") and kind not in self.marks:
            self.marks[kind] = time.monotonic()

    def close(self):
        if self.buf and not self.problems:
            self.problems.append(f"a partial line at the end of the records channel: {bytes(self.buf[:200])!r}")


# -- one run -----------------------------------------------------------------------------------


def run(job, tree, launcher, answer):
    repo = job["repo"].rstrip("/")
    tests = job.get("tests")
    work = tempfile.mkdtemp(prefix="sg-run-")
    prep = job.get("prepare")
    t0 = time.monotonic()
    phases = answer["phases"] = {}
    os.makedirs(repo, exist_ok=True)  # the test process's cwd and read-only bind, filled below
    readonly = "chmod" if job.get("readonly") else "none"
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
    home, tmp = tempfile.mkdtemp(prefix="sg-home-"), tempfile.mkdtemp(prefix="sg-tmp-")
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": home,
        "LANG": "C.UTF-8",
        "TMPDIR": tmp,
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
    log_path = os.path.join(work, "output.log")
    open(log_path, "wb").close()
    # -s -P, not -I: the environment is this one, built from nothing above,
    # and -I (its -E) would drop PYTHONHASHSEED, which keeps parametrize ids
    # made from sets and dicts the same from run to run.
    child = os.path.join(HERE, "pytest_child.py")
    argv = [job["python"], "-s", "-P", child, repo, job.get("import_root", "."), *args]
    writable = [p for p in ("/tmp", os.path.dirname(repo), "/dev/shm") if os.path.isdir(p)]
    spec = {
        "argv": argv,
        "env": env,
        "cwd": repo,
        "log": log_path,
        "repo": repo,
        "isolation": job.get("isolation", "pidns"),
        "readonly": readonly,
        "noexec": writable,
    }
    # The test process starts now (namespaces, interpreter, pytest's import) and
    # waits for its secrets; nothing of the repository runs before they come,
    # and they come once the tree below is final.
    launcher.send(spec)
    if tree:
        unpack(tree, os.path.dirname(repo))
    phases["unpack_s"] = round(time.monotonic() - t0, 4)
    if prep is not None and not prepare(repo, work, prep, answer):
        launcher.cancel()
        return
    phases["apply_s"] = round(time.monotonic() - t0, 4)
    protected = list(prep.get("protected", [])) if prep else []
    sentinel_files = [s["file"] for s in prep.get("sentinels", [])] if prep else []
    hashes = hash_files(repo, dict.fromkeys(protected + sentinel_files))
    # Read-only by mode too: where the read-only bind is refused (gVisor may),
    # or with no namespaces (docker runc), modes are what is left.
    if readonly == "chmod":
        chmod_tree(repo, writable=False)
    # With no listed file left, the whole suite is collected and every item
    # deselected: zero collected, an invalid log.
    files = test_files(repo, tests) if tests is not None else []
    key = secrets.token_bytes(32)
    start = time.monotonic()
    phases["prepare_s"] = round(start - t0, 4)
    setup = launcher.started()
    phases["setup_s"] = round(time.monotonic() - start, 4)  # what the preparation did not hide
    answer["isolation"] = setup
    start = time.monotonic()
    secrets_blob = json.dumps(
        {"key": key.hex(), "repo": repo, "tests": hashes, "changed": answer.get("changed", {}), "files": files}
    ).encode()
    try:
        while secrets_blob:
            secrets_blob = secrets_blob[os.write(launcher.secrets_w, secrets_blob) :]
    except BrokenPipeError:
        pass  # the test process is gone already; its exit status says how
    os.close(launcher.secrets_w)
    channel = Channel(launcher.channel_r, key)
    timed_out = False
    deadline = start + float(job["timeout_s"])
    exited_at = None
    status = None
    while True:
        now = time.monotonic()
        if now >= deadline:
            timed_out = True
            break
        if exited_at is None:
            pid, st = os.waitpid(launcher.pid, os.WNOHANG)
            if pid:
                status, exited_at = st, now
        if exited_at is not None and now - exited_at > DRAIN_S:
            break
        watch = [launcher.channel_r]
        if exited_at is None and launcher.exit_fd is not None:
            watch.append(launcher.exit_fd)
        ready, _, _ = select.select(watch, [], [], min(0.2, deadline - now))
        if launcher.channel_r in ready:
            chunk = os.read(launcher.channel_r, 1 << 16)
            if not chunk:
                break  # every writer is gone
            channel.feed(chunk)
    if status is None and not timed_out:
        # The channel closed: the test process is on its way out.
        status = launcher.wait(DRAIN_S)
    launcher.kill()
    if status is None:
        status = os.waitpid(launcher.pid, 0)[1]
    channel.close()
    ended = time.monotonic()
    phases["tests_s"] = round(ended - start, 4)
    # Where the test process's time went, from when its records arrived.
    marks = [start, *(channel.marks.get(k) for k in ("armed", "collected", "finish")), ended]
    for name, a, b in zip(("start_s", "collect_s", "run_s", "exit_s"), marks[:-1], marks[1:], strict=True):
        if a is not None and b is not None:
            phases[name] = round(b - a, 4)
    os.close(launcher.channel_r)
    if launcher.exit_fd is not None:
        os.close(launcher.exit_fd)
    code = os.waitstatus_to_exitcode(status)
    if readonly == "chmod":
        chmod_tree(repo, writable=True)
    after = hash_files(repo, dict.fromkeys(protected + sentinel_files))
    answer["test_file_changes"] = sorted(
        os.path.relpath(p, repo) for p in set(hashes) | set(after) if hashes.get(p) != after.get(p)
    )
    with open(log_path, "rb") as f:
        f.seek(max(0, os.path.getsize(log_path) - OUTPUT_TAIL))
        tail = f.read().decode("utf-8", "replace")
    phases["after_s"] = round(time.monotonic() - ended, 4)
    answer.update(
        {
            "exit_code": code if code >= 0 else 128 - code,
            "signal": -code if code < 0 else 0,
            "timed_out": timed_out,
            "duration_s": round(time.monotonic() - start, 3),
            "records": channel.records,
            "channel_problems": channel.problems,
            "output": tail,
        }
    )


def main():
    not_dumpable()
    launcher = Launcher()  # before the job (and its nonce) is in this process
    raw = sys.stdin.buffer.read()
    head, _, tree = raw.partition(b"\n")  # the job, then the start tree (a tar) if the host sent it
    del raw
    job = json.loads(head)
    answer = {"nonce": job["nonce"]}
    try:
        run(job, tree, launcher, answer)
    except InfraError as e:
        answer["infra_error"] = str(e)
        launcher.kill()
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()
