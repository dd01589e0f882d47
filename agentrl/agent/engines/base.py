"""The Engine protocol: token ids in, sampled token ids and their log-probabilities out.

What this is: `SamplingParams`, the `Completion` an engine returns, and the two protocols:
- `Engine`, the runner's view: a tokenizer and `generate` (token ids in, sampled ids and log-probs out).
  Engines are token-in/token-out so that the runner never re-tokenises text the model produced: the trainer
  must see exactly the tokens that were sampled.
- `PolicyEngine`, the trainer's view of the engines a run builds (cached, hf, vllm, openai): `module`, the
  in-process torch module the engine samples with or mirrors (None when a server owns the weights),
  `load_weights` after an update, `release_memory` before an update and `retake_memory` after it.
`InProcessWeights` gives that contract to engines that sample with the trainer's module itself (hf, cached).

What this is not: batching policy or chat rendering. Each backend batches concurrent `generate` calls its
own way; prompts are rendered by `agentrl/agent/prompting.py`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedTokenizerBase

Weights = Mapping[str, "torch.Tensor"]

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
    first_token_entropy: entropy in nats of the distribution the first token was drawn from,
                   softmax(logits / T) over the whole vocabulary before top-p (T = 1 for greedy, as for
                   `logprobs`); reported by the engines that see the logits (cached, hf), None from those
                   that return only the sampled tokens' log-probs (vllm, openai). Tree rollouts branch on it
                   (`rollout.tree.branch_on=entropy`, agentrl/agent/tree.py)
    """

    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    text: str
    finish_reason: FinishReason
    ended_turn: bool
    first_token_entropy: float | None = None


class Engine(Protocol):
    """Anything that completes token-id prompts; `tokenizer` is the one its prompts are rendered with."""

    @property
    def tokenizer(self) -> PreTrainedTokenizerBase: ...

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> Completion: ...


class PolicyEngine(Engine, Protocol):
    """An engine a run owns: what the trainer and the run's lifecycle use beyond sampling."""

    @property
    def module(self) -> torch.nn.Module | None:
        """The in-process module the engine samples with (hf, cached) or mirrors (vllm): the one a
        single-process trainer optimises and the final weights are saved from; None when a server owns the
        weights (openai)."""
        ...

    def load_weights(self, weights: Weights | None) -> None:
        """Sample with new weights from now on: `weights` (a full state dict) loaded into `module` first, or
        None when `module` was updated in place. Only between generations."""
        ...

    def release_memory(self) -> None:
        """Before an update: give up accelerator memory the update needs (vLLM sleep mode); else nothing."""
        ...

    def retake_memory(self) -> None:
        """After an update that changed no weights: take back what `release_memory` gave up."""
        ...

    async def aclose(self) -> None: ...


class InProcessWeights:
    """`PolicyEngine`'s weight methods for engines that sample with the trainer's own module (`self.model`):
    an update in place is already what they sample with, and they hold no memory of their own to release."""

    model: torch.nn.Module

    @property
    def module(self) -> torch.nn.Module:
        return self.model

    def load_weights(self, weights: Weights | None) -> None:
        if weights is not None:
            self.model.load_state_dict(weights)

    def set_eval(self) -> None:
        """Eval mode (no dropout) for sampling; the update switches the module to train mode and back."""
        self.model.eval()

    def release_memory(self) -> None:
        """Nothing to release: the engine's weights are the trainer's."""

    def retake_memory(self) -> None:
        """Nothing was released."""
