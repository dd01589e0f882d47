"""Pytest setup of the web envs' tests: a test fails when it leaves a file or socket unclosed.

What this is: an autouse fixture that records the ResourceWarnings of each test (and of the garbage it
leaves) with `agentrl.env.checker.recording_resource_warnings` and fails the test on any, plus error
filters for those raised outside it (module-scoped fixtures closing). What this is not: a check of sandbox
containers left running (tests/conftest.py's `no_leaked_sandboxes` does that for the tests under tests/).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentrl.env.checker import recording_resource_warnings

HERE = Path(__file__).resolve().parent
UNCLOSED = ("error::ResourceWarning", "error::pytest.PytestUnraisableExceptionWarning")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Outside the fixture below (module-scoped fixtures closing, garbage collected between tests), a
    ResourceWarning is an error; raised in a finalizer, pytest reports it as an unraisable exception."""
    for item in items:
        if item.path.is_relative_to(HERE):
            for spec in UNCLOSED:
                item.add_marker(pytest.mark.filterwarnings(spec))


@pytest.fixture(autouse=True)
def closes_what_it_opens() -> Iterator[None]:
    """Fail the test when it, or the garbage it leaves, raised a ResourceWarning (a file or socket never
    closed); run with PYTHONTRACEMALLOC=20 to see where each was opened."""
    with recording_resource_warnings() as leaks:
        yield
    if leaks:
        pytest.fail(f"{len(leaks)} file(s) or socket(s) left unclosed:\n" + "\n".join(leaks), pytrace=False)


@pytest.fixture(scope="module", autouse=True)
def module_closes_what_it_opens() -> Iterator[None]:
    """After the module's own fixtures closed, collect the garbage: an unclosed file or socket in it fails
    the module's last test (through the error filters above)."""
    yield
    gc.collect()
