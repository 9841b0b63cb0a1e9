"""Text safe for a terminal: what divfuzz prints from a file never drives the terminal.

A store, a timings file, a corpus or a shard comes from anyone, and its strings (bucket keys,
culprits, messages, the keys of `divfuzz-run<N>-timings.json`) reach the terminal. Raw, an ESC or
OSC sequence in them sets the window title, clears the screen or recolours (issue 40), and a
bidirectional override reorders what the reader sees. `terminal_safe` writes every such character
as a visible escape (`\\x1b`, `\\x9b`, `\\u202e`), as `repr` does; newlines and tabs stay.
Invariant: the result holds no C0 or C1 control character but newline and tab, no DEL and no
bidirectional or invisible formatting character, and equals the input when it held none.
The CLI's consoles apply it to every piece of text they print (`divfuzz.fuzzer.cli.options`), so a
command never has to remember to; anything else that writes to a terminal calls it itself.
"""

from __future__ import annotations

import re

# C0 but newline and tab, DEL and C1, and the invisible and bidirectional formatting characters.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff\ufff9-\ufffb]")


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal_safe(text: str) -> str:
    """`text` with every character that could control a terminal written as a visible escape."""
    return _UNSAFE.sub(_escape, text)


# The longest one-line message a failure is said in (a campaign's failure, the CLI's internal
# error): long enough for a sentence naming two paths, so that no message is cut mid-word
# (a cache's warning read "...compiles without the cache (;" when clipped at 300).
ONE_LINE_CHARS = 2000


def one_line(text: str, limit: int = ONE_LINE_CHARS) -> str:
    """`text` on one line (its whitespace runs as one space), at most `limit` characters; a longer
    one ends with "… (N more characters)", never cut without saying so."""
    flat = " ".join(str(text).split())
    if len(flat) <= limit:
        return flat
    return f"{flat[:limit]}… ({len(flat) - limit} more characters)"
