"""URL sources: https only, public addresses only, size and time limits."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from vlm_ocr.errors import InputError
from vlm_ocr.fetch import download

from .httpserver import LoopbackServer


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    srv = LoopbackServer()
    yield srv
    srv.close()


def fetch(url: str, *, allow_private: bool = False, max_bytes: int = 10_000, timeout: float = 5):
    return asyncio.run(
        download(
            url,
            field="input.pdf.url",
            max_bytes=max_bytes,
            timeout_s=timeout,
            allow_private=allow_private,
        )
    )


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://example.com/a.pdf", "not an https URL"),
        ("ftp://example.com/a.pdf", "not an https URL"),
        ("https://127.0.0.1/a.pdf", "loopback address"),
        ("https://localhost/a.pdf", "loopback address"),
        ("https://169.254.169.254/latest/meta-data", "link-local address"),
        ("https://10.1.2.3/a.pdf", "private address"),
        ("https://[::1]/a.pdf", "loopback address"),
        ("https://[::ffff:192.168.0.1]/a.pdf", "private address"),
    ],
)
def test_refused_targets(url: str, says: str) -> None:
    with pytest.raises(InputError) as info:
        fetch(url)
    assert info.value.field == "input.pdf.url"
    assert says in info.value.message


def test_loopback_allowed_only_when_configured(server: LoopbackServer) -> None:
    server.body("/a.bin", b"x" * 100)
    assert fetch(server.url + "/a.bin", allow_private=True) == b"x" * 100
    with pytest.raises(InputError, match="not an https URL"):
        fetch(server.url + "/a.bin")


def test_size_limit(server: LoopbackServer) -> None:
    server.body("/big", b"x" * 20_000)
    with pytest.raises(InputError, match=r"over the 0\.01 MB limit"):
        fetch(server.url + "/big", allow_private=True)


def test_time_limit(server: LoopbackServer) -> None:
    server.body("/slow", b"x", delay=3)
    with pytest.raises(InputError, match=r"did not finish within 0\.5 s"):
        fetch(server.url + "/slow", allow_private=True, timeout=0.5)


def test_http_error_and_redirects(server: LoopbackServer) -> None:
    server.body("/final", b"done")
    server.redirect("/hop", "/final")
    assert fetch(server.url + "/hop", allow_private=True) == b"done"
    with pytest.raises(InputError, match="HTTP 404"):
        fetch(server.url + "/missing", allow_private=True)
