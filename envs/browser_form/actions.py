"""The browser action grammar: a tokenizer and a parser; nothing is ever evaluated.

    action  := NAME "(" [ arg { "," arg } ] ")"
    arg     := REF | STRING
    REF     := e<digits>  (an element ref from the snapshot, e.g. e12; f1e3 inside frames)
    STRING  := "..." or '...' with backslash escapes (\\" \\' \\\\ \\n \\t \\uXXXX)

A target is a REF, or a STRING "role:accessible name" (e.g. "button:Sign in"),
which names exactly one element the way the snapshot shows it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sandgym.errors import SandgymError

GRAMMAR = (
    'Actions (one per turn): click(ref) | fill(ref, "text") | select(ref, "option") | press("Key") | '
    'goto("/path") | done(). A ref is an element id from the snapshot such as e12, or "role:name" '
    '(e.g. "button:Sign in"). Strings are in double quotes with backslash escapes.'
)
# name -> kinds of its arguments, in order
SIGNATURES: dict[str, tuple[str, ...]] = {
    "click": ("target",),
    "fill": ("target", "text"),
    "select": ("target", "text"),
    "press": ("text",),
    "goto": ("text",),
    "done": (),
}
REF_RE = re.compile(r"(?:f\d+)?e\d+")
MAX_ACTION_CHARS = 20_000
_TOKEN = re.compile(r"""\s*(?:(?P<name>[A-Za-z_][A-Za-z0-9_]*)|(?P<punct>[(),])|(?P<quote>["']))""")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'", "0": "\0"}


class ActionError(SandgymError, ValueError):
    """The action is not in the grammar; the message says why."""


@dataclass(frozen=True)
class Target:
    ref: str | None = None  # e12
    role: str | None = None  # with name: "button:Sign in"
    name: str | None = None

    def __str__(self) -> str:
        return self.ref if self.ref else f'"{self.role}:{self.name}"'


@dataclass(frozen=True)
class Action:
    kind: str
    target: Target | None = None
    text: str | None = None


def _read_string(src: str, i: int, quote: str) -> tuple[str, int]:
    out: list[str] = []
    while i < len(src):
        ch = src[i]
        if ch == quote:
            return "".join(out), i + 1
        if ch == "\\":
            if i + 1 >= len(src):
                break
            nxt = src[i + 1]
            if nxt == "u":
                digits = src[i + 2 : i + 6]
                if not re.fullmatch(r"[0-9a-fA-F]{4}", digits):
                    raise ActionError(f"bad escape \\u{digits!s} at column {i + 1}: use \\uXXXX")
                out.append(chr(int(digits, 16)))
                i += 6
                continue
            if nxt not in _ESCAPES:
                raise ActionError(f"unknown escape \\{nxt} at column {i + 1}")
            out.append(_ESCAPES[nxt])
            i += 2
            continue
        out.append(ch)
        i += 1
    raise ActionError("a string is not closed")


def _unfenced(src: str) -> str | None:
    """The inside of an action wrapped in a fence (```, an optional language,
    the action, ```), stripped; None if `src` is not one. String operations,
    linear: the regular expression this was backtracked quadratically."""
    if len(src) < 6 or not (src.startswith("```") and src.endswith("```")):
        return None
    i = 3
    while i < len(src) - 3 and src[i].isascii() and src[i].isalpha():
        i += 1
    return src[i:-3].strip()


def _tokens(src: str) -> list[tuple[str, str]]:
    toks: list[tuple[str, str]] = []
    i = 0
    end = len(src.rstrip())
    while i < len(src):
        if i >= end:
            break
        m = _TOKEN.match(src, i)
        if not m:
            raise ActionError(f"unexpected {src[i:].lstrip()[:20]!r} at column {i + 1}")
        i = m.end()
        if m.group("name"):
            toks.append(("name", m.group("name")))
        elif m.group("punct"):
            toks.append((m.group("punct"), m.group("punct")))
        else:
            text, i = _read_string(src, i, m.group("quote"))
            toks.append(("string", text))
    return toks


def _target(kind: str, value: str) -> Target:
    if kind == "name":
        if not REF_RE.fullmatch(value):
            raise ActionError(f"{value!r} is not a ref: refs look like e12 (see [ref=...] in the snapshot)")
        return Target(ref=value)
    if REF_RE.fullmatch(value):
        return Target(ref=value)
    role, sep, name = value.partition(":")
    if not sep or not re.fullmatch(r"[a-z]+", role.strip()) or not name.strip():
        raise ActionError(f'{value!r} is not a target: give a ref like e12, or "role:name" like "button:Sign in"')
    return Target(role=role.strip(), name=name.strip())


def parse_action(text: str) -> Action:
    """One action from an agent's text; raises ActionError naming the problem."""
    if not isinstance(text, str):
        raise ActionError(f"an action is text, got {type(text).__name__}")
    if len(text) > MAX_ACTION_CHARS:
        raise ActionError(f"the action is {len(text)} characters long; the limit is {MAX_ACTION_CHARS}")
    src = text.strip()
    fenced = _unfenced(src)
    if fenced is not None:
        src = fenced
    if not src:
        raise ActionError("the action is empty")
    toks = _tokens(src)
    if len(toks) < 3 or toks[0][0] != "name" or toks[1][0] != "(" or toks[-1][0] != ")":
        raise ActionError("expected one call such as click(e12)")
    name = toks[0][1]
    if any(t[0] in "()" for t in toks[2:-1]):
        raise ActionError("expected one call such as click(e12), not several")
    if name not in SIGNATURES:
        raise ActionError(f"unknown action {name!r}")
    args: list[tuple[str, str]] = []
    body = toks[2:-1]
    for n, tok in enumerate(body):
        if n % 2 == 1:
            if tok[0] != ",":
                raise ActionError(f"expected ',' between the arguments of {name}()")
            continue
        if tok[0] not in ("name", "string"):
            raise ActionError(f"unexpected {tok[1]!r} in the arguments of {name}()")
        args.append(tok)
    if body and body[-1][0] == ",":
        raise ActionError(f"a trailing ',' in {name}()")
    kinds = SIGNATURES[name]
    if len(args) != len(kinds):
        raise ActionError(f"{name}() takes {len(kinds)} argument(s), got {len(args)}")
    target, string = None, None
    for (tok_kind, value), kind in zip(args, kinds, strict=True):
        if kind == "target":
            target = _target(tok_kind, value)
        elif tok_kind != "string":
            raise ActionError(f'{name}(): {value} must be a quoted string, e.g. "{value}"')
        else:
            string = value
    return Action(kind=name, target=target, text=string)
