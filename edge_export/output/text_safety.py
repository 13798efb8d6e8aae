"""One sanitiser per sink for text a model or file supplies (tensor, output, operator and module
names, metadata, archive member names, error texts quoting them), over one definition of what is
unsafe to show (``unsafe_to_show``): control characters, format characters (bidi overrides and
isolates, zero-width spaces and joiners, the byte-order mark), surrogates, private-use and
unassigned code points, line and paragraph separators. Letters of any script are shown as they are.

- the terminal: ``for_terminal`` shows those characters as visible escapes (``\\x1b``, ``\\u202e``),
  so a name cannot clear the screen, move the cursor and print "all checks PASSED", or reorder what
  follows it; ``terminal.py``'s consoles apply it to every text segment they write;
- C source: ``for_c_comment`` (printable ASCII, an unsafe character as ``<U+202E>``, no newline, no
  ``*/``, no trigraph, no backslash that could continue the line) and ``for_c_identifier``;
- Markdown and HTML: ``escape_markdown`` and ``code_span`` (reports and every target's Markdown
  section); a Kotlin string literal in the report's app example: ``kotlin_string``; XML:
  ``reports/junit.py`` passes its document through ``show_unsafe``.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = [
    "unsafe_to_show", "show_unsafe", "for_terminal", "for_c_comment", "for_c_identifier", "escape_markdown", "code_span",
    "kotlin_string",
]

# An allow-list by Unicode category: everything outside these is shown (letters, marks, numbers,
# punctuation, symbols, spaces). Cc: controls; Cf: format (U+202A-E and U+2066-9 bidi, U+200B-F,
# U+2060, U+FEFF, U+061C, U+00AD); Cs: lone surrogates; Co: private use; Cn: unassigned (a newer
# Unicode's character is escaped rather than trusted); Zl, Zp: U+2028, U+2029.
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
_C_COMMENT_SAFE = re.compile(r"[^A-Za-z0-9 _.,:;()+=<>#@%&^|~!?'\"\[\]{}$/-]")


def unsafe_to_show(char: str) -> bool:
    """Whether ``char`` (one character) could hide, reorder or act on text when shown raw."""
    return unicodedata.category(char) in _UNSAFE_CATEGORIES


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def show_unsafe(text: object, keep: str = "") -> str:
    """``text`` with every character ``unsafe_to_show`` (but those in ``keep``) as a visible escape:
    ``\\x1b``, ``\\u202e``, ``\\U000f0000``."""
    text = str(text)
    if text.isprintable():  # no character of an unsafe category: the common case, at C speed
        return text
    return "".join(_escape(c) if c not in keep and unsafe_to_show(c) else c for c in text)


def for_terminal(text: object, *, keep_newlines: bool = True) -> str:
    """``text`` with every character a terminal would act on, or that would hide or reorder text,
    shown as an escape (``\\x1b``, ``\\u202e``)."""
    shown = show_unsafe(text, keep="\n\t")
    return shown if keep_newlines else shown.replace("\n", "\\n").replace("\t", "\\t")


def for_c_comment(text: object) -> str:
    """``text`` safe inside a ``//`` or ``/* */`` comment: printable ASCII only (a character unsafe to
    show becomes ``<U+202E>``, any other ``?``), no comment terminator, no trigraph, no backslash (a
    trailing one continues the line)."""
    shown = "".join(f"<U+{ord(c):04X}>" if unsafe_to_show(c) else c for c in str(text))
    safe = _C_COMMENT_SAFE.sub("?", shown)
    while "*/" in safe or "/*" in safe or "??" in safe:
        safe = safe.replace("*/", "*?").replace("/*", "/?").replace("??", "?_")
    return safe


def for_c_identifier(text: object, fallback: str = "value") -> str:
    """A C identifier made from ``text``: letters, digits and underscores, not starting with a digit."""
    ident = re.sub(r"[^A-Za-z0-9_]", "_", str(text)) or fallback
    return f"_{ident}" if ident[0].isdigit() else ident


# Everything a model or file supplies (tensor, output, module and op names, paths, error texts) goes
# through escape_markdown: the report is published as a CI step summary, where a crafted name could
# otherwise add a heading, an image, a link, raw HTML or table cells. Such text is never put in a
# backtick code span (a backtick in it would end the span); <code> keeps the look.
# Backslash-escaped: emphasis, code, links and images, table cells, strikethrough, math, headings,
# and the ':' and '.' that GFM's bare-URL autolinks start from.
# Characters that are unsafe to show (text_safety.unsafe_to_show: controls, bidi overrides, zero-width
# and other format characters, U+2028/9) become visible escapes such as \u202e, whose backslash is
# then escaped like any other; a line break or tab, which a message may hold, is a space.
_MD_PUNCTUATION = re.compile(r"([\\`*_\[\]()#!|~$:.])")
_LINE_BREAKS = str.maketrans("\r\n\t", "   ")


def escape_markdown(value) -> str:
    """``value`` as literal text in Markdown and HTML: no markup of any kind survives, and no
    character that would hide or reorder the text around it."""
    text = show_unsafe(str(value).translate(_LINE_BREAKS))
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MD_PUNCTUATION.sub(r"\\\1", text)


def code_span(value) -> str:
    """A model-supplied name shown as code, escaped."""
    return f"<code>{escape_markdown(value)}</code>"


def kotlin_string(value) -> str:
    """``value`` as a Kotlin string literal of printable ASCII only: quotes, backslashes and ``$``
    (string templates) escaped, everything else as ``\\uXXXX``. No line break can appear, so a name
    read from a file cannot end the fenced code block it is written in, nor the literal; backticks
    and ``<>&`` are ``\\uXXXX`` too, so the block holds no fence or HTML a name brought."""
    out = []
    for ch in str(value):
        if ch in '"\\$':
            out.append("\\" + ch)
        elif " " <= ch <= "~" and ch not in "`<>&":
            out.append(ch)
        else:
            data = ch.encode("utf-16-be")
            out.extend(f"\\u{int.from_bytes(data[i:i + 2], 'big'):04X}" for i in range(0, len(data), 2))
    return '"' + "".join(out) + '"'
