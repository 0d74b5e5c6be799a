"""The real browser, for the pages a person looks at: Debian's `chromium-headless-shell`, driven
over the DevTools protocol (a websocket on loopback) to open a page, point and click at it, read
what its script did and take a screenshot."""

from __future__ import annotations

import atexit
import base64
import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from websockets.sync.client import connect

BROWSER = "chromium-headless-shell"
# What it needs in a container: no sandbox (root), no GPU, and nothing that calls home.
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--no-first-run",
    "--hide-scrollbars",
    "--mute-audio",
    "--force-device-scale-factor=1",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",
)
START_S = 60.0  # to start, on a busy machine; a browser that takes longer is broken
REPLY_S = 120.0  # for one reply
MAX_HEIGHT = 12_000  # CSS pixels of a page shown at once


def browser_path() -> str:
    path = shutil.which(BROWSER)
    if path is None:
        pytest.fail(
            f"{BROWSER} is not installed, and the review page is tested in a real browser: "
            f"`make test` installs it (Debian: apt-get install -y {BROWSER})"
        )
    return path


class Browser:
    """One headless browser with one tab, on a fresh profile in `home`."""

    def __init__(self, home: Path, width: int = 1280) -> None:
        profile = home / "profile"
        profile.mkdir(parents=True)
        self.width = width
        self.proc = subprocess.Popen(
            [
                browser_path(),
                *FLAGS,
                f"--user-data-dir={profile}",
                f"--window-size={width},900",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=(home / "browser.log").open("wb"),
            # its own process group, so its helpers (zygotes, renderer, GPU and network
            # processes) end with it
            start_new_session=True,
        )
        self.watchdog = watchdog(self.proc.pid)
        atexit.register(self.kill)  # an interrupted run, whose teardown did not come
        try:
            port, path = self._endpoint(profile / "DevToolsActivePort", home / "browser.log")
            self.ws = connect(f"ws://127.0.0.1:{port}{path}", max_size=None, open_timeout=START_S)
        except BaseException:
            self.kill()
            raise
        self._id = 0
        self.events: list[dict[str, Any]] = []
        self.session: str | None = None
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)[
            "sessionId"
        ]
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable")

    def _endpoint(self, port_file: Path, log: Path) -> tuple[str, str]:
        """The port and path the browser writes to its profile once it listens."""
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{BROWSER} exited: {log.read_text(errors='replace')[-2000:]}")
            lines = port_file.read_text().split() if port_file.exists() else []
            if len(lines) == 2:
                return lines[0], lines[1]
            time.sleep(0.05)
        raise RuntimeError(f"{BROWSER} did not open its DevTools port: {log.read_text()[-2000:]}")

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self._id += 1
        message: dict[str, Any] = {"id": self._id, "method": method, "params": params}
        if self.session is not None:
            message["sessionId"] = self.session
        self.ws.send(json.dumps(message))
        while True:
            reply = json.loads(self.ws.recv(timeout=REPLY_S))
            if reply.get("id") != self._id:
                self.events.append(reply)
                continue
            if "error" in reply:
                raise RuntimeError(f"{method}: {reply['error']}")
            return reply.get("result", {})

    def wait_for(self, event: str) -> dict[str, Any]:
        while True:
            for n, seen in enumerate(self.events):
                if seen.get("method") == event:
                    return self.events.pop(n)
            self.events.append(json.loads(self.ws.recv(timeout=REPLY_S)))

    def open(self, page: Path) -> None:
        """Load the page, and make the window as tall as the page (up to MAX_HEIGHT), so all of
        it can be pointed at and seen without scrolling."""
        self.call("Page.navigate", url=page.resolve().as_uri())
        self.wait_for("Page.loadEventFired")
        height = min(MAX_HEIGHT, self.evaluate("document.documentElement.scrollHeight"))
        self.call(
            "Emulation.setDeviceMetricsOverride",
            width=self.width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )

    def evaluate(self, expression: str) -> Any:
        """The value of an expression in the page (run by the test harness, beside the page's
        own script: the page's Content-Security-Policy does not apply to it)."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def point(self, x: float, y: float) -> None:
        self.call("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y)

    def click(self, x: float, y: float) -> None:
        self.point(x, y)
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)

    def screenshot(self) -> Image.Image:
        """What the window shows: the page from its top (see `open`)."""
        shot = self.call("Page.captureScreenshot", format="png")
        return Image.open(io.BytesIO(base64.b64decode(shot["data"]))).convert("RGB")

    def logged(self) -> list[str]:
        """What the page logged (console messages, and the policy's refusals)."""
        out = []
        for event in self.events:
            if event.get("method") == "Log.entryAdded":
                out.append(event["params"]["entry"]["text"])
            elif event.get("method") == "Runtime.consoleAPICalled":
                out.append(" ".join(str(a.get("value")) for a in event["params"]["args"]))
        return out

    def close(self) -> None:
        """Close the connection and end the browser and every process it started."""
        try:
            self.ws.close()
        finally:
            self.kill()

    def kill(self) -> None:
        """End the browser's process group: SIGTERM, then SIGKILL for what is left."""
        atexit.unregister(self.kill)
        self.watchdog.kill()
        self.watchdog.wait()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                continue
            if sig == signal.SIGTERM:  # its helpers may outlive it by a moment: end them too
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
            return


# Waits for the end of its stdin, which only this test process holds open: when the process
# ends, however it ends (SIGKILL too, where no teardown and no atexit runs), the pipe closes
# and the browser's process group is killed.
WATCH = """import os, signal, sys
sys.stdin.buffer.read()
try:
    os.killpg(int(sys.argv[1]), signal.SIGKILL)
except ProcessLookupError:
    pass
"""


def watchdog(group: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", WATCH, str(group)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        start_new_session=True,  # a signal to the test's own group does not end it first
    )
