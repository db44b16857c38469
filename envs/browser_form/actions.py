"""The browser action language: BrowserGym's high-level actions and sandgym's first grammar; parsed, never run.

An action is one call with literal arguments, in BrowserGym's names and
argument order: click('e12'), fill('e5', "text"), select_option('e7', ['a', 'b']),
press('e5', 'Enter'), scroll(0, 200), noop(500), send_msg_to_user("...").
The call is read with Python's `ast` (the tree only: nothing is compiled or
evaluated); arguments are string, number, True/False literals or lists of
strings. sandgym's first grammar stays valid: a bare ref (click(e12)),
"role:name" targets ("button:Sign in"), select(ref, "option"), press("Key")
with one argument (the keyboard), done().

Each action's arguments are a pydantic model (ACTION_MODELS): the parser
validates against it and the chat tools' schemas are generated from it, so
the two cannot drift. A reply may hold reasoning before the action (see
`parse_action`).
"""

from __future__ import annotations

import ast
import io
import math
import re
import tokenize
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sandgym.errors import SandgymError

GRAMMAR = (
    "Actions, one per turn (reasoning may come first; the action is the last line or in <action></action>): "
    "click(ref) | fill(ref, 'text') | select_option(ref, 'option') | press(ref, 'Enter') | check(ref) | "
    "uncheck(ref) | hover(ref) | focus(ref) | clear(ref) | dblclick(ref) | scroll(0, 300) | noop() | "
    "goto('/path') | go_back() | send_msg_to_user('text') | done(). A ref is an element id from the snapshot "
    'such as \'e12\' (or "role:name" like "button:Sign in"). send_msg_to_user and done end the episode.'
)
REF_RE = re.compile(r"(?:f\d+)?e\d+")
MAX_ACTION_CHARS = 100_000  # a whole reply, reasoning included
MAX_CALL_CHARS = 20_000  # the call itself
NOOP_MAX_MS = 5_000  # noop(wait_ms) waits at most this long: a worker is not held for a minute
MAX_SCROLL = 100_000.0
# Actions that end the episode (the state is verified then).
ENDING = frozenset({"done", "send_msg_to_user", "report_infeasible"})
BID_FIELDS = ("bid", "from_bid", "to_bid")
# The argument an Action's `text` carries (fill's value, press's key, goto's url...).
TEXT_FIELDS = ("value", "options", "option", "key_comb", "key", "url", "text", "reason", "file")
# BrowserGym actions this env does not offer, and what to do instead.
UNSUPPORTED = {
    **dict.fromkeys(
        ("mouse_move", "mouse_up", "mouse_down", "mouse_click", "mouse_dblclick", "mouse_drag_and_drop", "scroll_at"),
        "coordinate actions are not offered: act on elements by ref, e.g. click('e12')",
    ),
    **dict.fromkeys(("tab_close", "tab_focus", "new_tab"), "the episode has one tab"),
    "mouse_upload_file": "upload with upload_file(ref, 'name') on the file input, a name the task lists",
    **dict.fromkeys(("keyboard_up", "keyboard_down"), "use keyboard_press('Key') or press(ref, 'Key')"),
}


class ActionError(SandgymError, ValueError):
    """The action is not in the grammar; the message says why."""


# -- the actions' arguments ------------------------------------------------------------------------

_REF_DOC = "An element's ref as the observation shows it, e.g. 'e12' or 'f1e12' (or \"role:name\")."
Button = Literal["left", "middle", "right"]
Modifier = Literal["Alt", "Control", "ControlOrMeta", "Meta", "Shift"]


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class Noop(_Args):
    """Do nothing this turn; wait `wait_ms` milliseconds (at most 5000) for the page."""

    wait_ms: float = Field(1000, ge=0, allow_inf_nan=False, description="Milliseconds to wait.")


class SendMsgToUser(_Args):
    """Tell the user something; this ends the episode (the form's state is then verified)."""

    text: str = Field(description="The message, e.g. that the task is done.")


class ReportInfeasible(_Args):
    """Report that the task cannot be done; this ends the episode."""

    reason: str = Field(description="Why the task cannot be done.")


