"""`agentrl swebench validate`: check a SWE-bench task set (gold patches resolve, empty patches do not).

What this is: argument parsing and output for the `agentrl-env-swebench` plugin's validator
(`agentrl_swebench.validate`); prints one JSON object {n_instances, gold_resolved, empty_resolved, seconds}
and exits 1 unless every gold patch resolves and no empty patch does (the failing ids go to stderr).
What this is not: the validator itself, or the image build (`scripts/build_swebench_images.sh`).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from agentrl.errors import ConfigError
from agentrl.tasks import load_tasks

SPLITS = ("train", "heldout")


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("swebench", help="SWE-bench task sets: validate")
    actions = parser.add_subparsers(dest="action", required=True)
    validate = actions.add_parser("validate", help="gold patches must resolve, empty patches must fail")
    validate.add_argument("--instances", nargs="*", default=None, help="instance ids (default: all)")
    validate.add_argument("--tasks-dir", default="tasks", help="root of the task suites")
    validate.add_argument("--suite", default="swebench-local")
    validate.add_argument("--splits", default=",".join(SPLITS), help="comma-separated splits to read")
    validate.add_argument("--workers", type=int, default=2, help="instances graded in parallel")
    validate.set_defaults(handler=run_validate)


def select(records: list[Any], instances: list[str] | None) -> list[Any]:
    """The records named by `instances` (all when None), in the order given; `ConfigError` for unknown ids."""
    if not instances:
        return records
    by_id = {record["instance_id"]: record for record in records}
    missing = [name for name in instances if name not in by_id]
    if missing:
        raise ConfigError(f"unknown instance ids {missing}; see the suite's train/heldout.jsonl")
    return [by_id[name] for name in instances]


def run_validate(args: argparse.Namespace) -> int:
    try:
        from agentrl_swebench.validate import ValidateConfig, validate_instances
    except ImportError as exc:
        raise ConfigError(
            f"the swebench env plugin is not installed ({exc}); pip install -e envs/swebench"
        ) from exc
    records = [
        r for split in args.splits.split(",") if split for r in load_tasks(args.tasks_dir, args.suite, split)
    ]
    result = validate_instances(select(records, args.instances), ValidateConfig(workers=args.workers))
    gold_failed, empty_passed = result.pop("gold_failed"), result.pop("empty_passed")
    print(json.dumps(result))
    if gold_failed or empty_passed:
        print(
            f"gold patches not resolving: {gold_failed}; empty patches resolving: {empty_passed}",
            file=sys.stderr,
        )
        return 1
    return 0
