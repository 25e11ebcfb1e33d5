"""A small headless-Chromium client for the site tests: the DevTools protocol over a pipe.

Chromium started with ``--remote-debugging-pipe`` reads commands on fd 3 and writes replies and
events on fd 4, JSON messages each ended by a NUL byte: no websocket library, no port. One browser
visits every page; what a page logs on its console, an uncaught exception, and a resource that
failed to load are collected per page.

``python tests/browser.py SITE OUT`` writes screenshots of a built site's main pages into OUT
(the PNGs in docs/img/).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_browser() -> str | None:
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    return None


class BrowserError(RuntimeError):
    pass


class Browser:
    """One headless Chromium; :meth:`visit` loads a page and returns what it logged."""

    def __init__(self, binary: str, width: int = 1200, height: int = 800, timeout: float = 30.0) -> None:
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="puffer-chromium.")
        to_chrome_r, to_chrome_w = os.pipe()
        from_chrome_r, from_chrome_w = os.pipe()

        def fds() -> None:  # the child: commands on fd 3, replies on fd 4 (moved up first: no clash)
            import fcntl

            high_r = fcntl.fcntl(to_chrome_r, fcntl.F_DUPFD, 100)
            high_w = fcntl.fcntl(from_chrome_w, fcntl.F_DUPFD, 100)
            os.dup2(high_r, 3)
            os.dup2(high_w, 4)

        self.proc = subprocess.Popen(
            [
                binary,
                "--headless",
                "--disable-gpu",
                "--no-sandbox",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-extensions",
                "--remote-debugging-pipe",
                f"--user-data-dir={self.profile}",
                f"--window-size={width},{height}",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=fds,
            pass_fds=(3, 4),
        )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self.out = os.fdopen(to_chrome_w, "wb", buffering=0)
        self.inp = os.fdopen(from_chrome_r, "rb", buffering=0)
        self.buffer = b""
        self.next_id = 0
        self.events: list[dict[str, Any]] = []
        targets = self.call("Target.getTargets")["targetInfos"]
        page = next((t for t in targets if t["type"] == "page"), None)
        target = page["targetId"] if page else self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable", session=True)
        self.call(
            "Emulation.setDeviceMetricsOverride",
            session=True,
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )

    def _read(self) -> dict[str, Any]:
        deadline = time.monotonic() + self.timeout
        while b"\0" not in self.buffer:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise BrowserError("chromium stopped answering")
            chunk = self.inp.read(65536)
            if not chunk:
                raise BrowserError("chromium closed its pipe")
            self.buffer += chunk
        message, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method: str, session: bool = False, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        message: dict[str, Any] = {"id": self.next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = self.session
        self.out.write(json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error'].get('message')}")
                return reply.get("result", {})
            if "method" in reply:
                self.events.append(reply)

    def _wait_event(self, method: str) -> None:
        deadline = time.monotonic() + self.timeout
        while not any(e["method"] == method for e in self.events):
            if time.monotonic() > deadline:
                raise BrowserError(f"no {method} within {self.timeout:g} s")
            self.events.append(self._read())

    def visit(self, url: str) -> list[str]:
        """Load ``url``; the console messages, uncaught exceptions and failed loads it caused."""
        self.events = []
        result = self.call("Page.navigate", session=True, url=url)
        if result.get("errorText"):
            return [f"navigation failed: {result['errorText']}"]
        self._wait_event("Page.loadEventFired")
        self.evaluate("1")  # let the page's own scripts and events settle
        return self.problems()

    def problems(self) -> list[str]:
        out = []
        for e in self.events:
            p = e.get("params", {})
            if e["method"] == "Runtime.consoleAPICalled":
                out.append(
                    f"console.{p.get('type')}: " + " ".join(str(a.get("value")) for a in p.get("args", []))
                )
            elif e["method"] == "Runtime.exceptionThrown":
                details = p.get("exceptionDetails", {})
                out.append(
                    "exception: "
                    + str((details.get("exception") or {}).get("description") or details.get("text"))
                )
            elif e["method"] == "Log.entryAdded":
                entry = p.get("entry", {})
                out.append(f"log {entry.get('level')}: {entry.get('text')} {entry.get('url') or ''}".strip())
        return out

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", session=True, expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression[:60]}: {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", session=True, format="png")["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        with contextlib.suppress(BrowserError, OSError, ValueError):
            self.call("Browser.close")
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for f in (self.out, self.inp):
            f.close()
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def start() -> Browser | str:
    """A started browser, or one line saying why none could be started."""
    binary = find_browser()
    if binary is None:
        return "no chromium on PATH (Debian: apt-get install chromium)"
    try:
        return Browser(binary)
    except (BrowserError, OSError, ValueError) as e:
        return f"chromium ({binary}) could not be started: {e}"


def screenshots(site: Path, out: Path) -> list[Path]:
    """The docs' screenshots of a built site: the machines page, a leaderboard, a metric's history
    and a comparison, each the top of its page at 1200 x 720."""
    out.mkdir(parents=True, exist_ok=True)
    browser = Browser(find_browser() or "chromium", width=1200, height=720)
    written = []
    with browser:
        with_steps = [
            p for p in sorted((site / "metric").glob("*.html")) if "<ul class=steps>" in p.read_text()
        ]
        pages = {
            "machines": site / "machines.html",
            "leaderboard": site / "board-env_sps.html",
            "metric": (with_steps or sorted((site / "metric").glob("*.html")))[0],
            "compare": next(iter(sorted((site / "compare").glob("*.html")))),
        }
        for name, page in pages.items():
            browser.visit(page.resolve().as_uri())
            if name == "metric":  # the first history with a step
                browser.evaluate(
                    "(() => { const s = document.querySelector('ul.steps') || document.querySelector('svg.plot');"
                    " s.previousElementSibling.previousElementSibling.scrollIntoView(); })()"
                )
            written.append(browser.screenshot(out / f"site-{name}.png"))
    return written


if __name__ == "__main__":
    for p in screenshots(Path(sys.argv[1]), Path(sys.argv[2])):
        print(f"wrote {p}")