class Scroll(_Args):
    """Scroll the page by a number of pixels (positive: right or down)."""

    delta_x: float = Field(ge=-MAX_SCROLL, le=MAX_SCROLL, allow_inf_nan=False, description="Pixels to the right.")
    delta_y: float = Field(ge=-MAX_SCROLL, le=MAX_SCROLL, allow_inf_nan=False, description="Pixels down.")


class Fill(_Args):
    """Replace the text of an input, textarea or editable element."""

    bid: str = Field(description=_REF_DOC)
    value: str = Field(description="The text to put in.")
    enable_autocomplete_menu: bool = Field(False, description="Type the last character so suggestions open.")


class Check(_Args):
    """Make sure a checkbox or radio button is checked."""

    bid: str = Field(description=_REF_DOC)


class Uncheck(_Args):
    """Make sure a checkbox is unchecked."""

    bid: str = Field(description=_REF_DOC)


class SelectOption(_Args):
    """Choose one or more options of a select element, by value or label."""

    bid: str = Field(description=_REF_DOC)
    options: str | list[str] = Field(description="An option's label or value, or a list of them.")


class Click(_Args):
    """Click an element."""

    bid: str = Field(description=_REF_DOC)
    button: Button = Field("left", description="The mouse button.")
    modifiers: list[Modifier] = Field(default_factory=list, description="Keys held during the click.")


class Dblclick(_Args):
    """Double-click an element."""

    bid: str = Field(description=_REF_DOC)
    button: Button = Field("left", description="The mouse button.")
    modifiers: list[Modifier] = Field(default_factory=list, description="Keys held during the clicks.")


class Hover(_Args):
    """Move the mouse over an element."""

    bid: str = Field(description=_REF_DOC)


class Press(_Args):
    """Focus an element and press a key or combination, e.g. 'Enter', 'Control+a'."""

    bid: str = Field(description=_REF_DOC)
    key_comb: str = Field(description="A key name or combination such as 'Enter', 'Tab', 'Shift+ArrowDown'.")


class Focus(_Args):
    """Focus an element."""

    bid: str = Field(description=_REF_DOC)


class Clear(_Args):
    """Empty an input field."""

    bid: str = Field(description=_REF_DOC)


class DragAndDrop(_Args):
    """Drag one element onto another."""

    from_bid: str = Field(description=_REF_DOC)
    to_bid: str = Field(description=_REF_DOC)


class UploadFile(_Args):
    """Put one or more of the episode's files (by the names the task lists) in a file input."""

    bid: str = Field(description=_REF_DOC)
    file: str | list[str] = Field(description="A file name the task lists, or a list of them.")


class GoBack(_Args):
    """Go back one page in the tab's history."""


class GoForward(_Args):
    """Go forward one page in the tab's history."""


class Goto(_Args):
    """Open a page of the app: a path such as '/profile' (or a URL on the app's origin)."""

    url: str = Field(description="A path inside the app, e.g. '/profile'.")


class KeyboardPress(_Args):
    """Press a key or combination on whatever element has the focus."""

    key: str = Field(description="A key name or combination such as 'Enter' or 'Control+a'.")


class KeyboardType(_Args):
    """Type text, key by key, into whatever element has the focus."""

    text: str = Field(description="The text to type.")


class KeyboardInsertText(_Args):
    """Insert text into whatever element has the focus, without key events."""

    text: str = Field(description="The text to insert.")


class Done(_Args):
    """End the episode: the form's state is verified now."""


class Select(_Args):
    """sandgym's first grammar: select(ref, "option") is select_option with one option."""

    bid: str = Field(description=_REF_DOC)
    option: str = Field(description="The option's label or value.")


class PressKey(_Args):
    """sandgym's first grammar: press("Key") presses a key on the focused element."""

    key: str = Field(description="A key name such as 'Enter'.")


