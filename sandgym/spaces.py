"""Gymnasium spaces for the text (and tool calls) LLM agents send and see.

`UnicodeText` is text of any characters; `TextOrToolCall` is that or a tool
call as a dict, checked by the family's own action parser. Both batch as
gymnasium's Text does (a Tuple of copies) and go through `AsyncVectorEnv`'s
shared memory: the handlers registered at the end store each text as its
code points, so the async vector env works with its defaults
(`shared_memory=True`).
"""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Callable, Sequence
from ctypes import c_int32
from multiprocessing.sharedctypes import SynchronizedArray
from types import ModuleType
from typing import Any, cast, overload

import numpy as np
from gymnasium.spaces import Text
from gymnasium.vector.utils import create_shared_memory, read_from_shared_memory, write_to_shared_memory

MAX_TEXT = 1_000_000
# The longest text sample() draws by default: a random action is for smoke
# tests of an env, and a megabyte of random letters tests nothing more.
SAMPLE_LENGTH = 64


class UnicodeText(Text):
    """Text of any characters up to `max_length`.

    Gymnasium's Text rejects every character outside its charset (spaces,
    punctuation, non-ASCII by default); prompts and code are full of them.
    Membership checks type and length only; `sample()` still draws from the
    charset (at most SAMPLE_LENGTH characters unless a mask gives a length),
    which is enough for smoke tests of an env.
    """

    def __init__(self, max_length: int = MAX_TEXT, *, min_length: int = 0, **kwargs: Any):
        super().__init__(max_length, min_length=min_length, **kwargs)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        if mask is None and probability is None:
            high = max(self.min_length, min(self.max_length, SAMPLE_LENGTH))
            mask = (int(self.np_random.integers(self.min_length, high + 1)), None)
        return super().sample(mask=mask, probability=probability)

    def __repr__(self) -> str:
        return f"UnicodeText({self.min_length}, {self.max_length})"


class TextOrToolCall(UnicodeText):
    """Text, or a tool call as a dict `{"tool": NAME, **ARGS}` (the SWE family's dict actions).

    `parse` is the family's action parser: a dict is in the space when it
    parses (so the space accepts exactly the dicts `step` accepts and cannot
    drift from it); text is checked as UnicodeText. `tools` are the
    family's tool schemas (OpenAI function format), from which `sample()`
    draws a well-formed call with short random arguments.
    """

    def __init__(
        self,
        tools: Sequence[dict[str, Any]],
        parse: Callable[[Any], Any],
        max_length: int = MAX_TEXT,
        **kwargs: Any,
    ):
        super().__init__(max_length, **kwargs)
        self.tools = [t["function"] for t in tools]
        self.parse = parse

    def contains(self, x: Any) -> bool:
        if isinstance(x, dict):
            try:
                self.parse(x)
            except (ValueError, TypeError):
                return False
            return True
        return super().contains(x)

    def sample(self, mask: Any = None, probability: Any = None) -> dict[str, Any] | str:  # type: ignore[override]
        """A random call of a random tool: its required arguments, each
        optional one with probability 1/2. With a Text mask or probability
        (length, characters): random text, as UnicodeText draws it."""
        if mask is not None or probability is not None:
            return super().sample(mask=mask, probability=probability)
        tool = self.tools[int(self.np_random.integers(len(self.tools)))]
        params = tool.get("parameters", {})
        required = set(params.get("required", ()))
        call: dict[str, Any] = {"tool": tool["name"]}
        for name, prop in params.get("properties", {}).items():
            if name in required or self.np_random.random() < 0.5:
                call[name] = self._value(prop)
        return call

    def _value(self, prop: dict[str, Any]) -> Any:
        kind = prop.get("type")
        if kind == "integer":
            return int(self.np_random.integers(1, 50))
        if kind == "number":
            return float(self.np_random.random())
        if kind == "boolean":
            return bool(self.np_random.integers(2))
        if kind == "array":
            return [self._value(prop.get("items", {"type": "string"})) for _ in range(self.np_random.integers(3))]
        return super().sample(mask=(int(self.np_random.integers(1, SAMPLE_LENGTH)), None))

    def __eq__(self, other: Any) -> bool:
        return (
            isinstance(other, TextOrToolCall)
            and super().__eq__(other)
            and self.tools == other.tools
            and self.parse is other.parse
        )

    def __repr__(self) -> str:
        return f"TextOrToolCall({self.max_length}, tools={[t['name'] for t in self.tools]})"


