"""The trajectory viewer in a real browser: Debian's headless chromium driven by Playwright, against
`agentrl ui` serving a real SQLite store that holds a run recorded through the real store writer (the
synthetic sample run: no model). Clicks runs → run → step → filter → episode, asserts what each page shows,
and takes a screenshot; `agentrl runs plot` on the same store draws a plot. Both go to a temporary folder:
the README's pictures come from a real run (scripts/readme_images.py).

Needs `chromium` (scripts/setup_extras.sh installs it) and the `playwright` Python package; skips with a
reason otherwise. Playwright's own browser download is never used.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from agentrl.store.repository import close_store, open_store
from agentrl.ui.sample import record_sample_run

AGENTRL = [sys.executable, "-m", "agentrl.cli.main"]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path}/runs.db"
    store = open_store(url)
    record_sample_run(store)
    close_store(store)
    return url


@pytest.fixture
def viewer(store_url: str, tmp_path: Path) -> Iterator[str]:
    """`agentrl ui` on a free loopback port; yields its base URL and stops it afterwards."""
    port = free_port()
    log = (tmp_path / "ui.log").open("w")
    env = {**os.environ, "AGENTRL_DB_URL": ""}
    server = subprocess.Popen(
        AGENTRL + ["ui", "--db", store_url, "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, (tmp_path / "ui.log").read_text()
            try:
                if httpx.get(f"{base}/healthz", timeout=2).text == "ok":
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "agentrl ui did not answer within 60 s"
            time.sleep(0.2)
        yield base
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


@pytest.mark.slow
def test_click_through_to_an_episode(viewer: str, tmp_path: Path) -> None:
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed; run scripts/setup_extras.sh (as root)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright (the [dev] extra)")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1000, "height": 1000})
            page.goto(viewer + "/")
            assert page.locator("#runs tr").count() == 2  # header + the sample run
            page.get_by_role("link", name="sample-calc").click()

            assert page.locator("h1").inner_text() == "sample-calc"
            assert page.locator("svg.chart").count() == 3
            page.locator("#steps").get_by_role("link", name="step 1").first.click()

            assert page.locator("h1").inner_text().startswith("Step 1")
            assert page.locator("h2.group").count() == 2
            page.get_by_role("link", name="invalid actions").click()
            assert "2 of 6 episodes" in page.locator("p.meta").inner_text()
            page.locator("table.episodes a").first.click()

            assert page.locator("h1").inner_text() == "Episode train-1-calc-17-1"
            turns = page.locator("div.turn")
            assert turns.count() == 3
            assert "invalid" in (turns.nth(1).get_attribute("class") or "")
            assert "tool call · python" in turns.nth(0).inner_text()
            assert page.locator("span.pos").count() >= 3  # positive advantages of a successful episode
            assert page.locator("b.anchor-size").first.inner_text() == "3"
            assert "exit_code=0" in page.locator("div.exec-log").first.inner_text()  # the env's exec log
            assert "What is" in page.locator("#first-observation").inner_text()
            page.screenshot(path=str(tmp_path / "viewer.png"))

            page.locator("div.turn").nth(1).get_by_role("link").first.click()  # follow an anchor-group link
            assert page.url.split("#")[-1].startswith("turn-")
        finally:
            browser.close()
    assert (tmp_path / "viewer.png").stat().st_size < 400_000


@pytest.mark.slow
def test_runs_plot_draws_a_png(store_url: str, tmp_path: Path) -> None:
    out = tmp_path / "plot.png"
    result = subprocess.run(
        AGENTRL + ["runs", "plot", "sample-calc", "--db", store_url, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size < 200_000
