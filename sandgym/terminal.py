"""Text from data, made safe to print on a terminal through rich.

Model names, task ids, titles, problems and paths come from files someone
else wrote. Printed raw, an escape sequence in one would set the window
title, clear the screen or make a hyperlink, and a `[/]` would be read as
rich markup (and crash the print). `shown()` is the one way the CLI puts
such a string into what it prints.
"""

from __future__ import annotations

import re

# What a terminal would act on rather than show: C0 and C1 controls (escape
# sequences set the window title, clear the screen, make hyperlinks) and the
# bidirectional overrides that reorder what is shown.
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def shown(value: object, one_line: bool = True) -> str:
    """`value` as rich markup that prints as the text itself: control
    characters dropped (tabs and line breaks too when `one_line`, as
    spaces), lone surrogates escaped, rich markup escaped (`[/]` prints as
    itself). Every string from data (task sets, records, predictions, paths)
    goes through this before the CLI prints it."""
    from rich.markup import escape

    text = str(value).encode("utf-8", "backslashreplace").decode("utf-8")
    if one_line:
        text = re.sub("[\t\n\r\x0b\x0c\x85\u2028\u2029]", " ", text)
    return escape(_CONTROLS.sub("", text))


def plain(value: object) -> str:
    """`value` as one line of plain text (printed without rich): control
    characters dropped, line breaks as spaces, lone surrogates escaped."""
    text = str(value).encode("utf-8", "backslashreplace").decode("utf-8")
    return _CONTROLS.sub("", re.sub("[\t\n\r\x0b\x0c\x85\u2028\u2029]", " ", text))
