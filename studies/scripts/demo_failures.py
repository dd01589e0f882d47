"""How the calc demo's held-out episodes ended, read from the run store; writes
studies/calc-demo/results/demo_failures.json (`--out`).

    .venv/bin/python studies/scripts/demo_failures.py demo-20261127-083035 demo-20261127-093729  # by name
    .venv/bin/python studies/scripts/demo_failures.py \
        --report studies/calc-demo/results/demo_failures.json  # the markdown table

For each `make demo` run named, four held-out evaluations of the same 48 tasks: `before` and `after`
(the run's own, at the evaluation temperature) and `control-before` / `control-after` (the runs
`<name>-control-base` and `<name>-control-trained` that scripts/demo.sh plays at the control temperature).
Every episode gets one outcome (`outcome`, first rule that applies):

- `solved`;
- `infra`: an infrastructure failure (not the policy's);
- `syntax_error`: a python call failed with a SyntaxError and the episode was not solved;
- `never_submitted`: no submit call before the turn limit (calls that printed nothing, malformed calls);
- `wrong_answer`: submitted a wrong answer, every python call ran.

It also counts `unclosed_calls`: episodes whose first python call opens more parentheses than it closes
(`print(1 + 2` or `print(1 + 2}`: a failure mode seen after training with seed 1). Read with the evidence
files in studies/calc-demo/results/demo/, which hold the per-task outcomes; this file says what the failures
were made of.

What this is not: a replay (it reads what the store recorded; the store must be the one the runs wrote,
runs/agentrl.db unless $AGENTRL_DB_URL says otherwise) or a statement about other tasks.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "studies" / "calc-demo" / "results" / "demo_failures.json"
OUTCOMES = ("solved", "infra", "syntax_error", "never_submitted", "wrong_answer")


def tool_calls(text: str) -> list[dict[str, Any]]:
    """The turn's tool calls as {"name", "arguments"} dicts, parsed as the env parses them
    (`agentrl.agent.parsing.parse_turn`: a malformed turn has none); pure."""
    from agentrl.agent.parsing import parse_turn

    return [{"name": call.name, "arguments": dict(call.arguments)} for call in parse_turn(text).tool_calls]


def python_code(turn: Mapping[str, Any]) -> str | None:
    """The code of the turn's first python call, None when it made none; pure."""
    for call in tool_calls(turn["text"]):
        arguments = call.get("arguments")
        if call.get("name") == "python" and isinstance(arguments, dict):
            return str(arguments.get("code", ""))
    return None


def submitted(turns: Sequence[Mapping[str, Any]]) -> bool:
    return any(call.get("name") == "submit" for turn in turns for call in tool_calls(turn["text"]))


def outcome(episode: Mapping[str, Any]) -> str:
    """One of OUTCOMES for a stored episode dict (with its turns); pure."""
    turns = episode["turns"]
    if episode["success"]:
        return "solved"
    if episode["stop_reason"] == "infra_error":
        return "infra"
    if any("SyntaxError" in turn["observation"] for turn in turns if python_code(turn) is not None):
        return "syntax_error"
    if not submitted(turns):
        return "never_submitted"
    return "wrong_answer"


def unclosed(episode: Mapping[str, Any]) -> bool:
    """Whether the episode's first python call opens more parentheses than it closes; pure."""
    for turn in episode["turns"]:
        code = python_code(turn)
        if code is not None:
            return code.count("(") > code.count(")")
    return False


