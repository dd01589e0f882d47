"""SWE-bench task records: the official schema, its validation, and the generated problem statements.

What this is: pure functions over records. A record has the official fields (`instance_id`, `repo`,
`base_commit`, `problem_statement`, `patch`, `test_patch`, `FAIL_TO_PASS`, `PASS_TO_PASS`, `version`,
`environment_setup_commit`, `created_at`, `hints_text`) plus `id` (= `instance_id`, what `agentrl.tasks`
keys on) and `split`. `FAIL_TO_PASS`/`PASS_TO_PASS` may be JSON-encoded strings, as in the official
datasets on the Hugging Face hub; `validate_record` turns them into lists.

What this is not: the generator (`scripts/swebench_make_tasks.py`) or grading (`agentrl_swebench.grading`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from agentrl.errors import EnvError

OFFICIAL_FIELDS = (
    "instance_id",
    "repo",
    "base_commit",
    "problem_statement",
    "patch",
    "test_patch",
    "FAIL_TO_PASS",
    "PASS_TO_PASS",
    "version",
    "environment_setup_commit",
    "created_at",
    "hints_text",
)
TEST_LIST_FIELDS = ("FAIL_TO_PASS", "PASS_TO_PASS")
HELDOUT_PERCENT = 20
MAX_LISTED_FAILURES = 8
MAX_ERROR_LINES = 6
_FAILURE_HEADER = re.compile(r"^_{3,} (.+?) _{3,}$")


def validate_record(task: Any) -> dict[str, Any]:
    """The record with FAIL_TO_PASS/PASS_TO_PASS as lists and `id` set; `EnvError` names a bad field."""
    if not isinstance(task, Mapping):
        raise EnvError(f"options['task'] must be a SWE-bench record (a dict), got {type(task).__name__}")
    record = dict(task)
    for key in ("instance_id", "repo", "problem_statement", "patch"):
        if not isinstance(record.get(key), str) or not record[key]:
            raise EnvError(f"SWE-bench record is missing {key!r} (a non-empty string)")
    for key in TEST_LIST_FIELDS:
        record[key] = _test_list(record.get(key), key, record["instance_id"])
    if not record["FAIL_TO_PASS"]:
        raise EnvError(f"{record['instance_id']}: FAIL_TO_PASS is empty; nothing would grade the agent")
    record.setdefault("test_patch", "")
    record.setdefault("id", record["instance_id"])
    return record


def _test_list(value: Any, key: str, instance_id: str) -> list[str]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise EnvError(f"{instance_id}: {key} is a string but not JSON ({exc.msg})") from exc
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise EnvError(f"{instance_id}: {key} must be a list of test ids")
    return list(value)


def split_of(instance_id: str) -> str:
    """'heldout' for a stable HELDOUT_PERCENT of instance ids, else 'train'."""
    digest = hashlib.sha256(instance_id.encode("utf-8")).hexdigest()
    return "heldout" if int(digest[:8], 16) % 100 < HELDOUT_PERCENT else "train"


def instance_id(project: str, patch: str) -> str:
    """`pypi__NAME-<12 hex of the gold patch>`: stable, and distinct for distinct bugs."""
    return f"pypi__{project}-{hashlib.sha256(patch.encode('utf-8')).hexdigest()[:12]}"


def failure_messages(log: str) -> dict[str, list[str]]:
    """From a pytest log (`--tb=short`), each failure section's title and its `E   ...` lines."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in log.splitlines():
        header = _FAILURE_HEADER.match(line)
        if header:
            current = sections.setdefault(header.group(1), [])
        elif current is not None and line.startswith("E "):
            current.append(line[1:].strip())
        elif line.startswith("=") and current is not None and "short test summary" in line:
            current = None
    return sections


def section_title(test_id: str) -> str:
    """A test's failure section title in pytest's log: `Class.test[p]` for `path::Class::test[p]`."""
    return ".".join(test_id.split("::")[1:]) or test_id


def problem_statement(repo: str, version: str, failing: Sequence[str], log: str) -> str:
    """An issue text naming the failing tests and their assertion output (never the fix or its location)."""
    messages = failure_messages(log)
    lines = [
        f"Some tests of {repo} {version} fail after a recent change to the library code.",
        "",
        "Failing tests:",
    ]
    for test_id in failing[:MAX_LISTED_FAILURES]:
        lines.append(f"- {test_id}")
        detail = [text for text in messages.get(section_title(test_id), []) if text][:MAX_ERROR_LINES]
        lines.extend(f"      {text}" for text in detail)
    if len(failing) > MAX_LISTED_FAILURES:
        lines.append(f"- ... and {len(failing) - MAX_LISTED_FAILURES} more")
    lines += [
        "",
        "Fix the library so that these tests pass again without breaking any other test. "
        "The tests themselves are correct; do not change them.",
    ]
    return "\n".join(lines)


def make_record(
    *,
    project: str,
    repo: str,
    version: str,
    base_commit: str,
    environment_setup_commit: str,
    patch: str,
    fail_to_pass: Sequence[str],
    pass_to_pass: Sequence[str],
    log: str,
    created_at: str,
) -> dict[str, Any]:
    """One record in the official schema (plus `id` and `split`)."""
    identifier = instance_id(project, patch)
    return {
        "instance_id": identifier,
        "id": identifier,
        "repo": repo,
        "base_commit": base_commit,
        "problem_statement": problem_statement(repo, version, fail_to_pass, log),
        "patch": patch,
        # the tests that grade the instance already exist at base_commit (only the library was mutated)
        "test_patch": "",
        "FAIL_TO_PASS": sorted(fail_to_pass),
        "PASS_TO_PASS": sorted(pass_to_pass),
        "version": version,
        "environment_setup_commit": environment_setup_commit,
        "created_at": created_at,
        "hints_text": "",
        "split": split_of(identifier),
    }
