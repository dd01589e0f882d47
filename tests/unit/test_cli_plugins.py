"""`agentrl` subcommands from plugins: agentrl/cli imports no plugin package, the installed plugins'
subcommands are listed, and a broken plugin is reported by name without breaking the other subcommands."""

from __future__ import annotations

import ast
import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest

from agentrl.cli import main as cli_main

CLI_DIR = Path(__file__).resolve().parents[2] / "agentrl" / "cli"
PLUGIN_SUBCOMMANDS = ("search", "swebench")  # from envs/search and envs/swebench


def imported_modules(source: str) -> list[str]:
    """Every module an `import` or `from ... import` statement names, wherever it sits in the file."""
    modules: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            modules += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            modules.append(node.module)
    return modules


def test_the_cli_package_imports_no_plugin_package() -> None:
    offenders = {
        path.name: [m for m in imported_modules(path.read_text()) if m.split(".")[0].startswith("agentrl_")]
        for path in sorted(CLI_DIR.glob("*.py"))
    }
    assert {name: found for name, found in offenders.items() if found} == {}


def test_the_import_scan_sees_lazy_imports() -> None:
    source = "def run():\n    from agentrl_search.retriever import build_index\n    import agentrl_web\n"
    assert imported_modules(source) == ["agentrl_search.retriever", "agentrl_web"]


def test_installed_plugin_subcommands_appear_in_agentrl_help() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "agentrl.cli.main", "--help"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    for name in PLUGIN_SUBCOMMANDS:
        assert name in done.stdout
    assert "broken plugin" not in done.stdout and not done.stderr


def test_plugin_subcommands_parse_their_own_arguments() -> None:
    args = cli_main.build_parser().parse_args(["swebench", "validate", "--workers", "3"])
    assert (args.command, args.action, args.workers) == ("swebench", "validate", 3)


def _use_cli_plugins(monkeypatch: pytest.MonkeyPatch, *entry_points: importlib.metadata.EntryPoint) -> None:
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda *, group: list(entry_points))


def test_a_broken_plugin_is_named_and_the_other_subcommands_still_work(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = importlib.metadata.EntryPoint("broken", "agentrl_unit_no_such_cli", cli_main.CLI_PLUGIN_GROUP)
    _use_cli_plugins(monkeypatch, broken)
    parser = cli_main.build_parser()
    assert "broken plugin: agentrl_unit_no_such_cli" in parser.format_help()
    assert parser.parse_args(["envs", "list"]).command == "envs"
    assert cli_main.main(["broken", "validate", "--anything"]) == 2
    stderr = capsys.readouterr().err
    assert stderr.startswith("agentrl broken: EnvPluginError: the agentrl.cli plugin 'broken'")
    assert "agentrl_unit_no_such_cli" in stderr and "Traceback" not in stderr


def test_a_plugin_clashing_with_a_builtin_is_reported_and_the_builtin_kept(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    clash = importlib.metadata.EntryPoint("envs", "agentrl.cli.envs", cli_main.CLI_PLUGIN_GROUP)
    _use_cli_plugins(monkeypatch, clash)
    args = cli_main.build_parser().parse_args(["envs", "list"])
    assert args.handler is cli_main.envs.run
    assert "plugin 'envs' (agentrl.cli.envs) failed to load" in capsys.readouterr().err
