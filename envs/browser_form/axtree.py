"""Playwright's aria snapshot, rewritten in the layout of BrowserGym's `axtree_txt`.

Playwright (mode "ai") writes YAML-like lines:

    - link "Home" [ref=e3] [cursor=pointer]:
      - /url: /
    - checkbox "Remember me" [checked] [ref=e9]
    - text: Signed in as alice

BrowserGym's agents read one node a line, indented with tabs, the element
id in brackets first:

    [e3] link 'Home', url='/'
    [e9] checkbox 'Remember me', checked
    StaticText 'Signed in as alice'

The ids are the refs the actions take ('e3'). A line this rewrite does not
recognise is kept as it was (indented), so nothing of the page is lost.
"""

from __future__ import annotations

import json
import re

_ITEM = re.compile(
    r"""(?P<indent>\s*)-\s
        (?P<role>[A-Za-z][\w-]*|/[\w-]+)
        (?:\s"(?P<name>(?:[^"\\]|\\.)*)")?
        (?P<attrs>(?:\s\[[^\]]*\])*)
        (?::(?:\s(?P<text>.*))?)?$""",
    re.X,
)
_ATTR = re.compile(r"\[([^\]=]+)(?:=([^\]]*))?\]")
_SKIPPED_ATTRS = {"cursor"}  # presentation, not state


def _quoted(text: str) -> str:
    """A YAML scalar of the snapshot as plain text (quoted ones are JSON-compatible)."""
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] == '"':
        try:
            return str(json.loads(text))
        except ValueError:
            pass
    return text


def _name(raw: str) -> str:
    try:
        return str(json.loads(f'"{raw}"'))
    except ValueError:
        return raw


def to_axtree_txt(snapshot: str) -> str:
    out: list[str] = []
    last_at_depth: dict[int, int] = {}  # depth -> index in `out` of the last node there
    for line in snapshot.splitlines():
        m = _ITEM.match(line)
        if m is None:
            out.append(line)
            continue
        depth = len(m["indent"]) // 2
        role, text = m["role"], m["text"]
        if role.startswith("/"):  # a property of the node above, e.g. /url
            parent = last_at_depth.get(depth - 1)
            if parent is not None:
                out[parent] += f", {role[1:]}={_quoted(text or '')!r}"
                continue
            out.append("\t" * depth + f"{role[1:]}={_quoted(text or '')!r}")
            continue
        tabs = "\t" * depth
        if role == "text":
            out.append(f"{tabs}StaticText {_quoted(text or '')!r}")
            last_at_depth[depth] = len(out) - 1
            continue
        ref = ""
        props: list[str] = []
        for key, value in _ATTR.findall(m["attrs"] or ""):
            if key == "ref":
                ref = f"[{value}] "
            elif key == "active":
                props.append("focused")
            elif key not in _SKIPPED_ATTRS:
                props.append(key if value == "" else f"{key}={value}")
        node = f"{tabs}{ref}{role}"
        if m["name"] is not None:
            node += f" {_name(m['name'])!r}"
        if props:
            node += ", " + ", ".join(props)
        out.append(node)
        last_at_depth[depth] = len(out) - 1
        if text:  # inline text: a child of its own, as BrowserGym shows it
            out.append(f"{tabs}\tStaticText {_quoted(text)!r}")
    return "\n".join(out)
