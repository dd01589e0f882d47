"""Pytest pieces that fail an env's tests when they leave a file or socket unclosed, for any env's conftest.

    # envs/<yours>/tests/conftest.py
    from pathlib import Path
    import pytest
    from agentrl.devtools.leak_guard import (
        closes_what_it_opens, module_closes_what_it_opens, unclosed_is_error,
    )

    def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
        unclosed_is_error(items, Path(__file__).resolve().parent)

What this is: an autouse fixture that records the ResourceWarnings of each test (and of the garbage it
leaves) with `agentrl.env.checker.recording_resource_warnings` and fails the test on any; a module-scoped one
that collects the garbage earlier modules left before the module (ignored: not the env's) and its own
after the module's fixtures closed; and the error filters for the warnings
raised outside them (a finalizer's ResourceWarning reaches pytest as an unraisable exception). What this is
not: a check of sandbox containers left running (tests/conftest.py's `no_leaked_sandboxes` does that).
"""

from __future__ import annotations

import gc
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentrl.env.checker import recording_resource_warnings

UNCLOSED = ("error::ResourceWarning", "error::pytest.PytestUnraisableExceptionWarning")


def unclosed_is_error(items: list[pytest.Item], folder: Path) -> None:
    """Outside the fixtures below (module-scoped fixtures closing, garbage collected between tests), a
    ResourceWarning in a test under `folder` is an error."""
    for item in items:
        if item.path.is_relative_to(folder):
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
    """Before the module, collect the garbage earlier modules left, its warnings ignored: it is not this
    env's (under pytest-xdist a worker runs other folders' modules first, and a socket another test left
    would otherwise fail whichever test here the collector happened to run in). After the module's own
    fixtures closed, collect its garbage: an unclosed file or socket in it fails the module's last test
    (through the error filters of `unclosed_is_error`)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
    yield
    gc.collect()