# Tools and BrowserGym names, in BrowserGym's order; then sandgym's own.
ACTION_MODELS: dict[str, type[_Args]] = {
    "noop": Noop,
    "send_msg_to_user": SendMsgToUser,
    "report_infeasible": ReportInfeasible,
    "scroll": Scroll,
    "fill": Fill,
    "check": Check,
    "uncheck": Uncheck,
    "select_option": SelectOption,
    "click": Click,
    "dblclick": Dblclick,
    "hover": Hover,
    "press": Press,
    "focus": Focus,
    "clear": Clear,
    "drag_and_drop": DragAndDrop,
    "upload_file": UploadFile,
    "go_back": GoBack,
    "go_forward": GoForward,
    "goto": Goto,
    "keyboard_press": KeyboardPress,
    "keyboard_type": KeyboardType,
    "keyboard_insert_text": KeyboardInsertText,
    "done": Done,
}
# Accepted as text, not offered as tools: the first grammar's forms.
LEGACY_MODELS: dict[str, type[_Args]] = {"select": Select}


@dataclass(frozen=True)
class Target:
    ref: str | None = None  # e12
    role: str | None = None  # with name: "button:Sign in"
    name: str | None = None

    def __str__(self) -> str:
        return self.ref if self.ref else f'"{self.role}:{self.name}"'


@dataclass(frozen=True)
class Action:
    kind: str  # the action's name
    target: Target | None = None  # the element acted on (bid)
    text: str | None = None  # its one text argument (value, key, url, message), if it has one
    args: Mapping[str, Any] = field(default_factory=dict)  # all arguments, validated, by BrowserGym's names
    to: Target | None = None  # drag_and_drop's drop target


# -- reading one call ------------------------------------------------------------------------------


class _Bare(str):
    """A bare name as an argument: a ref (click(e12)) where a ref is expected, an error elsewhere."""


_VALID_ESCAPES = set("\n\\'\"abfnrtvxNuU01234567")


def _scan(src: str) -> None:
    """Reject what Python would accept but the grammar does not, before `ast` sees it
    (so no invalid-escape warning is ever printed): unknown escapes, a trailing ','."""
    prev = ""
    try:
        for tok in tokenize.generate_tokens(io.StringIO(src).readline):
            if tok.type in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT):
                continue
            if tok.type == tokenize.OP and tok.string == ")" and prev == ",":
                raise ActionError(f"a trailing ',' before ')' at column {tok.start[1] + 1}: remove it")
            if tok.type == tokenize.STRING:
                quote = min(i for i in (tok.string.find("'"), tok.string.find('"')) if i >= 0)
                if "r" not in tok.string[:quote].lower():
                    body = tok.string[quote:]
                    i = body.find("\\")
                    while i != -1:
                        nxt = body[i + 1 : i + 2]
                        if nxt not in _VALID_ESCAPES:
                            raise ActionError(f"unknown escape \\{nxt} at column {tok.start[1] + quote + i + 1}")
                        i = body.find("\\", i + 2)
            prev = tok.string if tok.type == tokenize.OP else ""
    except (tokenize.TokenError, SyntaxError):
        return  # ast.parse says what is wrong


def _syntax_problem(src: str, e: SyntaxError) -> str:
    msg = e.msg or "invalid syntax"
    if "unterminated" in msg or "EOF while scanning" in msg:
        return "a string is not closed"
    if "null byte" in msg:
        return "the action holds a null byte"
    if "escape" in msg:
        return f"unknown escape: {msg}"
    base = "expected one call such as click('e12')"
    if "never closed" in msg or "unexpected EOF" in msg:
        return f"{base}: {msg}"
    lines = src.splitlines() or [""]
    line = lines[min(max((e.lineno or 1) - 1, 0), len(lines) - 1)]
    col = max((e.offset or 1) - 1, 0)
    near = line[col : col + 20] or line[-20:]
    return f"{base}, not several or other text: unexpected {near!r} at line {e.lineno or 1}, column {col + 1}"


def _what(node: ast.AST) -> str:
    if isinstance(node, ast.Call):
        return "a nested call"
    if isinstance(node, ast.Attribute):
        return f"attribute access (.{node.attr})"
    if isinstance(node, ast.JoinedStr):
        return "an f-string"
    if isinstance(node, ast.Dict):
        return "a dict"
    if isinstance(node, (ast.List, ast.Tuple)):
        return "a list of non-strings"
    return f"an expression ({type(node).__name__})"


