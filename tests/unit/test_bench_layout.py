"""bench/ holds benchmarks on one harness (issue 52): every benchmark emits through `bench/harness.py`, every
result file carries the harness block, bench/README.md lists every script, and the harness's own pure parts
behave as documented.

What this is: architecture rules as tests (like tests/unit/test_layers.py) plus the harness's pure logic.
What it is not: a run of any benchmark (tests/integration/test_*_bench.py run some with --quick).
"""

from __future__ import annotations

import argparse
import ast
import json
from pathlib import Path

import pytest
from bench_scripts import BENCH, load_bench

ROOT = BENCH.parent
PRODUCED_ELSEWHERE = {
    "make-test-gpu": "agentrl/devtools/gpu_check.py writes it on a GPU machine (`make test-gpu`)",
    "fleet_leak_check": "scripts/fleet_leak_check.sh's figures, written down from its output",
}
NOT_BENCHMARKS = {
    "harness": "the harness itself",
    "gpu_report": "the report of `make test-gpu`'s result file, not a measurement",
    "engine_vllm_worker": "the vLLM peer process of engine.py; engine.py emits the result",
}


def scripts() -> list[Path]:
    return sorted(BENCH.glob("*.py"))


def calls_emit(path: Path) -> bool:
    """Whether the script calls `harness.emit(...)` somewhere."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            target = node.func
            if target.attr == "emit" and isinstance(target.value, ast.Name) and target.value.id == "harness":
                return True
    return False


def test_every_benchmark_emits_its_result_through_the_harness() -> None:
    missing = [path.name for path in scripts() if path.stem not in NOT_BENCHMARKS and not calls_emit(path)]
    assert missing == [], f"these bench/ scripts do not call harness.emit: {missing}"


def test_bench_readme_lists_every_script_and_nothing_else() -> None:
    readme = (BENCH / "README.md").read_text()
    listed = {line.split("`")[1] for line in readme.splitlines() if line.startswith("| `")}
    on_disk = {path.name for path in scripts()} - {"harness.py"}
    assert listed == on_disk


def test_every_committed_result_carries_the_harness_block() -> None:
    bad = []
    for path in sorted((BENCH / "results").glob("*.json")):
        block = json.loads(path.read_text()).get("harness")
        if not isinstance(block, dict) or block.get("schema") != 1 or not block.get("bench"):
            bad.append(path.name)
        elif not (BENCH / f"{block['bench']}.py").is_file() and block["bench"] not in PRODUCED_ELSEWHERE:
            bad.append(f"{path.name}: names no benchmark ({block['bench']})")
    assert bad == [], f"result files without a valid harness block: {bad}"


def test_timed_warms_up_then_times_each_round() -> None:
    harness = load_bench("harness")
    calls: list[int] = []
    timing = harness.timed(lambda: calls.append(1), warmup=2, rounds=3)
    assert len(calls) == 5 and len(timing["rounds_s"]) == 3
    assert timing["min_s"] <= timing["median_s"] and (timing["warmup"], timing["rounds"]) == (2, 3)
    with pytest.raises(ValueError, match="rounds >= 1"):
        harness.timed(lambda: None, rounds=0)
    assert harness.ratio(2.0, 0.5) == 4.0
    with pytest.raises(ValueError, match="positive"):
        harness.ratio(1.0, 0.0)


def test_a_quick_run_writes_no_committed_file_unless_told(tmp_path: Path) -> None:
    harness = load_bench("harness")
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    harness.add_out_argument(parser, "demo_bench")
    assert harness.out_path(parser.parse_args(["--quick"]), "demo_bench") is None
    assert harness.out_path(parser.parse_args([]), "demo_bench") == ROOT / "bench/results/demo_bench.json"
    assert harness.out_path(parser.parse_args(["--out", "-"]), "demo_bench") is None
    chosen = tmp_path / "x.json"
    assert harness.out_path(parser.parse_args(["--quick", "--out", str(chosen)]), "demo_bench") == chosen


def test_emit_writes_the_schema_and_refuses_the_reserved_key(tmp_path: Path, capsys) -> None:
    harness = load_bench("harness")
    out = tmp_path / "r.json"
    result = harness.emit("demo_bench", {"speedup": 2.0}, baseline="the slow way", out=out, argv=["--x"])
    written = json.loads(out.read_text())
    assert written == result and json.loads(capsys.readouterr().out) == result
    block = written["harness"]
    assert (block["bench"], block["schema"], block["baseline"]) == ("demo_bench", 1, "the slow way")
    assert block["command"].endswith("--x") and block["commit"]
    assert {"cores", "cpu_flags", "cpu_model", "load_before", "load_after"} <= set(block["machine"])
    with pytest.raises(ValueError, match="reserved key"):
        harness.emit("demo_bench", {"harness": 1}, baseline="", out=None)
