"""Download a job's file from an https URL, safely.

Only public https targets are fetched: every redirect hop is checked before it is fetched, and
so is the address the connection reached, once it answers (a host name that resolved to a public
address for the check and to a private one for the connect meets that address's TLS, which does
not hold the name's certificate, and is refused). An address is public when Python calls it
global (`is_global`) and it is not in IANA's 192.0.0.0/24, and addresses that embed an IPv4
address (mapped, compatible, translated, 6to4, Teredo, NAT64 of either prefix) are judged by
that address. The body streams into a file against a size and a time limit. URLs are shown
without their credentials and query (`redact`), which may hold tokens.
"""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import logging
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO
from urllib.parse import urljoin, urlsplit

import httpx

from ..errors import InputError
from ..urls import redact

MAX_REDIRECTS = 5


class DownloadTimeout(InputError):
    """The download did not finish in its time."""


# httpx logs every request line with its full URL, credentials and query included.
logging.getLogger("httpx").setLevel(logging.WARNING)
logging.getLogger("httpcore").setLevel(logging.INFO)
# IPv6 ranges whose last 32 bits are an IPv4 address: NAT64 (well-known and local-use),
# IPv4-compatible (deprecated, but routed by some stacks) and IPv4-translated
_EMBEDDING = tuple(
    ipaddress.ip_network(n) for n in ("64:ff9b::/96", "64:ff9b:1::/48", "::/96", "::ffff:0:0:0/96")
)
# IANA's IETF protocol assignments: not globally reachable, but for two anycast addresses
_PROTOCOL = ipaddress.ip_network("192.0.0.0/24")
_PROTOCOL_GLOBAL = {ipaddress.ip_address("192.0.0.9"), ipaddress.ip_address("192.0.0.10")}


def blocked(addr: str) -> str | None:
    """Why an address must not be fetched from, or None when it is public."""
    ip = ipaddress.ip_address(addr.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        for embedded in (ip.ipv4_mapped, ip.sixtofour, ip.teredo and ip.teredo[1]):
            if embedded:
                return blocked(str(embedded))
        if int(ip) > 1 and any(ip in net for net in _EMBEDDING):  # `::` and `::1` are IPv6's
            return blocked(str(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)))
    if ip in _PROTOCOL and ip not in _PROTOCOL_GLOBAL:
        return f"non-public address {ip}"
    if ip.is_global and not ip.is_multicast:
        return None
    kind = next(
        (
            what
            for what, flag in (
                ("loopback", ip.is_loopback),
                ("link-local", ip.is_link_local),
                ("private", ip.is_private),
            )
            if flag
        ),
        "non-public",
    )
    return f"{kind} address {ip}"


def url_target(url: str, field: str, allow_private: bool) -> tuple[str, int]:
    """Host and port of a URL we may fetch, or InputError saying what is wrong with it: what
    can be told without the network (its address is checked as it is fetched)."""
    shown = redact(url)
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in url):
        raise InputError(field, f"{shown!r} is not a valid URL (it holds a control character)")
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port or 443
        if host:
            host.encode("idna")  # empty or over-long labels, bad characters
            if ".." in host:
                raise ValueError("empty label")
    except (ValueError, UnicodeError):
        raise InputError(field, f"{shown!r} is not a valid URL (check its host and port)") from None
    allowed = ("https", "http") if allow_private else ("https",)
    if parts.scheme not in allowed:
        whole = "" if parts.scheme else f" (give the whole address: https://{shown})"
        raise InputError(
            field, f"{shown!r} is not an https URL; only https:// URLs are fetched{whole}"
        )
    if not host:
        raise InputError(
            field, f"{shown!r} has no host; give the whole address: https://example.com/file.pdf"
        )
    return host, port


@dataclass(frozen=True)
class _Pinned:
    """A URL's request with its host resolved once and checked: the connection goes to the
    address checked, so a name that resolves anew between the check and the connection (DNS
    rebinding) cannot turn it to another; the Host header and TLS's server name (against which
    the certificate is verified) keep the host's own name."""

    url: httpx.URL
    headers: dict[str, str] = dataclasses.field(default_factory=dict)
    extensions: dict[str, str] = dataclasses.field(default_factory=dict)


