"""Weights & Biases mirror of a run's metrics: the same per-step numbers the console, metrics.jsonl and the
store get, sent to W&B when `metrics.wandb_project` is set.

What this is: a thin sink the training loop calls once per logged step. The W&B run id is the store's run
id, so a resumed run (`trainer.resume=`) continues the same W&B run; W&B keeps steps monotonic, so steps
re-run after a checkpoint are dropped there (the store and metrics.jsonl hold the re-run values).
`metrics.wandb_mode=offline` writes the run under runs/<run>/wandb/ for a later `wandb sync` (machines
without internet, like CI here).

What this is not: a store. W&B is optional (`pip install 'agentrl[wandb]'`); nothing is read back from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from agentrl.errors import ConfigError

WandbMode = Literal["online", "offline", "disabled"]
WANDB_MODES: tuple[str, ...] = ("online", "offline", "disabled")


@dataclass(frozen=True)
class MetricsConfig:
    """Where metrics go besides the console, runs/<run>/metrics.jsonl, the store and TensorBoard.

    wandb_project: a W&B project name turns the W&B mirror on (None: off).
    wandb_entity:  the W&B team or user (None: your default entity).
    wandb_mode:    "online", "offline" (files only, sync later) or "disabled".
    """

    wandb_project: str | None = None
    wandb_entity: str | None = None
    wandb_mode: WandbMode = "online"

    def __post_init__(self) -> None:
        if self.wandb_mode not in WANDB_MODES:
            raise ConfigError(
                f"metrics.wandb_mode must be one of {', '.join(WANDB_MODES)}, got {self.wandb_mode!r}"
            )


class WandbSink:
    """One open W&B run; `log` per step, `close` at the end (idempotent)."""

    def __init__(self, run: Any) -> None:
        self._run = run

    @classmethod
    def open(
        cls, config: MetricsConfig, run_id: str, name: str, run_dir: Path, resolved: Mapping[str, Any]
    ) -> WandbSink | None:
        """Start (or resume) the W&B run of this store run, or None when W&B is not configured."""
        if config.wandb_project is None:
            return None
        try:
            import wandb
        except ImportError as error:
            raise ConfigError(
                "metrics.wandb_project is set but wandb is not installed; "
                "run `pip install 'agentrl[wandb]'` or unset metrics.wandb_project"
            ) from error
        run = wandb.init(
            project=config.wandb_project,
            entity=config.wandb_entity,
            name=name,
            id=run_id,
            resume="allow",
            dir=str(run_dir),
            mode=config.wandb_mode,
            config=dict(resolved),
        )
        return cls(run)

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        self._run.log({key: float(value) for key, value in metrics.items()}, step=step)

    def close(self, finished: bool) -> None:
        """Finish the run and, when no other W&B run is active in this process, wait until W&B has
        written (offline) or sent (online) everything: `run.finish` alone returns before wandb-core's
        writer has flushed the run file, so a `wandb sync` or a reader right after would see a partial run."""
        run, self._run = self._run, None
        if run is None:
            return
        run.finish(exit_code=0 if finished else 1)
        import wandb

        if wandb.run is None:
            wandb.teardown()
