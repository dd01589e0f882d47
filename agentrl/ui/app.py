"""The trajectory viewer: a FastAPI app serving server-rendered pages over one run store.

    /                                    runs: status, last step, best held-out success
    /runs/{run}                          reward and success curves (inline SVG), steps, metrics, config
    /runs/{run}/steps/{step}?split=&show= a step's episodes grouped by task group; show = all | failed |
                                         infra | invalid; a tree rollout's group also drawn as its tree
                                         (`tree.py`: branch points, siblings side by side)
    /runs/{run}/episodes/{id}            one episode as a chat: assistant text, tool calls, observations,
                                         per-turn reward and advantage coloured by sign, state keys, anchor
                                         group (count and links), invalid flag, infrastructure error
    /healthz                             "ok"

What this is: thin handlers that read the store (`repository`), shape the data with the pure functions of
`views.py` and render `templates.py`; every value is HTML-escaped by Jinja2's autoescaping. Serve it with
`agentrl ui` (127.0.0.1 only).

What this is not: a writer, or fast on huge runs: each page reads the whole run's episodes through
`load_episodes` (the store has no per-step reader yet). Nothing the store lacks is invented: the page says
what is missing (task prompt, first observation, sandbox exec log).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import yaml
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, PlainTextResponse
from markupsafe import Markup, escape
from sqlalchemy.engine import make_url

from agentrl.agent.parsing import parse_turn
from agentrl.errors import ConfigError, NotFound
from agentrl.store import repository
from agentrl.ui import views
from agentrl.ui.svg import line_chart
from agentrl.ui.templates import environment
from agentrl.ui.tree import group_tree

CHARTS = (
    ("reward", ("reward_mean", "eval/mean_reward")),
    ("success", ("success_rate", "eval/success_rate")),
    ("anchor hit rate", ("credit/anchor_hit_rate",)),
)
FILTER_LABELS = {
    "all": "all",
    "failed": "failed episodes",
    "infra": "infra failures",
    "invalid": "invalid actions",
}


def create_app(url: str | None = None) -> FastAPI:
    """The viewer app over the store at `url` (default: $AGENTRL_DB_URL, else sqlite:///runs/agentrl.db)."""
    templates = environment()
    templates.globals.update(signed=signed, sign=sign)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.store = repository.open_store(url)
        yield
        repository.close_store(app.state.store)

    app = FastAPI(title="agentrl viewer", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)

    def page(name: str, context: Mapping[str, Any], status: int = 200) -> HTMLResponse:
        return HTMLResponse(templates.get_template(name).render(**context), status_code=status)

    @app.exception_handler(NotFound)
    async def not_found(_request: Request, exc: NotFound) -> HTMLResponse:
        return page("error.html", {"message": str(exc)}, status=404)

    @app.get("/healthz", response_class=PlainTextResponse)
    def healthz() -> str:
        return "ok"

    @app.get("/", response_class=HTMLResponse)
    def runs_page(request: Request) -> HTMLResponse:
        return page("runs.html", runs_context(request.app.state.store))

    @app.get("/runs/{run_id}", response_class=HTMLResponse)
    def run_page(request: Request, run_id: str) -> HTMLResponse:
        return page("run.html", run_context(request.app.state.store, run_id))

    @app.get("/runs/{run_id}/steps/{step}", response_class=HTMLResponse)
    def step_page(
        request: Request, run_id: str, step: int, split: str = "train", show: str = "all"
    ) -> HTMLResponse:
        return page("step.html", step_context(request.app.state.store, run_id, step, split, show))

    @app.get("/runs/{run_id}/episodes/{episode_id}", response_class=HTMLResponse)
    def episode_page(request: Request, run_id: str, episode_id: int) -> HTMLResponse:
        return page("episode.html", episode_context(request.app.state.store, run_id, episode_id))

    return app


# --- page data (plain functions over the store's readers) --------------------------------------------


def runs_context(store: repository.Store) -> dict[str, Any]:
    rows = []
    for run in repository.list_runs(store):
        metrics = repository.load_metrics(store, run["id"])
        rows.append(
            {
                **run,
                "steps": views.last_step(metrics),
                "best": views.best_value(views.metric_series(metrics)),
                "created": run["created_at"].strftime("%Y-%m-%d %H:%M"),
            }
        )
    return {"runs": rows, "store_url": make_url(store.url).render_as_string(hide_password=True)}


def find_run(store: repository.Store, run_id: str) -> Mapping[str, Any]:
    try:
        return views.find_run(repository.list_runs(store), run_id)
    except ConfigError as exc:
        raise NotFound(str(exc)) from exc


def run_context(store: repository.Store, run_id: str) -> dict[str, Any]:
    run = find_run(store, run_id)
    series = views.metric_series(repository.load_metrics(store, run["id"]))
    charts = [line_chart({name: series.get(name, []) for name in names}, title) for title, names in CHARTS]
    return {
        "run": run,
        "charts": charts,
        "steps": views.step_summaries(repository.load_episodes(store, run["id"])),
        "metrics": views.summarise_metrics(series),
        "config": yaml.safe_dump(run["config"], sort_keys=False),
    }


def step_context(store: repository.Store, run_id: str, step: int, split: str, show: str) -> dict[str, Any]:
    run = find_run(store, run_id)
    if show not in views.FILTERS:
        raise NotFound(f"unknown filter {show!r}; use one of {', '.join(views.FILTERS)}")
    episodes = [
        e for e in repository.load_episodes(store, run["id"]) if e["step"] == step and e["split"] == split
    ]
    if not episodes:
        raise NotFound(f"run {run['name']} has no {split} episodes at step {step}")
    kept = [{**e, "invalid": views.invalid_turns(e)} for e in episodes if views.keep(e, show)]
    groups = views.group_by_task(kept)
    whole = views.group_by_task(episodes)  # a tree is drawn whole, whatever the filter keeps
    return {
        "run": run,
        "step": step,
        "split": split,
        "show": show,
        "filters": list(FILTER_LABELS.items()),
        "groups": groups,
        "trees": {group_id: group_tree(whole[group_id]) for group_id in groups},
        "shown": len(kept),
        "total": len(episodes),
    }


def episode_context(store: repository.Store, run_id: str, episode_id: int) -> dict[str, Any]:
    run = find_run(store, run_id)
    episodes = repository.load_episodes(store, run["id"])
    episode = next((e for e in episodes if e["id"] == episode_id), None)
    if episode is None:
        raise NotFound(f"run {run['name']} has no episode {episode_id}")
    same_step = [e for e in episodes if e["step"] == episode["step"] and e["split"] == episode["split"]]
    return {
        "run": run,
        "e": episode,
        "anchors": turn_anchors(episode, views.anchor_groups(same_step)),
        "calls": {turn["index"]: tool_calls(turn["text"]) for turn in episode["turns"]},
    }


def tool_calls(text: str) -> dict[str, Any]:
    """The turn's tool calls re-parsed from its stored text with the runner's own parser (the store keeps
    only the first call's name): [(name, arguments as JSON)] and the parse error, if any."""
    action = parse_turn(text)
    calls = [(call.name, json.dumps(dict(call.arguments), indent=1)) for call in action.tool_calls]
    return {"calls": calls, "error": action.parse_error}


def turn_anchors(
    episode: Mapping[str, Any], groups: Mapping[views.TurnRef, Sequence[views.TurnRef]]
) -> dict[int, dict[str, Any]]:
    """Per turn index: its anchor key (state before), the anchor group's members and the other members."""
    anchors = {}
    for turn in episode["turns"]:
        ref = views.TurnRef(int(episode["id"]), int(turn["index"]))
        members = list(groups.get(ref, [ref]))
        key = views.state_before(episode, ref.turn)
        anchors[ref.turn] = {"key": key, "members": members, "others": [m for m in members if m != ref]}
    return anchors


def sign(value: float | None) -> str:
    """The CSS class of a signed number: pos, neg or zero (None counts as zero)."""
    if value is None or value == 0:
        return "zero"
    return "pos" if value > 0 else "neg"


def signed(value: float | None) -> Markup:
    """A number coloured by its sign; a dash for a missing value (e.g. no advantage on eval episodes)."""
    text = "–" if value is None else f"{value:+.3f}"
    return Markup(f'<span class="{sign(value)}">{escape(text)}</span>')
