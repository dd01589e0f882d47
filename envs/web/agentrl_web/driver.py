"""The in-sandbox browser driver: one headless Chromium kept open across steps, answering over a unix socket.

What this is: a standalone program (stdlib + Playwright for Python) that the web env uploads into the sandbox
at the start of an episode and starts in the background (`python3 driver.py SOCKET`). It launches Debian's
Chromium through Playwright (`executable_path`, never Playwright's own browser download), headless, with
`--no-sandbox` (Chromium's setuid/namespace sandbox cannot work in an unprivileged container; the container,
with no network, a non-root user and resource limits, is the sandbox) and `--disable-dev-shm-usage`. It then
serves one JSON request per connection on SOCKET: a line of JSON in, a line of JSON out. Each step of the
env is one short `exec` of `CLIENT_SOURCE` (below), because the sandbox's exec channel runs one command at a
time and a persistent driver cannot hold it.

Operations: `open_miniwob` (task, seed), `open_shop` (seed; the shop site of `shop.py` is served by a thread
on 127.0.0.1), `observe`, `click`, `type`, `press`, `scroll`, `select`, `purchase` (the shop's recorded
purchase), `quit`. Every page operation answers with the page's text rendering, the MiniWoB reward state and,
when asked, a PNG screenshot (base64). Element ids are `data-agentrl-id` attributes given once per element
in document order, so an element keeps its id while it lives on the page.

What this is not: a security boundary or a general automation API; errors the agent causes (a missing id, a
click on a hidden element) are answered as {"ok": false, "error": ...}, never raised.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import sys
import threading
from typing import Any

MINIWOB_EPISODE_MS = 3_600_000  # no time penalty: a CPU-bound model needs seconds per step
ACTION_TIMEOUT_MS = 3000
SETTLE_MS = 100  # after an action, let event handlers and re-renders run
MAX_TEXT = 300  # characters of one element's text in the rendering
SCROLL_PIXELS = 300

# Assign ids and render the visible page as one line per element that has its own text or can be acted on.
RENDER_JS = r"""
(maxText) => {
  const root = document.body;
  if (window.__agentrlNext === undefined) window.__agentrlNext = 1;
  const skip = new Set(['SCRIPT', 'STYLE', 'NOSCRIPT', 'HEAD', 'META', 'LINK', 'SVG', 'BR', 'HR']);
  const clip = (s) => {
    s = s.replace(/\s+/g, ' ').trim();
    return s.length > maxText ? s.slice(0, maxText) + '...' : s;
  };
  const visible = (el) => {
    const style = getComputedStyle(el);
    if (style.display === 'none' || style.visibility === 'hidden') return false;
    return el.getClientRects().length > 0;
  };
  const lines = [];
  const walk = (el) => {
    if (skip.has(el.tagName) || !visible(el)) return;
    if (el.id === 'sync-task-cover' || el.id === 'reward-display') return;
    if (!el.dataset.agentrlId) el.dataset.agentrlId = String(window.__agentrlNext++);
    const tag = el.tagName.toLowerCase();
    let own = '';
    for (const node of el.childNodes) if (node.nodeType === 3) own += node.textContent + ' ';
    own = clip(own);
    const id = el.dataset.agentrlId;
    let line = null;
    if (tag === 'input') {
      const type = (el.getAttribute('type') || 'text').toLowerCase();
      if (type === 'checkbox' || type === 'radio') {
        line = `${type}${el.checked ? ' checked' : ''}`;
      } else if (type === 'submit' || type === 'button') {
        line = `button "${clip(el.value)}"`;
      } else {
        line = `input ${type} value="${clip(el.value)}"`;
        if (el.placeholder) line += ` placeholder="${clip(el.placeholder)}"`;
      }
    } else if (tag === 'textarea') {
      line = `textarea value="${clip(el.value)}"`;
    } else if (tag === 'select') {
      const opts = Array.from(el.options).map((o) => clip(o.text));
      const chosen = el.options[el.selectedIndex] ? el.options[el.selectedIndex].text : '';
      line = `select value="${clip(chosen)}" options=${JSON.stringify(opts)}`;
    } else if (tag === 'button') {
      line = `button "${clip(el.innerText || '')}"`;
    } else if (tag === 'a') {
      line = `link "${clip(el.innerText || '')}"`;
    } else if (tag === 'option') {
      return;
    } else if (el.id === 'query') {
      line = `${tag === 'label' ? 'label' : 'text'} "${clip(el.innerText || '')}"`;
      lines.push(`[${id}] ${line}`);
      return;  // MiniWoB's instruction, with its inline markup, stays one line
    } else if (own) {
      line = `${tag === 'label' ? 'label' : 'text'} "${own}"`;
    }
    if (line !== null) lines.push(`[${id}] ${line}`);
    if (tag === 'button' || tag === 'a' || tag === 'select' || tag === 'textarea') return;
    for (const child of el.children) walk(child);
  };
  walk(root);
  return lines.join('\n');
}
"""

MINIWOB_STATE_JS = """() => (typeof WOB_DONE_GLOBAL === 'undefined') ? null :
  {done: WOB_DONE_GLOBAL, raw_reward: WOB_RAW_REWARD_GLOBAL, reason: WOB_REWARD_REASON}"""

# The per-step client, run as `python3 -I -S -c CLIENT_SOURCE SOCKET` with the request on stdin.
CLIENT_SOURCE = """
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(sys.stdin.buffer.read().strip() + b"\\n")
out = bytearray()
while True:
    chunk = s.recv(1 << 20)
    if not chunk:
        break
    out += chunk
