"""Text from outside (a store's lease owner, a server's message, a file's field) as it may be
shown: one terminal-safe line of a bounded length."""

from __future__ import annotations

LIMIT = 200
"""The characters of an outside string a message shows (the rest counted, not shown)."""


def one_line(value: object, limit: int | None = LIMIT) -> str:
    """``value`` as one line a terminal shows as written: every character Python cannot print
    (ESC and the other control characters, newlines, bidirectional overrides, lone
    surrogates) as its backslash escape, and at most ``limit`` characters of it (None: all),
    the rest counted.

    Args:
        value: Anything; ``str(value)`` is shown.
        limit: How many of its characters to show.

    Returns:
        The escaped text, e.g. ``'host\\x1b[2J...' (+999800 characters)``.
    """
    text = str(value)
    cut = text if limit is None else text[:limit]
    shown = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii")
                    for c in cut)
    return shown if len(cut) == len(text) else f"{shown}... (+{len(text) - len(cut)} characters)"
