"""The RunPod SDK's own log lines. At its default level (DEBUG) the SDK logs every item a handler
returns or yields, and a job's items hold presigned URLs (each a bearer credential until it
expires) and the pages' text: so the worker lowers the SDK's level unless the user asked for one
(`RUNPOD_LOG_LEVEL`, `RUNPOD_DEBUG_LEVEL` or `--rp_log_level`, which then wins)."""

from __future__ import annotations

import os
from collections.abc import Mapping

import runpod


def sdk_level_asked(argv: list[str], environ: Mapping[str, str] = os.environ) -> bool:
    if environ.get("RUNPOD_LOG_LEVEL") or environ.get("RUNPOD_DEBUG_LEVEL"):
        return True
    return any(a == "--rp_log_level" or a.startswith("--rp_log_level=") for a in argv)


def quiet_sdk(argv: list[str], level: str, environ: Mapping[str, str] = os.environ) -> bool:
    """Set the SDK's level to `level` unless one was asked for; True when it was set."""
    if sdk_level_asked(argv, environ):
        return False
    runpod.RunPodLogger().set_level(level)
    return True
