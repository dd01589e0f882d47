"""Load a `bench/` script, or a study script of `studies/scripts/`, as a module by its file name, for the unit
tests of its pure parts.

The scripts are not a package (each runs as `python bench/NAME.py` or `python studies/scripts/NAME.py`), so
tests load them from their path. This is a test helper, not a test module.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
STUDY_SCRIPTS = ROOT / "studies" / "scripts"


def load_script(path: Path, name: str) -> ModuleType:
    """The script at `path`, executed afresh as the module `name`."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, f"no {path.relative_to(ROOT)}"
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_bench(name: str) -> ModuleType:
    """bench/NAME.py, executed afresh as the module `NAME_bench`, with bench/ on `sys.path` as when it runs
    (its `import harness` resolves)."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    return load_script(BENCH / f"{name}.py", f"{name}_bench")


def load_study_script(name: str) -> ModuleType:
    """studies/scripts/NAME.py, executed afresh as the module `NAME_study`."""
    return load_script(STUDY_SCRIPTS / f"{name}.py", f"{name}_study")
