"""Control characters in text that may reach a terminal: stripped from what the Python tool feeds the policy, shown
escaped in the console's completions table.

A C0 (U+0000-U+001F, U+007F) or C1 (U+0080-U+009F) control character is an instruction to a terminal, not text: ESC
and C1's CSI and OSC open escape sequences (OSC 0 sets the window title, OSC 52 writes the clipboard), BEL ends them,
CR moves the cursor back over what was printed. One `print` in a program the policy writes, or the policy's own
tokens, can hold any of them, and printed raw (TRL's completions table, a log tailed in a terminal) they act on the
reader's terminal. Newline and tab are layout and stay. With ESC, BEL and the C1 introducers gone, what is left of a
sequence (`]0;title`, `[31m`) is inert text.
"""

from __future__ import annotations

import re

# C0 but newline (U+000A) and tab (U+0009), DEL, C1.
CONTROL_CHARACTERS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def strip_control_characters(text: str) -> str:
    """`text` without its control characters (newline and tab kept): what the Python tool's observation holds."""
    return CONTROL_CHARACTERS.sub("", text)


def escape_control_characters(text: str) -> str:
    """`text` with each control character written as its Python escape (ESC as the four characters `\\x1b`), so a
    console shows that the policy wrote it and the terminal does not act on it; newline and tab kept."""
    return CONTROL_CHARACTERS.sub(lambda match: f"\\x{ord(match.group()):02x}", text)
