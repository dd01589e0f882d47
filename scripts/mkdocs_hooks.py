"""mkdocs hooks of the docs site (mkdocs.yml): links from docs/ to files of the repository outside docs/.

The pages link a file as GitHub shows it, relative to docs/: a figure of a study
(`![...](../studies/credit-gym/results/credit_gym.png)`), a benchmark's result (`../bench/results/...`).
mkdocs only serves files under docs/, so for each such link whose target exists this adds the file to the
site (at the same path under the site's root) and points the link there; a link to a file that does not
exist is left alone, and `mkdocs build --strict` fails on it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
OUTSIDE_LINK = re.compile(r"\]\(\.\./(?P<path>[^)\s#]+)")


def outside_targets() -> list[str]:
    """Repository paths (relative to the root) that pages in docs/ link to with `../`."""
    targets = {m["path"] for page in DOCS.glob("*.md") for m in OUTSIDE_LINK.finditer(page.read_text())}
    return sorted(path for path in targets if (ROOT / path).is_file())


def on_files(files: Files, config: Any) -> Files:
    for path in outside_targets():
        files.append(File(path, str(ROOT), config["site_dir"], config["use_directory_urls"]))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    if "/" in page.file.src_uri:  # only the pages at the top of docs/ link with ../
        return markdown

    def relink(match: re.Match[str]) -> str:
        path = match["path"]
        return f"]({path}" if (ROOT / path).is_file() else match[0]

    return OUTSIDE_LINK.sub(relink, markdown)
