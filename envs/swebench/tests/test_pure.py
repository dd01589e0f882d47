"""The pure parts of the swebench env: mutations, diffs, patch filtering, records, observations, task set."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agentrl_swebench.env import _arguments
from agentrl_swebench.grading import filter_patch, section_paths, split_patch, status_map
from agentrl_swebench.mutations import apply_mutation, find_mutations, unified_diff
from agentrl_swebench.projects import PROJECTS, image_of, is_protected_path, is_test_path, project_of
from agentrl_swebench.records import (
    OFFICIAL_FIELDS,
    failure_messages,
    problem_statement,
    section_title,
    split_of,
    validate_record,
)
from agentrl_swebench.tools import command_observation

from agentrl.errors import EnvError
from agentrl.sandbox.base import ExecResult
from agentrl.types import ToolCall

SOURCE = '''"""Module docstring with 1 < 2 and not this."""


def f(a, b):
    if a < b and not a == 0:
        return True
    x = a in b
    return x
'''
TASKS = Path(__file__).resolve().parents[3] / "tasks" / "swebench-local"


def mutated_lines(kind: str) -> set[str]:
    return {m.after.strip() for m in find_mutations("m.py", SOURCE) if m.kind == kind}


def test_each_mutation_kind_edits_one_line_and_keeps_the_rest() -> None:
    assert mutated_lines("flip_comparison") == {"if a <= b and not a == 0:", "if a < b and not a != 0:",
                                                "x = a not in b"}  # fmt: skip
    assert mutated_lines("swap_bool_op") == {"if a < b or not a == 0:"}
    assert mutated_lines("drop_not") == {"if a < b and a == 0:"}
    assert mutated_lines("off_by_one") == {"if a < b and not a == 1:"}
    assert mutated_lines("change_return") == {"return False", "return None"}


def test_docstrings_are_never_mutated() -> None:
    assert all(m.line > 1 for m in find_mutations("m.py", SOURCE))


def test_apply_mutation_checks_the_original_line() -> None:
    mutation = find_mutations("m.py", SOURCE)[0]
    assert apply_mutation(SOURCE, mutation) != SOURCE
    with pytest.raises(ValueError):
        apply_mutation(apply_mutation(SOURCE, mutation), mutation)


def test_unified_diff_is_git_style_and_reverses_the_mutation() -> None:
    mutation = next(m for m in find_mutations("pkg/m.py", SOURCE) if m.kind == "drop_not")
    diff = unified_diff("pkg/m.py", apply_mutation(SOURCE, mutation), SOURCE)
    assert diff.startswith("diff --git a/pkg/m.py b/pkg/m.py\n--- a/pkg/m.py\n+++ b/pkg/m.py\n@@ ")
    assert "-    if a < b and a == 0:\n+    if a < b and not a == 0:\n" in diff
    assert unified_diff("pkg/m.py", SOURCE, SOURCE) == ""


def test_test_and_config_paths_are_protected() -> None:
    for path in ("tests/test_a.py", "test_x.py", "pkg/tests/data.txt", "a_test.py", "conftest.py",
                 "sub/conftest.py", "pytest.ini", "pyproject.toml", "setup.cfg", "x.pth", ".git/config",
                 "../escape.py", "/abs.py", "sitecustomize.py"):  # fmt: skip
        assert is_protected_path(path), path
    for path in ("parse/__init__.py", "toolz/itertoolz.py", "README.rst", "testament.py"):
        assert not is_protected_path(path), path
    assert is_test_path("toolz/tests/test_itertoolz.py") and not is_test_path("toolz/itertoolz.py")


def test_filter_patch_drops_sections_touching_protected_paths() -> None:
    source = unified_diff("lib.py", "a = 1\n", "a = 2\n")
    tests = unified_diff("tests/test_lib.py", "assert a == 2\n", "assert True\n")
    conftest = (
        "diff --git a/conftest.py b/conftest.py\nnew file mode 100644\n--- /dev/null\n+++ b/conftest.py\n"
    )
    rename = "diff --git a/lib2.py b/tests/lib2.py\nrename from lib2.py\nrename to tests/lib2.py\n"
    kept, dropped = filter_patch(source + tests + conftest + rename)
    assert kept == source
    assert dropped == ("tests/test_lib.py", "conftest.py", "tests/lib2.py")
    assert len(split_patch(source + tests)) == 2
    assert section_paths(rename) == ("lib2.py", "tests/lib2.py")


def test_status_map_uses_the_official_pytest_parser() -> None:
    log = "PASSED t.py::test_a\nFAILED t.py::test_b - assert 1 == 2\nSKIPPED [1] t.py:3: no\n"
    log += "ERROR t.py::test_c\n"
    assert status_map(log) == {"t.py::test_a": "PASSED", "t.py::test_b": "FAILED", "t.py::test_c": "ERROR"}


def test_validate_record_accepts_json_encoded_test_lists() -> None:
    record = {"instance_id": "x__y-1", "repo": "x/y", "problem_statement": "p", "patch": "d",
              "FAIL_TO_PASS": '["t.py::a"]', "PASS_TO_PASS": "[]"}  # fmt: skip
    checked = validate_record(record)
    assert checked["FAIL_TO_PASS"] == ["t.py::a"] and checked["PASS_TO_PASS"] == []
    assert checked["id"] == "x__y-1" and checked["test_patch"] == ""
    with pytest.raises(EnvError, match="FAIL_TO_PASS is empty"):
        validate_record({**record, "FAIL_TO_PASS": []})
    with pytest.raises(EnvError, match="patch"):
        validate_record({**record, "patch": ""})


def test_problem_statement_names_the_failing_tests_and_their_assertions() -> None:
    log = (
        "____ TestX.test_a[1] ____\n\n    def test_a():\n>       assert f(1) == 2\nE       assert 3 == 2\n"
        "=== short test summary info ===\nFAILED t.py::TestX::test_a[1] - assert 3 == 2\n"
    )
    assert failure_messages(log) == {"TestX.test_a[1]": ["assert 3 == 2"]}
    assert section_title("t.py::TestX::test_a[1]") == "TestX.test_a[1]"
    text = problem_statement("pypi/x", "1.0", ["t.py::TestX::test_a[1]"], log)
    assert "- t.py::TestX::test_a[1]\n      assert 3 == 2" in text and "do not change them" in text


def test_command_observation_is_mini_swe_agent_style_and_truncated() -> None:
    result = ExecResult(2, "x" * 5000, "", False, False, 0.1, False)
    text = command_observation(result, 1000)
    assert text.startswith("<returncode>2</returncode>\n<warning>The output was too long")
    assert "bytes truncated" in text and len(text) < 1500
    timed_out = command_observation(ExecResult(137, "", "", True, False, 30.0, False), 1000)
    assert "timed out" in timed_out and timed_out.endswith("<output>\n</output>")


def test_tool_arguments_are_checked() -> None:
    schema = {"path": str, "start": int, "end": int}
    assert _arguments(ToolCall("view", {"path": "a", "start": "3", "end": -1}), schema) == {
        "path": "a", "start": 3, "end": -1}  # fmt: skip
    assert _arguments(ToolCall("view", {"path": "a", "start": True, "end": 1}), schema) is None
    assert _arguments(ToolCall("view", {"path": "a"}), schema) is None


def test_images_come_from_repo_and_version_or_the_record() -> None:
    assert image_of({"repo": "pypi/parse", "version": "1.22.4"}) == "agentrl/swebench-parse:1.22.4"
    assert image_of({"repo": "a/b", "image": "registry/x:1"}) == "registry/x:1"
    assert project_of({"repo": "pypi/toolz"}).test_targets == ("toolz/tests",)
    with pytest.raises(EnvError, match="unknown repo"):
        project_of({"repo": "django/django"})


def test_the_shipped_task_set_has_the_official_schema() -> None:
    records = [json.loads(line) for split in ("train", "heldout")
               for line in (TASKS / f"{split}.jsonl").read_text().splitlines()]  # fmt: skip
    assert len(records) >= 30
    assert len({record["repo"] for record in records}) >= 3
    assert len({record["instance_id"] for record in records}) == len(records)
    for record in records:
        assert set(OFFICIAL_FIELDS) <= set(record), record["instance_id"]
        assert record["id"] == record["instance_id"] and split_of(record["id"]) == record["split"]
        assert record["FAIL_TO_PASS"] and not set(record["FAIL_TO_PASS"]) & set(record["PASS_TO_PASS"])
        assert record["test_patch"] == "" and record["patch"].startswith("diff --git a/")
        assert not filter_patch(record["patch"])[1], "a gold patch must not touch protected paths"
        assert record["repo"].removeprefix("pypi/") in PROJECTS
    manifest = json.loads((TASKS / "manifest.json").read_text())
    assert sum(manifest["counts"].values()) == len(records)


def test_the_registered_id_makes_the_env_without_docker() -> None:
    from agentrl_swebench.env import SWEBenchEnv

    from agentrl.env import make

    made = make("agentrl/SWEBench-v0", max_steps=3, partial_credit=True)
    assert isinstance(made, SWEBenchEnv) and made.max_steps == 3 and made.partial_credit
    assert [spec["function"]["name"] for spec in made.tools] == ["bash", "view", "str_replace", "submit"]
