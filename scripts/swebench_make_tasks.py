"""Make the offline SWE-bench task set (`tasks/swebench-local/`) from real projects, SWE-smith style.

For each project of `agentrl_swebench.projects.PROJECTS` (sdists in `sandboxes/swebench/sdists/`, images from
`scripts/build_swebench_images.sh`): run its test suite twice on the pristine tree inside its image and keep
the tests that pass both times; then, for AST mutations of its library modules in a seeded order
(`agentrl_swebench.mutations`), write the mutated file into the container, run the suite, and keep the
candidate only if some stable tests fail (FAIL_TO_PASS, at most --max-fail) while every other stable test
still passes (PASS_TO_PASS) -- twice, with the same result, so flaky tests cannot decide. A kept bug's gold
patch is the diff back to the original; its base commit is the commit id `setup_workspace` makes for the
buggy tree (checked by rebuilding the workspace from the record). Tests run in the sandbox, never on the host.

What this is not: the grader (`agentrl swebench validate` re-checks every instance through it).

    .venv/bin/python scripts/swebench_make_tasks.py --out tasks/swebench-local --per-project 14
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import tarfile
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agentrl_swebench.grading import status_map
from agentrl_swebench.mutations import Mutation, apply_mutation, find_mutations, unified_diff
from agentrl_swebench.projects import PROJECTS, ProjectSpec
from agentrl_swebench.records import make_record
from agentrl_swebench.workspace import SANDBOX, TestRun, run_tests, setup_workspace

from agentrl.sandbox.docker import DockerSandbox

GENERATOR_VERSION = 1
ROOT = Path(__file__).resolve().parents[1]
SDISTS = ROOT / "sandboxes" / "swebench" / "sdists"
WORKDIR = "/work"
PASSING = ("PASSED", "XFAIL")


def read_sdist(spec: ProjectSpec) -> tuple[dict[str, str], str]:
    """({relative path: text} of the project's mutable sources, created_at from the sdist's PKG-INFO)."""
    with tarfile.open(SDISTS / spec.sdist) as archive:
        top = f"{spec.name}-{spec.version}/"
        sources = {}
        for path in spec.source_globs:
            member = archive.extractfile(top + path)
            if member is None:
                raise SystemExit(f"{spec.sdist} has no {path}")
            sources[path] = member.read().decode("utf-8")
        created = datetime.fromtimestamp(archive.getmember(top + "PKG-INFO").mtime, UTC)
    return sources, created.strftime("%Y-%m-%dT%H:%M:%SZ")


def ordered_candidates(sources: dict[str, str], seed: int) -> Iterator[Mutation]:
    """Every mutation, shuffled by the seed, then interleaved by kind so each kind gets its turn."""
    by_kind: dict[str, list[Mutation]] = defaultdict(list)
    for path, text in sorted(sources.items()):
        for mutation in find_mutations(path, text):
            by_kind[mutation.kind].append(mutation)
    rng = random.Random(seed)
    queues = [rng.sample(items, len(items)) for _, items in sorted(by_kind.items())]
    while any(queues):
        for queue in queues:
            if queue:
                yield queue.pop()


def passing(run: TestRun) -> set[str]:
    return {test for test, status in status_map(run.log).items() if status in PASSING}


def write_source(sandbox: DockerSandbox, path: str, text: str) -> None:
    result = sandbox.exec(["sh", "-c", 'cat > "$1"', "write", f"{WORKDIR}/{path}"], stdin=text)
    if result.exit_code != 0:
        raise SystemExit(f"could not write {path} in the sandbox: {result.stderr}")


def judge(
    sandbox: DockerSandbox, spec: ProjectSpec, stable: set[str], max_fail: int, timeout_s: float
) -> tuple[list[str], list[str], str] | None:
    """(FAIL_TO_PASS, PASS_TO_PASS, first log) if the mutated tree in the sandbox makes a good bug."""
    first = run_tests(sandbox, WORKDIR, spec.test_targets, timeout_s)
    failing = stable - passing(first)
    if first.timed_out or not failing or len(failing) > max_fail:
        return None
    second = run_tests(sandbox, WORKDIR, spec.test_targets, timeout_s)
    if second.timed_out or stable - passing(second) != failing:
        return None
    return sorted(failing), sorted(stable - failing), first.log


def make_project_tasks(spec: ProjectSpec, count: int, seed: int, args: argparse.Namespace) -> list[dict]:
    sources, created_at = read_sdist(spec)
    config = replace(SANDBOX, image=spec.image)
    records: list[dict[str, Any]] = []
    labels = {"agentrl.purpose": "swebench-make-tasks"}
    with DockerSandbox(config, labels) as sandbox:
        setup_commit = setup_workspace(sandbox, WORKDIR, None)
        runs = [run_tests(sandbox, WORKDIR, spec.test_targets, args.test_timeout) for _ in range(2)]
        stable = passing(runs[0]) & passing(runs[1])
        print(f"{spec.name}: {len(stable)} stable passing tests", file=sys.stderr)
        tried = 0
        for mutation in ordered_candidates(sources, seed):
            if len(records) >= count or tried >= args.max_candidates:
                break
            tried += 1
            original = sources[mutation.path]
            write_source(sandbox, mutation.path, apply_mutation(original, mutation))
            verdict = judge(sandbox, spec, stable, args.max_fail, args.test_timeout)
            write_source(sandbox, mutation.path, original)
            if verdict is None:
                continue
            fail_to_pass, pass_to_pass, log = verdict
            patch = unified_diff(mutation.path, apply_mutation(original, mutation), original)
            base_commit = setup_workspace(sandbox, WORKDIR, patch)
            if setup_workspace(sandbox, WORKDIR, None) != setup_commit:
                raise SystemExit(f"{spec.name}: the pristine workspace is not reproducible")
            records.append(
                make_record(
                    project=spec.name,
                    repo=spec.repo,
                    version=spec.version,
                    base_commit=base_commit,
                    environment_setup_commit=setup_commit,
                    patch=patch,
                    fail_to_pass=fail_to_pass,
                    pass_to_pass=pass_to_pass,
                    log=log,
                    created_at=created_at,
                )
            )
            print(
                f"{spec.name}: kept {mutation.kind} at {mutation.path}:{mutation.line} "
                f"({len(fail_to_pass)} failing) [{len(records)}/{count}, {tried} tried]",
                file=sys.stderr,
            )
    return records


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> str:
    text = "".join(json.dumps(record, sort_keys=True) + "\n" for record in records)
    path.write_text(text, encoding="utf-8")
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="Make the local SWE-bench task set by mutating real projects."
    )
    parser.add_argument("--out", type=Path, default=ROOT / "tasks" / "swebench-local")
    parser.add_argument("--projects", default=",".join(PROJECTS), help="comma-separated project names")
    parser.add_argument("--per-project", type=int, default=14, help="instances to keep per project")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-fail", type=int, default=12, help="most FAIL_TO_PASS tests a bug may have")
    parser.add_argument("--max-candidates", type=int, default=120, help="mutations tried per project at most")
    parser.add_argument("--test-timeout", type=float, default=120.0)
    args = parser.parse_args(argv)
    started = time.monotonic()
    records: list[dict[str, Any]] = []
    names = [name for name in args.projects.split(",") if name]
    for name in names:
        records += make_project_tasks(PROJECTS[name], args.per_project, args.seed, args)
    args.out.mkdir(parents=True, exist_ok=True)
    splits = {split: [r for r in records if r["split"] == split] for split in ("train", "heldout")}
    hashes = {
        f"{split}.jsonl": write_jsonl(args.out / f"{split}.jsonl", rows) for split, rows in splits.items()
    }
    manifest = {
        "suite": "swebench-local",
        "env_id": "agentrl/SWEBench-v0",
        "generator": "scripts/swebench_make_tasks.py",
        "generator_version": GENERATOR_VERSION,
        "seed": args.seed,
        "projects": {
            name: {
                "repo": PROJECTS[name].repo,
                "version": PROJECTS[name].version,
                "image": PROJECTS[name].image,
                "instances": sum(r["repo"] == PROJECTS[name].repo for r in records),
            }
            for name in names
        },
        "counts": {split: len(rows) for split, rows in splits.items()},
        "test_patch": "empty for every instance: the grading tests exist at base_commit; only library code "
        "was mutated, and the test files are restored from the pristine tree before grading",
        "sha256": hashes,
    }
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    print(
        json.dumps(
            {
                "instances": len(records),
                "counts": manifest["counts"],
                "seconds": round(time.monotonic() - started, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
