"""Reading code out of an agent's text action.

Grammar (documented in the README):
- single-turn: the action holds the code, in a ```python (or ```py)
  fenced block; with several blocks the last one counts. Plain text with
  no fence counts as code when it parses as Python and defines the entry
  point.
- multi-turn: as above; a first non-empty line `SUBMIT` (any case) makes
  the action a submission, otherwise the code is run on the visible
  examples. `SUBMIT` with no code submits the code run last, and so does
  a last turn with no code. An unclosed fence at the end (a reply cut
  off by a length limit) counts as a block.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.DOTALL)
# A reply cut off inside its code block (a length limit) still counts.
OPEN_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*)\Z", re.DOTALL)


@dataclass(frozen=True)
class ParsedAction:
    submit: bool
    code: str | None
    problem: str = ""  # why no code was found
    any_code: bool = False  # the action held code, usable or not


def defines(code: str, name: str) -> bool | None:
    """Whether `code` binds `name` at top level; None if it does not parse."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
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
    blocks = [(lang.lower(), body) for lang, body in FENCE.findall(text)]
    python = [body for lang, body in blocks if lang in ("python", "py", "python3")]
    bare = [body for lang, body in blocks if lang == ""]
    unclosed = OPEN_FENCE.search(FENCE.sub("", text))
    if python or bare:
        code = (python or bare)[-1]
    elif unclosed:
        code = unclosed.group(1)
    elif defines(text, entry_point):
        code = text
    else:
        return None, (f"no code found: reply with a ```python block that defines `{entry_point}`")
    if not code.strip():
        return None, f"the code block is empty: it must define `{entry_point}`"
    if defines(code, entry_point) is False:
        return None, f"the code does not define `{entry_point}` at top level"
    return code, ""


def parse_action(text: str, entry_point: str, multi_turn: bool) -> ParsedAction:
    submit = not multi_turn
    if multi_turn:
        first = next((line.strip() for line in text.splitlines() if line.strip()), "")
        if first.upper() == "SUBMIT":
            submit = True
            text = text.split(first, 1)[1] if first in text else text
    code, problem = extract_code(text, entry_point)
    return ParsedAction(
        submit=submit, code=code, problem=problem, any_code=code is not None or not problem.startswith("no code found")
    )
