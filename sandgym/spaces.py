"""Gymnasium spaces for text that may hold any Unicode."""

from __future__ import annotations

from typing import Any

from gymnasium.spaces import Text

MAX_TEXT = 1_000_000


class UnicodeText(Text):
    """Text of any characters up to `max_length`.

    Gymnasium's Text rejects every character outside its charset (spaces,
    punctuation, non-ASCII by default); prompts and code are full of them.
    Membership checks type and length only; `sample()` still draws from the
    charset, which is enough for smoke tests of an env.
    """

    def __init__(self, max_length: int = MAX_TEXT, *, min_length: int = 0, **kwargs: Any):
        super().__init__(max_length, min_length=min_length, **kwargs)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"UnicodeText({self.min_length}, {self.max_length})"
