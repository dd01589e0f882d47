"""Take docs/viewer.md's screenshots: headless chromium on `agentrl ui` over the synthetic sample runs.

    .venv/bin/python scripts/viewer_screenshots.py [--out docs/img/viewer]

Records the sample run (`agentrl.ui.sample`) and a copy of it evaluated at temperature 0.7 into a fresh
SQLite store in a temporary folder, serves it with `agentrl ui` on a free loopback port, and writes one PNG
per main page: runs list, run, step, episode, compare, held-out per task, and one of an episode's turn with
its token strip unfolded (`tokens`). Needs Debian's chromium and the
playwright package, as tests/integration/test_ui_browser.py does.

What this is not: a test (the browser test asserts what the pages show), or a picture of a real model's run
(the sample run is hand-made; scripts/readme_images.py shoots a real run for the README).
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from agentrl.store.repository import close_store, open_store
from agentrl.ui.sample import record_sample_run

ROOT = Path(__file__).resolve().parents[1]
AGENTRL = [sys.executable, "-m", "agentrl.cli.main"]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
VIEWPORT = {"width": 1100, "height": 900}


def record_store(folder: Path) -> tuple[str, str, str]:
    """(store URL, sample run id, hot copy's id) of a fresh store holding the two sample runs."""
    url = f"sqlite:///{folder}/viewer.db"
    store = open_store(url)
    run_id = record_sample_run(store)
    hot = record_sample_run(store, "sample-calc-hot", eval_temperature=0.7)
    close_store(store)
    return url, run_id, hot


@contextmanager
def serve(url: str) -> Iterator[str]:
    """`agentrl ui` over `url` on a free loopback port; its base URL, stopped on exit."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "AGENTRL_DB_URL": ""}
    server = subprocess.Popen(AGENTRL + ["ui", "--db", url, "--port", str(port)], env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                if httpx.get(f"{base}/healthz", timeout=2).text == "ok":
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        yield base
    finally:
        server.terminate()
        server.wait(timeout=30)


def pages(run_id: str, hot: str, episode_path: str) -> dict[str, str]:
    """Screenshot name -> path on the viewer."""
    return {
        "runs": "/",
        "run": f"/runs/{run_id}",
        "step": f"/runs/{run_id}/steps/1?split=train",
        "episode": episode_path,
        "compare": f"/compare?run={run_id}&run={hot}",
        "heldout": f"/heldout?run_a={run_id}",
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img" / "viewer", help="PNG name prefix")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    args.out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        url, run_id, hot = record_store(Path(folder))
        with serve(url) as base, sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport=VIEWPORT)
                page.goto(f"{base}/runs/{run_id}/steps/1?split=train&show=invalid")
                episode_path = str(page.locator("table.episodes a").first.get_attribute("href"))
                for name, path in pages(run_id, hot, episode_path).items():
                    page.goto(base + path)
                    page.screenshot(path=f"{args.out}-{name}.png")
                    print(f"wrote {args.out}-{name}.png ({path})")
                page.goto(base + episode_path)
                page.locator("#tokens-1 > summary").click()  # the invalid turn's sampled tokens
                page.locator("#turn-1").screenshot(path=f"{args.out}-tokens.png")
                print(f"wrote {args.out}-tokens.png ({episode_path}, turn 1's tokens unfolded)")
            finally:
                browser.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