def _literal(node: ast.expr) -> Any:
    if isinstance(node, ast.Constant):
        v = node.value
        if isinstance(v, (bytes, complex)) or v is Ellipsis:
            raise ActionError(f"{type(v).__name__} {ast.unparse(node)[:40]} is not an argument: use text or a number")
        return v
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner = node.operand
        number = inner.value if isinstance(inner, ast.Constant) else None
        if isinstance(number, (int, float)) and not isinstance(number, bool):
            return -number if isinstance(node.op, ast.USub) else number
    if isinstance(node, ast.Name):
        return _Bare(node.id)
    if isinstance(node, (ast.List, ast.Tuple)):
        items = node.elts
        if all(isinstance(x, ast.Constant) and isinstance(x.value, str) for x in items):
            return [x.value for x in items]  # type: ignore[attr-defined]
    raise ActionError(
        f"{_what(node)} is not an argument: arguments are literals (strings, numbers, True/False, lists of strings)"
    )


def _signature(model: type[_Args]) -> str:
    parts = []
    for name, f in model.model_fields.items():
        parts.append(name if f.is_required() else f"{name}={f.get_default(call_default_factory=True)!r}")
    return ", ".join(parts)


def _target(value: str, bare: bool) -> Target:
    if bare:
        if not REF_RE.fullmatch(value):
            raise ActionError(f"{value!r} is not a ref: refs look like e12 (see [ref=...] in the snapshot)")
        return Target(ref=value)
    value = value.strip()
    if REF_RE.fullmatch(value):
        return Target(ref=value)
    if re.fullmatch(r"[A-Za-z]*\d+", value):  # another site's bid ('a12', '12')
        raise ActionError(
            f"{value!r} is not a ref of this page: refs here look like e12 or f1e12; copy the id in brackets"
        )
    role, sep, name = value.partition(":")
    if not sep or not re.fullmatch(r"[a-z]+", role.strip()) or not name.strip():
        raise ActionError(f'{value!r} is not a target: give a ref like e12, or "role:name" like "button:Sign in"')
    return Target(role=role.strip(), name=name.strip())


def _model_for(name: str, call: ast.Call) -> type[_Args]:
    if name == "press" and len(call.args) == 1 and not call.keywords:
        return PressKey  # the first grammar's press("Key")
    model = ACTION_MODELS.get(name) or LEGACY_MODELS.get(name)
    if model is None:
        if name in UNSUPPORTED:
            raise ActionError(f"{name}() is not offered here: {UNSUPPORTED[name]}")
        raise ActionError(f"unknown action {name!r}; the actions: {', '.join(ACTION_MODELS)}")
    return model


