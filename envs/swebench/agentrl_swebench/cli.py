"""`agentrl swebench validate|export`: check a SWE-bench task set, or make one from an official dataset.

What this is: the plugin's `agentrl` subcommand, registered under the `agentrl.cli` entry-point group (see
this package's pyproject.toml); `agentrl` calls `add_parser` when it builds its command line. `validate`
(`agentrl_swebench.validate`) prints one JSON object {n_instances, gold_resolved, empty_resolved, seconds}
and exits 1 unless every gold patch resolves and no empty patch does (the failing ids go to stderr);
`--images official` grades in the official instance images. `export NAME --suite SUITE`
(`agentrl_swebench.dataset`) reads a dataset (a hub id through `datasets`, or a local copy) and writes
`tasks/SUITE/` for `tasks.suite=SUITE` with `env.kwargs.images=official`; it prints the manifest.

What this is not: the validator or loader themselves, or the image build (`scripts/build_swebench_images.sh`).
They are imported when a subcommand runs, so `agentrl --help` stays quick.
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
    parser = commands.add_parser("swebench", help="SWE-bench task sets: validate, export")
    actions = parser.add_subparsers(dest="action", required=True)
    validate = actions.add_parser("validate", help="gold patches must resolve, empty patches must fail")
    validate.add_argument("--instances", nargs="*", default=None, help="instance ids (default: all)")
    validate.add_argument("--tasks-dir", default="tasks", help="root of the task suites")
    validate.add_argument("--suite", default="swebench-local")
    validate.add_argument("--splits", default=",".join(SPLITS), help="comma-separated splits to read")
    validate.add_argument("--workers", type=int, default=2, help="instances graded in parallel")
    validate.add_argument("--images", default="local", help="local (project images) or official")
    validate.add_argument("--image-namespace", default=None, help="official images: registry namespace")
    validate.set_defaults(handler=run_validate)
    export = actions.add_parser("export", help="write an official SWE-bench dataset as a task suite")
    export.add_argument("dataset", help="hub id (e.g. SWE-bench/SWE-bench_Verified) or local dataset path")
    export.add_argument("--split", default="test", help="the dataset's split to read")
    export.add_argument("--suite", required=True, help="writes TASKS_DIR/SUITE/{train,heldout,SPLIT}.jsonl")
    export.add_argument("--tasks-dir", default="tasks", help="root of the task suites")
    export.add_argument("--instances", nargs="*", default=None, help="instance ids (default: all)")
    export.set_defaults(handler=run_export)


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
    from agentrl_swebench.sources import ImageSource
    from agentrl_swebench.validate import ValidateConfig, validate_instances

    records = [
        r for split in args.splits.split(",") if split for r in load_tasks(args.tasks_dir, args.suite, split)
    ]
    images = ImageSource(args.images, args.image_namespace)
    config = ValidateConfig(workers=args.workers, images=images)
    result = validate_instances(select(records, args.instances), config)
    gold_failed, empty_passed = result.pop("gold_failed"), result.pop("empty_passed")
    print(json.dumps(result))
    if gold_failed or empty_passed:
        print(
            f"gold patches not resolving: {gold_failed}; empty patches resolving: {empty_passed}",
            file=sys.stderr,
        )
        return 1
    return 0


def run_export(args: argparse.Namespace) -> int:
    from agentrl_swebench.dataset import export_suite, load_official, normalise

    rows = select(load_official(args.dataset, args.split), args.instances)
    records = [normalise(row) for row in rows]
    manifest = export_suite(records, args.tasks_dir, args.suite, source=args.dataset, split=args.split)
    print(json.dumps(manifest))
    return 0
