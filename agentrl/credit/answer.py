"""Options of IGPO's measurement of p_t: how the known answer is teacher-forced, and the batch budget.

What this is: two frozen dataclasses, kept free of torch so the run config (`credit.answer`) can hold them.
What this is not: the measurement itself (`agentrl/trainer/answer_probs.py`) or the estimator (`igpo.py`).
Set in a run config as, e.g., `credit.answer.answer_format.prefix='<tool_call>...'`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agentrl.errors import ConfigError


@dataclass(frozen=True)
class AnswerFormat:
    """How the known answer is written after a context that ends with the assistant header.

    prefix: text teacher-forced before the answer but not scored, e.g. '<answer>' or the opening of a
            submit tool call; "" (default) forces the raw answer text right after the assistant header.
    """

    prefix: str = ""


@dataclass(frozen=True)
class AnswerProbConfig:
    """Options of the measurement.

    answer_format:     how the answer is rendered (see `answer_tokens`).
    max_batch_tokens:  padded tokens (rows x longest row) per forward pass.
    """

    answer_format: AnswerFormat = field(default_factory=AnswerFormat)
    max_batch_tokens: int = 8192

    def __post_init__(self) -> None:
        if self.max_batch_tokens < 1:
            raise ConfigError(f"max_batch_tokens must be >= 1, got {self.max_batch_tokens}")
