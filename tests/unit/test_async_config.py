"""Async mode's config: its options, and the combinations it refuses with a message saying what to do."""

from __future__ import annotations

import pytest

from agentrl.config import load_config
from agentrl.errors import ConfigError


def test_async_options_parse_from_overrides() -> None:
    config = load_config(
        "calc", ["trainer.async_mode=true", "trainer.max_staleness=3", "trainer.overprovision=2"]
    )
    assert config.trainer.async_mode and config.trainer.max_staleness == 3
    assert config.trainer.overprovision == 2.0


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["trainer.nproc=2"], "trainer.nproc=1"),
        (["trainer.resume=runs/x"], "cannot resume exactly"),
        (["trainer.checkpoint_every=1"], "cannot resume exactly"),
    ],
)
def test_async_refuses_what_it_cannot_do(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config("calc", ["trainer.async_mode=true", *overrides])


@pytest.mark.parametrize("override", ["trainer.max_staleness=-1", "trainer.overprovision=0.5"])
def test_async_bounds_are_checked(override: str) -> None:
    with pytest.raises(ConfigError, match=override.split("=")[0]):
        load_config("calc", [override])


def test_an_estimator_that_measures_the_policy_first_is_refused_in_async_mode() -> None:
    from agentrl.config import load_config

    with pytest.raises(ConfigError, match="answer_probs"):
        load_config("calc", ["trainer.async_mode=true", "credit.estimator=igpo"])
