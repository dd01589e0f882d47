"""`agentrl search index --corpus FILE.jsonl --out DIR`: build a BM25 index for the search env.

What this is: the plugin's `agentrl` subcommand, registered under the `agentrl.cli` entry-point group (see
this package's pyproject.toml); `agentrl` calls `add_parser` when it builds its command line. `index` runs
the indexer (`agentrl_search.retriever.build_index`): it reads `{"id", "title", "text"}` lines, writes a
bm25s index plus the passages to DIR, and prints one JSON object {passages, bm25s_version, stopwords,
seconds}.

What this is not: the indexer itself (imported when the subcommand runs, so `agentrl --help` stays quick),
or the sandbox image that serves an index (`SEARCH_CORPUS=FILE.jsonl bash sandboxes/search/build.sh` bakes a
corpus's index into it).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from agentrl.errors import ConfigError


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("search", help="search env: build a retrieval index")
    actions = parser.add_subparsers(dest="action", required=True)
    index = actions.add_parser("index", help="index a JSONL corpus of {id, title, text} passages with BM25")
    index.add_argument("--corpus", required=True, type=Path, help="JSONL file, one passage per line")
    index.add_argument("--out", required=True, type=Path, help="index directory (created)")
    index.set_defaults(handler=run_index)


def run_index(args: argparse.Namespace) -> int:
    from agentrl_search.retriever import build_index, read_corpus

    if not args.corpus.is_file():
        raise ConfigError(f"corpus file {args.corpus} not found; give a JSONL file of id/title/text lines")
    try:
        passages = read_corpus(args.corpus)
    except ValueError as exc:
        raise ConfigError(f"{exc}; each line must be a JSON object with string id, title and text") from exc
    print(json.dumps(build_index(passages, args.out)))
    return 0
