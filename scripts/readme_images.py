"""Regenerate the pictures of docs/features.md ("Looking at runs") from a real run: docs/img/plot.png and
docs/img/viewer.png.

    .venv/bin/python scripts/readme_images.py --db sqlite:///runs/agentrl.db --run demo-seed0

`plot.png` is `agentrl runs plot RUN`; `viewer.png` is a headless-chromium screenshot of `agentrl ui` on the
first successful multi-turn training episode of the run's last step (Debian's chromium and the playwright
package, as in tests/integration/test_ui_browser.py). What this is not: a test; the viewer's tests use the
synthetic sample run and write their pictures into a temporary folder.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from viewer_screenshots import CHROMIUM, CHROMIUM_ARGS, serve  # noqa: E402

IMAGES = Path(__file__).resolve().parents[1] / "docs" / "img"
AGENTRL = [sys.executable, "-m", "agentrl.cli.main"]


def pick_episode(db_path: str, run_name: str) -> tuple[str, int]:
    """(run id, episode id): a successful training episode with the most turns in the run's last step."""
    with sqlite3.connect(db_path) as conn:
        run_id = conn.execute("select id from runs where name = ?", (run_name,)).fetchone()[0]
        step = conn.execute("select max(step) from episodes where run_id = ? and split = 'train'", (run_id,))
        row = conn.execute(
            "select id from episodes where run_id = ? and split = 'train' and step = ? and success = 1 "
            "order by num_turns desc, id limit 1",
            (run_id, step.fetchone()[0]),
        ).fetchone()
    return run_id, int(row[0])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True, help="a sqlite:/// store URL")
    parser.add_argument("--run", required=True, help="the run's name")
    args = parser.parse_args()
    env = {**os.environ, "AGENTRL_DB_URL": ""}
    plot = AGENTRL + ["runs", "plot", args.run, "--db", args.db, "--out", str(IMAGES / "plot.png")]
    subprocess.run(plot, check=True, env=env)
    run_id, episode = pick_episode(args.db.removeprefix("sqlite:///"), args.run)
    from playwright.sync_api import sync_playwright

    with serve(args.db) as base, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1000, "height": 1000})
        page.goto(f"{base}/runs/{run_id}/episodes/{episode}")
        page.screenshot(path=str(IMAGES / "viewer.png"))
        browser.close()
    print(f"wrote {IMAGES / 'plot.png'} and {IMAGES / 'viewer.png'} (episode {episode} of {args.run})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
