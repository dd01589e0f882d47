"""Why the base model fails the later parts of a calc-chain episode (issue 41, docs/credit_study.md part 3).

    .venv/bin/python studies/scripts/calc_chain_failures.py
    # -> studies/calc-chain-gonogo/results/calc_chain_failures.json
    .venv/bin/python studies/scripts/calc_chain_failures.py --study calc-chain-s4m-compare --set heldout-256
    # -> studies/calc-chain-s4m-compare/results/failures.json: the study's stored evaluations, labelled

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

Every part, right or not, also gets its first call scored apart from whether it parsed and whether it was
submitted (issue 53): `parses` (the part's first turn is a well-formed tool call), `expression` (its first
python call's first arithmetic expression: `right` when its value is the part's answer,
`operands_misordered` when it uses the task's numbers but another order or operator, `term_dropped` when
its numbers are some of the task's and no others (a product left out), `wrong_operands` (any other number),
`not_arithmetic` when the code holds no expression of integers, `no_python` when the part made no python
call), `submitted` and `right`. `by_level` counts parts, right parts and first-expression labels per
problem level (calc-chain-s4m mixes level 3, two products, and level 4, three).

With `--study NAME` nothing is played: the held-out evaluations that `agentrl study run` stored (the final
ones of each run and the base, on `--set` at `--temperature`, sampler seed 0) are read from the study's
store and labelled the same way, one entry per run; the file also holds each group's mean shares (the base,
a reference line, each arm over its seeds) and their Markdown table, which `--page PAGE` writes into PAGE's
`<!-- failures:STUDY:SET:start ... -->` block: what each arm's gain is made of.

What this is not: a training run, or a measure of the estimators. The labels are heuristics over the text
and the env's observations, stated here so a reader can check them against `examples` in the JSON.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import json
import re
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from agentrl.agent.parsing import parse_turn
from agentrl.config import load_config
from agentrl.cpu import cpu_flags
from agentrl.evidence import replace_block
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


def turns_by_part(episode: Episode | Stored, parts: int) -> list[list[Turn]]:
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


FIRST_CALL = (
    "right",
    "operands_misordered",
    "term_dropped",
    "wrong_operands",
    "not_arithmetic",
    "no_python",
)


def first_call(turns: Sequence[Turn], expression: str, answer: str) -> dict[str, Any]:
    """The part's first call scored apart from parsing and submitting (module docstring); pure."""
    codes = [str(args.get("code", "")) for turn in turns for name, args in calls(turn) if name == "python"]
    first = turns[0] if turns else None
    return {
        "parses": first is not None and bool(first.action.tool_calls) and not first.action.parse_error,
        "expression": expression_label(codes[0], expression, answer) if codes else "no_python",
        "submitted": submitted(turns) is not None,
        "right": any(turn.info.get("part_correct") is True for turn in turns),
    }


def expression_label(code: str, expression: str, answer: str) -> str:
    """How `code`'s first arithmetic expression compares with the task's `expression` (`FIRST_CALL`)."""
    found = first_arithmetic(code)
    if found is None:
        return "not_arithmetic"
    value = arithmetic_value(found)
    if value is not None and str(value) == answer.strip():
        return "right"
    wanted = first_arithmetic(expression)
    if wanted is None:
        return "wrong_operands"
    used, asked = Counter(integers(found)), Counter(integers(wanted))
    if used == asked:
        return "operands_misordered"
    return "term_dropped" if not used - asked else "wrong_operands"


def first_arithmetic(code: str) -> ast.expr | None:
    """The first binary operation over integers in `code` (outermost first), or None; pure."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and arithmetic_value(node) is not None:
            return node
    return None


def arithmetic_value(node: ast.expr) -> int | None:
    """The value of an expression of integer literals under + - * and unary minus; None for anything else."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = arithmetic_value(node.operand)
        return None if inner is None else -inner
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub | ast.Mult):
        left, right = arithmetic_value(node.left), arithmetic_value(node.right)
        if left is None or right is None:
            return None
        if isinstance(node.op, ast.Add):
            return left + right
        return left - right if isinstance(node.op, ast.Sub) else left * right
    return None


def integers(node: ast.expr) -> list[int]:
    """The integer literals of an arithmetic expression, in the order they are written."""
    ordered = sorted(
        (child for child in ast.walk(node) if isinstance(child, ast.Constant) and type(child.value) is int),
        key=lambda child: (child.lineno, child.col_offset),
    )
    return [child.value for child in ordered if isinstance(child.value, int)]