async def _resolve(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [info[4][0] for info in infos]


async def _pin(url: str, field: str, allow_private: bool) -> _Pinned:
    host, port = url_target(url, field, allow_private)
    try:
        addrs = await _resolve(host, port)
    except (socket.gaierror, UnicodeError) as exc:
        reason = getattr(exc, "strerror", None) or "invalid host name"
        raise InputError(field, f"cannot resolve host {host!r}: {reason}") from None
    for addr in () if allow_private else addrs:
        reason = blocked(addr)
        if reason:
            raise InputError(
                field, f"{host!r} resolves to a {reason}; only public hosts are fetched"
            )
    target = httpx.URL(url)
    # an address given as such, or one with a zone (a link-local one: never public) as it is
    if not addrs or target.host == addrs[0] or "%" in addrs[0]:
        return _Pinned(target)
    name = target.raw_host.decode("ascii")
    return _Pinned(
        target.copy_with(host=addrs[0]),
        {"Host": target.netloc.decode("ascii")},
        {"sni_hostname": name},
    )


async def download(
    url: str,
    dest: BinaryIO,
    *,
    field: str,
    max_bytes: int,
    timeout_s: float,
    allow_private: bool,
    take: Callable[[int], None] = lambda n: None,
) -> int:
    """Stream `url` into `dest`; returns the bytes written, or raises InputError naming `field`.
    `take(n)` is called for every chunk (the job's byte budget) and may raise InputError."""
    try:
        async with asyncio.timeout(timeout_s):
            return await _download(url, dest, field, max_bytes, timeout_s, allow_private, take)
    except TimeoutError:
        raise DownloadTimeout(
            field, f"download did not finish within {timeout_s:g} s; use a faster host or a key"
        ) from None


async def _download(
    url: str,
    dest: BinaryIO,
    field: str,
    max_bytes: int,
    timeout_s: float,
    allow_private: bool,
    take: Callable[[int], None],
) -> int:
    timeout = httpx.Timeout(timeout_s, connect=min(10.0, timeout_s))
    async with httpx.AsyncClient(timeout=timeout, follow_redirects=False) as client:
        for _ in range(MAX_REDIRECTS + 1):
            pinned = await _pin(url, field, allow_private)
            shown = redact(url)
            try:
                async with client.stream(
                    "GET", pinned.url, headers=pinned.headers, extensions=pinned.extensions
                ) as resp:
                    if not allow_private:
                        _check_peer(resp, field)
                    if resp.is_redirect:
                        url = urljoin(url, resp.headers["location"])
                        continue
                    if resp.status_code != 200:
                        raise InputError(field, f"GET {shown} answered HTTP {resp.status_code}")
                    length = resp.headers.get("content-length") or ""
                    declared = int(length) if length.isdigit() else 0
                    if declared > max_bytes:
                        raise InputError(field, _too_large(declared, max_bytes))
                    size = 0
                    async for chunk in resp.aiter_bytes():
                        size += len(chunk)
                        if size > max_bytes:
                            raise InputError(field, _too_large(size, max_bytes))
                        take(len(chunk))
                        dest.write(chunk)
                    return size
            except httpx.HTTPError as exc:
                raise InputError(field, f"GET {shown} failed ({type(exc).__name__})") from None
            except (ValueError, httpx.InvalidURL):  # a redirect to a URL httpx cannot parse
                raise InputError(field, f"GET {shown} redirected to an invalid URL") from None
        raise InputError(field, f"more than {MAX_REDIRECTS} redirects")


def _check_peer(resp: httpx.Response, field: str) -> None:
    stream = resp.extensions.get("network_stream")
    peer = stream.get_extra_info("server_addr") if stream is not None else None
    if peer:
        reason = blocked(peer[0])
        if reason:
            raise InputError(
                field, f"the URL connected to a {reason}; only public hosts are fetched"
            )


def _too_large(size: int, limit: int) -> str:
    return (
        f"the file is over the {limit / 1e6:g} MB limit (at least {size / 1e6:.1f} MB); "
        "split it or raise MAX_DOWNLOAD_BYTES"
    )
