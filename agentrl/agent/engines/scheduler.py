"""The continuous-batching core of the cached engine: synchronous, single-threaded, one step at a time.

What this is: `BatchScheduler`. `submit` queues a request; each `step` (1) admits waiting requests into
free batch rows: it copies the KV of their longest cached prefix into the row and prefills only the rest
(requests arriving together first get their common prefix, e.g. system prompt + tools + few-shot examples,
prefilled once), then samples their first token (the entropy of its distribution is kept:
`Completion.first_token_entropy`); (2) runs ONE batched decode step for every running row;
(3) returns the sequences that finished (end-of-turn/eos token, stop string, or `max_new_tokens`), whose
rows are freed at once for waiting requests. Rows are kept packed at the front of one KV tensor, each row's
tokens at positions [0, length), so rows of different lengths decode together under a padding mask.
Finished sequences (and admitted prompts) are stored in the `PrefixCache`, so an episode's next turn, which
extends its previous context, prefills only the observation tokens.

When the model's weights change (the trainer updated them in place: parameter version counters move), the
compute copies are rebuilt and the prefix cache is emptied before the next admission.

Deterministic mode (`engine.cached.deterministic`, on by default): every forward pass that includes a
seeded request runs the batch-invariant kernels (`forward(exact=True)`, no shared-prefix cascade), and a
seeded request reuses only prefix-cache entries computed entirely that way. Those kernels give a token's
K/V and logits independently of the batch, the padding and of prefill versus decode, so a seeded request's
tokens and log-probs are a function of its prompt, seed and the weights. Unseeded requests keep the faster
kernels except in steps they share with a seeded one.

What this is not: thread-safe (the async engine calls it from one task, stepping in a worker thread) or a
memory manager (the KV tensor grows to the longest row seen and to the rows running, in steps of 8;
`max_cached_tokens` bounds the prefix cache).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from agentrl.agent.engines import llama_kernels as kernels
from agentrl.agent.engines.base import Completion, SamplingParams
from agentrl.agent.engines.configs import CachedEngineConfig, Precision
from agentrl.agent.engines.prefix_cache import CacheEntry as PrefixCacheEntry
from agentrl.agent.engines.prefix_cache import PrefixCache, longest_common_prefix
from agentrl.agent.engines.sampler import sample_next, token_entropy
from agentrl.errors import InvalidPrompt

_CAPACITY_STEP = 128
"""KV capacity grows in steps of this many tokens; in deterministic mode in steps of `kernels.EXACT_KEYS`,
since the exact kernels attend over whole key blocks."""
_ROW_STEP = 8
"""The batch KV tensor has rows for the sequences running, rounded up to this many (at most `max_batch`): a
step of 24 episodes holds 24 rows, not 32 (the rows are most of a rollout's memory)."""


@dataclass
class SchedulerStats:
    """Counters since the scheduler was created (tests and the benchmark read them)."""

    prefilled_tokens: int = 0
    reused_tokens: int = 0
    decode_steps: int = 0
    sampled_tokens: int = 0


@dataclass
class _Sequence:
    handle: int
    prompt: tuple[int, ...]
    params: SamplingParams
    length: int = 0  # tokens whose K/V sit in the batch cache
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    generator: torch.Generator | None = None  # the request's own RNG when its params carry a seed
    exact_kv: bool = True  # every K/V position of the row so far came from the batch-invariant kernels
    first_token_entropy: float | None = None  # of the distribution the first token was drawn from

    def __post_init__(self) -> None:
        if self.params.seed is not None and self.generator is None:
            self.generator = torch.Generator().manual_seed(self.params.seed)


class BatchScheduler:
    """Continuous batching over a Llama model with a cross-turn prefix cache (see the module docstring)."""

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        stop_ids: frozenset[int],
        config: CachedEngineConfig,
    ) -> None:
        kernels.check_supported(model)
        self.model, self.tokenizer, self.stop_ids, self.config = model, tokenizer, stop_ids, config
        self.dtype = resolve_precision(config.precision)
        self.prefix_cache = PrefixCache(config.max_cached_tokens)
        self.stats = SchedulerStats()
        self.vocab_size = int(model.config.vocab_size)
        self._weights: kernels.LlamaWeights | None = None
        self._weights_version = -1
        self._kv: torch.Tensor | None = None
        self._running: list[_Sequence] = []
        self._waiting: list[_Sequence] = []
        self._next_handle = 0
        self._shared_members: tuple[int, ...] = ()
        self._shared = 0
        self._lock = threading.Lock()  # a cancelled async caller may reset while a step still runs

    @property
    def busy(self) -> bool:
        return bool(self._running or self._waiting)

    def invalidate_weights(self) -> None:
        """The model's weights changed: rebuild the compute copy (and empty the prefix cache) at next use.
        Needed because an in-place update need not bump the parameters' version counters: torch's fused
        AdamW (`_fused_adamw_`) writes them without, so the version check alone missed every update."""
        self._weights = None

    @property
    def weights(self) -> kernels.LlamaWeights:
        """The compute copy of the model's weights, rebuilt (and the prefix cache emptied) after updates:
        when `invalidate_weights` was called, or when the parameters' version counters moved."""
        version = weights_version(self.model)
        if self._weights is None or version != self._weights_version:
            with torch.inference_mode():
                self._weights = kernels.LlamaWeights.from_model(  # the exact kernels need packed matmuls
                    self.model,
                    self.dtype,
                    pack=self.config.deterministic or None,
                    rounding=self.config.rounding,
                )
            self._weights_version = version
            self.prefix_cache.clear()
        return self._weights

    def submit(self, prompt: Sequence[int], params: SamplingParams) -> int:
        """Queue one request; returns its handle. Raises `InvalidPrompt` for unreadable prompts."""
        ids = tuple(int(token) for token in prompt)
        if not ids or min(ids) < 0 or max(ids) >= self.vocab_size:
            raise InvalidPrompt(
                f"prompt ids must be non-empty and within [0, {self.vocab_size}); got {ids[:8]}..."
            )
        if params.max_new_tokens < 1:
            raise InvalidPrompt("max_new_tokens must be at least 1")
        with self._lock:
            self._next_handle += 1
            self._waiting.append(_Sequence(self._next_handle, ids, params))
            return self._next_handle

    def cancel(self, handle: int) -> None:
        """Forget a request (waiting or running); its row is freed."""
        with self._lock, torch.inference_mode():
            self._waiting = [sequence for sequence in self._waiting if sequence.handle != handle]
            self._free_rows([row for row, sequence in enumerate(self._running) if sequence.handle == handle])

    def release(self) -> bool:
        """Before an update: drop the batch KV tensor, the prefix cache and the compute copy of the weights,
        each rebuilt at its next use (an update changes the weights, which empties the cache anyway), so
        that the update's activations do not sit beside them. Nothing is dropped while requests wait or
        run (an async loop keeps sampling during its update); whether it dropped them."""
        with self._lock:
            if self.busy:
                return False
            self._kv, self._weights, self._shared, self._shared_members = None, None, 0, ()
            self.prefix_cache.clear()
            return True

    def reset(self) -> None:
        """Drop every request and the batch KV (the prefix cache is kept)."""
        with self._lock:
            self._running, self._waiting, self._kv = [], [], None

    def step(self) -> list[tuple[int, Completion]]:
        """Admit waiting requests, decode one token for every running row; the requests that finished."""
        with self._lock, torch.inference_mode():
            finished = self._admit()
            if self._running:
                finished += self._decode()
        return finished

    def run_to_completion(self) -> dict[int, Completion]:
        """Step until no request is left (the synchronous path of `generate_batch`)."""
        done: dict[int, Completion] = {}
        while self.busy:
            done.update(self.step())
        return done

    # -- admission: prefix reuse and prefill -------------------------------------------------------------

    def _admit(self) -> list[tuple[int, Completion]]:
        free = self.config.max_batch - len(self._running)
        admitted, self._waiting = self._waiting[:free], self._waiting[free:]
        if not admitted:
            return []
        weights = self.weights
        self._share_common_prefix(weights, [sequence.prompt for sequence in admitted], self._exact(admitted))
        reuse = [self._copy_plan(sequence) for sequence in admitted]
        order = sorted(range(len(admitted)), key=lambda i: len(admitted[i].prompt) - reuse[i][1])
        admitted = [admitted[i] for i in order]
        reuse = [reuse[i] for i in order]
        suffixes = [
            len(sequence.prompt) - cached for sequence, (_, cached) in zip(admitted, reuse, strict=True)
        ]
        groups = prefill_groups(suffixes, self.config.max_prefill_waste)
        need = max(len(s.prompt) + s.params.max_new_tokens for s in admitted)
        for start, stop in groups:  # a padded prefill writes up to cached + the group's widest suffix
            need = max(need, max(cached for _, cached in reuse[start:stop]) + max(suffixes[start:stop]))
        first_row = len(self._running)
        self._ensure_kv(weights, first_row + len(admitted), need)
        assert self._kv is not None
        for offset, (sequence, (entry, cached)) in enumerate(zip(admitted, reuse, strict=True)):
            if entry is not None:
                self._kv[:, :, first_row + offset, :, :cached] = entry.kv[:, :, :, :cached]
                sequence.exact_kv = entry.exact
            sequence.length = cached
            self.stats.reused_tokens += cached
        self._running.extend(admitted)
        finished_rows: list[int] = []
        for start, stop in groups:
            rows = range(first_row + start, first_row + stop)
            finished_rows += self._prefill(weights, list(rows))
        return self._finish(finished_rows)

    @property
    def _capacity_step(self) -> int:
        return kernels.EXACT_KEYS if self.config.deterministic else _CAPACITY_STEP

    def _exact(self, sequences: Sequence[_Sequence]) -> bool:
        """Whether a forward pass over `sequences` must be batch-invariant: one of them is seeded."""
        return self.config.deterministic and any(sequence.params.seed is not None for sequence in sequences)

    def _copy_plan(self, sequence: _Sequence) -> tuple[PrefixCacheEntry | None, int]:
        """The cache entry to copy into the row and how many tokens it covers (at least one is left to
        prefill); a seeded request in deterministic mode takes exact entries only."""
        limit = len(sequence.prompt) - 1
        match = self.prefix_cache.match(sequence.prompt, limit=limit, exact=self._exact([sequence]))
        return (None, 0) if match is None else (match.entry, match.length)

    def _share_common_prefix(
        self, weights: kernels.LlamaWeights, prompts: list[tuple[int, ...]], exact: bool
    ) -> None:
        """Prefill the prefix all `prompts` share once, into the prefix cache, unless it is mostly cached."""
        if len(prompts) < 2:
            return
        common = min(longest_common_prefix(prompts), min(len(prompt) for prompt in prompts) - 1)
        match = self.prefix_cache.match(prompts[0][:common], exact=exact)
        cached = 0 if match is None else match.length
        if common - cached < self.config.min_shared_prefix:
            return
        step = self._capacity_step
        kv = kernels.new_cache(weights, rows=1, capacity=-(-common // step) * step)
        if match is not None:
            kv[:, :, 0, :, :cached] = match.entry.kv[:, :, :, :cached]
        ids = torch.tensor([prompts[0][cached:common]])
        last = torch.tensor([common - cached - 1])
        kernels.forward(weights, ids, torch.tensor([cached]), kv, last, exact=exact)
        self.stats.prefilled_tokens += common - cached
        self.stats.reused_tokens += cached
        exact_kv = exact and (match is None or match.entry.exact)
        self.prefix_cache.insert(prompts[0][:common], kv[:, :, 0, :, :common], exact=exact_kv)

    def _prefill(self, weights: kernels.LlamaWeights, rows: list[int]) -> list[int]:
        """Prefill the uncached suffix of `rows` (consecutive) in one padded batch; sample first tokens."""
        assert self._kv is not None
        sequences = [self._running[row] for row in rows]
        suffixes = [sequence.prompt[sequence.length :] for sequence in sequences]
        width = max(len(suffix) for suffix in suffixes)
        ids = torch.zeros((len(rows), width), dtype=torch.long)
        for index, suffix in enumerate(suffixes):
            ids[index, : len(suffix)] = torch.tensor(suffix)
        starts = torch.tensor([sequence.length for sequence in sequences])
        last = torch.tensor([len(suffix) - 1 for suffix in suffixes])
        exact = self._exact(sequences)
        logits = kernels.forward(
            weights, ids, starts, self._kv[:, :, rows[0] : rows[-1] + 1], last, exact=exact
        )
        for row, sequence, suffix in zip(rows, sequences, suffixes, strict=True):
            sequence.length = len(sequence.prompt)
            sequence.exact_kv = sequence.exact_kv and exact
            self.stats.prefilled_tokens += len(suffix)
            self._remember(sequence.prompt, row, sequence)
        done = self._sample(sequences, logits)
        return [row for row, finished in zip(rows, done, strict=True) if finished]

    # -- decoding and finishing ---------------------------------------------------------------------------

    def _decode(self) -> list[tuple[int, Completion]]:
        """One batched decode step: feed every running row its last sampled token, sample the next."""
        assert self._kv is not None
        count = len(self._running)
        ids = torch.tensor([[sequence.tokens[-1]] for sequence in self._running])
        starts = torch.tensor([sequence.length for sequence in self._running])
        zeros = torch.zeros(count, dtype=torch.long)
        exact = self._exact(self._running)
        shared = 0 if exact else self._shared_prefix()
        logits = kernels.forward(self.weights, ids, starts, self._kv[:, :, :count], zeros, shared, exact)
        self.stats.decode_steps += 1
        for sequence in self._running:
            sequence.length += 1
            sequence.exact_kv = sequence.exact_kv and exact
        done = self._sample(self._running, logits)
        return self._finish([row for row, finished in enumerate(done) if finished])

    def _shared_prefix(self) -> int:
        """Leading prompt tokens every running row shares (0 below `min_shared_prefix`); cached per batch."""
        members = tuple(sequence.handle for sequence in self._running)
        if members != self._shared_members:
            shared = longest_common_prefix([sequence.prompt for sequence in self._running])
            self._shared_members = members
            self._shared = shared if shared >= self.config.min_shared_prefix else 0
        return self._shared

    def _sample(self, sequences: list[_Sequence], logits: torch.Tensor) -> list[bool]:
        """Sample each sequence's next token from its row of `logits` [B, V]; which sequences are done."""
        temperatures = torch.tensor([sequence.params.temperature for sequence in sequences])
        top_ps = torch.tensor([sequence.params.top_p for sequence in sequences])
        generators = [sequence.generator for sequence in sequences]
        tokens, logprobs = sample_next(logits, temperatures, top_ps, generators)
        first = [row for row, sequence in enumerate(sequences) if not sequence.tokens]  # just prefilled
        if first:
            entropies = token_entropy(logits[first], temperatures[first]).tolist()
            for row, entropy in zip(first, entropies, strict=True):
                sequences[row].first_token_entropy = float(entropy)
        for sequence, token, logprob in zip(sequences, tokens.tolist(), logprobs.tolist(), strict=True):
            sequence.tokens.append(int(token))
            sequence.logprobs.append(float(logprob))
        self.stats.sampled_tokens += len(sequences)
        return [self._done(sequence) for sequence in sequences]

    def _done(self, sequence: _Sequence) -> bool:
        if sequence.tokens[-1] in self.stop_ids or len(sequence.tokens) >= sequence.params.max_new_tokens:
            return True
        return self._hit_stop_string(sequence)

    def _hit_stop_string(self, sequence: _Sequence) -> bool:
        stop = sequence.params.stop
        if not stop:
            return False
        window = max(len(string) for string in stop) + 8  # tokens; every token decodes to >= 1 character
        tail = str(self.tokenizer.decode(sequence.tokens[-window:], skip_special_tokens=False))
        return any(string in tail for string in stop)

    def _finish(self, rows: list[int]) -> list[tuple[int, Completion]]:
        """Completions of the finished `rows`; their KV goes to the prefix cache and their rows are freed."""
        results = []
        for row in rows:
            sequence = self._running[row]
            self._remember((*sequence.prompt, *sequence.tokens[:-1]), row, sequence)
            results.append((sequence.handle, self._completion(sequence)))
        self._free_rows(rows)
        return results

    def _completion(self, sequence: _Sequence) -> Completion:
        tokens = sequence.tokens
        ended_turn = tokens[-1] in self.stop_ids
        stopped = ended_turn or self._hit_stop_string(sequence)
        return Completion(
            token_ids=tuple(tokens),
            logprobs=tuple(sequence.logprobs),
            text=str(self.tokenizer.decode(tokens, skip_special_tokens=True)),
            finish_reason="stop" if stopped else "length",
            ended_turn=ended_turn,
            first_token_entropy=sequence.first_token_entropy,
        )

    def _remember(self, tokens: tuple[int, ...], row: int, sequence: _Sequence) -> None:
        """Store row `row`'s KV positions (all `sequence.length` of them) as the prefix-cache entry of
        `tokens`."""
        length = sequence.length
        assert self._kv is not None and len(tokens) == length
        kv = self._kv[:, :, row, :, :length].clone()
        self.prefix_cache.insert(tokens, kv, exact=self.config.deterministic and sequence.exact_kv)

    def _free_rows(self, rows: list[int]) -> None:
        """Remove rows, moving the last running row into each hole so rows stay packed."""
        for row in sorted(rows, reverse=True):
            last = len(self._running) - 1
            if row != last:
                assert self._kv is not None
                moved = self._running[last]
                self._kv[:, :, row, :, : moved.length] = self._kv[:, :, last, :, : moved.length]
                self._running[row] = moved
            self._running.pop()

    def _ensure_kv(self, weights: kernels.LlamaWeights, rows: int, capacity: int) -> None:
        """Grow the batch KV tensor to at least `rows` x `capacity`, keeping the running rows' contents."""
        current = self._kv
        if current is not None and current.shape[2] >= rows and current.shape[4] >= capacity:
            return
        rows = min(self.config.max_batch, -(-rows // _ROW_STEP) * _ROW_STEP)
        capacity = -(-capacity // self._capacity_step) * self._capacity_step
        if current is not None:
            rows, capacity = max(rows, current.shape[2]), max(capacity, current.shape[4])
        grown = kernels.new_cache(weights, rows, capacity)
        if current is not None and self._running:
            longest = max(sequence.length for sequence in self._running)
            kept = len(self._running)
            grown[:, :, :kept, :, :longest] = current[:, :, :kept, :, :longest]
        self._kv = grown


def prefill_groups(suffix_lengths: Sequence[int], max_waste: float) -> list[tuple[int, int]]:
    """[start, stop) runs of ascending `suffix_lengths` prefilled together: padding <= max_waste * real."""
    groups: list[tuple[int, int]] = []
    start = 0
    for stop in range(1, len(suffix_lengths) + 1):
        if stop < len(suffix_lengths):
            members = suffix_lengths[start : stop + 1]
            padded = max(members) * len(members)
            if padded - sum(members) <= max_waste * sum(members):
                continue
        groups.append((start, stop))
        start = stop
    return groups


def weights_version(model: torch.nn.Module) -> int:
    """Sum of the parameters' version counters: it moves whenever any parameter is modified in place."""
    return sum(int(parameter._version) for parameter in model.parameters())


def resolve_precision(precision: Precision) -> torch.dtype:
    if precision == "auto":
        return kernels.best_dtype()
    return torch.bfloat16 if precision == "bfloat16" else torch.float32
