"""The viewer's search page and streamed export of one run.

    /runs/{run}/search?task=&q=&page=&limit=&sort=&order=   episodes by task id (or id prefix), sortable;
                                                           turns whose text or observation contain q
    /runs/{run}/export.jsonl                               the run's episodes as `agentrl runs export`
                                                           writes them (JSON lines), streamed in batches

What this is: the page data (`search_context`), the text around a match (`snippet`) and the export's lines
(`export_lines`), over the paged readers of `agentrl.store.pages`; template `SEARCH` (registered as
"search.html"). What this is not: a full-text index: text search is a scan of the run's turns (see
`pages.turns_with_text`), so a rare word in a large run takes a while, and it is not ranked.
"""

# ruff: noqa: E501 (HTML lines are kept whole)
from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from agentrl.store import pages
from agentrl.store.repository import Store
from agentrl.ui.export import plain
from agentrl.ui.paging import Pager, Sorter

SNIPPET_CHARS = 80  # of context either side of a match


def snippet(text: str, needle: str, width: int = SNIPPET_CHARS) -> str:
    """The part of `text` around the first (case-insensitive) match of `needle`, with "…" where cut;
    the start of the text when there is no match."""
    at = text.lower().find(needle.lower()) if needle else -1
    if at < 0:
        return text[: 2 * width] + ("…" if len(text) > 2 * width else "")
    start, end = max(0, at - width), min(len(text), at + len(needle) + width)
    return ("…" if start else "") + text[start:end] + ("…" if end < len(text) else "")


def search_context(
    store: Store, run: Mapping[str, Any], task: str, text: str, window: pages.Window
) -> dict[str, Any]:
    """The search page: episodes of a task id (sortable, counted) and turns containing a text (paged)."""
    path, params = f"/runs/{run['id']}/search", {"task": task, "q": text}
    context: dict[str, Any] = {"run": run, "task": task, "q": text, "episodes": None, "hits": None}
    if task:
        episodes, total = pages.episodes_by_task(store, str(run["id"]), task, window)
        order = {"sort": window.sort, "order": "desc" if window.descending else "asc"}
        context["episodes"] = episodes
        context["pager"] = Pager(path, window, total, "episodes", {**params, **order})
        context["sorter"] = Sorter(path, window.sort or "id", window.descending, params)
    elif text:
        hits, more = pages.turns_with_text(store, str(run["id"]), text, window)
        context["hits"] = [{**hit, "snippet": snippet(_matched(hit["turn"], text), text)} for hit in hits]
        context["pager"] = Pager(path, window, None, "turns", params, more=more)
    return context


def _matched(turn: Mapping[str, Any], text: str) -> str:
    """The turn's assistant text if it holds the match, else its observation."""
    return str(turn["text"]) if text.lower() in str(turn["text"]).lower() else str(turn["observation"])


def export_lines(store: Store, run_id: str) -> Iterator[str]:
    """One JSON line per episode, the records `agentrl runs export --format jsonl` writes."""
    for episode in pages.iter_episodes(store, run_id):
        yield json.dumps(plain(episode)) + "\n"


SEARCH = """{% extends "base.html" %}{% from "paging.html" import page_links, sort_header %}
{% block title %}search {{ run.name }}{% endblock %}
{% block crumbs %} › <a href="/runs/{{ run.id }}">{{ run.name }}</a> › search{% endblock %}
{% block body %}<h1>Search {{ run.name }}</h1>
{% include "search_form.html" %}
{% if episodes is not none %}
<h2>Episodes of task <code>{{ task }}</code>…</h2>{{ page_links(pager) }}
<table id="task-results"><tr>{{ sort_header(sorter, "id", "episode") }}<th>step</th><th>split</th>{{ sort_header(sorter, "task", "task") }}
{{ sort_header(sorter, "outcome", "outcome") }}{{ sort_header(sorter, "reward", "reward") }}{{ sort_header(sorter, "turns", "turns") }}</tr>
{% for e in episodes %}<tr><td><a href="/runs/{{ run.id }}/episodes/{{ e.id }}">{{ e.uid }}</a></td>
<td><a href="/runs/{{ run.id }}/steps/{{ e.step }}?split={{ e.split }}">{{ e.step }}</a></td><td>{{ e.split }}</td><td>{{ e.task_id }}</td>
<td>{% if e.success %}<span class="badge ok">success</span>{% else %}<span class="badge bad">{{ "infra_error" if e.stop_reason == "infra_error" else "failed" }}</span>{% endif %}</td>
<td class="num">{{ "%.3f"|format(e.reward) }}</td><td class="num">{{ e.num_turns }}</td></tr>
{% else %}<tr><td colspan="7">no episode of this run has a task id starting with {{ task }}</td></tr>{% endfor %}
</table>
{% elif hits is not none %}
<h2>Turns containing <code>{{ q }}</code></h2>{{ page_links(pager) }}
<table id="text-results"><tr><th>episode</th><th>turn</th><th>step</th><th>task</th><th>text</th></tr>
{% for h in hits %}<tr><td><a href="/runs/{{ run.id }}/episodes/{{ h.episode.id }}#turn-{{ h.turn.index }}">{{ h.episode.uid }}</a></td>
<td class="num">{{ h.turn.index }}</td><td>{{ h.episode.step }} ({{ h.episode.split }})</td><td>{{ h.episode.task_id }}</td>
<td class="snippet"><code>{{ h.snippet }}</code></td></tr>
{% else %}<tr><td colspan="5">no turn of this run contains this text</td></tr>{% endfor %}
</table>
{% endif %}
{% endblock %}
"""
"""The `search.html` template."""

SEARCH_FORM = """<form class="search" method="get" action="/runs/{{ run.id }}/search">
<label>task id <input name="task" value="{{ task or '' }}" size="16"></label>
<label>or text <input name="q" value="{{ q or '' }}" size="24"></label> <button type="submit">search</button>
· <a href="/runs/{{ run.id }}/export.jsonl" download>export episodes (JSONL)</a>
· or <code>agentrl runs export {{ run.id[:12] }} --format parquet --db {{ store_url }}</code></form>
"""
"""The `search_form.html` template: the search form and the export links, on the run and search pages."""
