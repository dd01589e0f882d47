"""Load a `bench/` script as a module by its file name, for the unit tests of its pure parts.

The scripts are not a package (each runs as `python bench/NAME.py`), so tests load them from their path.
This is a test helper, not a test module.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[1] / "bench"


def load_bench(name: str) -> ModuleType:
    """bench/NAME.py, executed afresh as the module `NAME_bench`."""
    spec = importlib.util.spec_from_file_location(f"{name}_bench", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None, f"no bench/{name}.py"
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
