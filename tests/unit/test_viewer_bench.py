"""bench/viewer.py --quick end to end: it builds a small generated store, times every page through the real
app and writes its JSON with the keys the committed bench/results/viewer.json has (no timing is asserted:
the machine is shared)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = {"runs_list", "run", "train_step", "eval_step", "episode", "task_search", "text_search"}


def test_quick_bench_writes_every_page(tmp_path: Path) -> None:
    out = tmp_path / "viewer.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "viewer.py"), "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())
    assert (result["episodes"], result["turns"], result["runs"]) == (2000, 20000, 10)
    assert set(result["pages"]) == PAGES
    for figures in result["pages"].values():
        assert 0 < figures["p50_ms"] <= figures["p95_ms"] <= figures["max_ms"] and figures["bytes"] > 0
    assert isinstance(result["met"], bool) and result["target_p95_ms"] == 300
    assert {"cpu_flags", "load_avg_start", "load_avg_end", "build_s", "db_mb"} <= set(result)
    assert result["harness"]["bench"] == "viewer" and result["harness"]["command"].startswith(
        "bench/viewer.py"
    )
