"""Docs that cannot drift from the code or from the measurements.

- docs/design.md's repository layout names every top-level module and package of `agentrl/`; a package
  whose layout line lists its `.py` files lists all of them (credit's estimator files aside: the line says
  "one estimator per file"); every page in docs/ is named on the `docs/` line.
- docs/design.md's CLI list names every built-in `agentrl` subcommand the parser has.
- A measured figure is traceable: in README.md and docs/*.md, a paragraph (or list item, or table with
  the paragraph that introduces it) that quotes a performance figure (a ratio such as `6.8x` or `4.5×`, a
  rate in tokens/s, steps/s or episodes/s, a latency in ms) in a measured context (the word "measured"/
  "measures", or a `bench/*.py` or `studies/scripts/*.py` script named) must cite a results file, of
  bench/results/ or of a study's studies/<name>/results/ (`.json`, `.jsonl`, `.md`, `.png`, `.csv`), that
  exists, or say "not backed: no results file in bench/results/". Fenced code blocks are not read; every
  results file the docs cite must exist.
"""

from __future__ import annotations

import re
from pathlib import Path

from agentrl.cli.main import SUBCOMMANDS, build_parser, plugin_entry_points
from agentrl.credit import ESTIMATORS

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "design.md"
PACKAGE = ROOT / "agentrl"

FIGURE = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?:x\b|×| ?tokens/s| ?tok/s| ?steps/s| ?episodes/s| ?ms\b)")
MEASURED = re.compile(r"\bmeasur|\b(?:bench|studies/scripts)/\w+\.py", re.IGNORECASE)
CITATION = re.compile(r"(?:bench|studies/[\w-]+)/results/[\w./<>${}*-]+?\.(?:json|jsonl|md|png|csv)\b")
TEMPLATE = re.compile(r"[<>${}*]")  # a path pattern (`cold_start_<env>.json`), not a file
NOT_BACKED = "not backed: no results file in bench/results/"
FENCE = re.compile(r"^```.*?^```$", re.MULTILINE | re.DOTALL)
ITEM = re.compile(r"^(?:[-*]|\d+\.) ")


def layout_block() -> str:
    section = DESIGN.read_text(encoding="utf-8").split("## Repository layout", 1)[1]
    return FENCE.search(section).group(0)  # type: ignore[union-attr]


def layout_lines() -> dict[str, str]:
    """The layout's lines under `agentrl/`, keyed by their first word (`env/`, `types.py`, ...), each with
    its continuation lines; top-level module lines (several names, no description) give one entry per name."""
    lines: dict[str, str] = {}
    key = ""
    for line in layout_block().splitlines():
        if line.startswith("  ") and not line.startswith("   "):
            words = line.split()
            key = words[0]
            lines[key] = line
        elif line.startswith("   ") and key:
            lines[key] += " " + line.strip()
        else:
            key = ""
    return lines


def test_the_layout_names_every_top_level_module_and_package() -> None:
    block = layout_block()
    named = set(re.findall(r"[\w.]+/?", block))
    entries = [p for p in PACKAGE.iterdir() if p.name not in {"__init__.py", "__pycache__"}]
    wanted = {p.name + "/" if p.is_dir() else p.name for p in entries if p.is_dir() or p.suffix == ".py"}
    missing = sorted(wanted - named)
    assert missing == [], f"docs/design.md's repository layout lacks {missing}"


def test_a_package_line_that_lists_files_lists_all_of_them() -> None:
    estimator_modules = {entry.fn.__module__.rsplit(".", 1)[1] + ".py" for entry in ESTIMATORS.values()}
    missing = {}
    for key, line in layout_lines().items():
        listed = set(re.findall(r"[\w]+\.py", line))
        if not key.endswith("/") or not listed - {key}:
            continue
        folder = PACKAGE / key.rstrip("/")
        modules = {p.name for p in folder.glob("*.py") if p.name != "__init__.py"}
        if key == "credit/":
            modules -= estimator_modules
        if modules - listed:
            missing[key] = sorted(modules - listed)
    assert missing == {}, f"docs/design.md's repository layout lacks these files: {missing}"


def test_the_layout_names_every_page_in_docs() -> None:
    lines = layout_block().splitlines()
    start = next(index for index, line in enumerate(lines) if line.startswith("docs/"))
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith(" ")), len(lines))
    named = set(re.findall(r"[\w]+\.md", " ".join(lines[start:end])))
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    missing = sorted(pages - named - {"design.md", "index.md"})  # design.md is "this page"
    assert missing == [], f"docs/design.md's layout line for docs/ lacks {missing}"


