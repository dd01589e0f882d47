"""The Engine protocol: token ids in, sampled token ids and their log-probabilities out.

What this is: `SamplingParams`, the `Completion` an engine returns, and the `Engine` protocol every backend
(hf, vllm, openai) implements. Engines are token-in/token-out so that the runner never re-tokenises text
the model produced: the trainer must see exactly the tokens that were sampled.

What this is not: batching policy or chat rendering. Each backend batches concurrent `generate` calls its
own way; prompts are rendered by `agentrl/agent/prompting.py`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

FinishReason = Literal["stop", "length"]


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one completion.

    temperature:    0 means greedy decoding (its logprobs are then those of temperature 1)
    top_p:          nucleus sampling mass; 1.0 disables it
    max_new_tokens: the completion's token budget
    stop:           strings that end the completion once generated (the tokens completing them are kept)
    seed:           a per-request sampler seed: the completion then depends only on the prompt, these
                    params and the weights, not on which other requests it was batched with (engines that
                    cannot seed rows one by one sample such a request alone); None: the engine's RNG
    """

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 128
    stop: tuple[str, ...] = ("</tool_call>",)
    seed: int | None = None


@dataclass(frozen=True)
class Completion:
    """One sampled completion.

    token_ids:     [C] sampled ids, ending with the end-of-turn token or the stop string's last token if any
    logprobs:      [C] sampler log-probabilities of `token_ids`
    finish_reason: "stop" (end of turn or stop string) or "length" (max_new_tokens reached)
    ended_turn:    True when the last token is the end-of-turn / eos token
    """

    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    text: str
    finish_reason: FinishReason
    ended_turn: bool


class Engine(Protocol):
    """Anything that completes token-id prompts; `tokenizer` is the one its prompts are rendered with."""

    @property
    def tokenizer(self) -> PreTrainedTokenizerBase: ...

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> Completion: ...
