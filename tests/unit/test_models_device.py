"""`model.device`: where the model and the update's batches go."""

from __future__ import annotations

import pytest
import torch

from agentrl.errors import ConfigError
from agentrl.models import resolve_device
from agentrl.trainer.update import to_device


def test_auto_is_the_cpu_without_cuda_and_the_current_cuda_device_with_it() -> None:
    expected = (
        torch.device("cuda", torch.cuda.current_device())
        if torch.cuda.is_available()
        else torch.device("cpu")
    )
    assert resolve_device("auto") == expected
    assert resolve_device("cpu") == torch.device("cpu")


def test_a_bad_or_missing_device_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="not a device"):
        resolve_device("tpu-ish")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="CUDA is not available"):
            resolve_device("cuda:0")


def test_batches_follow_the_model() -> None:
    batch = {"input_ids": torch.ones(2, 3, dtype=torch.long), "loss_mask": torch.ones(2, 3)}
    moved = to_device(batch, torch.device("cpu"))
    assert set(moved) == set(batch) and all(moved[name].device.type == "cpu" for name in batch)
