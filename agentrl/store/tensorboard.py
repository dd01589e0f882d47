"""TensorBoard event files of a run's step metrics, so `tensorboard --logdir runs` shows every run.

What this is: `export_run_events(store, run_id, log_dir)` reads the run's metric rows from the store and
writes them as scalars (tag = metric name, x = step) with `torch.utils.tensorboard.SummaryWriter`, which
works offline (it needs the `tensorboard` package, not a server). It replaces the event files it wrote
before in `log_dir`, so calling it again (e.g. at the end of every run, or by hand on an old run) never
duplicates points. NULL values (non-finite metrics) are skipped.

What this is not: a live logger (the store is the source of truth; TensorBoard is one more way to look at
it) or a reader of episodes (use `agentrl ui` for trajectories).
"""

from __future__ import annotations

from pathlib import Path

from agentrl.store.repository import Store, load_metrics

EVENT_SUFFIX = ".agentrl"  # tags our event files so a rewrite removes only ours


def export_run_events(store: Store, run_id: str, log_dir: Path) -> Path:
    """Write the run's metrics to event files in `log_dir` (created if needed); return the folder."""
    from torch.utils.tensorboard import SummaryWriter

    log_dir.mkdir(parents=True, exist_ok=True)
    for old in log_dir.glob(f"events.out.tfevents.*{EVENT_SUFFIX}"):
        old.unlink()
    writer = SummaryWriter(log_dir=str(log_dir), filename_suffix=EVENT_SUFFIX)
    try:
        for row in load_metrics(store, run_id):
            if row["value"] is not None:
                writer.add_scalar(row["name"], row["value"], global_step=row["step"])
    finally:
        writer.close()
    return log_dir
