"""Headless Chromium driven over the DevTools protocol on a pipe: open a page, report what a reader sees.

No WebDriver and no Python package: Chromium started with `--remote-debugging-pipe` reads protocol
commands (JSON, each ended by a NUL byte) from its file descriptor 3 and writes answers and events to
descriptor 4. That is all the tests need: load a file, collect console errors, exceptions and any
request that leaves the file, time the first frames, and measure the charts in the laid-out page.

Chromium runs with a fresh profile and without the background services that would try the network
(this machine's closed network refuses them, and a test must not depend on one).
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.helpers.tools import missing_tool

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
FLAGS = (
    "--headless",
    "--no-sandbox",  # CI containers run as root, where the sandbox cannot start
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-default-apps",
    "--mute-audio",
    "--remote-debugging-pipe",
)

# What the page holds once laid out: each chart's box and how many of its marks have an area.
CHARTS_JS = """
JSON.stringify([...document.querySelectorAll('svg.chart')].map(svg => {
  const box = svg.getBoundingClientRect();
  const marks = [...svg.querySelectorAll('.mark')];
  const drawn = marks.filter(m => { const b = m.getBBox(); return b.width > 0 || b.height > 0; }).length;
  return {title: (svg.querySelector('title') || {}).textContent || '', width: box.width,
          height: box.height, marks: marks.length, drawn: drawn};
}))
"""
# Milliseconds from the start of navigation until two frames after the load event: the page is
# parsed, laid out and painted.
PAINTED_JS = (
    "new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(performance.now()))))"
)


def chromium() -> str:
    """The browser's path; skips the test where none is installed (fails it under `.ci/run`)."""
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    missing_tool("Chromium", "apt-get install chromium")
    raise AssertionError("unreachable")  # missing_tool skips or fails


@dataclass
class PageLoad:
    """What loading one page showed."""

    render_ms: float  # navigation start -> two frames after the load event
    errors: list[str] = field(default_factory=list)  # console errors, exceptions, failed loads
    requests: list[str] = field(default_factory=list)  # every URL requested besides the file itself
    charts: list[dict[str, Any]] = field(default_factory=list)
    text: str = ""  # the page's visible text
    results: list[Any] = field(default_factory=list)  # what each of `load_page`'s `actions` returned


def _high(fds: tuple[int, int]) -> tuple[int, int]:
    """The pipe's ends moved to 10 and above: never 3 or 4, which the shell below points elsewhere."""
    moved = tuple(fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in fds)
    for fd in fds:
        os.close(fd)
    return moved[0], moved[1]


class _Pipe:
    """The protocol over Chromium's descriptors 3 (commands) and 4 (answers and events)."""

    def __init__(self, browser: str, profile: str, size: tuple[int, int]) -> None:
        cmd_read, self.cmd = _high(os.pipe())
        self.out, out_write = _high(os.pipe())
        args = [*FLAGS, f"--user-data-dir={profile}", f"--window-size={size[0]},{size[1]}", "about:blank"]
        # The shell puts the two pipe ends at 3 and 4 and execs the browser (a preexec_fn is unsafe in
        # a process with threads).
        script = f'exec "$0" "$@" 3<&{cmd_read} 4>&{out_write} {cmd_read}<&- {out_write}>&-'
        self.proc = subprocess.Popen(
            ["bash", "-c", script, browser, *args],  # bash: dash takes single-digit descriptors only
            pass_fds=(cmd_read, out_write),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(cmd_read)
        os.close(out_write)
        self.next_id = 0
        self.buffer = b""
        self.events: list[dict[str, Any]] = []

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> int:
        self.next_id += 1
        msg: dict[str, Any] = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self.cmd, json.dumps(msg).encode() + b"\0")
        return self.next_id

    def call(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        session: str | None = None,
        *,
        deadline: float,
    ) -> dict[str, Any]:
        """Send a command and wait for its answer; events that arrive meanwhile are kept."""
        ident = self.send(method, params, session)
        while True:
            msg = self.receive(deadline)
            if msg.get("id") == ident:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return dict(msg.get("result", {}))
            self.events.append(msg)

    def wait_event(self, method: str, deadline: float) -> dict[str, Any]:
        for k, msg in enumerate(self.events):
            if msg.get("method") == method:
                return self.events.pop(k)
        while True:
            msg = self.receive(deadline)
            if msg.get("method") == method:
                return msg
            self.events.append(msg)

    def receive(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.out], [], [], left)[0]:
                raise TimeoutError("Chromium did not answer in time")
            chunk = os.read(self.out, 1 << 16)
            if not chunk:
                raise RuntimeError("Chromium closed its DevTools pipe (it exited)")
            self.buffer += chunk
        raw, self.buffer = self.buffer.split(b"\0", 1)
        return dict(json.loads(raw))

    def close(self) -> None:
        try:
            self.send("Browser.close")
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        finally:
            os.close(self.cmd)
            os.close(self.out)


