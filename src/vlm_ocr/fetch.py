"""Download a job's file from an https URL, safely.

Only public https targets are fetched: every redirect hop is checked, and so is the address the
connection actually reached (a host name that resolves to a private address is refused even if it
changed between the check and the connect). The body is streamed against a size and a time limit.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from urllib.parse import urljoin, urlsplit

import httpx

from .errors import InputError

MAX_REDIRECTS = 5


def _blocked(addr: str) -> str | None:
    ip = ipaddress.ip_address(addr.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    for what, flag in (
        ("loopback", ip.is_loopback),
        ("link-local", ip.is_link_local),
        ("private", ip.is_private),
        ("reserved", ip.is_reserved or ip.is_multicast or ip.is_unspecified),
    ):
        if flag:
            return f"{what} address {ip}"
    return None


async def _check_target(url: str, field: str, allow_private: bool) -> None:
    parts = urlsplit(url)
    allowed = ("https", "http") if allow_private else ("https",)
    if parts.scheme not in allowed or not parts.hostname:
        raise InputError(field, f"{url!r} is not an https URL; only https:// URLs are fetched")
    if allow_private:
        return
    host = parts.hostname
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(
            host, parts.port or 443, type=socket.SOCK_STREAM
        )
    except socket.gaierror as exc:
        raise InputError(field, f"cannot resolve host {host!r}: {exc.strerror}") from None
    for info in infos:
        reason = _blocked(info[4][0])
        if reason:
            raise InputError(
                field, f"{host!r} resolves to a {reason}; only public hosts are fetched"
            )


async def download(
    url: str, *, field: str, max_bytes: int, timeout_s: float, allow_private: bool
) -> bytes:
    """Fetch `url` or raise InputError naming `field` and the reason."""
    try:
        async with asyncio.timeout(timeout_s):
            return await _download(url, field, max_bytes, timeout_s, allow_private)
    except TimeoutError:
        raise InputError(
            field, f"download did not finish within {timeout_s:g} s; use a faster host or a key"
        ) from None


async def _download(
    url: str, field: str, max_bytes: int, timeout_s: float, allow_private: bool
) -> bytes:
    timeout = httpx.Timeout(timeout_s, connect=min(10.0, timeout_s))
    async with httpx.AsyncClient(timeout=timeout, follow_redirects=False) as client:
        for _ in range(MAX_REDIRECTS + 1):
            await _check_target(url, field, allow_private)
            try:
                async with client.stream("GET", url) as resp:
                    if not allow_private:
                        _check_peer(resp, field)
                    if resp.is_redirect:
                        url = urljoin(url, resp.headers["location"])
                        continue
                    if resp.status_code != 200:
                        raise InputError(field, f"GET {url} answered HTTP {resp.status_code}")
                    declared = int(resp.headers.get("content-length") or 0)
                    if declared > max_bytes:
                        raise InputError(field, _too_large(declared, max_bytes))
                    body = bytearray()
                    async for chunk in resp.aiter_bytes():
                        body += chunk
                        if len(body) > max_bytes:
                            raise InputError(field, _too_large(len(body), max_bytes))
                    return bytes(body)
            except httpx.HTTPError as exc:
                raise InputError(field, f"GET {url} failed: {exc!r}") from None
        raise InputError(field, f"more than {MAX_REDIRECTS} redirects")


def _check_peer(resp: httpx.Response, field: str) -> None:
    stream = resp.extensions.get("network_stream")
    peer = stream.get_extra_info("server_addr") if stream is not None else None
    if peer:
        reason = _blocked(peer[0])
        if reason:
            raise InputError(
                field, f"the URL connected to a {reason}; only public hosts are fetched"
            )


def _too_large(size: int, limit: int) -> str:
    return (
        f"the file is over the {limit / 1e6:g} MB limit (at least {size / 1e6:.1f} MB); "
        "split it or raise MAX_DOWNLOAD_BYTES"
    )
