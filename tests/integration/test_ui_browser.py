"""The trajectory viewer in a real browser: Debian's headless chromium driven by Playwright, against
`agentrl ui` serving a real SQLite store that holds a run recorded through the real store writer (the
synthetic sample run: no model). Clicks runs → run → step → filter → episode, asserts what each page shows,
and takes a screenshot; `agentrl runs plot` on the same store draws a plot. Both go to a temporary folder:
the pictures of docs/features.md come from a real run (scripts/readme_images.py).

Needs `chromium` (scripts/setup_extras.sh installs it) and the `playwright` Python package; skips with a
reason otherwise. Playwright's own browser download is never used.
"""

from __future__ import annotations

import os
import re
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

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


@contextmanager
def chromium_page(width: int, height: int) -> Iterator[Any]:
    """A headless Chromium page (Debian's chromium through playwright), closed on exit; skips the test where
    either is missing."""
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed; run scripts/setup_extras.sh (as root)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright (the [dev] extra)")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser.new_page(viewport={"width": width, "height": height})
        finally:
            browser.close()


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
    with serve(store_url, tmp_path) as base:
        yield base


@pytest.fixture
def two_runs(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """`agentrl ui` over a store holding the sample run and a copy evaluated at temperature 0.7; yields the
    base URL and the SQLite file."""
    url = f"sqlite:///{tmp_path}/two.db"
    store = open_store(url)
    record_sample_run(store)
    record_sample_run(store, "sample-calc-hot", eval_temperature=0.7)
    close_store(store)
    with serve(url, tmp_path) as base:
        yield base, tmp_path / "two.db"


@contextmanager
def serve(store_url: str, tmp_path: Path) -> Iterator[str]:
    """`agentrl ui` over `store_url` on a free loopback port: its base URL, stopped on exit."""
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
    with chromium_page(width=1000, height=1000) as page:
        page.goto(viewer + "/")
        assert page.locator("#runs tr").count() == 2  # header + the sample run
        page.get_by_role("link", name="sample-calc").click()

        assert page.locator("h1").inner_text() == "sample-calc"
        assert page.locator("svg.chart").count() == 10  # every metric the sample run logged
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


def stored_pairs(db: Path, run_a: str, run_b: str) -> dict[str, int]:
    """The paired counts of run A's first evaluation against run B's last, straight from the SQLite file."""
    with sqlite3.connect(db) as conn:

        def outcomes(run: str, pick: str) -> dict[str, bool]:
            query = (
                "select task_id, success from episodes where split = 'eval' and run_id = (select id from "
                f"runs where name = ?) and step = (select {pick}(step) from episodes where split = 'eval' "
                "and run_id = (select id from runs where name = ?))"
            )
            return {task: bool(ok) for task, ok in conn.execute(query, (run, run))}

        before, after = outcomes(run_a, "min"), outcomes(run_b, "max")
    pairs = [(before[task], after[task]) for task in before if task in after]
    return {
        "both": sum(a and b for a, b in pairs),
        "gained": sum(b and not a for a, b in pairs),
        "lost": sum(a and not b for a, b in pairs),
        "neither": sum(not a and not b for a, b in pairs),
    }


@pytest.mark.slow
def test_compare_held_out_and_credit_in_chromium(two_runs: tuple[str, Path], tmp_path: Path) -> None:
    """Runs list -> tick two runs -> compare (overlaid charts, config diff) -> held-out per task (counts
    match the store) -> a run's charts (a point per stored metric value, hover titles) -> step (group
    summaries, anchor groups) -> episode (the return as used, a turn's token strip with the trainer's
    log-probs and importance ratios, the token outside the clip range boxed)."""
    base, db = two_runs
    with sqlite3.connect(db) as conn:
        points = conn.execute(
            "select count(*) from metrics where value is not null and run_id = (select id from runs where "
            "name = 'sample-calc')"
        ).fetchone()[0]
    with chromium_page(width=1100, height=1000) as page:
        page.goto(base + "/")
        assert "0.0, 0.7" in page.locator("#temperature-note").inner_text()
        for box in page.locator("#runs input[type=checkbox]").all():
            box.check()
        page.locator("#compare-runs").click()

        assert page.locator("h1").inner_text() == "Compare 2 runs"
        assert page.locator("svg.chart polyline").count() >= 2 * 10
        assert "eval.temperature" in page.locator("#config-diff").inner_text()
        page.locator("#heldout-link").click()

        assert page.locator("h1").inner_text() == "Held-out per task"
        shown = {
            c: int(page.locator(f"#count-{c}").inner_text()) for c in ("both", "gained", "lost", "neither")
        }
        first, second = re.findall(r"(sample-calc(?:-hot)?) \(", page.locator("#evaluations").inner_text())
        assert shown == stored_pairs(db, first, second)
        assert page.locator("#temperature-warning").count() == 1
        assert page.locator("tr.change-gained").count() == shown["gained"]
        page.screenshot(path=str(tmp_path / "heldout.png"))

        page.get_by_role("link", name=re.compile(r"^sample-calc \(")).first.click()
        assert page.locator("h1").inner_text() == "sample-calc"
        assert page.locator("circle.pt").count() == points  # one point per stored metric value
        assert "step" in (page.locator("circle.pt title").first.text_content() or "")
        assert page.locator("#credit b.estimator").inner_text() == "gigpo"
        page.locator("#steps").get_by_role("link", name="step 1").first.click()

        assert page.locator("p.group-summary").count() == 2
        assert page.locator("table.anchor-set").count() >= 2
        assert page.locator("td.return-used").count() == 6  # the infrastructure failure shows a dash
        page.get_by_role("link", name="invalid actions").click()
        page.locator("table.episodes a").first.click()
        assert "+0.900" in page.locator("#return-used").inner_text()
        assert page.locator("span.finish").first.inner_text() == "stop string </tool_call>"
        assert not page.locator(".prompt-tool").first.is_visible()  # folded until asked for
        page.locator("#prompt > summary").click()
        assert "Run Python code" in page.locator(".prompt-tool").first.inner_text()
        strip = page.locator("#tokens-1")  # the invalid turn's sampled tokens, folded until asked for
        assert not strip.locator("div.tokens").is_visible()
        strip.locator("summary").click()
        first = strip.locator("div.tokens span").first
        assert first.inner_text() == "The " and "p 0.080" in (first.get_attribute("title") or "")
        assert strip.locator("table.lowest-tokens code").all_inner_texts() == ["The ", "s 42"]
        # the trainer's log-probs beside the sampler's: the ratio in each title, the clipped token boxed
        assert (
            "trainer vs sampler: mean |log ratio| 0.0680, max ratio 1.486"
            in strip.locator(".ratio-summary").inner_text()
        )
        assert "trainer log-prob -2.134 · ratio 1.486" in (first.get_attribute("title") or "")
        assert first.get_attribute("class") == "p3 clip"
        outline = first.evaluate(
            "node => getComputedStyle(node).outlineStyle + ' ' + getComputedStyle(node).outlineWidth"
        )
        assert outline == "solid 2px"  # drawn, not only classed
        assert strip.locator("table.clipped-tokens code").all_inner_texts() == ["The "]
        second = strip.locator("div.tokens span").nth(1)
        assert (
            "ratio 0.998" in (second.get_attribute("title") or "") and second.get_attribute("class") is None
        )
        strip.screenshot(path=str(tmp_path / "ratios.png"))


@pytest.mark.slow
def test_sort_page_and_search_in_chromium(viewer: str) -> None:
    """Run page -> sort the steps by success -> an evaluation step as one table (sorted by reward) -> a
    training step one task group a page (next) -> search by task id and by text from the run page."""
    with chromium_page(width=1000, height=1000) as page:
        page.goto(viewer + "/")
        page.get_by_role("link", name="sample-calc").click()
        page.locator("#steps a.sort", has_text="success").click()
        page.locator("#steps a.sort", has_text="success").click()  # a second click: descending
        rates = [float(cell) for cell in page.locator("#steps tr td:nth-child(5)").all_inner_texts()]
        assert rates == sorted(rates, reverse=True) and len(rates) == 5
        page.locator("#steps").get_by_role("link", name="step 0").click()

        assert page.locator("h1").inner_text().startswith("Step 0")
        assert page.locator("#eval-episodes tr").count() == 3 and page.locator("h2.group").count() == 0
        page.locator("#eval-episodes a.sort", has_text="reward").click()
        assert page.locator("#eval-episodes tr td:nth-child(2)").all_inner_texts() == [
            "calc-42",
            "calc-17",
        ]

        page.goto(page.url.split("/steps/")[0] + "/steps/1?split=train&limit=1")
        assert page.locator("h2.group").count() == 1 and "calc-17" in page.locator("h2.group").inner_text()
        page.locator("p.pager a[rel=next]").first.click()
        assert "calc-42" in page.locator("h2.group").inner_text()

        page.locator("nav.crumbs a").nth(1).click()  # back to the run
        page.locator("form.search input[name=task]").fill("calc-42")
        page.locator("form.search button").click()
        page.wait_for_load_state()  # the click commits the navigation; the table may not be parsed yet
        assert page.locator("#task-results tr").count() == 1 + 11  # header + calc-42's episodes
        page.locator("form.search input[name=task]").fill("")
        page.locator("form.search input[name=q]").fill("wrong: 56")
        page.locator("form.search button").click()
        page.wait_for_load_state()
        assert page.locator("#text-results tr").count() >= 2
        page.locator("#text-results a").first.click()
        assert page.url.split("#")[-1] == "turn-1" and "wrong: 56" in page.locator("#turn-1").inner_text()