def parse_call(src: str) -> Action:
    """One call, alone: the action's text with nothing around it."""
    src = src.strip()
    if not src:
        raise ActionError("the action is empty")
    if len(src) > MAX_CALL_CHARS:
        raise ActionError(f"the call is {len(src)} characters long; the limit is {MAX_CALL_CHARS}")
    _scan(src)
    try:
        tree = ast.parse(src, mode="eval")
    except SyntaxError as e:
        raise ActionError(_syntax_problem(src, e)) from None
    except (ValueError, RecursionError, MemoryError, OverflowError) as e:
        why = "nested too deeply" if isinstance(e, (RecursionError, MemoryError)) else f"not readable: {e}"
        raise ActionError(f"expected one call such as click('e12'); this one is {why}") from None
    call = tree.body
    if not isinstance(call, ast.Call):
        raise ActionError(f"expected one call such as click('e12'), not {_what(call)}")
    if not isinstance(call.func, ast.Name):
        raise ActionError(f"unexpected {_what(call.func)} as the action: an action is a plain name, e.g. click('e12')")
    name = call.func.id
    model = _model_for(name, call)
    fields = list(model.model_fields)
    required = [k for k, f in model.model_fields.items() if f.is_required()]
    sig = f"{name}({_signature(model)})"
    given = len(call.args) + len(call.keywords)
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        raise ActionError(f"unexpected * or ** in {name}(): give the arguments one by one, as in {sig}")
    span = f"{len(required)}" if len(required) == len(fields) else f"{len(required)} to {len(fields)}"
    if len(call.args) > len(fields) or given < len(required) or given > len(fields):
        named = fields[: len(call.args)] + [k.arg for k in call.keywords]
        missing = [k for k in required if k not in named]
        lacking = f" (missing: {', '.join(missing)})" if missing and given < len(required) else ""
        raise ActionError(f"{name}() takes {span} argument(s), got {given}{lacking}: {sig}")
    values: dict[str, Any] = {}
    for pos, node in enumerate(call.args):
        values[fields[pos]] = _literal(node)
    for kw in call.keywords:
        assert kw.arg is not None
        if kw.arg not in model.model_fields:
            raise ActionError(f"{name}() has no argument {kw.arg!r}: {sig}")
        if kw.arg in values:
            raise ActionError(f"{name}() got {kw.arg!r} twice: {sig}")
        values[kw.arg] = _literal(kw.value)
    targets: dict[str, Target] = {}
    for key, value in list(values.items()):
        if key in BID_FIELDS:
            if not isinstance(value, str):
                raise ActionError(f"{name}(): {key} is a ref such as 'e12', not {value!r:.40}")
            targets[key] = _target(str(value), isinstance(value, _Bare))
            values[key] = str(value)
        elif isinstance(value, _Bare):
            raise ActionError(
                f"{name}() takes {span} argument(s), {sig}: {key} must be a literal, not the bare name {value} "
                f"(in quotes: '{value}')"
            )
    try:
        args = model.model_validate(values)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(x) for x in err["loc"]) or "(arguments)"
        if err["type"] == "missing":
            raise ActionError(f"{name}(): {where} is missing: {sig}") from None
        raise ActionError(f"{name}(): {where}={err.get('input')!r:.60}: {err['msg']}; {sig}") from None
    dumped = args.model_dump()
    text_key = next((k for k in fields if k in TEXT_FIELDS and isinstance(dumped[k], str)), None)
    bid = targets.get("bid") or targets.get("from_bid")
    return Action(
        kind=name,
        target=bid,
        text=dumped[text_key] if text_key else None,
        args=dumped,
        to=targets.get("to_bid"),
    )


# -- finding the call in a reply -------------------------------------------------------------------

