"""How long `make test` takes on a fresh clone, phase by phase, and which tests take the time (issue 55).

    .venv/bin/python bench/make_test_time.py --run /tmp/mt --label after [--wipe]   # about 30 minutes
    .venv/bin/python bench/make_test_time.py --logs /tmp/mt --label after            # the report only

What this is: `--run DIR` clones this checkout's HEAD into DIR/clone and runs `make test`'s phases there one
at a time (python, docker, images, model, extras, lint, docs, the SWE-bench images, pytest in two workers
with `--durations=80`, `agentrl swebench validate`), writing each phase's seconds to DIR/phases.txt and
pytest's output to DIR/pytest.log; `--wipe` first deletes every `agentrl/*` image, the model cache and pip's
cache and sets PIP_NO_CACHE_DIR (a fresh machine but for its Debian packages, which stay installed). Then, or
with `--logs DIR` alone, it reads those two files into `bench/results/make_test_time.json` under `--label`
(other labels already there are kept): the phases, their total, pytest's summary line and its 20 slowest
tests, with the CPU they ran on (`--logs`: this machine's) and the commit of the clone they ran in (none for
a folder without one: its note names the commit). The baseline is
another label of the same file (e.g. before and after a change, on one machine).

The rows before and after issue 55's changes were timed by a shell loop of these same steps before this
script existed, and the first two 2026-12-07 rows (pytest alone, serial and in two workers, on a CPU without
native bf16) by hand; those were read in with `--logs`. The later rows ran with `--run`.

What this is not: `make test` itself (CI runs that), or a measurement of installing the Debian packages.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import harness

ROOT = Path(__file__).resolve().parents[1]
PARALLEL = ("-n", "2", "--dist", "loadfile", "--no-loadscope-reorder")
PHASES = (
    ("python", ["make", "python"]),
    ("docker", ["make", "docker"]),
    ("images", ["make", "images"]),
    ("model", ["make", "model"]),
    ("extras", ["make", "extras"]),
    ("lint", ["make", "lint"]),
    ("docs", ["make", "docs"]),
    ("swebench_images", ["bash", "scripts/build_swebench_images.sh"]),
    # as the Makefile's test target: two worker processes, a test file each at a time
    ("pytest", [".venv/bin/pytest", "-q", *PARALLEL, "--durations=80", "-p", "no:cacheprovider"]),
    ("swebench_validate", [".venv/bin/agentrl", "swebench", "validate"]),
)
WIPE = (
    "docker images --format '{{.Repository}}:{{.Tag}}' | grep '^agentrl/' | xargs -r docker rmi -f",
    "rm -rf ~/.cache/agentrl/models ~/.cache/pip",
)


def run_phases(folder: Path, wipe: bool) -> None:
    """Clone HEAD into `folder`/clone and time each phase (module docstring)."""
    clone = folder / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    env = {**os.environ, "CI": "true"}
    if wipe:
        for command in WIPE:
            subprocess.run(["bash", "-c", command], check=False, capture_output=True)
        env["PIP_NO_CACHE_DIR"] = "1"
    lines = []
    for name, command in PHASES:
        log = folder / ("pytest.log" if name == "pytest" else f"{name}.log")
        started = time.perf_counter()
        with log.open("w") as out:
            code = subprocess.run(
                command, cwd=clone, env=env, stdout=out, stderr=subprocess.STDOUT
            ).returncode
        lines.append(f"{name} {time.perf_counter() - started:.1f} rc={code}")
        (folder / "phases.txt").write_text("\n".join(lines) + "\n")


def read_logs(folder: Path) -> dict[str, Any]:
    """The phases (seconds, exit code), their total, pytest's summary and its 20 slowest tests."""
    phases: dict[str, dict[str, float]] = {}
    for line in (folder / "phases.txt").read_text().splitlines():
        match = re.match(r"(\w+) ([\d.]+) rc=(\d+)$", line.strip())
        if match:
            phases[match[1]] = {"s": round(float(match[2]), 1), "rc": int(match[3])}
    log = (folder / "pytest.log").read_text()
    summary = [line for line in log.splitlines() if re.search(r"\d+ passed", line)]
    slowest = re.findall(r"^([\d.]+)s (call|setup|teardown)\s+(\S+)$", log, re.M)[:20]
    return {
        "phases": phases,
        "total_s": round(sum(phase["s"] for phase in phases.values()), 1),
        "pytest_summary": summary[-1].strip("= ") if summary else None,
        "slowest": [{"s": float(s), "what": what, "test": test} for s, what, test in slowest],
    }


def run_commit(folder: Path) -> str | None:
    """The commit the phases ran at: that of `folder`/clone, which `--run` makes (this checkout's HEAD may
    have moved on while they ran); None for a folder without one (earlier runs: their notes name it)."""
    clone = folder / "clone"
    return harness.commit(clone) if (clone / ".git").exists() else None


def provenance(header: dict[str, Any]) -> dict[str, Any]:
    """What a row was measured on and at: the commit and the machine (cores, CPU model and flags) of a
    result's `harness` block. Each row keeps its own, since the file's block names only the last writer."""
    machine = header.get("machine", {})
    return {
        "commit": header.get("commit"),
        "machine": {key: machine.get(key) for key in ("cores", "cpu_model", "cpu_flags")},
    }


def rows_with_provenance(earlier: dict[str, Any]) -> dict[str, Any]:
    """The rows of an earlier result, those written before rows kept their own provenance given its
    `harness` block's machine (they were measured in the session that wrote them; their notes name their
    commits, which the block's need not be)."""
    inherited = {"machine": provenance(earlier.get("harness", {}))["machine"]}
    return {label: {**inherited, **row} for label, row in earlier.get("runs", {}).items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, help="clone and time the phases into this folder")
    parser.add_argument("--logs", type=Path, help="read an earlier run's folder instead")
    parser.add_argument("--label", required=True, help="the row of the results file, e.g. before or after")
    parser.add_argument(
        "--wipe",
        action="store_true",
        help="delete the images and caches first (with --logs: say the run did)",
    )
    parser.add_argument("--note", default="", help="a line kept with the label (e.g. how the run was made)")
    harness.add_out_argument(parser, "make_test_time")
    args = parser.parse_args(argv)
    if (args.run is None) == (args.logs is None):
        parser.error("give --run DIR or --logs DIR")
    folder = args.run or args.logs
    if args.run is not None:
        folder.mkdir(parents=True, exist_ok=True)
        run_phases(folder, args.wipe)
    out = harness.out_path(args, "make_test_time")
    earlier = json.loads(out.read_text()) if out is not None and out.is_file() else {}
    measured = provenance({"machine": harness.machine(), "commit": run_commit(folder)})
    row = {**read_logs(folder), "wiped": args.wipe, "note": args.note, **measured}
    runs = {**rows_with_provenance(earlier), args.label: row}
    harness.emit("make_test_time", {"runs": runs}, baseline="the file's other label", out=out, argv=argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
