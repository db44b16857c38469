"""Inside a sandbox: the digests of every file an agent there could read.

Run as `python3 -I -S -c SOURCE` in a task's agent sandbox by the audit
(audit.py), standard library only. Reads one JSON line on stdin:
{"roots": [...], "skip": [...], "max_bytes": N} and writes one JSON line
per readable thing: {"p": where, "r": digest of the bytes, "n": digest
after whitespace normalisation (text only)}. It knows nothing of the task:
the host compares the digests with those of the task's hidden data.

Seen: every regular file under the roots (symlinks not followed, /proc and
the other `skip` paths left out), every member of a zip or tar archive
among them, and every blob in the object store of every git repository
among them (`git cat-file --batch-all-objects`: reachable from any ref,
tag, stash or reflog, packed or loose, or unreachable).
"""

import hashlib
import json
import os
import stat
import subprocess
import sys
import tarfile
import zipfile

DIGEST_HEX = 32
ARCHIVES_ZIP = (".zip", ".whl", ".egg", ".jar", ".pyz")
ARCHIVES_TAR = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz")


def digests(data):
    raw = hashlib.sha256(data).hexdigest()[:DIGEST_HEX]
    if b"\0" in data[:8192]:
        return raw, ""
    return raw, hashlib.sha256(b"".join(data.split())).hexdigest()[:DIGEST_HEX]


def emit(where, data):
    r, n = digests(data)
    sys.stdout.write(json.dumps({"p": where, "r": r, "n": n}) + "\n")


def scan_zip(path, max_bytes):
    try:
        with zipfile.ZipFile(path) as z:
            for info in z.infolist():
                if not info.is_dir() and info.file_size <= max_bytes:
                    emit(f"{path}!{info.filename}", z.read(info))
    except Exception:  # not an archive after all, or a broken one
        pass


def scan_tar(path, max_bytes):
    try:
        with tarfile.open(path) as t:
            for m in t:
                if m.isfile() and m.size <= max_bytes:
                    f = t.extractfile(m)
                    if f is not None:
                        emit(f"{path}!{m.name}", f.read())
    except Exception:
        pass


def scan_git(git_dir, max_bytes):
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": "/nonexistent",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_DIR": git_dir,
    }
    try:
        p = subprocess.Popen(
            ["git", "cat-file", "--batch-all-objects", "--unordered", "--batch"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            env=env,
        )
    except OSError:
        sys.stdout.write(json.dumps({"error": f"git: cannot run for {git_dir}"}) + "\n")
        return
    out = p.stdout
    assert out is not None
    while True:
        header = out.readline()
        if not header:
            break
        parts = header.split()
        if len(parts) != 3:
            break
        oid, kind, size = parts[0].decode(), parts[1], int(parts[2])
        data = out.read(size)
        out.read(1)  # the newline after each object
        if kind == b"blob" and size <= max_bytes:
            emit(f"git:{git_dir}:{oid}", data)
    p.wait()


def is_git_dir(path, names):
    return "objects" in names and "HEAD" in names and "refs" in names


def main():
    job = json.loads(sys.stdin.readline())
    max_bytes = job["max_bytes"]
    skip = set(job["skip"])
    for root in job["roots"]:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if os.path.join(dirpath, d) not in skip)
            if is_git_dir(dirpath, set(dirnames) | set(filenames)):
                scan_git(dirpath, max_bytes)
            for name in filenames:
                path = os.path.join(dirpath, name)
                if path in skip:
                    continue
                try:
                    st = os.lstat(path)
                    if not stat.S_ISREG(st.st_mode) or st.st_size > max_bytes:
                        continue
                    with open(path, "rb") as f:
                        data = f.read()
                except OSError:
                    continue
                emit(path, data)
                lower = name.lower()
                if lower.endswith(ARCHIVES_ZIP):
                    scan_zip(path, max_bytes)
                elif lower.endswith(ARCHIVES_TAR):
                    scan_tar(path, max_bytes)
    sys.stdout.write(json.dumps({"done": True}) + "\n")


if __name__ == "__main__":  # (as `python3 -c SOURCE` too)
    main()
