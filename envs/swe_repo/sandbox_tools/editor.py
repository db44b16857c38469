"""The view / str_replace / create tools, run inside the agent's sandbox.

`python3 -I -S editor.py` with a JSON request on stdin: {op, path, ...};
prints one JSON line {ok, text}. Standard library only. Relative paths are
relative to the repository; nothing here is a security boundary (it runs
with the agent's own rights in the agent's own sandbox).
"""

import json
import os
import sys

REPO = "/workspace/repo"
VIEW_MAX_LINES = 400
LIST_MAX = 300


def resolve(path):
    if not isinstance(path, str) or not path.strip():
        raise ValueError("`path` is required: a file path, relative to /workspace/repo or absolute")
    return os.path.normpath(path if os.path.isabs(path) else os.path.join(REPO, path))


def read_text(path):
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ValueError(f"{path}: is a folder") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not a UTF-8 text file; use bash to inspect it") from None


def listing(path):
    lines = [f"{path}/ (folders end with /; .git is left out)"]
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames[:] = sorted(d for d in dirnames if d not in (".git", "__pycache__"))
        depth = os.path.relpath(dirpath, path).count(os.sep) + (dirpath != path)
        if depth >= 2:
            dirnames[:] = []
        rel = os.path.relpath(dirpath, path)
        prefix = "" if rel == "." else rel + "/"
        for d in dirnames:
            lines.append(f"  {prefix}{d}/")
        for name in sorted(filenames):
            lines.append(f"  {prefix}{name}")
        if len(lines) > LIST_MAX:
            lines.append("  ... (more entries; use bash `find` to see all)")
            break
    return "\n".join(lines)


def view(req):
    path = resolve(req.get("path"))
    if os.path.isdir(path):
        return listing(path)
    lines = read_text(path).split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    n = len(lines)
    start, end = req.get("start"), req.get("end")
    start = 1 if start is None else int(start)
    if end is None or int(end) == -1:
        end = n if req.get("start") is not None else min(n, VIEW_MAX_LINES)
    end = int(end)
    if n == 0:
        return f"{path}: empty file"
    if not 1 <= start <= n:
        raise ValueError(f"start line {start} is outside the file (it has {n} lines)")
    if end < start:
        raise ValueError(f"end line {end} is before start line {start}")
    end = min(end, n)
    width = len(str(end))
    body = "\n".join(f"{i:>{width}}\t{lines[i - 1]}" for i in range(start, end + 1))
    note = ""
    if end < n:
        note = f"\n[lines {start}-{end} of {n}; ask for a range to see more]"
    return f"{path} (lines {start}-{end} of {n}):\n{body}{note}"


def snippet(text, index, length, path):
    first = text.count("\n", 0, index) + 1
    last = first + text.count("\n", index, index + length)
    lines = text.split("\n")
    lo, hi = max(1, first - 3), min(len(lines), last + 3)
    body = "\n".join(f"{i:>{len(str(hi))}}\t{lines[i - 1]}" for i in range(lo, hi + 1))
    return f"{path} edited; lines {lo}-{hi} now read:\n{body}"


def str_replace(req):
    path = resolve(req.get("path"))
    old, new = req.get("old"), req.get("new", "")
    if not isinstance(old, str) or old == "":
        raise ValueError("`old` must be the exact, non-empty text to replace")
    if not isinstance(new, str):
        raise ValueError("`new` must be text")
    text = read_text(path)
    count = text.count(old)
    if count == 0:
        raise ValueError(
            f"no match for `old` in {path}: the text must match exactly, whitespace and "
            "indentation included; view the file to copy it"
        )
    if count > 1:
        starts, at = [], text.find(old)
        while at != -1:
            starts.append(text.count("\n", 0, at) + 1)
            at = text.find(old, at + 1)
        raise ValueError(
            f"`old` occurs {count} times in {path} (lines {', '.join(map(str, starts[:20]))}); "
            "include more surrounding lines so it matches once"
        )
    index = text.find(old)
    updated = text[:index] + new + text[index + len(old) :]
    with open(path, "w", encoding="utf-8") as f:
        f.write(updated)
    return snippet(updated, index, len(new), path)


def create(req):
    path = resolve(req.get("path"))
    content = req.get("content")
    if not isinstance(content, str):
        raise ValueError("`content` must be the file's text")
    if os.path.isdir(path):
        raise ValueError(f"{path} is a folder")
    existed = os.path.exists(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(content)
    lines = content.count("\n") + (not content.endswith("\n") and content != "")
    return f"{'overwrote' if existed else 'created'} {path} ({lines} lines)"


OPS = {"view": view, "str_replace": str_replace, "create": create}


def main():
    req = json.loads(sys.stdin.buffer.read())
    try:
        text = OPS[req["op"]](req)
        out = {"ok": True, "text": text}
    except (ValueError, OSError) as e:
        out = {"ok": False, "text": str(e)}
    sys.stdout.write(json.dumps(out) + "\n")


main()
