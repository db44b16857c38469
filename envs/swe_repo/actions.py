"""Actions of sandgym/SWERepo-v0: a dict, or text holding one fenced block.

Dict form (keys beyond these are refused):

    {"tool": "bash", "command": "grep -rn total billing/"}
    {"tool": "view", "path": "billing/money.py", "start": 10, "end": 40}    # start/end optional
    {"tool": "str_replace", "path": "billing/money.py", "old": "...", "new": "..."}
    {"tool": "create", "path": "billing/util.py", "content": "..."}
    {"tool": "run_tests"}  or  {"tool": "run_tests", "tests": ["tests/test_money.py"]}
    {"tool": "submit"}

Text form: exactly one fenced block (``` or ~~~, three or more; a block
cut off at the end of the text still counts); reasoning may come before
it, and may quote code in blocks that name no tool (```python, ```diff).
The info string names the tool and its arguments; the body is the tool's
text:

    ```bash                        body: the command (``` with no tool name means bash too)
    ```view PATH [START [END]]     START-END or START:END also work; body unused
    ```create PATH                 body: the whole file
    ```str_replace PATH            body: old text, a line =======, new text
                                   (optionally wrapped in <<<<<<< / >>>>>>> lines)
    ```run_tests [TEST ...]        body: more test ids, one a line (none: the visible tests)
    ```submit                      ends the episode; the diff is verified
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from sandgym.envs.tools import function_tool, tool_arguments
from sandgym.errors import SandgymError

TOOLS = ("bash", "view", "str_replace", "create", "run_tests", "submit")
ALIASES = {
    "": "bash",
    "sh": "bash",
    "shell": "bash",
    "console": "bash",
    "str-replace": "str_replace",
    "edit": "str_replace",
    "run-tests": "run_tests",
    "test": "run_tests",
}


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


# One model per tool: its arguments in the dict form, and the schema chat
# models see (`chat_tools`). The docstrings are the tools' descriptions.
class Bash(_Args):
    """Run a bash command in the repository."""

    command: str = Field(description="A bash command; the working directory and exported variables persist.")


class View(_Args):
    """Show a file with line numbers (optionally a line range)."""

    path: str = Field(description="A path relative to the repository root.")
    start: int | None = Field(None, description="First line to show (1-based).")
    end: int | None = Field(None, description="Last line to show.")


class StrReplace(_Args):
    """Replace one exact occurrence of `old` with `new` in a file."""

    path: str = Field(description="A path relative to the repository root.")
    old: str = Field(description="Text that occurs exactly once in the file.")
    new: str = Field(description="Its replacement.")


class Create(_Args):
    """Create or overwrite a file."""

    path: str = Field(description="A path relative to the repository root.")
    content: str = Field(description="The whole file.")


class RunTests(_Args):
    """Run tests with pytest."""

    tests: list[str] | None = Field(None, description="Test ids (default: the task's visible tests).")


class Submit(_Args):
    """Submit the repository's changes for verification. Ends the episode."""


TOOL_MODELS: dict[str, type[BaseModel]] = {
    "bash": Bash,
    "view": View,
    "str_replace": StrReplace,
    "create": Create,
    "run_tests": RunTests,
    "submit": Submit,
}
# Keys each tool accepts in the dict form, and which are required (from the models).
KEYS = {
    name: (set(model.model_fields), {k for k, f in model.model_fields.items() if f.is_required()})
    for name, model in TOOL_MODELS.items()
}
SEPARATOR = "======="
_OPEN = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")


@dataclass
class ToolCall:
    tool: str
    args: dict[str, Any] = field(default_factory=dict)


class ActionError(SandgymError, ValueError):
    """The action could not be read; the message says how to write it."""


GRAMMAR_HINT = (
    "Write one fenced block whose info string names the tool: ```bash, ```view PATH [START END], "
    "```str_replace PATH (old text, a line =======, new text), ```create PATH, ```run_tests, "
    '```submit; or send a dict such as {"tool": "bash", "command": "ls"}.'
)


def parse_action(action: Any) -> ToolCall:
    if isinstance(action, dict):
        return _from_dict(action)
    if isinstance(action, str):
        return _from_text(action)
    raise ActionError(f"an action is text or a dict, not {type(action).__name__}. {GRAMMAR_HINT}")


