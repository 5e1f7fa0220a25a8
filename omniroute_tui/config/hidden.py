"""Characters a reader cannot see: refused in names, escaped wherever text is printed.

A control character in a name (`\\x1b[2J` clears a CI log), a right-to-left override
(U+202E shows `exe.txt` for `txt.exe`) or a zero-width space (two names that look the same)
makes a terminal, a report or a log line say something other than what the file says
(docs/design.md §1). Names may hold any visible character; a description may also hold
line breaks and tabs, and the zero-width (non-)joiners that some scripts and emoji need.
"""

from __future__ import annotations

import unicodedata

__all__ = ["DESCRIPTION_KEEPS", "find_hidden", "hidden_reason", "visible"]

#: categories a reader cannot see: C0 and C1 controls and DEL (Cc), format characters such
#: as bidi overrides and zero-width spaces (Cf), line and paragraph separators (Zl, Zp),
#: and lone surrogates (Cs), which no UTF-8 file can even hold; and the noncharacters
#: (U+FFFE, U+FFFF and the like), which XML 1.0 cannot hold
_HIDDEN = {"Cc": "a control character", "Cf": "an invisible formatting character",
           "Zl": "a line separator", "Zp": "a paragraph separator",
           "Cs": "a lone surrogate"}
_NONCHARACTER = "a noncharacter"
#: what a description may hold besides visible text: line breaks, tabs, and the joiners
#: that Persian script and emoji sequences are written with
DESCRIPTION_KEEPS = "\n\t\u200c\u200d"


def _kind(char: str) -> str | None:
    code = ord(char)
    if code & 0xFFFE == 0xFFFE or 0xFDD0 <= code <= 0xFDEF:
        return _NONCHARACTER
    return _HIDDEN.get(unicodedata.category(char))


def find_hidden(text: str, keep: str = "") -> tuple[int, str] | None:
    """The index and the character of the first hidden character of `text` not in
    `keep`, or None."""
    if text.isprintable():  # the common case, in C: no character of any category above
        return None
    for index, char in enumerate(text):
        if char not in keep and _kind(char) is not None:
            return index, char
    return None


def hidden_reason(text: str, what: str, keep: str = "") -> str | None:
    """The sentence refusing `text` (`what` says what it is: "the name"), or None if
    every character of it shows."""
    found = find_hidden(text, keep)
    if found is None:
        return None
    index, char = found
    return (f"{what} holds U+{ord(char):04X}, {_kind(char)}, at character {index + 1}: it "
            "would not show as written in a terminal or a report")


_SHORT = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _escaped(char: str) -> str:
    if char in _SHORT:
        return _SHORT[char]
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def visible(text: str, keep: str = "") -> str:
    """`text` with each hidden character not in `keep` written as its escape (`\\x1b`,
    `\\u202e`), as Python's repr writes it: safe to print, and still says what was there."""
    if find_hidden(text, keep) is None:
        return text
    return "".join(_escaped(c) if c not in keep and _kind(c) is not None else c
                   for c in text)
