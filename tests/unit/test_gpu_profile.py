"""The GPU check's 1.7B shapes and update profile (`agentrl.devtools.gpu_profile`), run in this process on
the CPU at the dry run's tiny sizes (the 1.7B model itself is built only on a GPU), and the profile's
categories on hand-made events.

What this is not: a measurement; the GPU's figures come from `make test-gpu` (bench/results/gpu_check.json).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from agentrl.devtools.gpu_check import CHECKS, run_check, throughput_lines
from agentrl.devtools.gpu_checks import SMALL
from agentrl.devtools.gpu_profile import SMOLLM2_1P7B_SHAPE, categorise
from agentrl.model_shapes import SHAPES, parameters


def test_events_fall_in_the_first_category_they_match_and_the_shares_sum_to_one() -> None:
    shares = categorise(
        [
            ("aten::mm", 4.0),
            ("aten::scaled_dot_product_attention", 2.0),  # attention, though it multiplies matrices
            ("_HeadLogprobs", 1.0),
            ("aten::_fused_adamw_", 1.0),
            ("Memcpy HtoD (Pageable -> Device)", 1.0),
            ("aten::add", 1.0),
        ]
    )
    expected = {"attention": 0.2, "loss": 0.1, "optimizer": 0.1, "copies": 0.1, "matmul": 0.4, "other": 0.1}
    assert shares == pytest.approx(expected)
    assert set(categorise([])) == set(shares) and sum(categorise([]).values()) == 0


def test_the_1_7b_shape_is_the_published_config() -> None:
    shape = SHAPES["smollm2-1.7b"]
    assert SMOLLM2_1P7B_SHAPE["hidden_size"] == shape.hidden == 2048
    assert SMOLLM2_1P7B_SHAPE["num_hidden_layers"] == 24 and 1.7e9 < parameters(shape) < 1.72e9


@pytest.mark.parametrize("name", ["shape_1.7b_lora", "shape_1.7b_full", "update_profile_1.7b"])
def test_the_new_checks_run_at_the_dry_runs_sizes(name: str, tmp_path: Path) -> None:
    assert name in CHECKS
    result = run_check(name, torch.device("cpu"), tmp_path, SMALL)
    if name.startswith("update_profile"):
        assert result["update_s"] > 0 and result["profiled_s"] > 0 and result["longest"]
        assert sum(result["shares"].values()) == pytest.approx(1.0) and result["shares"]["matmul"] > 0
    else:
        assert result["update_tokens_per_s"] > 0 and result["lora_rank"] == (16 if "lora" in name else 0)
        line = throughput_lines({"checks": {name: {"passed": True, "result": result}}})
        assert line and line[0].startswith(name)
