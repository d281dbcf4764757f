"""Open a page in headless Chromium and ask it what a person would see: errors, elements, pixels.

The explain page must work from a file with no network, so it is checked in a real browser: the
Chrome DevTools protocol over ``--remote-debugging-pipe`` (JSON messages ending in a NUL byte on
file descriptors 3 and 4; no port, no WebSocket library) loads the file, records console errors,
uncaught exceptions, log errors and every request the page makes, evaluates expressions in it, and
takes screenshots. The browser is Debian's ``chromium`` (``scripts/install-system-deps.sh``) or
whatever ``$TVM_FUSION_HW_BROWSER`` names; :func:`find_browser` returns None where there is none.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import queue
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "chrome", "chromium-headless-shell")
TIMEOUT_S = 60.0


def find_browser() -> str | None:
    """The browser to use: ``$TVM_FUSION_HW_BROWSER``, else the first of :data:`BROWSERS` on PATH."""
    chosen = os.environ.get("TVM_FUSION_HW_BROWSER")
    if chosen:
        return shutil.which(chosen) or (chosen if os.access(chosen, os.X_OK) else None)
    return next((found for found in map(shutil.which, BROWSERS) if found), None)


class BrowserError(RuntimeError):
    """The browser did not start, answer or load the page."""


class HeadlessPage:  # pylint: disable=too-many-instance-attributes
    """One tab of a headless browser: ``with HeadlessPage() as page: page.load(path) ...``."""

    def __init__(self, browser: str | None = None, width: int = 1280, height: int = 900):
        self.browser = browser or find_browser()
        if self.browser is None:
            raise BrowserError("no headless browser found (apt-get install chromium)")
        self.width, self.height = width, height
        self.errors: list[str] = []  # console errors, uncaught exceptions, log entries at error level
        self.requests: list[str] = []  # every URL the page asked for, itself included
        self._events: queue.Queue[dict] = queue.Queue()
        self._next_id = 0
        self._session = ""
        self._profile = tempfile.TemporaryDirectory(prefix="explain-browser-")

    # ---- the pipe ------------------------------------------------------------------------------
    def __enter__(self) -> HeadlessPage:  # noqa: PYI034 (typing.Self: Python 3.11+)
        to_browser_r, to_browser_w = os.pipe()
        from_browser_r, from_browser_w = os.pipe()
        # the browser reads commands on fd 3 and writes answers on fd 4: bash puts the pipe's
        # ends there (copies above 9 first, so that neither end already sits on 3 or 4)
        ends = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (to_browser_r, from_browser_w)]
        for fd in (to_browser_r, from_browser_w):
            os.close(fd)
        flags = ["--headless", "--remote-debugging-pipe", "--no-sandbox", "--disable-gpu",
                 "--no-first-run", "--no-default-browser-check", "--disable-extensions",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", f"--user-data-dir={self._profile.name}",
                 f"--window-size={self.width},{self.height}", "about:blank"]
        script = f'exec "$0" "$@" 3<&{ends[0]} 4>&{ends[1]} {ends[0]}<&- {ends[1]}>&-'
        shell = shutil.which("bash") or "/bin/bash"  # dash reads no fd above 9 in a redirection
        self._proc = subprocess.Popen([shell, "-c", script, self.browser, *flags],  # pylint: disable=consider-using-with
                                      stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL, pass_fds=ends)
        to_browser_r, from_browser_w = ends
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._out = os.fdopen(to_browser_w, "wb", buffering=0)
        self._reader = threading.Thread(target=self._read, args=(from_browser_r,), daemon=True)
        self._reader.start()
        target = self._call("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
        self._session = self._call("Target.attachToTarget", {"targetId": target, "flatten": True},
                                   session=False)["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self._call(f"{domain}.enable")
        self._call("Emulation.setDeviceMetricsOverride", {"width": self.width, "height": self.height,
                                                         "deviceScaleFactor": 1, "mobile": False})
        return self

    def __exit__(self, *exc) -> None:
        try:
            self._send("Browser.close", {}, session=False)
            self._proc.wait(timeout=10)
        except (OSError, BrowserError, subprocess.TimeoutExpired):
            self._proc.kill()
            self._proc.wait(timeout=10)
        finally:
            self._out.close()
            self._profile.cleanup()

    def _read(self, fd: int) -> None:
        buffer = b""
        with os.fdopen(fd, "rb", buffering=0) as stream:
            while True:
                chunk = stream.read(65536)
                if not chunk:
                    self._events.put({"closed": True})
                    return
                buffer += chunk
                *messages, buffer = buffer.split(b"\0")
                for message in messages:
                    self._events.put(json.loads(message))

    def _send(self, method: str, params: dict, session: bool = True) -> int:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if session and self._session:
            message["sessionId"] = self._session
        self._out.write(json.dumps(message).encode() + b"\0")
        return self._next_id

    def _call(self, method: str, params: dict | None = None, session: bool = True) -> dict:
        wanted = self._send(method, params or {}, session)
        return self._wait(lambda m: m.get("id") == wanted, method)

    def _wait(self, done, what: str) -> dict:
        while True:
            try:
                message = self._events.get(timeout=TIMEOUT_S)
            except queue.Empty:
                raise BrowserError(f"the browser did not answer {what} within {TIMEOUT_S:.0f} s") from None
            if message.get("closed"):
                raise BrowserError(f"the browser closed the pipe while waiting for {what}")
            self._record(message)
            if done(message):
                if "error" in message:
                    raise BrowserError(f"{what}: {message['error'].get('message')}")
                return message.get("result", message.get("params", {}))

    def _record(self, message: dict) -> None:
        method, params = message.get("method", ""), message.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            self.errors.append("console: " + " ".join(str(a.get("value", a.get("description", "")))
                                                     for a in params.get("args", [])))
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            self.errors.append("exception: " + str(details.get("exception", {}).get("description")
                                                    or details.get("text")))
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            self.errors.append("log: " + str(params["entry"].get("text")))
        elif method == "Network.requestWillBeSent":
            self.requests.append(params.get("request", {}).get("url", ""))

    # ---- what a test asks ----------------------------------------------------------------------
    def load(self, path: Path) -> str:
        """Open a file and wait until it has loaded (and its scripts have run); its URL."""
        url = Path(path).resolve().as_uri()
        self._call("Page.navigate", {"url": url})
        self._wait(lambda m: m.get("method") == "Page.loadEventFired", f"the load of {url}")
        self.evaluate("new Promise(r => setTimeout(r, 100))")  # late console messages arrive
        return url

    def evaluate(self, expression: str):
        """The value of a JavaScript expression in the page (a promise is awaited)."""
        result = self._call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                 "awaitPromise": True})
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression}: {result['exceptionDetails'].get('text')}")
        return result.get("result", {}).get("value")

    def screenshot(self, path: Path, full_page: bool = True, max_height: int | None = None) -> Path:
        """A PNG of the page (all of it, or its top ``max_height`` pixels)."""
        params: dict[str, object] = {"format": "png"}
        if full_page:
            size = self._call("Page.getLayoutMetrics")["cssContentSize"]
            height = min(size["height"], max_height) if max_height else size["height"]
            params.update(captureBeyondViewport=True,
                          clip={"x": 0, "y": 0, "width": max(size["width"], self.width), "height": height,
                                "scale": 1})
        data = self._call("Page.captureScreenshot", params)["data"]
        Path(path).write_bytes(base64.b64decode(data))
        return Path(path)

