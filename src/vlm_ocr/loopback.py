"""Ports on 127.0.0.1 for servers this process starts.

A port found free can be taken by another process before the server binds it. Two habits keep
that rare, and the callers retry a start whose server says the address is in use:

- `free_port()` asks the kernel (bind to port 0): a port from its ephemeral range, which is what
  every other process asking the same way gets too (test harnesses, clients).
- `private_port()` picks a free port *below* that range, where the kernel never hands one out:
  the worker's own engine ports, so they cannot take a port a harness just picked for the worker's
  API server (and released, so the server could bind it) while the engine starts.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

PRIVATE_FLOOR = 20_000  # below: well-known and registered services
_EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_taken(port: int) -> bool:
    """Another socket listens on (or is bound to) the port. Connections of an earlier server
    lingering in TIME_WAIT do not count: the server binds with SO_REUSEADDR past them."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def ephemeral_floor() -> int:
    """The lowest port the kernel hands out for port 0 (Linux; 32768 elsewhere)."""
    try:
        return int(_EPHEMERAL.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def private_port(attempts: int = 64) -> int:
    """A free port between PRIVATE_FLOOR and the ephemeral range; a kernel-chosen one when that
    span is too narrow or full."""
    top = ephemeral_floor()
    if top - PRIVATE_FLOOR >= 1000:
        for _ in range(attempts):
            port = random.randrange(PRIVATE_FLOOR, top)
            if not port_taken(port):
                return port
    return free_port()
