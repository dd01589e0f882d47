"""The layering rules of the core, checked on the source and on what an import pulls in.

- Building a run config imports no engine, kernel, env service or web framework (`agentrl.config`), and
  neither torch nor transformers (the failure names the modules that loaded them).
- The trainer reaches engines only through `PolicyEngine` and estimators only through their registry entry:
  no engine classes, no `.model` reach-ins, no peft probes, no estimator names in agentrl/trainer/.
- The sync and async loops do not import each other both ways.
- `agentrl/env` is the Env API: none of its modules imports the env service or the CLI, at module level or
  inside a function (the tools that need them live in `agentrl/devtools`).
- No import cycle among agentrl's modules, function-level imports included (`if TYPE_CHECKING:` imports
  do not run and do not count); `agentrl/agent` never imports `agentrl/harness` (the trainer picks the
  episode player and passes it down).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from agentrl.credit import ESTIMATORS, entry
from agentrl.trainer.step import PREPARATIONS

ROOT = Path(__file__).resolve().parents[2]
TRAINER = ROOT / "agentrl" / "trainer"
ENV_API = ROOT / "agentrl" / "env"
HEAVY = (
    "fastapi",
    "starlette",
    "uvicorn",
    "agentrl.service",
    "agentrl.agent.engines.hf",
    "agentrl.agent.engines.cached",
    "agentrl.agent.engines.scheduler",
    "agentrl.agent.engines.llama_kernels",
    "agentrl.agent.engines.vllm",
    "agentrl.agent.engines.openai",
)


def imported_by(module: str) -> list[str]:
    code = f"import json, sys, {module}; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return list(json.loads(out))


def test_building_a_config_imports_no_engine_kernel_service_or_web_framework() -> None:
    loaded = imported_by("agentrl.config")
    heavy = [name for name in loaded if any(name == h or name.startswith(h + ".") for h in HEAVY)]
    assert heavy == []


def import_chains(module: str, packages: Sequence[str]) -> dict[str, list[str]]:
    """For each top-level package of `packages` that `import module` loads: the chain of imports that first
    loaded it, from `module` down to the package (read from `python -X importtime`, which prints a module
    after the modules it imported, those indented one level deeper)."""
    command = [sys.executable, "-X", "importtime", "-c", f"import {module}"]
    report = subprocess.run(command, capture_output=True, text=True, check=True).stderr
    rows = [
        (len(field) - len(field.lstrip()), field.strip())
        for line in report.splitlines()
        if line.startswith("import time:") and not line.endswith("imported package")
        for field in [line.rsplit("|", 1)[1]]
    ]
    chains: dict[str, list[str]] = {}
    for index, (indent, name) in enumerate(rows):
        top = name.split(".")[0]
        if top not in packages or top in chains:
            continue
        chain = [name]
        for outer, importer in rows[index + 1 :]:
            if outer < indent:
                chain.insert(0, importer)
                indent = outer
        first = next(at for at, name in enumerate(chain) if name.split(".")[0] == top)
        chains[top] = chain[: first + 1]
    return chains


def test_a_config_loads_neither_torch_nor_transformers() -> None:
    chains = import_chains("agentrl.config", ("torch", "transformers"))
    ours = [name for name in imported_by("agentrl.config") if name.split(".")[0] == "agentrl"]
    how = "; ".join(" -> ".join(chain) for chain in chains.values())
    assert chains == {}, f"`import agentrl.config` loads {sorted(chains)} ({how}); agentrl modules: {ours}"


def trainer_sources() -> dict[str, str]:
    return {path.name: path.read_text() for path in sorted(TRAINER.glob("*.py"))}


@pytest.mark.parametrize(
    "forbidden",
    ["VLLMEngine", "HFEngine", "CachedEngine", "engine.model", "peft_config", '"igpo"', "'igpo'"],
)
def test_the_trainer_uses_engines_and_estimators_only_through_their_contracts(forbidden: str) -> None:
    assert [name for name, text in trainer_sources().items() if forbidden in text] == []


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}


def test_the_loops_do_not_import_each_other_both_ways() -> None:
    assert "agentrl.trainer.train" not in imports_of(TRAINER / "async_loop.py")
    for shared in ("step.py", "run.py"):
        assert not {"agentrl.trainer.train", "agentrl.trainer.async_loop"} & imports_of(TRAINER / shared)


def test_every_need_an_estimator_declares_has_a_preparation() -> None:
    assert entry("igpo").needs == ("answer_probs",)
    assert {need for item in ESTIMATORS.values() for need in item.needs} <= set(PREPARATIONS)


def imported_modules(path: Path) -> set[str]:
    """Every module `path` imports, anywhere in it (function bodies included), as absolute names."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
    return names


def test_the_env_api_imports_neither_the_service_nor_the_cli() -> None:
    above = ("agentrl.service", "agentrl.cli")
    found = {
        (path.name, name)
        for path in sorted(ENV_API.glob("*.py"))
        for name in imported_modules(path)
        if any(name == module or name.startswith(module + ".") for module in above)
    }
    assert sorted(found) == []
    # the detector sees an import inside a function: of `envs check`'s files (agentrl/devtools, above the
    # env layer), the one that serves imports the service, in `_serving`
    check_files = sorted((ROOT / "agentrl" / "devtools").glob("service_check*.py"))
    serving = [path.name for path in check_files if "agentrl.service" in imported_modules(path)]
    assert serving == ["service_check_play.py"]


# ---- no import cycles ---------------------------------------------------------------------------------

PACKAGE = ROOT / "agentrl"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def runtime_imports(path: Path, name: str, known: set[str]) -> set[str]:
    """The agentrl modules `path` imports at run time: module-level and function-level imports alike, not
    those under `if TYPE_CHECKING:`. `from a.b import c` counts as importing `a.b.c` when that is a module."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                base = ".".join(
                    package[: len(package) - node.level + 1] + ([node.module] if node.module else [])
                )
            found.update(f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    return {module for module in found if module in known and module != name}


def import_graph() -> dict[str, set[str]]:
    paths = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    return {name: runtime_imports(path, name, set(paths)) for name, path in paths.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while (top := stack.pop()) != node:
                component.append(top)
            if component:
                found.append(sorted([node, *component]))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_cycles_finds_a_cycle_through_a_function_level_import() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_in_agentrl_function_level_imports_included() -> None:
    assert cycles(import_graph()) == []


def test_the_agent_runner_never_imports_the_harness_package() -> None:
    """The trainer picks the episode player and passes it down; `agent/` knows only the player contract."""
    graph = import_graph()
    reaching = {m: sorted(d for d in deps if d.startswith("agentrl.harness")) for m, deps in graph.items()}
    assert {m: d for m, d in reaching.items() if m.startswith("agentrl.agent") and d} == {}
