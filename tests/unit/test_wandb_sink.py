"""The W&B mirror against the real `wandb` package in offline mode: what a run logs is in its run file
(read back by `wandb_log.history_rows`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentrl.config import load_config
from agentrl.errors import ConfigError
from agentrl.store.wandb_sink import MetricsConfig, WandbSink

pytest.importorskip("wandb")
from wandb_log import history_rows  # noqa: E402


def test_an_offline_run_holds_every_logged_step(tmp_path: Path) -> None:
    config = MetricsConfig(wandb_project="agentrl-test", wandb_mode="offline")
    sink = WandbSink.open(config, "run0123", "calc-train", tmp_path, {"task": "calc"})
    assert sink is not None
    sink.log(1, {"loss": 0.5, "reward_mean": 0.25})
    sink.log(2, {"loss": 0.25, "reward_mean": 0.5})
    sink.close(finished=True)
    sink.close(finished=True)
    rows = history_rows(tmp_path)
    assert [(row["_step"], row["loss"], row["reward_mean"]) for row in rows] == [
        (1, 0.5, 0.25),
        (2, 0.25, 0.5),
    ]


def test_without_a_project_there_is_no_sink(tmp_path: Path) -> None:
    assert WandbSink.open(MetricsConfig(), "r", "n", tmp_path, {}) is None


def test_the_mode_is_checked_and_the_option_reaches_the_run_config() -> None:
    with pytest.raises(ConfigError, match="online, offline, disabled"):
        MetricsConfig(wandb_mode="cloud")
    config = load_config("calc", ["metrics.wandb_project=p", "metrics.wandb_mode=offline"])
    assert config.metrics == MetricsConfig(wandb_project="p", wandb_mode="offline")
