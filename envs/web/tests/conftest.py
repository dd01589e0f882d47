"""Pytest setup of the web envs' tests: a test fails when it leaves a file or socket unclosed
(`agentrl.devtools.leak_guard`). What this is not: a check of sandbox containers left running."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentrl.devtools.leak_guard import (  # noqa: F401  (autouse fixtures: imported to be found)
    closes_what_it_opens,
    module_closes_what_it_opens,
    unclosed_is_error,
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    unclosed_is_error(items, Path(__file__).resolve().parent)