sys.stdout.buffer.write(bytes(out))
"""


class Driver:
    """The browser and its one page; `handle` answers one request."""

    def __init__(self, chromium: str, html_dir: str | None) -> None:
        from playwright.sync_api import sync_playwright

        self.playwright = sync_playwright().start()
        self.browser = self.playwright.chromium.launch(
            executable_path=chromium,
            headless=True,
            args=["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--no-first-run"],
        )
        self.page = self.browser.new_page(viewport={"width": 800, "height": 600})
        self.page.set_default_timeout(ACTION_TIMEOUT_MS)
        self.html_dir = html_dir
        self.shop_server: Any = None

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        method = getattr(self, f"op_{op}", None)
        if method is None:
            return {"ok": False, "error": f"unknown op {op!r}"}
        try:
            result = method(request)
        except Exception as error:  # a failed page action is the agent's problem, reported as data
            return {"ok": False, "error": f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"}
        if result is None:
            result = self.snapshot(bool(request.get("screenshot")))
        return result

    def snapshot(self, screenshot: bool) -> dict[str, Any]:
        self.page.wait_for_timeout(SETTLE_MS)
        reply: dict[str, Any] = {
            "ok": True,
            "url": self.page.url,
            "text": self.page.evaluate(RENDER_JS, MAX_TEXT),
            "miniwob": self.page.evaluate(MINIWOB_STATE_JS),
            "purchase": None if self.shop_server is None else self.shop_server.purchase,
        }
        if screenshot:
            reply["screenshot"] = base64.b64encode(self.page.screenshot(type="png")).decode()
        return reply

    def element(self, request: dict[str, Any]) -> Any:
        element_id = str(request.get("id"))
        locator = self.page.locator(f'[data-agentrl-id="{element_id}"]')
        if not element_id.isdigit() or locator.count() == 0:
            raise LookupError(f"no element [{element_id}] on the page")
        return locator.first

    def op_observe(self, request: dict[str, Any]) -> None:
        return None

    def op_open_miniwob(self, request: dict[str, Any]) -> None:
        if self.html_dir is None:
            raise RuntimeError("the miniwob package is not installed in this image")
        task = str(request["task"])
        self.page.goto(f"file://{self.html_dir}/miniwob/{task}.html")
        self.page.wait_for_function("() => typeof core !== 'undefined' && core.cover_div !== null")
        self.page.evaluate(
            "([seed, ms]) => { core.EPISODE_MAX_TIME = ms; Math.seedrandom(seed); core.startEpisodeReal(); }",
            [str(request["seed"]), MINIWOB_EPISODE_MS],
        )
        self.page.wait_for_function("() => WOB_TASK_READY")

    def op_open_shop(self, request: dict[str, Any]) -> None:
        import shop

        if self.shop_server is not None:
            self.shop_server.shutdown()
        self.shop_server = shop.serve(int(request["seed"]))
        self.page.goto(f"http://127.0.0.1:{self.shop_server.server_address[1]}/")

    def op_purchase(self, request: dict[str, Any]) -> dict[str, Any]:
        purchase = None if self.shop_server is None else self.shop_server.purchase
        return {"ok": True, "purchase": purchase}

    def op_click(self, request: dict[str, Any]) -> None:
        target = self.element(request)
        try:
            target.click(timeout=ACTION_TIMEOUT_MS)
        except Exception:  # covered or moving elements: fall back to the DOM's own click
            target.evaluate("(el) => el.click()")

    def op_type(self, request: dict[str, Any]) -> None:
        target = self.element(request)
        target.fill(str(request.get("text", "")))

    def op_press(self, request: dict[str, Any]) -> None:
        self.page.keyboard.press(str(request["key"]))

    def op_scroll(self, request: dict[str, Any]) -> None:
        direction = str(request.get("direction", "down"))
        if direction not in ("up", "down"):
            raise ValueError(f"direction must be 'up' or 'down', got {direction!r}")
        self.page.mouse.wheel(0, SCROLL_PIXELS if direction == "down" else -SCROLL_PIXELS)

    def op_select(self, request: dict[str, Any]) -> None:
        target = self.element(request)
        option = str(request.get("option", ""))
        try:
            target.select_option(label=option, timeout=ACTION_TIMEOUT_MS)
        except Exception:
            target.select_option(value=option, timeout=ACTION_TIMEOUT_MS)

    def op_quit(self, request: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, "quit": True}


def miniwob_html_dir() -> str | None:
    """The task pages of the `miniwob` package, found without importing it (its __init__ needs gymnasium)."""
    import importlib.util

    spec = importlib.util.find_spec("miniwob")
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.join(list(spec.submodule_search_locations)[0], "html")


def serve(path: str) -> None:
    driver = Driver(os.environ.get("AGENTRL_CHROMIUM", "/usr/bin/chromium"), miniwob_html_dir())
    if os.path.exists(path):
        os.unlink(path)
    server = socket.socket(socket.AF_UNIX)
    server.bind(path + ".tmp")
    server.listen(4)
    os.rename(path + ".tmp", path)  # the socket appears only once the browser is up
    while True:
        conn, _ = server.accept()
        with conn:
            data = bytearray()
            while not data.endswith(b"\n"):
                chunk = conn.recv(1 << 16)
                if not chunk:
                    break
                data += chunk
            try:
                request = json.loads(data)
            except ValueError as error:
                reply: dict[str, Any] = {"ok": False, "error": f"bad request: {error}"}
            else:
                reply = driver.handle(request)
            conn.sendall(json.dumps(reply).encode() + b"\n")
            if reply.get("quit"):
                break
    driver.browser.close()
    driver.playwright.stop()


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    threading.current_thread().name = "agentrl-web-driver"
    serve(sys.argv[1])
