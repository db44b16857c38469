"""Reading code out of an agent's text action.

Grammar (documented in the README):
- single-turn: the action holds the code, in a ```python (or ```py)
  fenced block; with several blocks the last one counts. Plain text with
  no fence counts as code when it parses as Python and defines the entry
  point.
- multi-turn: as above; a line `SUBMIT` (any case) makes
  the action a submission, otherwise the code is run on the visible
  examples. Reasoning may come before the marker and the code: `SUBMIT`
  counts on any line of its own before the first fence, not after it.
  `SUBMIT` with no code submits the code run last, and so does
  a last turn with no code. An unclosed fence at the end (a reply cut
  off by a length limit) counts as a block.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

# A fence is ``` then an info string to the end of its line (the language
# is its first word), the body, and the next ```. Found with str.find, in
# linear time: a regular expression for it backtracks quadratically on
# hostile text (a long run of backticks), seconds per kilobyte.
_LANG = re.compile(r"[A-Za-z0-9_+-]*")
# The info strings that may open a block cut off at the end (a reply that hit a length limit).
OPEN_INFO = ("", "py", "python", "python3")


@dataclass(frozen=True)
class ParsedAction:
    submit: bool
    code: str | None
    problem: str = ""  # why no code was found
    any_code: bool = False  # the action held code, usable or not
    language: str = "python"  # stdio tasks: the `/run_code` language of the code


# Stdio tasks: a fence's language tag -> the `/run_code` language it names.
FENCE_LANGUAGES = {
    **{t: "python" for t in ("", "py", "python", "python3")},
    **{t: "cpp" for t in ("cpp", "c++", "cc", "cxx")},
    **{t: "nodejs" for t in ("js", "javascript", "node", "nodejs")},
    **{t: "typescript" for t in ("ts", "typescript")},
    **{t: "go" for t in ("go", "golang")},
    **{t: "rust" for t in ("rs", "rust")},
    **{t: "bash" for t in ("bash", "sh", "shell")},
    **{t: "ruby" for t in ("rb", "ruby")},
    **{t: "perl" for t in ("pl", "perl")},
    **{t: "csharp" for t in ("cs", "csharp")},
    **{t: "racket" for t in ("rkt", "racket")},
    "r": "R",
    **{t: t for t in ("java", "php", "lua", "scala")},
}


def fenced_blocks(text: str) -> tuple[list[tuple[str, str]], str]:
    """([(language, body), ...] of the closed fenced blocks, in order; the
    text with those blocks taken out). Linear in the text's length."""
    blocks: list[tuple[str, str]] = []
    rest: list[str] = []
    pos = 0
    while True:
        start = text.find("```", pos)
        if start == -1:
            break
        newline = text.find("\n", start + 3)
        if newline == -1:  # no later fence can open either
            break
        close = text.find("```", newline + 1)
        if close == -1:  # nor close
            break
        info = text[start + 3 : newline].lstrip(" \t")
        lang = _LANG.match(info)
        blocks.append((lang.group(0) if lang else "", text[newline + 1 : close]))
        rest.append(text[pos:start])
        pos = close + 3
    rest.append(text[pos:])
    return blocks, "".join(rest)


def open_block(text: str) -> str | None:
    """The body of a block opened and never closed (``` or ```python on a
    line of its own, the rest of the text after it), or None."""
    offset = 0
    for line in text.split("\n")[:-1]:  # a fence line needs a newline after it
        stripped = line.rstrip(" \t")
        starts = []
        for word in OPEN_INFO:
            if stripped.endswith(word):
                head = stripped[: len(stripped) - len(word)].rstrip(" \t")
                if head.endswith("```"):
                    starts.append(len(head) - 3)
        if starts:
            return text[offset + len(line) + 1 :]
        offset += len(line) + 1
    return None


