"""URLs as a user may see them: without credentials, query or fragment, which may hold tokens."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def looks_like_url(text: str) -> bool:
    return _SCHEME.match(text) is not None


def redact(url: str) -> str:
    """The URL without user:password, query and fragment; a URL that does not parse, that has
    no `//` (`example.com/a.pdf`, `user:pw@host`), or whose `@` falls outside its host part (a
    password holding `?`, `#` or `/`, unescaped) is cut as typed."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return _cut(url)
    if not parts.netloc or ("@" in url and "@" not in parts.netloc):
        return _cut(url)
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme}://{host}{port}{parts.path}"[:300]


def _cut(text: str) -> str:
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "", text
    rest = rest.rsplit("@", 1)[-1]  # credentials first: a password may hold `?` or `#`
    rest = rest.split("?", 1)[0].split("#", 1)[0]
    return (f"{scheme}{sep}{rest}")[:100]
