"""The prefix cache: KV tensors of token sequences seen before, found by longest common token prefix.

What this is: `PrefixCache`, an LRU store of entries (token ids, their KV) under a token budget. The cached
engine inserts an entry for every prompt it prefills and for every finished sequence (prompt plus sampled
tokens); the next turn of the same episode, whose context extends that sequence, then matches all of it,
and any other prompt sharing the system prompt, tools and few-shot examples matches that part. Because
attention is causal, the KV of the first m tokens of an entry depends on those m tokens only, so a partial
match is as good as an exact one. An entry that is a prefix of a newly inserted one is dropped (the new one
answers every match it could), so an episode holds one entry at a time, and finished episodes age out.

An entry is `exact` when all of its KV was computed by the batch-invariant kernels (`engine.cached.
deterministic`): a seeded request matches only those, since KV from a batched step may differ in its last
bits from what the request would have computed itself; an exact entry is never dropped for an inexact one.

What this is not: a paged or copy-on-write allocator. Entries are plain tensors copied into (and out of) the
running batch; matching is a linear scan, fine for the few hundred entries a CPU batch produces.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class CacheEntry:
    """tokens: [N] ids; kv: [2, layers, kv_heads, N, head_dim], the KV of exactly those tokens; exact: all
    of it computed by the batch-invariant kernels."""

    tokens: torch.Tensor
    kv: torch.Tensor
    exact: bool = False

    @property
    def length(self) -> int:
        return int(self.tokens.shape[0])


@dataclass(frozen=True)
class PrefixMatch:
    """The entry sharing the longest prefix with a query, and how many leading tokens they share."""

    entry: CacheEntry
    length: int


class PrefixCache:
    """LRU entries keyed by token sequence; the total cached tokens stay within `max_tokens`."""

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens
        self._entries: OrderedDict[int, CacheEntry] = OrderedDict()
        self._next_key = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def total_tokens(self) -> int:
        return sum(entry.length for entry in self._entries.values())

    def entries(self) -> list[CacheEntry]:
        """Entries from least to most recently used."""
        return list(self._entries.values())

    def clear(self) -> None:
        self._entries.clear()

    def match(
        self, tokens: Sequence[int] | torch.Tensor, limit: int | None = None, exact: bool = False
    ) -> PrefixMatch | None:
        """The longest shared prefix (at most `limit` tokens) over all entries, or over the exact ones only;
        marks that entry used."""
        query = torch.as_tensor(tokens, dtype=torch.long)
        cap = query.shape[0] if limit is None else min(limit, query.shape[0])
        best: tuple[int, int] | None = None
        for key, entry in self._entries.items():
            if exact and not entry.exact:
                continue
            shared = common_prefix_length(query[:cap], entry.tokens)
            if shared > 0 and (best is None or shared > best[1]):
                best = (key, shared)
        if best is None:
            return None
        self._entries.move_to_end(best[0])
        return PrefixMatch(self._entries[best[0]], best[1])

    def insert(
        self, tokens: Sequence[int] | torch.Tensor, kv: torch.Tensor, exact: bool = False
    ) -> CacheEntry | None:
        """Store `kv` for `tokens` (dropping entries it extends), then evict least recently used ones.

        Returns the entry, or None when it alone exceeds the budget or an existing entry already covers it.
        """
        entry = CacheEntry(torch.as_tensor(tokens, dtype=torch.long).clone(), kv, exact)
        if entry.length == 0 or entry.length > self.max_tokens:
            return None
        for key, old in list(self._entries.items()):
            shared = common_prefix_length(entry.tokens, old.tokens)
            # one entry replaces another only if it answers every match the other could: exact ones answer
            # seeded requests too
            if shared == entry.length and (old.exact or not exact):  # already covered
                self._entries.move_to_end(key)
                return None
            if shared == old.length and (exact or not old.exact):
                del self._entries[key]
        self._entries[self._next_key] = entry
        self._next_key += 1
        self._evict()
        return entry

    def _evict(self) -> None:
        total = self.total_tokens
        while total > self.max_tokens and self._entries:
            _, oldest = self._entries.popitem(last=False)
            total -= oldest.length


def common_prefix_length(first: torch.Tensor, second: torch.Tensor) -> int:
    """How many leading ids two 1-D id tensors share."""
    width = min(first.shape[0], second.shape[0])
    differs = (first[:width] != second[:width]).nonzero()
    return int(differs[0, 0]) if differs.numel() else width


def longest_common_prefix(sequences: Sequence[Sequence[int]]) -> int:
    """How many leading ids all `sequences` share (0 for none)."""
    if not sequences:
        return 0
    shortest = min(len(sequence) for sequence in sequences)
    for index in range(shortest):
        token = sequences[0][index]
        if any(sequence[index] != token for sequence in sequences):
            return index
    return shortest
