"""Issue texts for factory-made SWE tasks, written from failing tests' output.

No model is involved. Three levels:

- `located` names the package and the function whose behaviour changed,
  lists failing tests, and quotes what pytest said (the assertion or
  exception, expected vs actual, and the test's own lines);
- `symptom` is a standalone reproduction taken from one failing test: the
  imports and the call (the test's failing line with its parameters and
  module constants substituted), the expected and the actual result or
  error; no file, test or location named;
- `minimal` is one sentence: the input, what came back, what was expected.

No level quotes the patch: traceback frames outside test files are dropped,
and any line that contains a line the mutation changed is removed. The
reproduction behind `symptom` and `minimal` comes from `reproduction.py`.
"""

from __future__ import annotations

import re
import shlex

from sandgym.envs.swe_repo.reproduction import FRAME_LINE, Repro

MAX_TESTS_SHOWN = 8
MAX_EXCERPTS = 3
MAX_EXCERPT_LINES = 14


def changed_lines(patch: str) -> list[str]:
    """Stripped text of every line a unified diff adds or removes."""
    out = []
    for line in patch.splitlines():
        if line.startswith(("+++", "---")):
            continue
        if line[:1] in "+-" and line[1:].strip():
            out.append(line[1:].strip())
    return out


UNTELLING = ("pass", "continue", "break", "return", "else:")


def telling_lines(patch: str) -> list[str]:
    """The changed lines a text must not quote: not a bare keyword, a line of
    brackets or quotes only (`)`, `\"\"\"`), or an import (a reproduction's own
    `import copy` says nothing about where the change is)."""
    return [
        s
        for s in changed_lines(patch)
        if s not in UNTELLING and any(ch.isalnum() for ch in s) and not re.match(r"(?:from \S+ )?import \w", s)
    ]


def _leaks(line: str, secrets: list[str]) -> bool:
    text = line.strip()
    return any(s in text or (len(text) > 3 and text in s) for s in secrets)


def test_excerpt(detail: str, is_test_file, secrets: list[str]) -> list[str]:
    """The lines of a pytest `--tb=short` report worth showing: frames in test
    files with their source line, and the `E` lines (the error itself)."""
    keep: list[str] = []
    in_test_frame = False
    for raw in detail.splitlines():
        m = FRAME_LINE.match(raw)
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
    total: int | None = None,
    hidden: bool = False,
) -> tuple[str, str]:
    """(title, problem statement) for a task whose FAIL_TO_PASS tests are
    `failing` (or, with `total`, of which `failing` are the ones to show)."""
    secrets = changed_lines(patch)
    kinds = [_error_kind(details.get(t, "")) for t in failing]
    main_kind = max(set(kinds), key=kinds.count) if kinds else "a failure"
    short = function.split(".")[-1]
    n = total or len(failing)
    title = f"{package}: `{short}` misbehaves ({n} failing test{'s' * (n != 1)})"
    lines = [
        f"After installing {package} {version} from source, `{function}` in `{module_path}` "
        f"no longer behaves as its tests expect.",
        "",
        f"Failing tests ({n}), mostly with {main_kind}{'; some of them' if n > len(failing) else ''}:",
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
    if hidden:
        # The tests are out of the agent's checkout: the verifier adds them back.
        lines += ["", "These tests are not in your checkout; they run when your fix is checked."]
    else:
        lines += [
            "",
            "To reproduce:",
            "",
            "```",
            "python -m pytest " + " ".join(shlex.quote(t) for t in failing[:3]),
            "```",
        ]
    lines += ["", "The tests are right; the library code needs fixing."]
    return title, "\n".join(lines) + "\n"


ISSUE_LEVELS = ("located", "symptom", "minimal")


def _outcome(r: Repro) -> str:
    if r.no_raise:
        return "raises nothing"
    if r.error:
        kind = r.error.split(":", 1)[0].rsplit(".", 1)[-1]
        return f"raises `{kind}`" + (f" (`{r.error}`)" if ":" in r.error else "")
    return f"returns `{r.actual}`"


def _expectation(r: Repro) -> str:
    if r.expected.endswith(" to be raised"):
        return f"`{r.expected.removesuffix(' to be raised')}` to be raised"
    if r.expected in ("a true value", "a false value"):
        return r.expected
    return f"`{r.expected}`"


def write_symptom(package: str, version: str, repros: list[Repro]) -> tuple[str, str]:
    """(title, text): what a user would report: reproductions, expected vs actual."""
    title = f"{package} {version}: wrong result" + (" in several places" if len(repros) > 1 else "")
    lines = [f"I am seeing wrong behaviour from {package} {version} (run from a source checkout).", ""]
    for i, r in enumerate(repros):
        if len(repros) > 1:
            lines += [f"Problem {i + 1}:", ""]
        lines += ["```python", r.block(), "```", ""]
        lines.append(
            f"This {_outcome(r)}" + (f"; I expected {_expectation(r)}." if r.expected else ", which I did not expect.")
        )
        lines.append("")
    lines.append("Other inputs may be affected too; please fix the library, not just these examples.")
    return title, "\n".join(lines) + "\n"


def write_minimal(package: str, version: str, repros: list[Repro]) -> tuple[str, str]:
    """(title, one sentence): the symptom without the call."""
    r = repros[0]
    if r.no_raise:
        got = "raises nothing"
    elif r.error:
        got = f"raises {r.error.split(':', 1)[0].rsplit('.', 1)[-1]}"
    else:
        got = f"gives `{r.actual}`"
    want = f" instead of {_expectation(r).removesuffix(' to be raised')}" if r.expected else ""
    more = " (and it is not the only input that goes wrong)" if len(repros) > 1 else ""
    return f"{package}: wrong result", f"With {package} {version}, the input `{r.args}` {got}{want}{more}.\n"


def names_any(text: str, words: list[str]) -> list[str]:
    """Which of `words` appear in `text` as whole identifiers."""
    return [w for w in words if re.search(rf"(?<![\w.]){re.escape(w)}(?!\w)", text)]
