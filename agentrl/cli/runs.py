"""`agentrl runs ls|show RUN|export RUN --format jsonl|parquet|plot RUN|tensorboard RUN`: look at stored runs
from a terminal.

What this is: thin handlers over the store's readers and the pure views of `agentrl.ui`. RUN is a run id,
a unique id prefix or a run name. The store is `--db URL`, else $AGENTRL_DB_URL, else
sqlite:///runs/agentrl.db (as for training). What this is not: a way to change or delete runs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

DEFAULT_OUT_DIR = "runs"  # outputs go to runs/<run name>/ unless --out says otherwise


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("runs", help="list, show, export and plot stored runs")
    actions = parser.add_subparsers(dest="action", required=True)
    ls = actions.add_parser("ls", help="runs with status, steps and best held-out success")
    ls.set_defaults(handler=list_command)
    show = actions.add_parser("show", help="a run's config and metrics summary")
    show.set_defaults(handler=show_command)
    export = actions.add_parser("export", help="a run's episodes with turns, rewards, advantages, state keys")
    export.add_argument("--format", choices=["jsonl", "parquet"], default="jsonl", dest="fmt")
    export.set_defaults(handler=export_command)
    plot = actions.add_parser("plot", help="PNG of reward, success, KL, entropy, anchor hit rate vs step")
    plot.set_defaults(handler=plot_command)
    board = actions.add_parser("tensorboard", help="write a run's metrics as TensorBoard event files")
    board.set_defaults(handler=tensorboard_command)
    for sub in (show, export, plot, board):
        sub.add_argument("run", metavar="RUN", help="run id, unique id prefix, or run name")
    for sub in (export, plot, board):
        sub.add_argument(
            "--out",
            type=Path,
            help="output file or folder (default: runs/<run name>/episodes.FORMAT, plot.png or tensorboard/)",
        )
    for sub in (ls, show, export, plot, board):
        sub.add_argument(
            "--db", metavar="URL", help="store URL (default: $AGENTRL_DB_URL, else runs/agentrl.db)"
        )


def list_command(args: argparse.Namespace) -> int:
    from agentrl.store.repository import list_runs, load_metrics, mark_dead_runs

    with _store(args.db) as store:
        mark_dead_runs(store)  # a run whose process died on this host is shown "killed", not live
        rows = [(run, load_metrics(store, run["id"])) for run in list_runs(store)]
    print(format_run_table(rows))
    return 0


def show_command(args: argparse.Namespace) -> int:
    from agentrl.store.repository import list_runs, load_metrics
    from agentrl.ui.views import find_run

    with _store(args.db) as store:
        run = find_run(list_runs(store), args.run)
        metrics = load_metrics(store, run["id"])
    print(format_run(run, metrics))
    return 0


def export_command(args: argparse.Namespace) -> int:
    from agentrl.store.repository import list_runs, load_episodes
    from agentrl.ui.export import export_episodes
    from agentrl.ui.views import find_run

    with _store(args.db) as store:
        run = find_run(list_runs(store), args.run)
        episodes = load_episodes(store, run["id"])
    out = args.out or Path(DEFAULT_OUT_DIR) / run["name"] / f"episodes.{args.fmt}"
    export_episodes(episodes, out, args.fmt)
    print(f"wrote {len(episodes)} episodes of run {run['name']} to {out}")
    return 0


def plot_command(args: argparse.Namespace) -> int:
    from agentrl.store.repository import list_runs, load_metrics
    from agentrl.ui.plot import plot_run
    from agentrl.ui.views import find_run, metric_series

    with _store(args.db) as store:
        run = find_run(list_runs(store), args.run)
        series = metric_series(load_metrics(store, run["id"]))
    out = args.out or Path(DEFAULT_OUT_DIR) / run["name"] / "plot.png"
    written, notes = plot_run(series, out, title=f"{run['name']} ({run['task']})")
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    if not written:
        print(f"run {run['name']} has none of the plotted metrics yet; nothing written", file=sys.stderr)
        return 1
    print(f"wrote {out}")
    return 0


def tensorboard_command(args: argparse.Namespace) -> int:
    from agentrl.store.repository import list_runs
    from agentrl.store.tensorboard import export_run_events
    from agentrl.ui.views import find_run

    with _store(args.db) as store:
        run = find_run(list_runs(store), args.run)
        out = export_run_events(
            store, run["id"], args.out or Path(DEFAULT_OUT_DIR) / run["name"] / "tensorboard"
        )
    print(f"wrote TensorBoard events of run {run['name']} to {out} (tensorboard --logdir {out})")
    return 0


# --- formatting (pure) -------------------------------------------------------------------------------


def format_run_table(rows: Sequence[tuple[Mapping[str, Any], Sequence[Mapping[str, Any]]]]) -> str:
    """One line per run: id prefix, name, task, status, last step, best held-out success, created."""
    from agentrl.ui.views import best_value, last_step, metric_series

    header = (
        f"{'ID':12s}  {'NAME':32s}  {'TASK':12s}  {'STATUS':9s}  {'STEPS':>5s}  {'BEST EVAL':>9s}  CREATED"
    )
    lines = [header]
    for run, metrics in rows:
        step = last_step(metrics)
        best = best_value(metric_series(metrics))
        lines.append(
            f"{run['id'][:12]:12s}  {run['name'][:32]:32s}  {run['task'][:12]:12s}  {run['status']:9s}  "
            f"{'-' if step is None else step:>5}  {'-' if best is None else f'{best:.3f}':>9s}  "
            f"{_when(run['created_at'])}"
        )
    if not rows:
        lines.append("(no runs in this store)")
    return "\n".join(lines)


def format_run(run: Mapping[str, Any], metrics: Sequence[Mapping[str, Any]]) -> str:
    """A run's identity, its metrics summary (one line per metric) and its resolved config as YAML."""
    from agentrl.ui.views import best_value, last_step, metric_series, summarise_metrics

    series = metric_series(metrics)
    best = best_value(series)
    lines = [
        f"run       {run['id']}",
        f"name      {run['name']}",
        f"task      {run['task']}",
        f"status    {run['status']}",
        f"created   {_when(run['created_at'])}",
        f"finished  {_when(run['finished_at'])}",
        f"steps     {last_step(metrics) if metrics else '-'}",
        f"best held-out success  {'-' if best is None else f'{best:.3f}'}",
        "",
        f"{'METRIC':36s}  {'STEPS':>5s}  {'FIRST':>10s}  {'LAST':>10s}  {'MIN':>10s}  {'MAX':>10s}",
    ]
    for summary in summarise_metrics(series):
        values = (summary.first, summary.last, summary.low, summary.high)
        lines.append(
            f"{summary.name[:36]:36s}  {summary.count:5d}  " + "  ".join(f"{_num(v):>10s}" for v in values)
        )
    if not series:
        lines.append("(no metrics recorded)")
    lines += ["", "config:", yaml.safe_dump(run["config"], sort_keys=False).rstrip()]
    return "\n".join(lines)


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _when(value: Any) -> str:
    return "-" if value is None else value.strftime("%Y-%m-%d %H:%M:%S")


@contextmanager
def _store(url: str | None) -> Iterator[Any]:
    """The store, open for one command."""
    from agentrl.store.repository import close_store, open_store

    store = open_store(url)
    try:
        yield store
    finally:
        close_store(store)
