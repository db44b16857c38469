"""Issue texts for factory-made SWE tasks, written from failing tests' output.

No model is involved: the text names the package and the function whose
behaviour changed, lists the failing tests, and quotes what pytest said
(the assertion or exception, expected vs actual, and the test's own lines).
It never quotes the patch: traceback frames outside test files are dropped,
and any line that contains a line the mutation changed is removed.
"""

from __future__ import annotations

import re
import shlex

MAX_TESTS_SHOWN = 8
MAX_EXCERPTS = 3
MAX_EXCERPT_LINES = 14

_FRAME = re.compile(r"^(?P<path>[^\s:][^:]*\.py):(?P<line>\d+): in (?P<func>\S+)")


def changed_lines(patch: str) -> list[str]:
    """Stripped text of every line a unified diff adds or removes."""
    out = []
    for line in patch.splitlines():
        if line.startswith(("+++", "---")):
            continue
        if line[:1] in "+-" and line[1:].strip():
            out.append(line[1:].strip())
    return out


def _leaks(line: str, secrets: list[str]) -> bool:
    text = line.strip()
    return any(s in text or (len(text) > 3 and text in s) for s in secrets)


def test_excerpt(detail: str, is_test_file, secrets: list[str]) -> list[str]:
    """The lines of a pytest `--tb=short` report worth showing: frames in test
    files with their source line, and the `E` lines (the error itself)."""
    keep: list[str] = []
    in_test_frame = False
    for raw in detail.splitlines():
        m = _FRAME.match(raw)
        if m:
            in_test_frame = bool(is_test_file(m.group("path")))
            if in_test_frame:
                keep.append(raw)
            continue
        if raw.startswith("E "):
            in_test_frame = False
            if raw[1:].strip():
                keep.append(raw)
            continue
        if in_test_frame and raw.startswith("    "):
            keep.append(raw)
    keep = [line for line in keep if not _leaks(line, secrets)]
    return keep[:MAX_EXCERPT_LINES]


def _error_kind(detail: str) -> str:
    for line in detail.splitlines():
        if line.startswith("E "):
            text = line[1:].strip()
            m = re.match(r"([A-Za-z_][\w.]*(Error|Exception|Warning|Exit|Interrupt))\b", text)
            if m:
                return m.group(1)
            if text.startswith("assert"):
                return "AssertionError"
    return "a failure"


def write_issue(
    package: str,
    version: str,
    function: str,
    module_path: str,
    failing: list[str],
    details: dict[str, str],
    patch: str,
    is_test_file,
) -> tuple[str, str]:
    """(title, problem statement) for a task whose FAIL_TO_PASS tests are `failing`."""
    secrets = changed_lines(patch)
    kinds = [_error_kind(details.get(t, "")) for t in failing]
    main_kind = max(set(kinds), key=kinds.count) if kinds else "a failure"
    short = function.split(".")[-1]
    title = f"{package}: `{short}` misbehaves ({len(failing)} failing test{'s' * (len(failing) != 1)})"
    lines = [
        f"After installing {package} {version} from source, `{function}` in `{module_path}` "
        f"no longer behaves as its tests expect.",
        "",
        f"Failing tests ({len(failing)}), mostly with {main_kind}:",
        "",
    ]
    lines += [f"- `{t}`" for t in failing[:MAX_TESTS_SHOWN]]
    if len(failing) > MAX_TESTS_SHOWN:
        lines.append(f"- ... and {len(failing) - MAX_TESTS_SHOWN} more")
    shown = 0
    for t in failing:
        excerpt = test_excerpt(details.get(t, ""), is_test_file, secrets)
        if not excerpt:
            continue
        if shown == 0:
            lines += ["", "What pytest reports (expected vs actual):"]
        lines += ["", f"`{t}`:", "", "```", *excerpt, "```"]
        shown += 1
        if shown >= MAX_EXCERPTS:
            break
    lines += [
        "",
        "To reproduce:",
        "",
        "```",
        "python -m pytest " + " ".join(shlex.quote(t) for t in failing[:3]),
        "```",
        "",
        "The tests are right; the library code needs fixing.",
    ]
    return title, "\n".join(lines) + "\n"
