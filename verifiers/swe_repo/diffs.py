"""Git diffs, parsed fail-closed.

The env takes the agent's diff with its own git configuration and fixed
a/ b/ prefixes; here it is cut into per-file sections and each section is
read exactly: its `diff --git` header, extended headers (modes, renames,
copies, index), `---`/`+++` lines, and every hunk against its line counts,
or a binary patch. A section that cannot be read exactly carries a
`problem` and is never applied (`path_policy.filter_diff` drops it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass
class FileDiff:
    paths: tuple[str, ...]  # every path the section names (old and new), without the a/ b/ prefix
    text: str
    adds_file: bool = False
    symlink: bool = False
    problem: str = ""  # why the section cannot be read exactly; such a section is never applied


_MODES = {"100644", "100755"}
_EXT_HEADER = re.compile(
    r"^(?:(old mode|new mode|deleted file mode|new file mode) ([0-7]{6})"
    r"|(copy from|copy to|rename from|rename to) (.+)"
    r"|(similarity index|dissimilarity index) \d{1,3}%"
    r"|index [0-9a-f]{4,64}\.\.[0-9a-f]{4,64}(?: ([0-7]{6}))?)$"
)
HUNK_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_BINARY_SIZE = re.compile(r"^(literal|delta) \d+$")
_BASE85 = re.compile(r"^[A-Za-z][0-9A-Za-z!#$%&()*+\-;<=>?@^_`{|}~]+$")
_C_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}
_PREFIX_PAIRS = (("a/", "b/"), ("b/", "a/"))  # git diff, git diff -R


class _Unreadable(Exception):
    pass


def _unquote(token: str) -> str:
    """A path as git writes it: plain, or C-quoted with octal escapes for bytes."""
    if not token.startswith('"'):
        return token
    if len(token) < 2 or not token.endswith('"'):
        raise _Unreadable(f"unterminated quoted path {token!r}")
    out = bytearray()
    body, i = token[1:-1], 0
    while i < len(body):
        c = body[i]
        if c == '"':
            raise _Unreadable(f"unescaped quote in {token!r}")
        if c != "\\":
            out += c.encode("utf-8", "surrogateescape")
            i += 1
            continue
        nxt = body[i + 1 : i + 2]
        if nxt in _C_ESCAPES:
            out.append(_C_ESCAPES[nxt])
            i += 2
        elif re.fullmatch(r"[0-3][0-7]{2}", body[i + 1 : i + 4]):
            out.append(int(body[i + 1 : i + 4], 8))
            i += 4
        else:
            raise _Unreadable(f"unknown escape in {token!r}")
    return out.decode("utf-8", "surrogateescape")


def _split_quoted(rest: str) -> tuple[str, str] | None:
    """Two C-quoted tokens separated by a space, or None."""
    if not rest.startswith('"'):
        return None
    i = 1
    while i < len(rest):
        if rest[i] == "\\":
            i += 2
            continue
        if rest[i] == '"':
            break
        i += 1
    first, tail = rest[: i + 1], rest[i + 1 :]
    if not tail.startswith(" "):
        raise _Unreadable("no space after the first quoted path")
    return first, tail[1:]


def _strip(name: str, prefix: str) -> str:
    if not name.startswith(prefix):
        raise _Unreadable(f"{name!r} does not start with {prefix!r}")
    return name[len(prefix) :]


def _check_path(path: str) -> str:
    parts = path.split("/")
    if not path or path.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise _Unreadable(f"not a plain relative path: {path!r}")
    if any(p.lower() == ".git" for p in parts):
        raise _Unreadable(f"a path inside .git: {path!r}")
    return path


def _header_names(rest: str, renamed: tuple[str, str] | None) -> tuple[str, str, tuple[str, str]]:
    """(old path, new path, (old prefix, new prefix)) of a `diff --git` header."""
    quoted = _split_quoted(rest)
    if quoted is not None:
        tokens = [_unquote(quoted[0]), _unquote(quoted[1])]
    elif renamed is None:
        # Unquoted names may hold spaces: the header is "P/X Q/X", X the same on both sides.
        if (len(rest) - 5) % 2:
            raise _Unreadable(f"cannot split the header {rest!r}")
        n = (len(rest) - 5) // 2
        tokens = [rest[: n + 2], rest[n + 3 :]]
        if rest[n + 2] != " ":
            raise _Unreadable(f"cannot split the header {rest!r}")
    else:
        for old_p, new_p in _PREFIX_PAIRS:
            if rest == f"{old_p}{renamed[0]} {new_p}{renamed[1]}":
                return renamed[0], renamed[1], (old_p, new_p)
        raise _Unreadable(f"the header {rest!r} does not match its rename/copy lines")
    for old_p, new_p in _PREFIX_PAIRS:
        if tokens[0].startswith(old_p) and tokens[1].startswith(new_p):
            old, new = _strip(tokens[0], old_p), _strip(tokens[1], new_p)
            if renamed is None and old != new:
                raise _Unreadable(f"the header names two paths without a rename: {rest!r}")
            if renamed is not None and (old, new) != renamed:
                raise _Unreadable(f"the header {rest!r} does not match its rename/copy lines")
            return old, new, (old_p, new_p)
    raise _Unreadable(f"unexpected path prefixes in the header {rest!r} (a/ and b/ are expected)")


def _file_line(line: str, marker: str, prefix: str, expected: str, dev_null_ok: bool) -> None:
    name = line[len(marker) :]
    if name.endswith("\t"):  # git ends names holding spaces with a tab
        name = name[:-1]
    if name == "/dev/null":
        if not dev_null_ok:
            raise _Unreadable(f"{marker.strip()} /dev/null where a file is expected")
        return
    if _strip(_unquote(name), prefix) != expected:
        raise _Unreadable(f"{line!r} names another path than the header")


def _parse_section(lines: list[str]) -> FileDiff:
    text = "".join(lines)
    body = [line[:-1] if line.endswith("\n") else line for line in lines]
    section = FileDiff(paths=(), text=text)
    try:
        rest = body[0][len("diff --git ") :]
        i, modes, moves = 1, {}, {}
        while i < len(body) and not body[i].startswith(("--- ", "GIT binary patch", "Binary files ", "@@")):
            m = _EXT_HEADER.match(body[i])
            if not m:
                raise _Unreadable(f"unexpected line in the header: {body[i][:200]!r}")
            if m.group(1):
                modes[m.group(1)] = m.group(2)
            elif m.group(3):
                moves[m.group(3)] = _unquote(m.group(4))
            elif m.group(6):
                modes["index"] = m.group(6)
            i += 1
        renamed = None
        for kind in ("rename", "copy"):
            if f"{kind} from" in moves or f"{kind} to" in moves:
                if f"{kind} from" not in moves or f"{kind} to" not in moves:
                    raise _Unreadable(f"{kind} from/to lines do not pair up")
                renamed = (moves[f"{kind} from"], moves[f"{kind} to"])
        old, new, (old_p, new_p) = _header_names(rest, renamed)
        paths = {_check_path(old), _check_path(new)}
        section.paths = tuple(sorted(paths))
        for what, mode in modes.items():
            if mode == "120000":
                section.symlink = True
            elif mode not in _MODES:
                raise _Unreadable(f"{what} {mode} is not a regular file's mode")
        section.adds_file = "new file mode" in modes
        deleted = "deleted file mode" in modes
        if i == len(body):
            return section  # a mode change, a rename, an empty new file
        if body[i].startswith("Binary files "):
            if i + 1 != len(body):
                raise _Unreadable("lines after a `Binary files` line")
            return section  # git apply refuses it: nothing to apply
        if body[i] == "GIT binary patch":
            i += 1
            blocks = 0
            while i < len(body):
                if not _BINARY_SIZE.match(body[i]):
                    raise _Unreadable(f"unexpected line in a binary patch: {body[i][:200]!r}")
                i += 1
                while i < len(body) and body[i] != "":
                    if not _BASE85.match(body[i]):
                        raise _Unreadable("a binary patch line that is not base85")
                    i += 1
                if i == len(body):
                    raise _Unreadable("a binary patch without its closing blank line")
                i += 1
                blocks += 1
            if blocks not in (1, 2):
                raise _Unreadable("a binary patch without data")
            return section
        if not body[i].startswith("--- ") or i + 1 >= len(body) or not body[i + 1].startswith("+++ "):
            raise _Unreadable("hunks without `---` and `+++` lines")
        _file_line(body[i], "--- ", old_p, old, section.adds_file)
        _file_line(body[i + 1], "+++ ", new_p, new, deleted)
        i += 2
        if i == len(body):
            raise _Unreadable("`---` and `+++` lines without a hunk")
        while i < len(body):
            m = HUNK_HEADER.match(body[i])
            if not m:
                raise _Unreadable(f"expected a hunk header: {body[i][:200]!r}")
            old_n = 1 if m.group(2) is None else int(m.group(2))
            new_n = 1 if m.group(4) is None else int(m.group(4))
            i += 1
            while old_n > 0 or new_n > 0:
                if i >= len(body):
                    raise _Unreadable("a hunk ends before its line counts")
                c = body[i][:1]
                if c in (" ", ""):  # an empty line is an empty context line
                    old_n, new_n = old_n - 1, new_n - 1
                elif c == "-":
                    old_n -= 1
                elif c == "+":
                    new_n -= 1
                elif c != "\\":
                    raise _Unreadable(f"unexpected line in a hunk: {body[i][:200]!r}")
                if old_n < 0 or new_n < 0:
                    raise _Unreadable("a hunk holds more lines than its header says")
                i += 1
            while i < len(body) and body[i].startswith("\\"):
                i += 1
        return section
    except _Unreadable as e:
        section.problem = str(e)
        return section


def split_diff(diff: str) -> list[FileDiff]:
    """Per-file sections of a git diff, each parsed fail-closed (see FileDiff.problem);
    text before the first header is ignored (never applied)."""
    sections: list[list[str]] = []
    for line in diff.splitlines(keepends=True):
        if line.startswith("diff --git "):
            sections.append([line])
        elif sections:
            sections[-1].append(line)
    return [_parse_section(lines) for lines in sections]


def added_paths(patch: str) -> list[str]:
    """The paths `patch` adds."""
    return [p for s in split_diff(patch) if s.adds_file for p in s.paths]


def patch_paths(patch: str) -> list[str]:
    """Every path `patch` names, sorted."""
    return sorted({p for s in split_diff(patch) for p in s.paths})