def _from_dict(action: dict) -> ToolCall:
    tool = action.get("tool")
    if not isinstance(tool, str) or ALIASES.get(tool, tool) not in TOOLS:
        raise ActionError(f"field `tool` must be one of {', '.join(TOOLS)}, got {tool!r}")
    tool = ALIASES.get(tool, tool)
    args = {k: v for k, v in action.items() if k != "tool"}
    allowed, required = KEYS[tool]
    if tool == "view" and "view_range" in args:  # [start, end], as some agents send it
        rng = args.pop("view_range")
        if not (isinstance(rng, (list, tuple)) and len(rng) == 2):
            raise ActionError("field `view_range` must be [start, end]")
        args["start"], args["end"] = rng
    unknown = set(args) - allowed
    if unknown:
        raise ActionError(f"tool {tool!r} takes {sorted(allowed) or 'no fields'}; unknown field(s) {sorted(unknown)}")
    missing = required - set(args)
    if missing:
        raise ActionError(f"tool {tool!r} needs field(s) {sorted(missing)}")
    for key in ("command", "path", "old", "new", "content"):
        if key in args and not isinstance(args[key], str):
            raise ActionError(f"field `{key}` must be a string, got {type(args[key]).__name__}")
    for key in ("start", "end"):
        if key in args and args[key] is not None and (isinstance(args[key], bool) or not isinstance(args[key], int)):
            raise ActionError(f"field `{key}` must be a line number (int), got {args[key]!r}")
    if "tests" in args:
        tests = args["tests"]
        if tests is not None and not (isinstance(tests, list) and all(isinstance(t, str) for t in tests)):
            raise ActionError("field `tests` must be a list of test ids (strings)")
    return ToolCall(tool, args)


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(info string, body) of every fenced block, in order."""
    lines = text.split("\n")
    blocks, i = [], 0
    while i < len(lines):
        m = _OPEN.match(lines[i])
        if not m or (m.group(1)[0] == "`" and "`" in m.group(2)):
            i += 1
            continue
        fence, info = m.group(1), m.group(2).strip()
        body, i = [], i + 1
        while i < len(lines):
            indent = len(lines[i]) - len(lines[i].lstrip(" "))
            stripped = lines[i].strip()
            if indent <= 3 and len(stripped) >= len(fence) and set(stripped) == {fence[0]}:
                break
            body.append(lines[i])
            i += 1
        blocks.append((info, "\n".join(body)))
        i += 1
    return blocks


def _line_range(words: list[str]) -> tuple[int | None, int | None]:
    if len(words) == 1 and (m := re.fullmatch(r"(\d+)[:-](-?\d+)", words[0])):
        words = [m.group(1), m.group(2)]
    if len(words) > 2:
        raise ActionError(f"view takes PATH [START [END]], got extra words {words[2:]}")
    try:
        nums = [int(w) for w in words]
    except ValueError:
        raise ActionError(f"view: START and END must be line numbers, got {' '.join(words)!r}") from None
    return (nums[0] if nums else None), (nums[1] if len(nums) > 1 else None)


def _block_tool(info: str) -> str:
    words = info.split()
    name = words[0].lower() if words else ""
    return ALIASES.get(name, name)


def _from_text(text: str) -> ToolCall:
    blocks = fenced_blocks(text)
    if not blocks:
        raise ActionError(f"no fenced block found in the action. {GRAMMAR_HINT}")
    if len(blocks) > 1:
        # Reasoning may quote code (```python, ```diff): blocks that name no
        # tool are text when exactly one block names one (or is bare: bash).
        tools = [b for b in blocks if _block_tool(b[0]) in TOOLS]
        if not tools:
            names = ", ".join(f"```{b[0].split()[0] if b[0].split() else ''}" for b in blocks)
            raise ActionError(f"found {len(blocks)} fenced blocks ({names}) and none names a tool. {GRAMMAR_HINT}")
        if len(tools) > 1:
            raise ActionError(f"found {len(tools)} fenced blocks; an action holds exactly one. {GRAMMAR_HINT}")
        blocks = tools
    info, body = blocks[0]
    words = info.split()
    name = words[0].lower() if words else ""
    tool = ALIASES.get(name, name)
    if tool not in TOOLS:
        raise ActionError(f"```{name} is not a tool; tools: {', '.join(TOOLS)}. {GRAMMAR_HINT}")
    rest = words[1:]
    if tool == "bash":
        if not body.strip():
            raise ActionError("the ```bash block is empty: put the command in it")
        return ToolCall("bash", {"command": body})
    if tool == "submit":
        return ToolCall("submit")
    if tool == "run_tests":
        tests = rest + [ln.strip() for ln in body.split("\n") if ln.strip()]
        return ToolCall("run_tests", {"tests": tests} if tests else {})
    if not rest:
        if tool == "view" and body.strip():
            rest = body.split()
        else:
            raise ActionError(f"```{tool} needs a path: ```{tool} PATH")
    path = rest[0]
    if tool == "view":
        start, end = _line_range(rest[1:])
        return ToolCall("view", {"path": path, "start": start, "end": end})
    if tool == "create":
        content = body + "\n" if body and not body.endswith("\n") else body
        return ToolCall("create", {"path": path, "content": content})
    # str_replace
    lines = body.split("\n")
    if lines and lines[0].startswith("<<<<<<<"):
        lines = lines[1:]
    if lines and lines[-1].startswith(">>>>>>>"):
        lines = lines[:-1]
    seps = [i for i, ln in enumerate(lines) if ln.rstrip() == SEPARATOR]
    if len(seps) != 1:
        raise ActionError(
            f"```str_replace needs exactly one line {SEPARATOR} between the old and the new text; found {len(seps)}"
        )
    old, new = "\n".join(lines[: seps[0]]), "\n".join(lines[seps[0] + 1 :])
    if not old.strip():
        raise ActionError("```str_replace: the old text (above =======) is empty")
    return ToolCall("str_replace", {"path": path, "old": old, "new": new})


def oracle_actions(patch: str) -> list[dict]:
    """The reference solution as actions: apply the gold `patch`, then submit."""
    marker = "SANDGYM_GOLD_PATCH_EOF"
    return [
        {"tool": "bash", "command": f"git apply --whitespace=nowarn <<'{marker}'\n{patch}{marker}\n"},
        {"tool": "submit"},
    ]


def null_actions() -> list[dict]:
    """Submit the repository as it stands."""
    return [{"tool": "submit"}]


def chat_tools() -> list[dict]:
    """OpenAI-style tool schemas made from `TOOL_MODELS`; a call maps onto the
    dict action {"tool": NAME, **ARGS} (`tool_action`)."""
    return [function_tool(name, TOOL_MODELS[name]) for name in TOOLS]


def tool_action(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """The dict action of one tool call, its arguments checked against the tool's model."""
    if name not in TOOL_MODELS:
        raise ValueError(f"unknown tool {name!r}; the tools are {', '.join(TOOLS)}")
    return {"tool": name, **tool_arguments(name, TOOL_MODELS[name], arguments)}
