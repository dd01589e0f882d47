"""Why the base model fails the later parts of a calc-chain episode (issue 41, docs/credit_study.md part 3).

    .venv/bin/python studies/scripts/calc_chain_failures.py
    # -> studies/calc-chain-gonogo/results/calc_chain_failures.json

The go/no-go (`studies/scripts/calc_chain_gonogo.py`) measured that parts 2 and 3 are solved far less often
than part 1 although the parts are independent problems of one kind, and kept outcomes, not turns. This script
plays the first `--tasks` held-out chains as the held-out evaluation plays them (`trainer.run.play_heldout`:
one episode per task, per-request sampler seeds, so the cached engine repeats them exactly; at
`--temperature`; the committed results file predates that and was played unseeded) and labels every part that
was not answered right with what its turns show (a part can carry several labels):

    carried_answer:  a number in a python call or the submitted answer is an earlier part's answer
    swapped:         the submitted answer is the negative of the right one (a reversed question's operands
                     taken in the written order)
    no_print:        a python call printed nothing ("no output" from the env)
    syntax_error:    a python call raised SyntaxError
    repeated_action: the same action text twice in a row
    never_submitted: the part's turn budget ran out without a submit
    wrong_other:     none of the above

What this is not: a training run, or a measure of the estimators. The labels are heuristics over the text
and the env's observations, stated here so a reader can check them against `examples` in the JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from agentrl.config import load_config
from agentrl.cpu import cpu_flags
from agentrl.memory import choose_allocator
from agentrl.tasks import load_tasks
from agentrl.trainer.run import open_run, play_heldout
from agentrl.types import Episode, Turn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calc_chain_gonogo import FLAGS  # noqa: E402
from credit_study import code_version  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "studies" / "calc-chain-gonogo" / "results" / "calc_chain_failures.json"
LABELS = (
    "carried_answer",
    "swapped",
    "no_print",
    "syntax_error",
    "repeated_action",
    "never_submitted",
    "wrong_other",
)


def turns_by_part(episode: Episode, parts: int) -> list[list[Turn]]:
    """The episode's turns split by the part they answered (`info["part"]`)."""
    split: list[list[Turn]] = [[] for _ in range(parts)]
    for turn in episode.turns:
        part = turn.info.get("part")
        if part is not None and 0 <= int(part) < parts:
            split[int(part)].append(turn)
    return split


def calls(turn: Turn) -> list[tuple[str, dict[str, Any]]]:
    return [(call.name, dict(call.arguments)) for call in turn.action.tool_calls]


def submitted(turns: Sequence[Turn]) -> str | None:
    """The last answer submitted in `turns`, or None."""
    answer = None
    for turn in turns:
        for name, arguments in calls(turn):
            if name == "submit":
                answer = str(arguments.get("answer", "")).strip()
    return answer


def part_labels(turns: Sequence[Turn], answer: str, earlier: Sequence[str]) -> list[str]:
    """The labels (module docstring) of one part that was not answered right; pure."""
    labels: list[str] = []
    codes = [
        str(arguments.get("code", ""))
        for turn in turns
        for name, arguments in calls(turn)
        if name == "python"
    ]
    given = submitted(turns)
    texts = [*codes, given or ""]
    numbers = {number for text in texts for number in re.findall(r"-?\d+", text)}
    if any(previous in numbers for previous in earlier):
        labels.append("carried_answer")
    if given is not None and answer.lstrip("-") == given.lstrip("-") and answer != given:
        labels.append("swapped")
    observations = [turn.observation for turn in turns]
    if any("no output" in observation for observation in observations):
        labels.append("no_print")
    if any("SyntaxError" in observation for observation in observations):
        labels.append("syntax_error")
    if any(
        first.text.strip() == second.text.strip() for first, second in zip(turns, turns[1:], strict=False)
    ):
        labels.append("repeated_action")
    if given is None:
        labels.append("never_submitted")
    return labels or ["wrong_other"]


def analyse(episodes: Sequence[Episode], tasks: Sequence[Mapping[str, Any]], parts: int) -> dict[str, Any]:
    """Per part index: how often it was right, and the labels of its failures; a few labelled examples."""
    by_id = {episode.task_id: episode for episode in episodes}
    right = [0] * parts
    labels: list[Counter[str]] = [Counter() for _ in range(parts)]
    by_form: dict[str, Counter[str]] = {}
    examples: list[dict[str, Any]] = []
    played = 0
    for task in tasks:
        episode = by_id[task["id"]]
        if episode.is_infra_failure:
            continue
        played += 1
        for part, turns in enumerate(turns_by_part(episode, parts)):
            form = (task.get("forms") or ["?"] * parts)[part]
            counts = by_form.setdefault(form, Counter())
            counts["parts"] += 1
            if any(turn.info.get("part_correct") is True for turn in turns):
                right[part] += 1
                counts["right"] += 1
                continue
            found = part_labels(turns, task["answers"][part], task["answers"][:part])
            labels[part].update(found)
            if len(examples) < 12:
                examples.append(
                    {
                        "task_id": task["id"],
                        "part": part,
                        "question": task["questions"][part],
                        "answer": task["answers"][part],
                        "labels": found,
                        "actions": [turn.text for turn in turns],
                    }
                )
    return {
        "chains": played,
        "right_by_part": [count / max(1, played) for count in right],
        "failure_labels_by_part": [dict(counter) for counter in labels],
        "failures_by_part": [played - count for count in right],
        "by_form": {form: dict(counter) for form, counter in sorted(by_form.items())},
        "examples": examples,
    }


async def play(task: str, count: int, temperature: float, overrides: Sequence[str]) -> dict[str, Any]:
    config = load_config(task, list(overrides))
    parts = int(config.env.kwargs.get("parts", 1))
    heldout = load_tasks(config.tasks.root, config.tasks.suite, config.tasks.eval_split)[:count]
    async with open_run(config, kind="eval") as ctx:
        sampling = replace(config.sampling, temperature=temperature)
        episodes = await play_heldout(ctx, heldout, sampling)
    return {"parts": parts, **analyse(episodes, heldout, parts)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="calc-chain", help="config name (configs/TASK.yaml)")
    parser.add_argument("--tasks", type=int, default=24, help="held-out chains")
    parser.add_argument("--temperature", type=float, default=0.3, help="0 decodes greedily")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    args = parser.parse_args(argv)
    choose_allocator()
    overrides = [f"name=failures-{time.strftime('%Y%m%d-%H%M%S')}", "runs_dir=runs/gonogo", *args.overrides]
    started = time.perf_counter()
    measured = asyncio.run(play(args.task, args.tasks, args.temperature, overrides))
    report = {
        "command": " ".join(
            ["studies/scripts/calc_chain_failures.py", *(argv if argv is not None else sys.argv[1:])]
        ),
        "commit": code_version(),
        "cpu_flags": {flag: flag in cpu_flags() for flag in FLAGS},
        "task": args.task,
        "temperature": args.temperature,
        "overrides": overrides,
        **measured,
        "wall_s": round(time.perf_counter() - started, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "examples"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
