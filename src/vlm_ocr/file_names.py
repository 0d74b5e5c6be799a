"""A file's name as text: kept in a JSON document, carried by a job, printed on a terminal.

A name made on a system of another encoding holds bytes that are no UTF-8 (Python holds them as
lone surrogates), which JSON cannot carry; a name may hold control characters, which a terminal
obeys. Both commands, `vlm-ocr run` and `vlm-ocr submit`, say names through these two.
"""

from __future__ import annotations


def stored_name(text: str) -> str:
    """A name as the report and document.json keep it: the bytes of a file name that are not
    UTF-8 (a name from another system's encoding) written `\\xff`, so the JSON is valid."""
    if text.isascii():
        return text
    try:
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate, which no file name decodes to
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return raw.decode("utf-8", "backslashreplace")


def shown(text: str) -> str:
    """A name (or a line naming one) as a terminal is given it: control characters escaped as
    Python writes them (`\\x1b`, `\\n`), so a name cannot clear the screen or fake a line."""
    text = stored_name(text)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