def analyse(
    episodes: Sequence[Episode | Stored], tasks: Sequence[Mapping[str, Any]], parts: int
) -> dict[str, Any]:
    """Per part index: how often it was right, and the labels of its failures; a few labelled examples."""
    by_id = {episode.task_id: episode for episode in episodes}
    right = [0] * parts
    labels: list[Counter[str]] = [Counter() for _ in range(parts)]
    by_form: dict[str, Counter[str]] = {}
    by_level: dict[str, Counter[str]] = {}
    scored: list[Counter[str]] = [Counter() for _ in range(parts)]
    examples: list[dict[str, Any]] = []
    played = 0
    for task in tasks:
        episode = by_id.get(task["id"])
        if episode is None or episode.is_infra_failure:
            continue
        played += 1
        for part, turns in enumerate(turns_by_part(episode, parts)):
            score = first_call(turns, (task.get("expressions") or [""] * parts)[part], task["answers"][part])
            scored[part].update(
                [f"expression_{score['expression']}"]
                + [key for key in ("parses", "submitted", "right") if score[key]]
            )
            form = (task.get("forms") or ["?"] * parts)[part]
            counts = by_form.setdefault(form, Counter())
            level = by_level.setdefault(str((task.get("levels") or ["?"] * parts)[part]), Counter())
            counts["parts"] += 1
            level.update(["parts", f"expression_{score['expression']}"])
            if any(turn.info.get("part_correct") is True for turn in turns):
                right[part] += 1
                counts["right"] += 1
                level["right"] += 1
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
        "by_level": {level: dict(counter) for level, counter in sorted(by_level.items())},
        "first_call_by_part": [first_call_shares(counter, played) for counter in scored],
        "examples": examples,
    }


def first_call_shares(counter: Counter[str], played: int) -> dict[str, float]:
    """A part's first-call counts as shares of the chains played: parses, submitted, right, and each
    expression label (`expression_<label>`, summing to 1)."""
    keys = ["parses", "submitted", "right", *(f"expression_{label}" for label in FIRST_CALL)]
    return {key: counter[key] / max(1, played) for key in keys}


@dataclass(frozen=True)
class Stored:
    """A held-out episode read back from a study's store, as `analyse` reads an `Episode`."""

    task_id: str
    is_infra_failure: bool
    turns: list[Turn]


def stored_episode(row: Mapping[str, Any]) -> Stored:
    """A stored episode (`agentrl.store.repository.episode_dict`) with its turns re-parsed from their text,
    as the runner parsed them when they were played."""
    turns = [
        Turn(
            index=int(turn["index"]),
            prompt_ids=(),
            completion_ids=(),
            completion_logprobs=(),
            text=str(turn["text"]),
            action=parse_turn(str(turn["text"])),
            observation=str(turn["observation"] or ""),
            reward=float(turn["reward"]),
            invalid=bool(turn["invalid"]),
            state_key=turn["state_key"],
            info=dict(turn["info"] or {}),
        )
        for turn in sorted(row["turns"], key=lambda turn: int(turn["index"]))
    ]
    return Stored(str(row["task_id"]), row["error"] is not None, turns)


def study_failures(name: str, held_out: str, temperature: float, root: Path = ROOT) -> dict[str, Any]:
    """Each run's final evaluation (and the base's) on held-out set `held_out` ("" the main one) at
    `temperature`, sampler seed 0, read from study `name`'s store and labelled; a run not evaluated there
    yet, or whose evaluation has not stored an episode of every task (it is still playing), is listed as
    missing. `root`: the checkout whose `studies/` holds it."""
    from agentrl.store.repository import close_store, list_runs, load_episodes, open_store
    from agentrl.study.runner import Layout, planned_runs
    from agentrl.study.spec import STUDIES_DIR, load_spec

    layout = Layout(root / STUDIES_DIR / name)
    if not (layout.train_runs / "store.db").is_file():
        raise SystemExit(f"{layout.train_runs / 'store.db'} does not exist: run the study first")
    spec = load_spec(layout.spec)
    chosen = next((item for item in spec.evaluations if item.name == held_out), None)
    if held_out and chosen is None:
        raise SystemExit(f"study {name} has no held-out set {held_out!r}")
    config = load_config(spec.task, [*spec.overrides, *(chosen.overrides if chosen else ())])
    parts = int(config.env.kwargs.get("parts", 1))
    count = chosen.tasks if chosen else spec.eval_tasks
    tasks = load_tasks(config.tasks.root, config.tasks.suite, config.tasks.eval_split)[:count]
    store = open_store(f"sqlite:///{(layout.train_runs / 'store.db').resolve()}")
    found: dict[str, Any] = {}
    groups = groups_of([(planned.name, planned.arm) for planned in planned_runs(spec)])
    try:
        stored = list_runs(store)  # newest first
        for planned in planned_runs(spec):
            prefix = f"{name}-{planned.name}-eval-{held_out or 'main'}-T{temperature:g}-s0-k1-"
            run = next((row for row in stored if str(row["name"]).startswith(prefix)), None)
            rows = [] if run is None else load_episodes(store, run["id"])
            rows = [row for row in rows if row["split"] == "eval"]
            finished = len({row["task_id"] for row in rows}) >= len(tasks)  # not one still playing
            episodes = [stored_episode(row) for row in rows]
            found[planned.name] = analyse(episodes, tasks, parts) if finished else None
    finally:
        close_store(store)
    labelled = {"study": name, "set": held_out, "temperature": temperature, "parts": parts, "runs": found}
    return {**labelled, "groups": {group: group_shares(found, members) for group, members in groups.items()},
            "table": failure_table(labelled, groups)}  # fmt: skip