_CALLISH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\s*\(")
_LABEL = re.compile(r"(?:\*\*|__)?action\s*:\s*(?:\*\*|__)?\s*", re.I)  # Action: / **Action:**


def _after_thinking(text: str) -> str:
    """The reply after its last </think>: reasoning models' scratch work may name actions it did not choose."""
    end = text.lower().rfind("</think>")
    return text[end + len("</think>") :] if end != -1 else text


def _tagged(text: str) -> str | None:
    """The inside of the last <action>...</action>, found with rfind (linear on any input)."""
    low = text.lower()
    close = low.rfind("</action>")
    if close == -1:
        return None
    start = low.rfind("<action>", 0, close)
    return None if start == -1 else text[start + len("<action>") : close]


def _last_fence(text: str) -> str | None:
    """The inside of the last closed ``` fence, without its language word; None if there is none."""
    marks: list[int] = []
    pos = text.find("```")
    while pos != -1:
        marks.append(pos)
        pos = text.find("```", pos + 3)
    if len(marks) < 2:
        return None
    pairs = len(marks) // 2
    start, close = marks[2 * pairs - 2] + 3, marks[2 * pairs - 1]
    body = text[start:close]
    first, nl, rest = body.partition("\n")
    if nl and re.fullmatch(r"[A-Za-z0-9_+.-]*\s*", first):
        return rest
    return body


def _clean_line(line: str) -> str:
    line = line.strip()
    m = _LABEL.match(line)
    if m:
        line = line[m.end() :].strip()
    if len(line) >= 2 and line[0] == line[-1] == "`":
        line = line.strip("`").strip()
    return line.rstrip(";").strip()


def parse_action(text: str) -> Action:
    """The one action in an agent's reply; raises ActionError saying what was not understood.

    The reply is the call alone; or reasoning, then the action: in the last
    <action>...</action>, else in the last ``` fence, else on a line of its
    own (an `Action:` label and `backticks` around it are fine). Text inside
    <think>...</think> is ignored. Two actions in one reply are an error.
    """
    if not isinstance(text, str):
        raise ActionError(f"an action is text, got {type(text).__name__}")
    if len(text) > MAX_ACTION_CHARS:
        raise ActionError(f"the action is {len(text)} characters long; the limit is {MAX_ACTION_CHARS}")
    src = _after_thinking(text).strip()
    if not src:
        raise ActionError("the action is empty")
    try:
        return parse_call(src)
    except ActionError as e:
        whole = e
    region, where = src, "reply"
    tagged = _tagged(src)
    fenced = _last_fence(src) if tagged is None else None
    if tagged is not None or fenced is not None:
        region, where = (tagged, "<action> tag") if tagged is not None else (fenced or "", "``` block")
        try:
            return parse_call(_clean_line(region) if "\n" not in region.strip() else region)
        except ActionError as e:
            whole = e
    lines = [ln for ln in region.splitlines() if ln.strip()]
    if len(lines) == 1 and _clean_line(lines[0]) != lines[0].strip():
        try:
            return parse_call(_clean_line(lines[0]))  # `Action: click('e12')`
        except ActionError:
            pass
    if len(lines) <= 1:
        raise whole if where == "reply" else ActionError(f"in the {where}: {whole}")
    found: list[Action] = []
    failed: tuple[str, ActionError] | None = None
    for line in lines:
        cleaned = _clean_line(line)
        if not _CALLISH.match(cleaned) or not cleaned.endswith(")"):
            continue
        try:
            found.append(parse_call(cleaned))
        except ActionError as e:
            failed = (cleaned, e)
    if len(found) == 1:
        return found[0]
    if found:
        names = ", ".join(f"{a.kind}()" for a in found)
        raise ActionError(f"the {where} holds {len(found)} actions ({names}): send one action per turn")
    if failed is not None:
        raise ActionError(f"no action in the {where}: the line {failed[0][:80]!r} looks like one, but {failed[1]}")
    raise ActionError(
        f"no action in the {where}: none of its lines is a call such as click('e12') "
        f"(its last line: {_clean_line(lines[-1])[:80]!r})"
    )


# -- chat tools ------------------------------------------------------------------------------------


def _strip_titles(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: _strip_titles(v) for k, v in schema.items() if k != "title"}
    if isinstance(schema, list):
        return [_strip_titles(v) for v in schema]
    return schema


def chat_tools(exclude: frozenset[str] | set[str] = frozenset()) -> list[dict[str, Any]]:
    """OpenAI-style tool schemas, one per action of ACTION_MODELS (the parser's own models)."""
    tools = []
    for name, model in ACTION_MODELS.items():
        if name in exclude:
            continue
        schema = _strip_titles(model.model_json_schema())
        params = {
            "type": "object",
            "properties": schema.get("properties", {}),
            "required": schema.get("required", []),
            "additionalProperties": False,
        }
        doc = (model.__doc__ or name).strip()
        tools.append({"type": "function", "function": {"name": name, "description": doc, "parameters": params}})
    return tools


def _lit(value: Any) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return repr(str(value))  # refused by the parser with the argument's name, not a syntax error
    return repr(value)


def tool_text(name: str, arguments: Mapping[str, Any]) -> str:
    """A tool call as the text action it stands for: name(key=value, ...) with Python
    literals, which parse_action reads back. Bad arguments still make an action, so
    the env answers them as the agent's mistake (an observation), not as a crash."""
    if name not in ACTION_MODELS:
        raise ValueError(f"unknown tool {name!r}; the tools: {', '.join(ACTION_MODELS)}")
    parts = []
    for key, value in arguments.items():
        if not (isinstance(key, str) and key.isidentifier()):
            raise ValueError(f"tool {name!r}: argument name {key!r} is not an identifier")
        parts.append(f"{key}={_lit(value)}")
    return f"{name}({', '.join(parts)})"