def defines(code: str, name: str) -> bool | None:
    """Whether `code` binds `name` at top level; None if it does not parse."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # nested too deeply for the parser
        return None
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return True
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if any((a.asname or a.name.split(".")[0]) == name for a in node.names):
                return True
    return False


def extract_code(text: str, entry_point: str) -> tuple[str | None, str]:
    """(code, problem): the code to run, or None and why there is none."""
    found, rest = fenced_blocks(text)
    blocks = [(lang.lower(), body) for lang, body in found]
    python = [body for lang, body in blocks if lang in ("python", "py", "python3")]
    bare = [body for lang, body in blocks if lang == ""]
    unclosed = open_block(rest)
    if python or bare:
        code = (python or bare)[-1]
    elif unclosed is not None:
        code = unclosed
    elif defines(text, entry_point):
        code = text
    else:
        return None, (f"no code found: reply with a ```python block that defines `{entry_point}`")
    if not code.strip():
        return None, f"the code block is empty: it must define `{entry_point}`"
    if defines(code, entry_point) is False:
        return None, (
            f"no function named `{entry_point}`: the code does not define `{entry_point}` at top level; "
            f"send the whole function (`def {entry_point}(...)`)"
        )
    return code, ""


def extract_program(text: str) -> tuple[str | None, str, str]:
    """Stdio tasks: (code, language, problem) from the last fenced block
    whose tag names a language (FENCE_LANGUAGES; no tag: Python), or an
    unclosed ```python block at the end."""
    found, rest = fenced_blocks(text)
    blocks = [(FENCE_LANGUAGES.get(lang.lower()), body) for lang, body in found]
    known = [(lang, body) for lang, body in blocks if lang is not None]
    unclosed = open_block(rest)
    if known:
        language, code = known[-1]
    elif unclosed is not None:
        language, code = "python", unclosed
    else:
        tags = sorted({lang for lang, _ in found if lang.lower() not in FENCE_LANGUAGES})
        why = f" (unknown language tag {', '.join(tags)})" if tags else ""
        return (
            None,
            "python",
            (
                f"no code found{why}: reply with the whole program in one fenced block tagged with its language, "
                "such as ```python or ```cpp"
            ),
        )
    if not code.strip():
        return None, language, "the code block is empty: send the whole program"
    return code, language, ""


def submit_marker(text: str) -> int | None:
    """Where the text after a `SUBMIT` line starts, or None. The marker is a
    line of its own before any fence: reasoning may come before it, but
    after the code it does not count (the code was written to be run)."""
    fence = text.find("```")
    head = text if fence == -1 else text[:fence]
    offset = 0
    for line in head.split("\n"):
        if line.strip().upper() == "SUBMIT" and (fence == -1 or offset + len(line) < fence):
            return offset + len(line) + 1
        offset += len(line) + 1
    return None


def parse_action(text: str, entry_point: str, multi_turn: bool, stdio: bool = False) -> ParsedAction:
    """`stdio`: the task asks for a whole program in any language (extract_program)."""
    submit = not multi_turn
    if multi_turn:
        after = submit_marker(text)
        if after is not None:
            submit = True
            text = text[after:]
    language = "python"
    if stdio:
        code, language, problem = extract_program(text)
    else:
        code, problem = extract_code(text, entry_point)
    return ParsedAction(
        submit=submit,
        code=code,
        problem=problem,
        any_code=code is not None or not problem.startswith("no code found"),
        language=language,
    )


# -- the tools a chat model may call instead (`CodeFunctionEnv.chat_tools`) ------------------


class SubmitCode(BaseModel):
    """Submit the final code for grading. Ends the episode."""

    model_config = ConfigDict(extra="forbid")

    code: str = Field(description="Complete Python code that defines the entry point.")


class RunCode(BaseModel):
    """Run the code on the task's visible examples and see the results."""

    model_config = ConfigDict(extra="forbid")

    code: str = Field(description="Complete Python code that defines the entry point.")


TOOL_MODELS: dict[str, type[BaseModel]] = {"run_code": RunCode, "submit_code": SubmitCode}


def tool_text(name: str, code: str) -> str:
    """A tool call in the text grammar: the code in a ```python fence, after
    SUBMIT for `submit_code`."""
    if "```" in code:  # the grammar's fences do not nest
        raise ValueError(f"tool {name!r}: argument `code` holds ```, which the action grammar cannot carry")
    block = f"```python\n{code.rstrip()}\n```"
    return f"SUBMIT\n{block}" if name == "submit_code" else block