TABLE_COLUMNS = (
    ("right", "part right"),
    ("parses", "first call parses"),
    ("submitted", "submitted"),
    ("expression_right", "first expression right"),
    ("expression_operands_misordered", "operands misordered"),
    ("expression_term_dropped", "a term left out"),
    ("expression_wrong_operands", "wrong operands"),
    ("expression_not_arithmetic", "no arithmetic"),
    ("expression_no_python", "no python call"),
)


def groups_of(planned: Sequence[tuple[str, str | None]]) -> dict[str, list[str]]:
    """The study's runs grouped as the failure table shows them: each run without an arm (the base, a
    reference line) on its own, then each arm with all its seeds. `planned`: (run, arm or None) in order."""
    groups: dict[str, list[str]] = {}
    for run, arm in planned:
        groups.setdefault(arm or run, []).append(run)
    return groups


def group_shares(runs: Mapping[str, Mapping[str, Any] | None], members: Sequence[str]) -> dict[str, Any]:
    """A group's first-call shares: per run the mean over parts of `first_call_by_part`, then the mean over
    the group's labelled runs (every labelled run counts, a collapsed one too; an unlabelled one is left out
    and counted apart)."""
    labelled = [found for name in members if (found := runs.get(name))]
    per_run = [
        {key: sum(part[key] for part in found["first_call_by_part"]) / len(found["first_call_by_part"])
         for key, _ in TABLE_COLUMNS}
        for found in labelled
    ]  # fmt: skip
    means = (
        {key: sum(run[key] for run in per_run) / len(per_run) for key, _ in TABLE_COLUMNS} if per_run else {}
    )
    return {"runs": len(per_run), "not_labelled": len(members) - len(per_run), "shares": means}


def failure_table(labelled: Mapping[str, Any], groups: Mapping[str, Sequence[str]]) -> str:
    """The Markdown table of what each group's parts are made of: a row per group (the base, a reference
    line, each arm over its seeds), the mean share of parts per first-call label."""
    header = "| | runs | " + " | ".join(title for _, title in TABLE_COLUMNS) + " |"
    rows = [header, "|---|---|" + "---|" * len(TABLE_COLUMNS)]
    for group, members in groups.items():
        found = group_shares(labelled["runs"], members)
        if not found["runs"]:
            rows.append(f"| {group} | 0 of {len(members)} |" + " |" * len(TABLE_COLUMNS))
            continue
        cells = " | ".join(f"{found['shares'][key]:.3f}" for key, _ in TABLE_COLUMNS)
        rows.append(f"| {group} | {found['runs']} of {len(members)} | {cells} |")
    where = f"on {labelled['set'] or 'the main set'} at T={labelled['temperature']:g}"
    return "\n".join(
        [f"Each part's first call, {where} (shares of parts; runs labelled of planned):", "", *rows]
    )


def failure_markers(study: str, held_out: str) -> tuple[str, str]:
    """The comment lines around a study's failure table in a page."""
    name = f"{study}:{held_out or 'main'}"
    return (
        f"<!-- failures:{name}:start (studies/scripts/calc_chain_failures.py --study {study} --page P) -->",
        f"<!-- failures:{name}:end -->",
    )


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
    parser.add_argument("--study", default="", help="label a study's stored evaluations; play nothing")
    parser.add_argument("--set", default="", help="--study: the held-out set (default: the main one)")
    parser.add_argument("--root", type=Path, default=ROOT, help="--study: the checkout holding studies/")
    parser.add_argument(
        "--page",
        type=Path,
        action="append",
        default=[],
        help="--study: a page with the failure table's block",
    )
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    args = parser.parse_args(argv)
    if args.study:
        labelled = study_failures(args.study, args.set, args.temperature, args.root)
        out = args.root / "studies" / args.study / "results" / f"failures-{args.set or 'main'}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"commit": code_version(), **labelled}, indent=1) + "\n")
        for page in args.page:
            start, end = failure_markers(args.study, args.set)
            page.write_text(replace_block(page.read_text(), labelled["table"], start, end, where=str(page)))
        print(labelled["table"])
        print(f"wrote {out}")
        return 0
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