# -- AsyncVectorEnv's shared memory ---------------------------------------------------------
# Gymnasium stores a Text as indices into its charset, which fails on any
# other character. Here each text gets max_length + 1 int32 slots: its
# length, then its code points (UTF-32; lone surrogates pass through).
_SLOT = np.dtype("<i4")  # little-endian, as the utf-32-le codec writes


def _slots(shared_memory: SynchronizedArray[c_int32]) -> np.ndarray:
    """The shared array as int32 numbers, without a copy (writes go to the shared memory)."""
    return np.frombuffer(cast(Any, shared_memory.get_obj()), dtype=_SLOT)


@create_shared_memory.register(UnicodeText)
def _create(space: UnicodeText, n: int = 1, ctx: ModuleType = mp) -> SynchronizedArray[c_int32]:
    return ctx.Array(np.dtype(np.int32).char, n * (space.max_length + 1))


@write_to_shared_memory.register(UnicodeText)
def _write(space: UnicodeText, index: int, value: str, shared_memory: SynchronizedArray[c_int32]) -> None:
    if not isinstance(value, str):
        raise TypeError(f"a {space!r} observation is text (a str), not {type(value).__name__}")
    if len(value) > space.max_length:
        raise ValueError(
            f"an observation text is {len(value):,} characters long; its space {space!r} holds at most "
            f"{space.max_length:,}: shorten it in the env, or make the vector env with "
            'vector_kwargs={"shared_memory": False}'
        )
    size = space.max_length + 1
    slots = _slots(shared_memory)[index * size : (index + 1) * size]
    codes = np.frombuffer(value.encode("utf-32-le", "surrogatepass"), dtype=_SLOT)
    slots[0] = len(codes)
    slots[1 : 1 + len(codes)] = codes


class SharedTexts(Sequence[str]):
    """The texts of a vector env's sub-envs, decoded from the shared memory
    when read: a live view, like the arrays gymnasium returns for a Box
    (`AsyncVectorEnv` reads the buffer once, then only lets the workers
    write to it). `copy`/`deepcopy` (what the vector env's default
    `copy=True` returns) give a tuple of str."""

    def __init__(self, rows: np.ndarray):
        self._rows = rows

    def __len__(self) -> int:
        return len(self._rows)

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[str, ...]: ...
    def __getitem__(self, i: int | slice) -> str | tuple[str, ...]:
        if isinstance(i, slice):
            return tuple(self[j] for j in range(*i.indices(len(self))))
        row = self._rows[i]
        return row[1 : 1 + row[0]].tobytes().decode("utf-32-le", "surrogatepass")

    def __copy__(self) -> tuple[str, ...]:
        return tuple(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> tuple[str, ...]:
        return tuple(self)

    def __eq__(self, other: object) -> bool:
        return tuple(self) == (tuple(other) if isinstance(other, Sequence) else other)

    __hash__ = None  # type: ignore[assignment]  # its contents change

    def __repr__(self) -> str:
        return f"SharedTexts({tuple(self)!r})"


@read_from_shared_memory.register(UnicodeText)
def _read(space: UnicodeText, shared_memory: SynchronizedArray[c_int32], n: int = 1) -> SharedTexts:
    return SharedTexts(_slots(shared_memory).reshape((n, space.max_length + 1)))
