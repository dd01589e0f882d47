"""The trajectory viewer: a FastAPI app serving server-rendered pages over one run store.

    /                                    runs: status, last step, best held-out success
    /runs/{run}                          every metric charted (inline SVG small multiples), the estimator
                                         and its effective options, steps, metrics, task sampler, config
    /runs/{run}/steps/{step}?split=&show= a step's episodes grouped by task group; show = all | failed |
                                         infra | invalid; a tree rollout's group also drawn as its tree
                                         (`tree.py`: branch points, siblings side by side); an evaluation
                                         step as one table (task, outcome, reward, turns)
    /runs/{run}/episodes/{id}            one episode as a chat: assistant text, tool calls, observations,
                                         per-turn reward and advantage coloured by sign, state keys, anchor
                                         group (count and links), invalid flag, infrastructure error; the
                                         return as the estimator used it, each turn's finish reason
                                         (`finish.py`), the first prompt's tools and examples, each
                                         turn's sampled tokens coloured by the sampler's probability,
                                         with the trainer's log-probs and the importance ratio where the
                                         update computed them (`tokens.py`), and under a context
                                         policy what each turn's prompt held and where a new token
                                         segment starts (`views.context_lines`)
    /runs/{run}/search, /export.jsonl    search by task id or text, streamed export (`search.py`)
    /compare?run=A&run=B                 several runs: metrics overlaid, key config, config diff
    /heldout?run_a=&step_a=&run_b=&step_b= one held-out evaluation against another, task by task
    /healthz                             "ok"

Every listing takes `?page=&limit=` (`paging.py`); the runs, steps, evaluation and search tables also
`?sort=COLUMN&order=asc|desc` (a training step's groups: order, task or reward); an episode pages its
turns. The run page of a run with no end time, and the runs list while a run on it has none, reload
themselves every REFRESH_S seconds.

What this is: thin handlers that read the store (`repository`), shape the data with the pure functions of
`views.py` and render `templates.py`; every value is HTML-escaped by Jinja2's autoescaping. Serve it with
`agentrl ui` (127.0.0.1 only).

Each page reads only what it shows, in SQL (`agentrl.store.pages`: a page of runs, the per-step table
aggregated by the database, one step's groups, one episode and its task group's turn stubs);
bench/viewer.py measures the page times on a store of 100k episodes and 1M turns.

What this is not: a writer. Nothing the store lacks is invented: the page says what is missing (task
prompt, first observation, sandbox exec log).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Annotated, Any

import yaml
from fastapi import FastAPI, Query, Request
from fastapi.responses import HTMLResponse, PlainTextResponse, StreamingResponse
from markupsafe import Markup, escape
from sqlalchemy.engine import make_url

from agentrl.agent.parsing import parse_turn
from agentrl.errors import ConfigError, NotFound
from agentrl.store import pages, repository
from agentrl.ui import analysis, charts, compare, credit_view, finish, paging, search, thinning, views
from agentrl.ui.paging import Pager, Sorter
from agentrl.ui.templates import environment
from agentrl.ui.tokens import TokenStrip, clip_range, no_trainer_reason, token_strip
from agentrl.ui.tree import group_tree

RUNS_PER_PAGE = 50
STEPS_PER_PAGE = 100  # rows of the run page's step table
GROUPS_PER_PAGE = 8  # task groups of a training step (a group's rows, anchors and tree are long)
EPISODES_PER_PAGE = 100  # rows of an evaluation step's table and of a task search
TURNS_PER_PAGE = 50  # of one episode
HITS_PER_PAGE = 50  # turns found by a text search
REFRESH_S = 15  # a running run's pages reload this often
RUNS_WINDOW = pages.Window(RUNS_PER_PAGE, sort="created", descending=True)
STEPS_WINDOW = pages.Window(STEPS_PER_PAGE)
TURNS_WINDOW = pages.Window(TURNS_PER_PAGE)
FILTER_LABELS = {
    "all": "all",
    "failed": "failed episodes",
    "infra": "infra failures",
    "invalid": "invalid actions",
}


PageNumber = Annotated[int, Query(alias="page")]  # `page` is taken by the handlers' render helper


def create_app(url: str | None = None) -> FastAPI:
    """The viewer app over the store at `url` (default: $AGENTRL_DB_URL, else sqlite:///runs/agentrl.db)."""
    templates = environment()
    templates.globals.update(signed=signed, sign=sign)
    store_url = make_url(repository.resolve_url(url)).render_as_string(hide_password=True)
    templates.globals.update(store_url=store_url)  # for the `agentrl runs export` line

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
    def runs_page(
        request: Request, number: PageNumber = 1, limit: int = RUNS_PER_PAGE,
        sort: str = "created", order: str = "",
    ) -> HTMLResponse:  # fmt: skip
        window = paging.window(number, limit, sort, order or ("desc" if sort == "created" else "asc"))
        return page("runs.html", runs_context(request.app.state.store, window))

    @app.get("/runs/{run_id}", response_class=HTMLResponse)
    def run_page(
        request: Request, run_id: str, number: PageNumber = 1, limit: int = STEPS_PER_PAGE,
        sort: str = "step", order: str = "asc",
    ) -> HTMLResponse:  # fmt: skip
        window = paging.window(number, limit, sort, order)
        return page("run.html", run_context(request.app.state.store, run_id, window))

    @app.get("/runs/{run_id}/steps/{step}", response_class=HTMLResponse)
    def step_page(
        request: Request, run_id: str, step: int, split: str = "train", show: str = "all",
        number: PageNumber = 1, limit: int | None = None, sort: str = "", order: str = "asc",
    ) -> HTMLResponse:  # fmt: skip
        size = limit or (EPISODES_PER_PAGE if split == "eval" else GROUPS_PER_PAGE)
        window = paging.window(number, size, sort, order)
        return page("step.html", step_context(request.app.state.store, run_id, step, split, show, window))

    @app.get("/runs/{run_id}/search", response_class=HTMLResponse)
    def search_page(
        request: Request, run_id: str, task: str = "", q: str = "",
        number: PageNumber = 1, limit: int | None = None, sort: str = "", order: str = "asc",
    ) -> HTMLResponse:  # fmt: skip
        store, task = request.app.state.store, task.strip()
        window = paging.window(number, limit or (EPISODES_PER_PAGE if task else HITS_PER_PAGE), sort, order)
        return page("search.html", search.search_context(store, find_run(store, run_id), task, q, window))

    @app.get("/runs/{run_id}/export.jsonl")
    def export_jsonl(request: Request, run_id: str) -> StreamingResponse:
        store = request.app.state.store
        run = find_run(store, run_id)
        disposition = {"Content-Disposition": f'attachment; filename="{run["id"]}.jsonl"'}
        lines = search.export_lines(store, run["id"])
        return StreamingResponse(lines, media_type="application/x-ndjson", headers=disposition)

    @app.get("/compare", response_class=HTMLResponse)
    def compare_page(request: Request, run: Annotated[list[str] | None, Query()] = None) -> HTMLResponse:
        return page("compare.html", analysis.compare_context(request.app.state.store, run or []))

    @app.get("/heldout", response_class=HTMLResponse)
    def heldout_page(
        request: Request,
        run_a: str,
        step_a: int | None = None,
        run_b: str | None = None,
        step_b: int | None = None,
    ) -> HTMLResponse:
        store = request.app.state.store
        return page("heldout.html", analysis.heldout_context(store, run_a, step_a, run_b, step_b))

    @app.get("/runs/{run_id}/episodes/{episode_id}", response_class=HTMLResponse)
    def episode_page(
        request: Request, run_id: str, episode_id: int, number: PageNumber = 1, limit: int = TURNS_PER_PAGE
    ) -> HTMLResponse:
        window = paging.window(number, limit)
        return page("episode.html", episode_context(request.app.state.store, run_id, episode_id, window))

    return app


# --- page data (plain functions over the store's readers) --------------------------------------------


def order_params(window: pages.Window) -> dict[str, str]:
    """The query parameters that keep a window's sort on the other pages of a listing."""
    return {"sort": window.sort, "order": "desc" if window.descending else "asc"}


def runs_context(store: repository.Store, window: pages.Window = RUNS_WINDOW) -> dict[str, Any]:
    repository.mark_dead_runs(store)  # a run whose process died on this host is listed "killed", not live
    runs, total = pages.runs_page(store, window, views.HELD_OUT_SUCCESS)
    rows = [
        {
            **run,
            "steps": run["last_step"],
            **compare.key_columns(run["config"]),
            "created": run["created_at"].strftime("%Y-%m-%d %H:%M"),
        }
        for run in runs
    ]
    return {
        "runs": rows,
        "pager": Pager("/", window, total, "runs", order_params(window)),
        "sorter": Sorter("/", window.sort or "created", window.descending),
        "refresh_s": REFRESH_S if any(row["finished_at"] is None for row in rows) else None,
        "store_url": make_url(store.url).render_as_string(hide_password=True),
        "eval_temperatures": sorted(
            {str(row["eval_temperature"]) for row in rows if row["best"] is not None}
        ),
    }


def find_run(store: repository.Store, run_id: str) -> Mapping[str, Any]:
    try:
        return views.find_run(pages.find_runs(store, run_id), run_id)
    except ConfigError as exc:
        raise NotFound(str(exc)) from exc


def refresh_seconds(run: Mapping[str, Any]) -> int | None:
    """How often a run's pages reload themselves: every REFRESH_S while it has no end time, else never."""
    return REFRESH_S if run["finished_at"] is None else None


def run_context(store: repository.Store, run_id: str, window: pages.Window = STEPS_WINDOW) -> dict[str, Any]:
    run = find_run(store, run_id)
    steps, total = pages.step_table(store, run["id"], window)
    path = f"/runs/{run['id']}"
    series = views.metric_series(repository.load_metrics(store, run["id"]))
    return {
        "run": run,
        "charts": charts.run_charts(thinning.thin_series(series)),  # a long run: its extremes per bucket
        "credit": credit_view.credit_settings(run["config"]),
        "eval_temperature": compare.eval_temperature(run["config"]),
        "sampler": analysis.sampler_panel(store, run["id"]),
        "steps": [views.StepSummary(**row) for row in steps],
        "pager": Pager(path, window, total, "step rows", order_params(window)),
        "sorter": Sorter(path, window.sort or "step", window.descending),
        "refresh_s": refresh_seconds(run),
        "metrics": views.summarise_metrics(series),
        "config": yaml.safe_dump(run["config"], sort_keys=False),
    }


def step_context(
    store: repository.Store, run_id: str, step: int, split: str, show: str, window: pages.Window | None = None
) -> dict[str, Any]:
    """A training step as one page of its task groups (whole, with turn stubs: no text); an evaluation
    step as one page of a table of its episodes (no turns)."""
    run = find_run(store, run_id)
    if show not in views.FILTERS:
        raise NotFound(f"unknown filter {show!r}; use one of {', '.join(views.FILTERS)}")
    counts = pages.step_counts(store, run["id"], step, split)
    if not counts["all"]:
        raise NotFound(f"run {run['name']} has no {split} episodes at step {step}")
    path, kept_params = f"/runs/{run['id']}/steps/{step}", {"split": split, "show": show}
    common = {
        "run": run,
        "step": step,
        "split": split,
        "show": show,
        "filters": list(FILTER_LABELS.items()),
        "counts": counts,
        "shown": counts[show],
        "total": counts["all"],
    }
    if split == "eval":
        window = window or pages.Window(EPISODES_PER_PAGE)
        rows, total = pages.step_episodes(store, run["id"], step, split, show, window)
        return {
            **common,
            "eval_rows": rows,
            "groups": {},
            "trees": {},
            **analysis.step_credit(run, {}),
            "pager": Pager(path, window, total, "episodes", {**kept_params, **order_params(window)}),
            "sorter": Sorter(path, window.sort or "id", window.descending, kept_params),
        }
    window = window or pages.Window(GROUPS_PER_PAGE)
    episodes, total = pages.step_groups(store, run["id"], step, split, show, window)
    kept = [{**e, "invalid": e["invalid_turns"]} for e in episodes if views.keep(e, show)]
    groups = views.group_by_task(kept)
    whole = views.group_by_task(episodes)  # a tree is drawn whole, whatever the filter keeps
    return {
        **common,
        "eval_rows": None,
        "groups": groups,
        "trees": {group_id: group_tree(whole[group_id]) for group_id in groups},
        **analysis.step_credit(run, {group_id: whole[group_id] for group_id in groups}),
        "pager": Pager(path, window, total, "task groups", {**kept_params, **order_params(window)}),
        "sorter": Sorter(path, window.sort or "order", window.descending, kept_params),
    }


def episode_context(
    store: repository.Store, run_id: str, episode_id: int, window: pages.Window = TURNS_WINDOW
) -> dict[str, Any]:
    """One page of an episode's turns in full; its task group's turn stubs (every turn: index, reward,
    advantage, state key, invalid) for the anchor groups and the credit, which need all turns."""
    run = find_run(store, run_id)
    episode = pages.load_episode(store, run["id"], episode_id, window.offset, window.limit)
    if episode is None:
        raise NotFound(f"run {run['name']} has no episode {episode_id}")
    group = pages.group_stubs(store, episode)  # anchor groups never leave the task group
    whole = next(e for e in group if e["id"] == episode["id"])  # the episode with every turn's stub
    return {
        "run": run,
        "e": episode,
        "anchors": turn_anchors(whole, views.anchor_groups(group)),
        "pager": Pager(f"/runs/{run['id']}/episodes/{episode['id']}", window, episode["num_turns"], "turns"),
        **analysis.episode_credit(run, whole),
        "finishes": finish.turn_finishes(run["config"], episode["turns"]),
        "contexts": views.context_lines(episode["turns"], episode["segment_before"]),
        "prompt": analysis.episode_prompt(store, run, episode),
        "calls": {turn["index"]: tool_calls(turn["text"]) for turn in episode["turns"]},
        "strips": turn_strips(run["config"], episode, whole),
    }


def turn_strips(
    config: Mapping[str, Any], episode: Mapping[str, Any], whole: Mapping[str, Any]
) -> dict[int, TokenStrip]:
    """Per turn index of the page, its token strip, the ratios boxed against the run's clip range, and why
    a turn has no trainer log-probs (from `whole`, the episode with every turn's advantage)."""
    clip = clip_range(config)
    advantages = [turn["advantage"] for turn in whole["turns"]]
    return {
        turn["index"]: token_strip(
            turn.get("tokens"),
            clip=clip,
            no_trainer=no_trainer_reason(episode, int(turn["index"]), advantages, config),
        )
        for turn in episode["turns"]
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