def summarise(episodes: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Counts of each outcome and of unclosed first calls over one evaluation's episodes; pure."""
    counts = Counter(outcome(episode) for episode in episodes)
    return {
        "episodes": len(episodes),
        "outcomes": {name: counts.get(name, 0) for name in OUTCOMES},
        "unclosed_calls": sum(unclosed(episode) for episode in episodes),
        "unclosed_solved": sum(unclosed(episode) and bool(episode["success"]) for episode in episodes),
    }


def training_unclosed(episodes: Sequence[Mapping[str, Any]]) -> dict[str, list[int]]:
    """Per training step: [episodes whose first python call is unclosed, episodes]; pure."""
    steps: dict[int, list[int]] = {}
    for episode in episodes:
        counts = steps.setdefault(episode["step"], [0, 0])
        counts[0] += unclosed(episode)
        counts[1] += 1
    return {str(step): steps[step] for step in sorted(steps)}


def evaluations(run_name: str, load: Any) -> dict[str, Any]:
    """The four held-out evaluations of a demo run through `load(name, split)`, which returns that run's
    episodes of the split with turns, or None when the run is not in the store; also the training
    episodes' unclosed first calls per step (`training_unclosed`, key `training`)."""
    own = load(run_name, "eval")
    if own is None:
        raise SystemExit(f"run {run_name!r} is not in the store; name a `make demo` run (runs/<name>)")
    steps = sorted({episode["step"] for episode in own})
    figures = {
        "before": summarise([e for e in own if e["step"] == steps[0]]),
        "after": summarise([e for e in own if e["step"] == steps[-1]]),
    }
    for label, suffix in (("control-before", "control-base"), ("control-after", "control-trained")):
        control = load(f"{run_name}-{suffix}", "eval")
        if control is not None:
            figures[label] = summarise(control)
    return {"evaluations": figures, "training": training_unclosed(load(run_name, "train") or [])}


def store_loader() -> Any:
    """`load(name, split)` over the run store: the named run's episodes of that split with turns (its latest
    run of that name), None when absent. Each run's episodes are read once, whatever splits are asked."""
    import functools

    from agentrl.store.repository import list_runs, load_episodes, open_store

    store = open_store()
    runs = {
        run["name"]: run["id"] for run in sorted(list_runs(store), key=lambda run: str(run["created_at"]))
    }

    @functools.cache
    def episodes(run_id: str) -> list[dict[str, Any]]:
        return load_episodes(store, run_id)

    def load(name: str, split: str) -> list[dict[str, Any]] | None:
        if name not in runs:
            return None
        return [e for e in episodes(runs[name]) if e["split"] == split]

    return load


def report(result: Mapping[str, Any]) -> str:
    """The JSON as a markdown table: one row per run and evaluation; pure."""
    lines = [
        "| run | evaluation | episodes | "
        + " | ".join(OUTCOMES)
        + " | first call left `(` open | of those, solved |",
        "|---" * (len(OUTCOMES) + 5) + "|",
    ]
    for run, figures in result["runs"].items():
        for label, figure in figures["evaluations"].items():
            cells = [str(figure["outcomes"][name]) for name in OUTCOMES]
            row = [run, label, str(figure["episodes"]), *cells]
            row += [str(figure["unclosed_calls"]), str(figure["unclosed_solved"])]
            lines.append("| " + " | ".join(row) + " |")
    lines += ["", "| run | training episodes whose first call left `(` open, per step |", "|---|---|"]
    for run, figures in result["runs"].items():
        steps = ", ".join(f"step {step}: {n}/{total}" for step, (n, total) in figures["training"].items())
        lines.append(f"| {run} | {steps} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("runs", nargs="*", help="`make demo` run names (runs/<name>)")
    parser.add_argument("--out", type=Path, default=OUT, help="the JSON's path")
    parser.add_argument("--report", type=Path, help="print the markdown table of this JSON and exit")
    options = parser.parse_args(argv)
    if options.report:
        print(report(json.loads(options.report.read_text())))
        return 0
    if not options.runs:
        parser.error("name at least one run, e.g. demo-20261127-093729")
    load = store_loader()
    result = {
        "runs": {name: evaluations(name, load) for name in options.runs},
        "command": " ".join(
            ["python studies/scripts/demo_failures.py", *(argv if argv is not None else sys.argv[1:])]
        ),
    }
    options.out.write_text(json.dumps(result, indent=2) + "\n")
    print(report(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
