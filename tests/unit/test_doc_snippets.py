"""Every code block of docs/ that a reader copies is accounted for, and what it shows works.

docs/environments.md has its own tests (tests/unit/test_environments_doc.py checks its quotes,
tests/smoke/test_envs_new.py runs its shell blocks); docs/credit.md's `json credit-example` blocks are run
by tests/unit/test_credit_doc_examples.py. Every other fenced block of every page is one of:

- `python`: runs as it stands, imports included, in a fresh interpreter (a block that needs an input the
  page defined in prose gets it from `GIVEN`);
- `python signature`: a method's signature, whose parameters must be those of `agentrl.env.Env`'s method;
- `toml`: parses, and the entry-point groups it names are agentrl's;
- `bash`: shell commands, each checked as below;
- `text`: a diagram or a listing, nothing to run.

A shell command, in a fenced `bash` block or an indented block of any page: an `agentrl` command parses
with the CLI's own parser, and its run config (with the command's overrides) loads unless the command holds a
placeholder the reader fills in (`TASK`, `HOST:PORT`), and so does `torchrun ... -m agentrl.cli.main ...`;
`python SCRIPT` names a
file that exists and `python -m MODULE` a module that imports; `make TARGET` a target of the Makefile;
`pytest PATH` tests that exist; `ray` an installed Ray; a plugin install is the one install line
(`agentrl.devtools.scaffold.INSTALL`). Any other command fails the test until it is added here. The one
install line is also the one in `agentrl envs new`'s printout and in the README a new plugin gets.
README.md's commands are run, in order, by tests/smoke/test_walkthrough.py.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import json
import re
import shlex
import subprocess
import sys
import tomllib
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path

import pytest
from doc_blocks import Block, commands, doc_blocks, indented_blocks

from agentrl.cli.main import CLI_PLUGIN_GROUP, build_parser, main
from agentrl.env import Env
from agentrl.env.registration import PLUGIN_GROUP
from agentrl.harness.runner import HarnessContext

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted((ROOT / "docs").glob("*.md"))
OWN_TESTS = {"environments.md"}  # run by its own tests
CREDIT_EXAMPLE = "json credit-example"  # run by tests/unit/test_credit_doc_examples.py


def _credit_records() -> str:
    page = ROOT / "docs" / "credit.md"
    example = next(json.loads(b.text) for b in doc_blocks(page) if b.info == "credit-example")
    return f"records = {example['records']!r}\n"


GIVEN = {"credit.md": _credit_records}  # what a page's block uses that the page defines in prose
WRAPPERS = {"nice", "time", "timeout"}  # run the command that follows them
SHELL = {"cd", "for", "done", "export", "cp", "docker", "docker-compose"}  # nothing to check
PLACEHOLDER = re.compile(r"[A-Z][A-Z_]*(?::[A-Z_]+)?")  # what the reader fills in: TASK, HOST:PORT
INSTALL_LINE = re.compile(r"^(?:\.venv/bin/)?pip install -e (\S+) --no-deps --no-build-isolation$")


def fenced() -> list[tuple[str, int, Block]]:
    return [
        (doc.name, index, block)
        for doc in DOCS
        if doc.name not in OWN_TESTS
        for index, block in enumerate(doc_blocks(doc))
        if f"{block.lang} {block.info}".strip() != CREDIT_EXAMPLE
    ]


def of_kind(kind: str) -> list[tuple[str, int, Block]]:
    return [item for item in fenced() if f"{item[2].lang} {item[2].info}".strip() == kind]


def ids(item: tuple[str, int, Block]) -> str:
    return f"{item[0]}#{item[1]}"


def test_every_fenced_block_is_of_a_kind_this_test_runs() -> None:
    kinds = {"python", "python signature", "toml", "bash", "text"}
    unaccounted = [ids(item) for item in fenced() if f"{item[2].lang} {item[2].info}".strip() not in kinds]
    assert unaccounted == [], "give these blocks one of the kinds in this module's docstring"


@pytest.mark.parametrize("item", of_kind("python"), ids=ids)
def test_a_python_block_runs_as_it_stands(item: tuple[str, int, Block], tmp_path: Path) -> None:
    page, _, block = item
    given = GIVEN[page]() if page in GIVEN else ""
    done = subprocess.run(
        [sys.executable, "-c", given + block.text],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"{ids(item)}:\n{block.text}\n{done.stderr[-3000:]}"


def test_the_harness_quick_start_uses_only_what_a_harness_gets(tmp_path: Path) -> None:
    block = next(b for _, _, b in of_kind("python") if b.text.startswith("# my_agent.py"))
    (tmp_path / "my_agent.py").write_text(block.text)
    used = set(re.findall(r"\bctx\.(\w+)", block.text))
    known = {field.name for field in fields(HarnessContext)} | set(dir(HarnessContext))
    assert used and used <= known, f"HarnessContext has no {sorted(used - known)}"
    assert "rollout.harness.target=my_agent:play" in (ROOT / "docs" / "harness.md").read_text()


@pytest.mark.parametrize("item", of_kind("python signature"), ids=ids)
def test_a_signature_block_has_the_parameters_of_the_env_method(item: tuple[str, int, Block]) -> None:
    function = ast.parse(item[2].text.rstrip() + "\n    ...\n").body[0]
    assert isinstance(function, ast.FunctionDef)
    arguments = function.args
    shown = [a.arg for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]]
    actual = list(inspect.signature(getattr(Env, function.name)).parameters)
    assert shown == actual


@pytest.mark.parametrize("item", of_kind("toml"), ids=ids)
def test_a_toml_block_parses_and_names_agentrl_entry_point_groups(item: tuple[str, int, Block]) -> None:
    data = tomllib.loads(item[2].text)
    groups = set(data.get("project", {}).get("entry-points", {}))
    assert groups <= {PLUGIN_GROUP, CLI_PLUGIN_GROUP}


def shell_commands() -> list[tuple[str, str]]:
    found = []
    for doc in DOCS:
        if doc.name in OWN_TESTS:
            continue
        texts = [b.text for b in doc_blocks(doc) if b.lang == "bash"] + indented_blocks(doc)
        found += [(doc.name, command) for text in texts for command in commands(text)]
    return found


def command_problem(command: str) -> str | None:
    """Why the command would not work as the page shows it; None when it is fine."""
    words = shlex.split(command)
    while words and re.match(r"^[A-Z_]+=", words[0]):  # VAR=value before the command
        words = words[1:]
    words = strip_wrappers(words)
    program, arguments = words[0], [word for word in words[1:] if word != "..."]  # "...": elided
    if program in {"agentrl", ".venv/bin/agentrl"}:
        return agentrl_problem(arguments)
    if program in {"torchrun", ".venv/bin/torchrun"}:
        if "agentrl.cli.main" not in arguments:
            return "torchrun runs something other than `-m agentrl.cli.main`"
        return agentrl_problem(arguments[arguments.index("agentrl.cli.main") + 1 :])
    if program in {"python", ".venv/bin/python"}:
        if arguments[:2] == ["-m", "agentrl.cli.main"]:
            return agentrl_problem(arguments[2:])
        if arguments[0] == "-m":
            found = subprocess.run([sys.executable, "-c", f"import {arguments[1]}"], capture_output=True)
            return None if found.returncode == 0 else f"no module {arguments[1]}"
        return None if (ROOT / arguments[0]).is_file() else f"no script {arguments[0]}"
    if program in {"pip", ".venv/bin/pip"}:
        if "-e" in arguments and not INSTALL_LINE.match(command):
            return "not the one plugin install line: pip install -e PATH --no-deps --no-build-isolation"
        return None
    if program == "make":
        makefile = (ROOT / "Makefile").read_text()
        missing = [t for t in arguments if not re.search(rf"^{re.escape(t)}:", makefile, re.M)]
        return f"no make target {missing}" if missing else None
    if program in {"pytest", ".venv/bin/pytest"}:
        paths = [word.split("::")[0] for word in arguments if "/" in word and not word.startswith("-")]
        missing = [path for path in paths if not (ROOT / path).exists()]
        return f"no test file {missing}" if missing else None
    if program == "ray":  # the Ray CLI: `make setup` installs ray in .venv
        return None if importlib.util.find_spec("ray") else "ray is not installed (make setup installs it)"
    if program == "bash":
        return None if (ROOT / arguments[0]).is_file() else f"no script {arguments[0]}"
    return None if program in SHELL else f"a command this test does not know: {program}"


def strip_wrappers(words: list[str]) -> list[str]:
    """The command under `nice [-n N]`, `time` or `timeout DURATION`."""
    while words and words[0] in WRAPPERS:
        wrapper, words = words[0], words[1:]
        if wrapper == "nice" and words[:1] == ["-n"]:
            words = words[2:]
        elif wrapper == "timeout":
            words = words[1:]
    return words


def agentrl_problem(arguments: Sequence[str]) -> str | None:
    """None when `agentrl ARGUMENTS` parses and, for a command with a run config, the config loads."""
    from agentrl.cli.runconfig import load_run_config
    from agentrl.cli.sft import flag_overrides

    try:
        args = build_parser().parse_args(list(arguments))
    except SystemExit:
        return "the CLI's parser refuses it"
    if not hasattr(args, "overrides") or not (getattr(args, "task", None) or getattr(args, "config", None)):
        return None
    if any("$" in word or PLACEHOLDER.fullmatch(word) for word in arguments):
        return None  # a shell variable or a placeholder (TASK, URL): the parse is all that can be checked
    overrides = [*args.overrides, *(flag_overrides(args) if args.command == "sft" else [])]
    try:
        load_run_config(args, overrides)
    except Exception as exc:  # noqa: BLE001 - the message is the finding
        return f"its run config does not load: {exc}"
    return None


@pytest.mark.parametrize(("page", "command"), shell_commands(), ids=lambda value: str(value)[:60])
def test_a_shell_command_works_as_shown(page: str, command: str) -> None:
    assert command_problem(command) is None, f"{page}: {command}\n{command_problem(command)}"


def test_the_command_checker_finds_what_is_wrong() -> None:
    assert command_problem("agentrl train --task maze train.steps=1") is None
    assert command_problem("agentrl train --task maze train.no_such_key=1") is not None
    assert command_problem("agentrl trian --task maze") is not None
    assert command_problem(".venv/bin/python bench/no_such_bench.py") is not None
    assert command_problem("pip install -e hilo --no-build-isolation") is not None
    assert command_problem("pip install -e hilo --no-deps --no-build-isolation") is None
    assert command_problem("make docs") is None and command_problem("make no-such-target") is not None
    assert command_problem("curl http://example.com") is not None
    assert command_problem("torchrun --nnodes 2 -m agentrl.cli.main train --task TASK") is None
    assert command_problem("torchrun --nnodes 2 -m agentrl.cli.main trian --task TASK") is not None
    assert command_problem("nice -n 19 .venv/bin/python studies/scripts/credit_gym.py --quick") is None
    assert command_problem("nice .venv/bin/python bench/no_such_bench.py") is not None


def test_every_plugin_install_line_is_the_one_install_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from agentrl.devtools.scaffold import install_command, render_plugin

    assert main(["envs", "new", "hilo", "--dir", str(tmp_path / "hilo")]) == 0
    printed = capsys.readouterr().out
    assert f"  {install_command(tmp_path / 'hilo')}\n" in printed
    texts = {
        "README.md": (ROOT / "README.md").read_text(encoding="utf-8"),
        "envs new": printed,
        **{doc.name: doc.read_text(encoding="utf-8") for doc in DOCS},
        **{f"plugin {name}": text for name, text in render_plugin("hilo").items() if name.endswith(".md")},
    }
    lines = {
        (where, match.group(0).split(" #")[0].strip("` ").removeprefix(".venv/bin/"))
        for where, text in texts.items()
        for match in re.finditer(r"(?:\.venv/bin/)?pip install[^\n`]*?-e [^\n`)]*", text)
    }
    wrong = sorted(f"{where}: {line}" for where, line in lines if not INSTALL_LINE.match(line.strip()))
    assert lines and wrong == [], "plugin install lines that are not the one line:\n" + "\n".join(wrong)
