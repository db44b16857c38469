"""Compiled programs kept in memory, by content, for `/run_code`.

A request whose language compiles and which sends no `files` compiles its
source alone: the key is a hash of everything that decides the compiler's
output (the image's tag, which names its toolchains; the language's
compile command, environment and extra files; the source), and the entry
is what the compile left in the workspace (its files, with their modes)
and the compile's own result. A later request with the same key gets the
files unpacked into its own fresh sandbox and skips the compile.

Why one request cannot poison another's result:
- only an exact key match is served, and the key covers every input the
  compile reads (requests with `files` are never cached: a header, a
  classpath entry or an annotation processor there could change the
  output without changing the source);
- an entry is taken right after a compile that exited 0 in time, in the
  request's own fresh sandbox, before any program of the request ran:
  what is cached is the compiler's output on that source, nothing else;
- entries live in the server's memory (never on disk, never shared with
  another server) and are unpacked only into a new sandbox, as the
  request's own files would be.
What it does not promise: a compiler whose output depends on the clock
(`__DATE__`, `__TIME__`) gives the first compile's value to later
requests of the same source.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import threading
from collections import OrderedDict
from dataclasses import dataclass

from .languages import Language

MAX_ENTRY_BYTES = 64 << 20
DEFAULT_MAX_BYTES = 256 << 20


@dataclass(frozen=True)
class CompiledEntry:
    archive: bytes  # a tar of the files the compile left, modes kept
    stdout: str
    stderr: str
    execution_time: float


def cache_key(lang: Language, source: str, image: str) -> str:
    canon = json.dumps(
        {
            "image": image,
            "language": lang.name,
            "compile": lang.compile,
            "run": lang.run,
            "env": lang.env,
            "extra_files": lang.extra_files,
            "source": source,
        },
        sort_keys=True,
    )
    return hashlib.sha256(canon.encode()).hexdigest()


def produced_files(workspace_tar: bytes, inputs: set[str]) -> bytes | None:
    """A tar of the regular files in `workspace_tar` (the workspace after
    the compile) that are not among `inputs`, with their permission bits;
    None when they are over MAX_ENTRY_BYTES."""
    out = io.BytesIO()
    total = 0
    with (
        tarfile.open(fileobj=io.BytesIO(workspace_tar), mode="r:") as src,
        tarfile.open(fileobj=out, mode="w") as dst,
    ):
        for member in src:
            name = member.name.split("/", 1)[1] if "/" in member.name else ""
            if not member.isfile() or not name or name in inputs:
                continue
            total += member.size
            if total > MAX_ENTRY_BYTES:
                return None
            f = src.extractfile(member)
            info = tarfile.TarInfo(name)
            info.size = member.size
            info.mode = member.mode & 0o755
            info.mtime = member.mtime
            dst.addfile(info, f)
    return out.getvalue()


class CompileCache:
    """Least recently used entries up to `max_bytes` in all; thread-safe."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, CompiledEntry] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, key: str) -> CompiledEntry | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return entry

    def put(self, key: str, entry: CompiledEntry) -> None:
        size = len(entry.archive)
        if size > self.max_bytes:
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= len(old.archive)
            self._entries[key] = entry
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, dropped = self._entries.popitem(last=False)
                self._bytes -= len(dropped.archive)
