"""The run config's reference (`agentrl.config_reference`, docs/config.md) and `agentrl config show`: every
key has text in its class's docstring, the committed page is what the config makes, and each value's source
is the default, the run config file or an override."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

from agentrl.config import RunConfig
from agentrl.config_reference import field_docs, provenance, reference_markdown, reference_rows, undocumented

ROOT = Path(__file__).resolve().parents[2]


def test_every_key_of_the_run_config_is_documented_in_its_class() -> None:
    rows = reference_rows(RunConfig)
    assert len(rows) > 100 and undocumented(rows) == [], "give these fields a 'name: text' docstring line"
    keys = [row.key for row in rows]
    assert "rollout.context.policy" in keys and "optim.lr" in keys and len(set(keys)) == len(keys)


def test_docs_config_md_is_what_the_config_makes() -> None:
    committed = (ROOT / "docs" / "config.md").read_text()
    assert committed == reference_markdown(RunConfig), "run: agentrl config reference --write docs/config.md"


def test_field_docs_read_name_lines_joint_names_and_continuations() -> None:
    @dataclasses.dataclass
    class Example:
        """Example.

        alpha, beta: two at once,
                     continued here
        gamma:       one
        not_a_field: ignored
        """

        alpha: int = 0
        beta: int = 0
        gamma: int = 0

    assert field_docs(Example) == {
        "alpha": "two at once, continued here",
        "beta": "two at once, continued here",
        "gamma": "one",
    }


def test_provenance_names_the_default_the_file_and_the_override() -> None:
    effective = {"a": {"b": 1, "c": 2, "d": {"e": 3}}, "f": 4}
    found = provenance(effective, {"a": {"c": 9}}, "file configs/x.yaml", ["a.d=5"])
    assert found == [
        ("a.b", 1, "default"),
        ("a.c", 2, "file configs/x.yaml"),
        ("a.d.e", 3, "override"),
        ("f", 4, "default"),
    ]


def test_config_show_prints_each_value_with_its_source() -> None:
    shown = subprocess.run(
        [sys.executable, "-m", "agentrl.cli.main", "config", "show", "--task", "calc-chain",
         "rollout.context.policy=window"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert 'rollout.context.policy = "window"    # override' in lines
    assert "env.kwargs.parts = 3    # file configs/calc-chain.yaml" in lines
    assert "rollout.context.keep_turns = 4    # default" in lines
    assert 'task = "calc-chain"    # --task' in lines
