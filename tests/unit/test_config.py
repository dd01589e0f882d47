"""The run config: YAML plus dotted overrides, typed, with clear errors."""

from __future__ import annotations

import pytest

from agentrl.config import load_config
from agentrl.errors import ConfigError


def test_calc_config_loads_with_typed_overrides() -> None:
    config = load_config("calc", ["optim.lr=1e-5", "train.steps=3", "engine.hf.autocast_bf16=true"])
    assert config.optim.lr == pytest.approx(1e-5) and isinstance(config.optim.lr, float)
    assert config.train.steps == 3 and config.engine.hf.autocast_bf16 is True
    assert config.train.env_step_budget == 0  # off unless asked for
    assert load_config("calc", ["train.env_step_budget=800"]).train.env_step_budget == 800


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("optim.lr=fast", "optim.lr must be float"),
        ("train.steps=2.5", "train.steps must be int"),
        ("train.stepz=2", "unknown key"),
        ("engine.hf.autocast_bf16=1", "must be bool"),
        ("engine.kind=sglang", "engine.kind .sglang. is unknown"),
        ("train.env_step_budget=-1", r"train.env_step_budget must be >= 0, got -1: set 0 for no budget"),
    ],
)
def test_bad_overrides_say_what_is_wrong(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config("calc", [override])


def test_unknown_task_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="calc"):
        load_config("no-such-task", [])


def test_credit_options_flat_or_nested_are_checked_against_the_estimator() -> None:
    flat = load_config("calc", ["credit.estimator=gigpo", "credit.gamma=0.9"])
    nested = load_config("calc", ["credit.estimator=gigpo", "credit.options.gamma=0.9"])
    assert flat.credit == nested.credit and flat.credit.options["gamma"] == 0.9
    with pytest.raises(ConfigError, match="no option"):
        load_config("calc", ["credit.estimator=grpo", "credit.gammma=0.9"])
    with pytest.raises(ConfigError, match="unknown credit estimator"):
        load_config("calc", ["credit.estimator=gigppo"])


def test_sandbox_build_passes_a_registry_base_to_the_script() -> None:
    from agentrl.cli.sandbox import build_env

    assert build_env("python:3.11-slim-bookworm", {"PATH": "/bin"}) == {
        "PATH": "/bin",
        "AGENTRL_BASE_IMAGE": "python:3.11-slim-bookworm",
    }
    assert build_env(None, {"PATH": "/bin"}) == {"PATH": "/bin"}


def test_igpo_answer_format_is_set_from_the_run_config() -> None:
    config = load_config(
        "calc", ["credit.estimator=igpo", "credit.answer.answer_format.prefix=<answer>", "credit.gamma=0.9"]
    )
    assert config.credit.answer.answer_format.prefix == "<answer>"
    assert dict(config.credit.options) == {"gamma": 0.9}


def test_estimator_options_are_built_into_their_typed_config_once() -> None:
    from agentrl.credit import GiGPOConfig

    config = load_config("calc", ["credit.estimator=gigpo", "credit.gamma=1", "credit.invalid_penalty=1e-1"])
    assert config.credit.settings == GiGPOConfig(gamma=1.0, invalid_penalty=0.1)
    assert dict(config.credit.options) == {"gamma": 1, "invalid_penalty": "1e-1"}  # saved as given
    with pytest.raises(ConfigError, match="credit.options.gamma must be float"):
        load_config("calc", ["credit.estimator=gigpo", "credit.gamma=fast"])
