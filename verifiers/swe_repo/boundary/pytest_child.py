"""Starts pytest for the runner: `python -s -P pytest_child.py REPO IMPORT_ROOT ARGS...`.

Run with no user site and no script folder, in an environment the runner
built from nothing (its PYTHON* variables are the runner's: no user site,
no bytecode written, a fixed hash seed). Before any code of the repository is imported:

1. pytest, pluggy and the records plugin are imported from the venv and
   this folder, so that a module in the repository cannot stand in for them
   (the runner is still preparing the tree meanwhile: nothing of it is read);
2. the per-run secrets come from a pipe the runner fills once the tree is
   final (the MAC key, the hashes of the test files, which files the diff
   changed, the test files to collect); the pipe is closed and the
   variables naming the descriptors are dropped;
3. the guard (sandgym_swe_guard.py) is armed: an audit hook that cannot
   be removed and is the only writer of the records channel. `_arm`
   returns only the test files to collect; the key lives on only in the
   hook's closure.

Then the repository's import root goes on sys.path, after the standard
library (a module of the repository cannot shadow one of it), pytest runs,
and the process ends with pytest's exit status without tearing down.
"""

import os
import sys

sys.dont_write_bytecode = True  # whatever the environment says
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def _arm():
    import json

    secrets_fd = int(os.environ.pop("SANDGYM_SWE_SECRETS_FD"))
    channel_fd = int(os.environ.pop("SANDGYM_SWE_CHANNEL_FD"))
    os.set_inheritable(channel_fd, False)

    # Imported while the runner still prepares the tree (nothing of it is read yet).
    import pytest  # noqa: F401
    import sandgym_swe_guard
    import sandgym_swe_records  # pinned in sys.modules; -p finds this one

    chunks = []
    while True:
        chunk = os.read(secrets_fd, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(secrets_fd)
    if not chunks:
        os._exit(0)  # no run after all (the diff did not apply)
    cfg = json.loads(b"".join(chunks))
    key = bytes.fromhex(cfg.pop("key"))
    files = cfg.pop("files")

    sandgym_swe_guard.arm(key, channel_fd, cfg, sandgym_swe_records)
    # The hook's globals are this module's: nothing the hook reads at run time.
    del sys.modules["sandgym_swe_guard"]
    return files


_files = _arm()
del _arm

repo, import_root = sys.argv[1], sys.argv[2]
root = os.path.normpath(os.path.join(repo, import_root))
site = [i for i, p in enumerate(sys.path) if p.endswith("-packages")]
sys.path.insert(site[0] if site else len(sys.path), root)
os.chdir(repo)

import pytest  # noqa: E402

code = int(pytest.main(sys.argv[3:] + _files))
# Out at once: the verdict's records are written, so nothing the tests left
# behind (atexit handlers, finalizers) runs after them, and the interpreter's
# teardown is not waited for.
for stream in (sys.stdout, sys.stderr):
    try:
        stream.flush()
    except (OSError, ValueError):
        pass
os._exit(code)
