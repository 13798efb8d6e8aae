"""One sanitiser per sink for text a model or file supplies (tensor, output, operator and module
names, metadata, archive member names, error texts quoting them).

- the terminal: ``for_terminal`` shows control characters (ESC, CR, backspace, C1 codes, bidi
  overrides) as visible escapes, so a name cannot clear the screen or move the cursor and print
  "all checks PASSED"; ``terminal.py``'s consoles apply it to every text segment they write;
- C source: ``for_c_comment`` (no newline, no ``*/``, no trigraph, no backslash that could continue
  the line) and ``for_c_identifier``;
- Markdown and HTML: ``reports/markdown.escape_markdown``; XML: ``reports/junit.py``.
"""

from __future__ import annotations

import re

__all__ = ["for_terminal", "for_c_comment", "for_c_identifier"]

# C0 controls except newline and tab, DEL, C1 controls, line/paragraph separators, bidi controls.
_TERMINAL_UNSAFE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_C_COMMENT_SAFE = re.compile(r"[^A-Za-z0-9 _.,:;()+=<>#@%&^|~!?'\"\[\]{}$/-]")


def _escaped(match: re.Match) -> str:
    code = ord(match.group(0))
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def for_terminal(text: object, *, keep_newlines: bool = True) -> str:
    """``text`` with every character a terminal would act on shown as an escape (``\\x1b``)."""
    shown = _TERMINAL_UNSAFE.sub(_escaped, str(text))
    return shown if keep_newlines else shown.replace("\n", "\\n").replace("\t", "\\t")


def for_c_comment(text: object) -> str:
    """``text`` safe inside a ``//`` or ``/* */`` comment: printable ASCII only (others become
    ``?``), no comment terminator, no trigraph, no backslash (a trailing one continues the line)."""
    safe = _C_COMMENT_SAFE.sub("?", str(text))
    while "*/" in safe or "/*" in safe or "??" in safe:
        safe = safe.replace("*/", "*?").replace("/*", "/?").replace("??", "?_")
    return safe


def for_c_identifier(text: object, fallback: str = "value") -> str:
    """A C identifier made from ``text``: letters, digits and underscores, not starting with a digit."""
    ident = re.sub(r"[^A-Za-z0-9_]", "_", str(text)) or fallback
    return f"_{ident}" if ident[0].isdigit() else ident
