"""URL sources: https only, public addresses only, size and time limits."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Iterator

import pytest

from vlm_ocr.contract import JobInput
from vlm_ocr.errors import InputError, InputErrors
from vlm_ocr.pipeline.fetch import blocked, download
from vlm_ocr.urls import redact

from .support.http_server import LoopbackServer


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    srv = LoopbackServer()
    yield srv
    srv.close()


def fetch(url: str, *, allow_private: bool = False, max_bytes: int = 10_000, timeout: float = 30):
    out = io.BytesIO()
    asyncio.run(
        download(
            url,
            out,
            field="input.pdf.url",
            max_bytes=max_bytes,
            timeout_s=timeout,
            allow_private=allow_private,
        )
    )
    return out.getvalue()


@pytest.mark.parametrize(
    ("addr", "says"),
    [
        ("127.0.0.1", "loopback address"),
        ("169.254.169.254", "link-local address"),
        ("10.1.2.3", "private address"),
        ("100.64.0.1", "non-public address"),  # shared address space (carrier-grade NAT)
        ("192.0.2.1", "address"),  # documentation range
        ("::1", "loopback address"),
        ("::ffff:192.168.0.1", "private address 192.168.0.1"),
        ("2002:a9fe:a9fe::1", "link-local address 169.254.169.254"),  # 6to4
        ("2001:0:4136:e378:8000:63bf:f5fe:fefe", "private address 10.1.1.1"),  # Teredo
        ("64:ff9b::a01:203", "private address 10.1.2.3"),  # NAT64
        ("64:ff9b:1::7f00:1", "loopback address 127.0.0.1"),  # local-use NAT64
        ("::127.0.0.1", "loopback address 127.0.0.1"),  # IPv4-compatible
        ("::ffff:0:7f00:1", "loopback address 127.0.0.1"),  # IPv4-translated
        ("192.0.0.8", "non-public address"),  # IETF protocol assignments
        ("fd00::1", "private address"),
        ("224.0.0.1", "address"),
    ],
)
def test_refused_addresses(addr: str, says: str) -> None:
    # The check itself: no test sends traffic to such an address.
    reason = blocked(addr)
    assert reason is not None and says in reason


def test_public_addresses_pass() -> None:
    assert blocked("1.1.1.1") is None and blocked("2606:4700:4700::1111") is None
    assert blocked("64:ff9b:1::101:101") is None and blocked("192.0.0.9") is None


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://example.com/a.pdf", "not an https URL"),
        (
            "example.com/a.pdf",
            "'example.com/a.pdf' is not an https URL; only https:// URLs are fetched (give the "
            "whole address: https://example.com/a.pdf)",
        ),
        ("ftp://example.com/a.pdf", "not an https URL"),
        ("https://localhost/a.pdf", "loopback address"),
        ("https://localhost:abc/", "not a valid URL"),
        ("https://localhost:99999/", "not a valid URL"),
        ("https://" + "a" * 64 + ".example/", "not a valid URL"),
        ("https://a..b/", "not a valid URL"),
        ("https:///nohost", "'https:///nohost' has no host; give the whole address"),
        ("https://", "'https://' has no host; give the whole address"),
        ("https://example.com/report\x00.pdf", "is not a valid URL (it holds a control character)"),
        ("https://example.com/a\x7f.pdf", "is not a valid URL (it holds a control character)"),
    ],
)
def test_refused_urls(url: str, says: str) -> None:
    with pytest.raises(InputError) as info:
        fetch(url)
    assert info.value.field == "input.pdf.url"
    assert says in info.value.message
    assert "Traceback" not in info.value.message and "/site-packages/" not in info.value.message


def test_credentials_and_query_never_shown() -> None:
    url = "https://user:pw@files.example/a.pdf?token=SECRET#frag"
    assert redact(url) == "https://files.example/a.pdf"
    # without its scheme, as typed, still without what may hold a secret
    assert redact("files.example/a.pdf?token=SECRET") == "files.example/a.pdf"
    assert redact("user:pw@files.example/a.pdf#frag") == "files.example/a.pdf"
    with pytest.raises(InputError) as info:
        fetch("http://user:pw@localhost/a.pdf?token=SECRET")
    assert "SECRET" not in str(info.value) and "pw" not in str(info.value)
    # a password holding `?`, `#` or `/` unescaped puts the `@` outside the URL's host part
    for url in (
        "https://bob:hun?ter2@files.example/a.pdf",
        "https://bob:h#n/t2@files.example/a.pdf",
    ):
        assert redact(url) == "https://files.example/a.pdf", url
    assert redact("https://bob:123?x@files.example/a") == "https://files.example/a"  # a "port"


def test_a_url_given_where_it_does_not_go_is_shown_without_its_secrets() -> None:
    secret = "https://bob:hunter2@files.example/a.pdf?sig=SECRET"
    for job, field in (
        ({"pdf": secret}, "input.pdf"),
        ({"images": [secret]}, "input.images[0]"),
        ({"pdf": {"key": secret}}, "input.pdf.key"),
    ):
        with pytest.raises(InputErrors) as info:
            JobInput.parse(job, max_pages=10)
        said = str(info.value)
        assert said.startswith(f"{field}: ") and "https://files.example/a.pdf" in said, said
        assert "hunter2" not in said and "SECRET" not in said and "bob" not in said
    with pytest.raises(InputErrors, match='is a URL, not a key in the bucket: send it as "url"'):
        JobInput.parse({"pdf": {"key": secret}}, max_pages=10)
    with pytest.raises(InputErrors, match=r"give the key within the bucket: 'inbox/a\.pdf'"):
        JobInput.parse({"pdf": {"key": "s3://my-bucket/inbox/a.pdf"}}, max_pages=10)


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
    server.stall("/slow")
    with pytest.raises(InputError, match=r"did not finish within 0\.5 s"):
        fetch(server.url + "/slow", allow_private=True, timeout=0.5)


def test_http_error_and_redirects(server: LoopbackServer) -> None:
    server.body("/final", b"done")
    server.redirect("/hop", "/final")
    assert fetch(server.url + "/hop", allow_private=True) == b"done"
    with pytest.raises(InputError, match="HTTP 404"):
        fetch(server.url + "/missing", allow_private=True)


def test_a_host_is_resolved_once_and_connected_to_at_the_address_checked(
    server: LoopbackServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A name only this resolver knows: were the connection to resolve it again (where a name
    # can turn to another address after its check), it would fail. The server still sees the
    # name the URL gave, and a redirect is resolved afresh and checked again.
    from vlm_ocr.pipeline import fetch as fetching

    asked: list[str] = []

    async def resolve(host: str, port: int) -> list[str]:
        asked.append(host)
        return ["127.0.0.1"]

    hosts: list[str] = []

    def route(h) -> None:
        hosts.append(h.headers["Host"])
        h.send_response(200)
        h.send_header("Content-Length", "2")
        h.end_headers()
        h.wfile.write(b"ok")

    server.routes["/a.pdf"] = route
    server.redirect("/hop", "/a.pdf")
    monkeypatch.setattr(fetching, "_resolve", resolve)
    port = server.url.rsplit(":", 1)[1]
    assert fetch(f"http://files.test:{port}/hop", allow_private=True) == b"ok"
    assert asked == ["files.test", "files.test"] and hosts == [f"files.test:{port}"]
    # unless private hosts are allowed, the address resolved is checked before any connection
    with pytest.raises(InputError, match=r"'files\.test' resolves to a loopback address"):
        fetch("https://files.test/a.pdf")


def test_the_name_is_kept_for_the_host_header_and_the_certificate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from vlm_ocr.pipeline import fetch as fetching

    async def resolve(host: str, port: int) -> list[str]:
        return ["2001:4860::1"]  # public, and never connected to: the request is only built

    monkeypatch.setattr(fetching, "_resolve", resolve)
    pinned = asyncio.run(fetching._pin("https://Bücher.test/a.pdf?t=1", "input.pdf.url", False))
    assert str(pinned.url) == "https://[2001:4860::1]/a.pdf?t=1"
    assert pinned.headers == {"Host": "xn--bcher-kva.test"}
    assert pinned.extensions == {"sni_hostname": "xn--bcher-kva.test"}
    # an address given as such is fetched as it is
    given = asyncio.run(fetching._pin("https://[2001:4860::1]:8443/a", "input.pdf.url", False))
    assert str(given.url) == "https://[2001:4860::1]:8443/a" and not given.headers
