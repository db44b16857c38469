"""Task files as YAML text: the guarded safe loader and the block dumper.

Imported on first use, not with `sandgym.specs.base`: a task set whose
files are all in the parse cache (parse_cache.py) is loaded without
importing PyYAML at all. The limits (MAX_SPEC_*) are `base`'s, read when
used. A change to what the loader accepts or returns must bump
`parse_cache.FORMAT`, or files parsed before it are taken from the cache.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from sandgym.specs import base

_SURROGATE = re.compile("[\ud800-\udfff]")


class YAMLRefused(yaml.YAMLError):
    """YAML that parses but that a task file may not hold (aliases, too deep, too many nodes)."""


def _where(event: Any) -> str:
    """Where a YAML event starts, for an error (made only when one is raised)."""
    return f"line {event.start_mark.line + 1}, column {event.start_mark.column + 1}"


class _Guard(yaml.composer.Composer):
    """A composer that refuses anchors and aliases (so no alias can expand
    into a billion nodes), nesting deeper than MAX_SPEC_DEPTH, more than
    MAX_SPEC_NODES nodes, and strings that are no Unicode (lone surrogates
    from \\ud800 escapes)."""

    def __init__(self) -> None:
        yaml.composer.Composer.__init__(self)
        self._depth = 0
        self._nodes = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()  # type: ignore[attr-defined]
        if isinstance(event, yaml.AliasEvent):
            raise YAMLRefused(
                f"a YAML alias (*{event.anchor}) at {_where(event)}: anchors and aliases are not allowed "
                "in task files; write the value out"
            )
        if event.anchor is not None:
            raise YAMLRefused(
                f"a YAML anchor (&{event.anchor}) at {_where(event)}: anchors and aliases are not allowed "
                "in task files; write the value out"
            )
        self._nodes += 1
        if self._nodes > base.MAX_SPEC_NODES:
            raise YAMLRefused(
                f"more than {base.MAX_SPEC_NODES:,} values (at {_where(event)}); a task file must be smaller"
            )
        if isinstance(event, yaml.ScalarEvent):
            bad = _SURROGATE.search(event.value)
            if bad:
                raise YAMLRefused(
                    f"a string at {_where(event)} holds a lone surrogate (U+{ord(bad.group()):04X}), "
                    "which is not Unicode text"
                )
            return super().compose_node(parent, index)
        self._depth += 1
        try:
            if self._depth > base.MAX_SPEC_DEPTH:
                raise YAMLRefused(f"nesting deeper than {base.MAX_SPEC_DEPTH} levels at {_where(event)}")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


if hasattr(yaml, "CSafeLoader"):  # libyaml's parser when PyYAML has it: the same safe subset, ~10x faster
    import yaml.cyaml

    CParser: Any = yaml.cyaml.CParser  # type: ignore[attr-defined]

    class _Loader(_Guard, CParser, yaml.constructor.SafeConstructor, yaml.resolver.Resolver):
        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            yaml.constructor.SafeConstructor.__init__(self)
            yaml.resolver.Resolver.__init__(self)
            _Guard.__init__(self)

else:  # pragma: no cover - PyYAML without libyaml

    class _Loader(  # type: ignore[no-redef]
        _Guard,
        yaml.reader.Reader,
        yaml.scanner.Scanner,
        yaml.parser.Parser,
        yaml.constructor.SafeConstructor,
        yaml.resolver.Resolver,
    ):
        def __init__(self, stream: str) -> None:
            yaml.reader.Reader.__init__(self, stream)
            yaml.scanner.Scanner.__init__(self)
            yaml.parser.Parser.__init__(self)
            yaml.constructor.SafeConstructor.__init__(self)
            yaml.resolver.Resolver.__init__(self)
            _Guard.__init__(self)


def load_yaml_text(text: str) -> Any:
    """YAML text as data, through the guarded safe loader (no anchors or
    aliases, bounded depth and size). Raises yaml.YAMLError (YAMLRefused for
    what the guard refuses)."""
    if len(text) > base.MAX_SPEC_BYTES:
        raise YAMLRefused(f"{len(text):,} characters; the limit is {base.MAX_SPEC_BYTES:,}")
    bad = _SURROGATE.search(text)
    if bad:  # text decoded with surrogateescape (a command-line argument that is not UTF-8)
        raise YAMLRefused(f"not Unicode text: a lone surrogate (U+{ord(bad.group()):04X}) at character {bad.start()}")
    loader = _Loader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


class _BlockDumper(yaml.SafeDumper):
    """Writes multi-line strings (code, prompts) as literal blocks."""


def _str_block(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    if any(ch in value for ch in "\x85\u2028\u2029"):
        # YAML line breaks that only a double-quoted scalar keeps (escaped).
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style='"')
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockDumper.add_representer(str, _str_block)


def dump_yaml(data: Any) -> str:
    return yaml.dump(data, Dumper=_BlockDumper, sort_keys=False, allow_unicode=True, width=100)