def load_page(
    path: Path, *, size: tuple[int, int] = (1280, 900), timeout_s: float = 60.0, actions: tuple[str, ...] = ()
) -> PageLoad:
    """Open the HTML file `path` in headless Chromium and report errors, requests, timing and charts;
    then evaluate each of `actions` (JavaScript expressions, as a reader's clicks and typing) in turn
    and keep what each returns (JSON values)."""
    browser = chromium()
    deadline = time.monotonic() + timeout_s
    url = path.resolve().as_uri()
    with tempfile.TemporaryDirectory(prefix="sdcscan-chromium-") as profile:
        pipe = _Pipe(browser, profile, size)
        try:
            target = pipe.call("Target.createTarget", {"url": "about:blank"}, deadline=deadline)["targetId"]
            session = pipe.call(
                "Target.attachToTarget", {"targetId": target, "flatten": True}, deadline=deadline
            )["sessionId"]
            for domain in ("Page", "Runtime", "Log", "Network"):
                pipe.call(f"{domain}.enable", session=session, deadline=deadline)
            pipe.events.clear()  # what about:blank said is not the page's
            pipe.call("Page.navigate", {"url": url}, session=session, deadline=deadline)
            pipe.wait_event("Page.loadEventFired", deadline)
            painted = pipe.call(
                "Runtime.evaluate",
                {"expression": PAINTED_JS, "awaitPromise": True, "returnByValue": True},
                session,
                deadline=deadline,
            )
            charts = pipe.call(
                "Runtime.evaluate",
                {"expression": CHARTS_JS, "returnByValue": True},
                session,
                deadline=deadline,
            )
            text = pipe.call(
                "Runtime.evaluate",
                {"expression": "document.body.innerText", "returnByValue": True},
                session,
                deadline=deadline,
            )
            load = PageLoad(
                render_ms=float(painted["result"]["value"]),
                charts=json.loads(charts["result"]["value"]),
                text=str(text["result"]["value"]),
            )
            for action in actions:
                done = pipe.call(
                    "Runtime.evaluate",
                    {"expression": action, "returnByValue": True},
                    session,
                    deadline=deadline,
                )
                load.results.append(done["result"].get("value"))
            _collect(pipe.events, load, url)
            return load
        finally:
            pipe.close()


def _collect(events: list[dict[str, Any]], load: PageLoad, url: str) -> None:
    """Console errors, uncaught exceptions, failed loads and requests other than the page itself."""
    for e in events:
        method, p = e.get("method"), e.get("params", {})
        if method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            load.errors.append(
                "console: "
                + " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))
            )
        elif method == "Runtime.exceptionThrown":
            load.errors.append("exception: " + str(p.get("exceptionDetails", {}).get("text")))
        elif method == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            load.errors.append(f"log ({p['entry'].get('source')}): {p['entry'].get('text')}")
        elif method == "Network.requestWillBeSent":
            requested = str(p.get("request", {}).get("url", ""))
            if requested != url:
                load.requests.append(requested)
        elif method == "Network.loadingFailed":
            load.errors.append(f"load failed: {p.get('errorText')}")
