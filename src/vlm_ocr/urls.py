"""URLs as a user may see them: without credentials, query or fragment, which may hold tokens."""

from __future__ import annotations

from urllib.parse import urlsplit


def redact(url: str) -> str:
    """The URL without user:password, query and fragment; a URL that does not parse, or that
    has no `//` (`example.com/a.pdf`, `user:pw@host`), is cut as typed."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return _cut(url)
    if not parts.netloc:
        return _cut(url)
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme}://{host}{port}{parts.path}"[:300]


def _cut(text: str) -> str:
    return text.split("?", 1)[0].split("#", 1)[0].rsplit("@", 1)[-1][:100]