def test_the_cli_list_names_every_subcommand_of_the_parser() -> None:
    text = DESIGN.read_text(encoding="utf-8")
    sentence = re.search(r"dispatches to one module per subcommand:(.*?)\. ", text, re.DOTALL)
    assert sentence, "docs/design.md no longer has its CLI list ('dispatches to one module per subcommand:')"
    listed = set(re.findall(r"`([\w-]+)`", sentence.group(1)))
    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices  # noqa: SLF001
    plugins = {entry_point.name for entry_point in plugin_entry_points()}
    builtin = set(commands) - plugins
    assert builtin == set(SUBCOMMANDS)
    missing = sorted(builtin - listed)
    assert missing == [], f"docs/design.md's CLI list lacks {missing}"
    assert sorted(listed - builtin) == [], "docs/design.md lists subcommands the CLI does not have"


def paragraphs(text: str) -> list[tuple[int, str]]:
    """(first line number, text) of each paragraph; a list item at the margin starts a new one."""
    text = FENCE.sub(lambda fence: "\n" * fence.group(0).count("\n"), text)
    found: list[tuple[int, list[str]]] = []
    current: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        starts = not line.strip() or line.startswith("#") or ITEM.match(line)
        if starts and current:
            found.append((number - len(current), current))
            current = []
        if line.strip() and not line.startswith("#"):
            current.append(line)
    if current:
        found.append((len(text.splitlines()) - len(current) + 1, current))
    return [(number, "\n".join(lines)) for number, lines in found]


def cited(paragraph: str) -> list[str]:
    """The results files the text names (path patterns left out)."""
    return [path for path in CITATION.findall(paragraph) if not TEMPLATE.search(path)]


def unbacked_figures(path: Path, root: Path = ROOT) -> list[str]:
    """`file:line: figures` for each paragraph that quotes measured figures with no results file."""
    problems = []
    found = paragraphs(path.read_text(encoding="utf-8"))
    for index, (number, paragraph) in enumerate(found):
        figures = FIGURE.findall(paragraph)
        if not figures or not MEASURED.search(paragraph) or NOT_BACKED in paragraph:
            continue
        context = paragraph
        if paragraph.startswith("|") and index:  # a table: the paragraph that introduces it counts
            context = found[index - 1][1] + "\n" + paragraph
        if not cited(context):
            problems.append(f"{path.relative_to(root)}:{number}: {figures}")
    return problems


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_every_measured_figure_cites_a_results_file() -> None:
    problems = [problem for doc in documents() for problem in unbacked_figures(doc)]
    assert problems == [], (
        "measured figures without a results file (bench/results/, studies/<name>/results/) in the same "
        "paragraph (cite the file, or write "
        f"'{NOT_BACKED}'):\n" + "\n".join(problems)
    )


def test_every_cited_results_file_exists() -> None:
    missing = sorted(
        {
            f"{doc.relative_to(ROOT)}: {path}"
            for doc in documents()
            for path in cited(FENCE.sub("", doc.read_text(encoding="utf-8")))
            if not (ROOT / path).is_file()
        }
    )
    assert missing == [], "docs cite results files that do not exist:\n" + "\n".join(missing)


def test_the_figure_rule_catches_an_unbacked_measurement(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "Measured with `bench/engine.py`: 129.6 tokens/s, 6.8x the naive loop.\n\n"
        "`bench/fork.py` (`bench/results/fork.json`): maze 0.08 ms.\n\n"
        "`studies/scripts/credit_gym.py` (`studies/credit-gym/results/credit_gym.json`): 2.1x.\n\n"
        "`studies/scripts/credit_gym.py` on level 3: 3.5x, no file.\n\n"
        "A target of 2x, not measured yet; not backed: no results file in bench/results/.\n\n"
        "```\nmeasured 3.0x in a code block\n```\n\n"
        "A plan: 4 x 48 tokens per step.\n"
    )
    assert unbacked_figures(page, root=tmp_path) == [
        "page.md:1: ['129.6 tokens/s', '6.8x']",
        "page.md:7: ['3.5x']",
    ]


def test_readme_stays_a_front_page() -> None:
    """README is the front page: at most 220 lines; generated tables live in docs/ (issue 55), and a study's
    generated headline there is a few lines of words (`agentrl study report --headline`)."""
    readme = (ROOT / "README.md").read_text().splitlines()
    assert len(readme) <= 220, f"README.md has {len(readme)} lines; move detail to docs/ and link it"
    blocks = [line for line in readme if line.startswith("<!--") and ":start" in line]
    assert not [line for line in blocks if ":headline:start" not in line], "tables belong in docs/"
    for start in blocks:  # a study's headline: a few lines of words (issue 53), never a table
        block = readme[readme.index(start) + 1 : readme.index(start.split(":start")[0] + ":end -->")]
        assert len(block) <= 8 and not [line for line in block if line.startswith("|")], start
