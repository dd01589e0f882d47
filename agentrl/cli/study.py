"""`agentrl study plan|run|status|report NAME`: a comparison planned, run, resumed and reported by one tool.

What this is: thin handlers over `agentrl.study` (docs/studies.md). NAME is a folder of `--root` (default
`studies/`) holding `study.yaml`. `plan` prints the runs and the estimated wall time and writes `plan.json`
(the study file's hash); `run` refuses a study file that differs from the planned one, then plays every run
not yet done, resuming from disk (`--until TIME`: none that would not end by then); `status` says what
ran; `report` writes the summary, table and plot under `results/` and rewrites the study's block in each
`--page`. A study file with `kind: gonogo` is a go/no-go
(`agentrl.study.gonogo`): the same four commands measure its variants and report go or no-go. What this is
not: the runner or the statistics.
"""

from __future__ import annotations

import argparse
import json
from datetime import datetime, time, timedelta
from pathlib import Path
from typing import Any

from agentrl.study.spec import STUDIES_DIR


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("study", help="plan, run, resume and report a comparison of training runs")
    actions = parser.add_subparsers(dest="action", required=True)
    for action, text in (
        ("plan", "the runs and the estimated wall time; writes plan.json (the study file's hash)"),
        ("run", "every run not yet done, resumed from disk; refuses a study changed since its plan"),
        ("status", "what has run"),
        ("report", "summary JSON, table and plot under results/, and the study's block in each --page"),
    ):
        sub = actions.add_parser(action, help=text)
        sub.add_argument("name", metavar="NAME", help="a folder of --root holding study.yaml")
        sub.add_argument(
            "--root", type=Path, default=STUDIES_DIR, help="where studies live (default: studies)"
        )
        sub.set_defaults(handler=handle)
        if action == "run":
            sub.add_argument(
                "--until",
                metavar="TIME",
                help="start no run that would not end by TIME (04:40: the next such time; or "
                "2026-12-07T04:40), estimated from this study's finished runs: it stops between runs",
            )
        if action == "report":
            sub.add_argument("--page", type=Path, action="append", default=[], help="a page with the block")
            sub.add_argument(
                "--headline",
                type=Path,
                action="append",
                default=[],
                help="a page (README) with the study's headline block: runs finished, paired statistics",
            )


def handle(args: argparse.Namespace) -> int:
    from agentrl.study.gonogo import KIND, spec_kind
    from agentrl.study.runner import Layout

    layout = Layout(args.root / args.name)
    if spec_kind(layout.spec) == KIND:
        return handle_gonogo(args, layout)
    return handle_comparison(args, layout)


def handle_gonogo(args: argparse.Namespace, layout: Any) -> int:
    from agentrl.errors import ConfigError
    from agentrl.study import gonogo

    if args.action == "plan":
        print(json.dumps(gonogo.plan(layout), indent=1))
    elif args.action == "run":
        if args.until:
            raise ConfigError(f"study {layout.name} is a go/no-go: --until is for comparisons; run it whole")
        gonogo.run(layout)
    elif args.action == "status":
        print("\n".join(gonogo.status(layout)))
    else:
        if args.headline:
            raise ConfigError(
                f"study {layout.name} is a go/no-go: --headline is for comparisons; use --page for its table"
            )
        summary = gonogo.report(layout, args.page)
        print((layout.results / "table.md").read_text(), end="")
        if summary["not_finished"]:
            print(f"not measured: {', '.join(summary['not_finished'])}")
    return 0


def handle_comparison(args: argparse.Namespace, layout: Any) -> int:
    from agentrl.study.report import report
    from agentrl.study.runner import plan, run, status

    if args.action == "plan":
        planned = plan(layout)
        estimate = planned["estimate_s"]
        print(json.dumps({key: value for key, value in planned.items() if key != "estimate_s"}, indent=1))
        print(
            f"estimated wall time: {estimate / 60:.0f} min (from this study's finished runs)"
            if estimate is not None
            else "estimated wall time: not known until one run of this study has finished"
        )
    elif args.action == "run":
        run(layout, until=None if args.until is None else deadline(args.until, datetime.now()).timestamp())
    elif args.action == "status":
        print("\n".join(status(layout)))
    else:
        summary = report(layout, args.page, args.headline)
        print((layout.results / "table.md").read_text(), end="")
        if summary["not_finished"]:
            print(f"not finished: {', '.join(summary['not_finished'])}")
    return 0


def deadline(text: str, now: datetime) -> datetime:
    """`--until`'s time as a local date and time: a date and time as given, or a time of day as its next
    occurrence after `now` (today's, or tomorrow's once today's has passed)."""
    from agentrl.errors import ConfigError

    try:
        return datetime.fromisoformat(text)
    except ValueError:
        pass
    try:
        of_day = time.fromisoformat(text)
    except ValueError:
        raise ConfigError(
            f"--until takes a time of day (04:40) or a date and time (2026-12-07T04:40), not {text!r}"
        ) from None
    today = datetime.combine(now.date(), of_day)
    return today if today > now else today + timedelta(days=1)
