"""Episodes -> token-level training samples (the `concat` mode of docs/design.md) and their padded collation.

What this is: `episode_to_sample` lays an episode's tokens out exactly as the engine saw and produced them
(turn after turn, `prompt_ids + completion_ids`; nothing is re-tokenised) with per-token masks, and
`collate` right-pads samples into [B, L] tensors. For the shared-prefix update (`update.shared_prefix`),
`plan_packs` finds the members of a group that start with the same tokens (the first prompt, at least) and
`collate_shared` lays them out as one prefix run once plus right-padded suffix rows.

Per-token conventions (position t is the t-th token of the sequence):
    loss_mask    1 on tokens the engine sampled, 0 on prompt, template and observation tokens ("1 if
                 sampled, 0 if forced").
    old_logprobs the sampler's log-probability of the token at t (placed at t itself, matching
                 `losses.token_logprobs`); 0 where loss_mask is 0.
    advantages   the advantage of the token's turn on sampled tokens; 0 elsewhere.

Shared prefix: a pack of K shared tokens holds ids[:K] once (`prefix_ids`) and, per member, the suffix row
ids[K:]. Row position 0 (token K) has no log-prob of its own (as position 0 of any row); that loses nothing
because K is chosen so that token K is trained (loss mask 1) in no member: see `shared_length`. In a flat
group no member trains a token before K either, and the loss columns are the suffix rows' (sliced at K). In
a tree the prefix may run past the branch point's parent turns: one member, the prefix's owner (the root or
the parent branch that played those turns), trains them, and every other member holds the same ids as
copied, loss-free context (`copied_turns`). Such a pack keeps the loss columns of the whole sequences
([G, K + S]) so that the owner's prefix tokens are trained in its own row, from the prefix's logits
(`trains_prefix`, `along_columns`, `agentrl/trainer/shared_prefix.py::pack_token_logprobs`).

What the episodes cost the env, counted the way the tree trains them (each played turn once, copies not):
`env_steps_of` (what `train.env_step_budget` counts) and `forks_of`.

The way back, from a sample's per-token values to the turns they belong to (the trainer's log-probs, for
the store): `segment_turns` (which turns each sample of an episode holds), `completion_spans` (where each
turn's sampled tokens sit in it) and `turn_values` (a turn's values, or None where the sample does not
train all of its tokens).

What this is not: a filter or the per-step mode. Callers exclude infrastructure-failure episodes (they are
not training signal) before calling `episode_to_sample`; the per-step sample mode comes later.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import torch

from agentrl.types import Episode, Turn


@dataclass(frozen=True)
class TrainSample:
    """One episode's token sequence and its per-token training targets (all [L], see module docstring)."""

    input_ids: torch.Tensor  # [L] long
    loss_mask: torch.Tensor  # [L] float
    old_logprobs: torch.Tensor  # [L] float
    advantages: torch.Tensor  # [L] float
    group_key: str | None = None  # the episode's group: members may share a prompt prefix; None: no group
    tree_key: str | None = None  # the episode's tree (`tree_keys`) in a group of several trees; None: none

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def num_sampled_tokens(self) -> int:
        return int(self.loss_mask.sum().item())


def episode_to_sample(
    episode: Episode, step_advantages: Sequence[float], max_length: int, copied: int | None = None
) -> TrainSample:
    """The episode's `concat` sample, keeping its first `max_length` tokens.

    Tokens past `max_length` are cut (and with them the end of the last turns' signal); the runner's context
    budget normally keeps episodes shorter than that. `copied`: how many of `episode.turns` are a tree
    branch's copied prefix (context only); None: `copied_turns(episode)`.
    """
    if len(step_advantages) != len(episode.turns):
        raise ValueError(
            f"episode {episode.episode_id} has {len(episode.turns)} turns "
            f"but {len(step_advantages)} advantages"
        )
    copied = copied_turns(episode) if copied is None else copied
    columns = [
        _turn_columns(turn, float(advantage), trained=position >= copied)
        for position, (turn, advantage) in enumerate(zip(episode.turns, step_advantages, strict=True))
    ]
    ids, mask, logprobs, advantages = (
        [value for column in columns for value in column[part]][:max_length] for part in range(4)
    )
    return TrainSample(
        input_ids=torch.tensor(ids, dtype=torch.long),
        loss_mask=torch.tensor(mask, dtype=torch.float32),
        old_logprobs=torch.tensor(logprobs, dtype=torch.float32),
        advantages=torch.tensor(advantages, dtype=torch.float32),
        group_key=episode.group_id,
    )


def episode_to_samples(
    episode: Episode, step_advantages: Sequence[float], max_length: int
) -> list[TrainSample]:
    """One sample per token segment (`Turn.segment`): the `concat` sample for an episode of one segment
    (a `full` context), and for a context policy's windows or masks (`rollout.context`) or an external
    harness that rewrote its history (`agentrl/harness`) one sample per sequence the engine was sent, each
    turn with its own advantage, each cut at `max_length`. Nothing is re-tokenised: a segment's first turn
    holds its whole prompt. A tree branch's copied prefix turns stay context only in whichever segment
    they fall."""
    segments = segment_turns(episode)
    if len(segments) <= 1:
        return [episode_to_sample(episode, step_advantages, max_length)]
    if len(step_advantages) != len(episode.turns):
        raise ValueError(
            f"episode {episode.episode_id} has {len(episode.turns)} turns "
            f"but {len(step_advantages)} advantages"
        )
    copied = copied_turns(episode)
    return [
        episode_to_sample(
            replace(episode, turns=tuple(episode.turns[p] for p in positions)),
            [step_advantages[p] for p in positions],
            max_length,
            copied=sum(position < copied for position in positions),
        )
        for positions in segments
    ]


def segment_turns(episode: Episode) -> list[tuple[int, ...]]:
    """The positions (in `episode.turns`) of the turns of each sample `episode_to_samples` makes, in its
    order: all of them for one segment (or none), else each segment's, by segment number, leaving out a
    segment that holds only a tree branch's copied prefix turns (it would train nothing)."""
    segments = sorted({turn.segment for turn in episode.turns})
    if len(segments) <= 1:
        return [tuple(range(len(episode.turns)))]
    copied = copied_turns(episode)
    found = (
        tuple(position for position, turn in enumerate(episode.turns) if turn.segment == segment)
        for segment in segments
    )
    return [positions for positions in found if positions[-1] >= copied]


def completion_spans(turns: Sequence[Turn]) -> list[tuple[int, int]]:
    """[start, stop) of each turn's completion tokens in the sample of these turns, laid out as
    `episode_to_sample` lays them (prompt then completion, turn after turn), before any cut at max_length."""
    spans = []
    position = 0
    for turn in turns:
        start = position + len(turn.prompt_ids)
        position = start + len(turn.completion_ids)
        spans.append((start, position))
    return spans


def turn_values(
    values: torch.Tensor, sample: TrainSample, spans: Sequence[tuple[int, int]]
) -> list[list[float] | None]:
    """Per turn (its `completion_spans`), `values` ([L], one per token of `sample`, e.g. the trainer's
    log-probs) at its completion tokens. None for a turn not wholly trained in the sample: one cut (even in
    part) at max_length, a copied context-only turn (loss mask 0), one with no completion tokens, or one
    whose completion starts the sample (no token before it to predict it from). Never a shifted or
    partial list: a turn's values are its own tokens' or None."""
    if values.shape != (sample.num_tokens,):
        raise ValueError(f"values of shape {tuple(values.shape)} for a sample of {sample.num_tokens} tokens")
    trained = sample.loss_mask > 0
    return [
        values[start:stop].tolist()
        if 0 < start < stop <= sample.num_tokens and bool(trained[start:stop].all())
        else None
        for start, stop in spans
    ]


def copied_turns(episode: Episode) -> int:
    """How many of the episode's first turns are copies of its parent's (a tree rollout's branch,
    `Episode.branch_turn`): they stay in the sample as context, with no loss, so the tree trains each shared
    turn once, in the episode that played it (credit gives the copies the original's advantage)."""
    return (episode.branch_turn or 0) if episode.parent_id is not None else 0


def env_steps_of(episodes: Sequence[Episode]) -> int:
    """Env steps the episodes cost: each turn the env played (a summary turn is none), a tree branch's
    copied prefix turns once, in the episode that played them (a fork plays no action; `copied_turns`), as
    bench/tree_rollout.py counts them. What `train.env_step_budget` and studies/scripts/credit_study.py
    count."""
    return sum(
        sum(not turn.is_summary for turn in episode.turns[copied_turns(episode) :]) for episode in episodes
    )


def forks_of(episodes: Sequence[Episode]) -> int:
    """Env forks the episodes cost: one per tree branch (an episode with a parent)."""
    return sum(episode.parent_id is not None for episode in episodes)


def tree_keys(episodes: Sequence[Episode]) -> list[str | None]:
    """Per episode, the id of the root of its tree (followed up the `parent_id` links that stay among
    `episodes`), or None for an episode that is in no tree (no parent among them and no branch): a group of
    `rollout.tree.trees` trees is packed tree by tree (`plan_packs`), a flat group as one."""
    parent = {e.episode_id: e.parent_id for e in episodes}
    linked = {e.episode_id for e in episodes if e.parent_id in parent} | {
        e.parent_id for e in episodes if e.parent_id in parent
    }

    def root(episode_id: str) -> str:
        for _ in range(len(parent)):  # at most the depth; a cycle (never made by the runner) stops here
            up = parent[episode_id]
            if up not in parent:
                break
            episode_id = up
        return episode_id

    return [root(e.episode_id) if e.episode_id in linked else None for e in episodes]


def _turn_columns(turn: Turn, advantage: float, trained: bool = True) -> tuple[Sequence[float], ...]:
    """(ids, loss_mask, old_logprobs, advantages) of one turn's prompt + completion tokens; a turn that is
    not `trained` (a copied prefix turn) is context only."""
    if len(turn.completion_logprobs) != len(turn.completion_ids):
        raise ValueError(
            f"turn {turn.index}: {len(turn.completion_ids)} completion ids but "
            f"{len(turn.completion_logprobs)} logprobs; the engine must return one logprob per sampled token"
        )
    prompt, completion = len(turn.prompt_ids), len(turn.completion_ids)
    weight = 1.0 if trained else 0.0
    return (
        [*turn.prompt_ids, *turn.completion_ids],
        [0.0] * prompt + [weight] * completion,
        [0.0] * prompt + list(turn.completion_logprobs),
        [0.0] * prompt + [advantage * weight] * completion,
    )


def collate(samples: Sequence[TrainSample], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad to the longest sample: input_ids, attention_mask, loss_mask, old_logprobs and advantages,
    each [B, L]. Padding has attention_mask 0 and loss_mask 0."""
    if not samples:
        raise ValueError("collate needs at least one sample")
    length = max(sample.num_tokens for sample in samples)
    return {
        "input_ids": _pad([s.input_ids for s in samples], length, pad_id),
        "attention_mask": _pad([torch.ones_like(s.input_ids) for s in samples], length, 0),
        "loss_mask": _pad([s.loss_mask for s in samples], length, 0.0),
        "old_logprobs": _pad([s.old_logprobs for s in samples], length, 0.0),
        "advantages": _pad([s.advantages for s in samples], length, 0.0),
    }


def _pad(rows: Sequence[torch.Tensor], length: int, value: float) -> torch.Tensor:
    out = torch.full((len(rows), length), value, dtype=rows[0].dtype)
    for index, row in enumerate(rows):
        out[index, : row.shape[0]] = row
    return out


SHARED_COLUMNS = ("loss_mask", "old_logprobs", "advantages")


@dataclass(frozen=True)
class Pack:
    """Samples that go through the model together as one micro batch: `indices` into the caller's list, and
    `shared`, how many leading tokens they run once for all (0: a plain padded batch, `collate`)."""

    indices: tuple[int, ...]
    shared: int = 0

    def padded_tokens(self, samples: Sequence[TrainSample]) -> int:
        """Tokens the forward pass runs: the shared prefix once plus every row padded to the longest."""
        longest = max(samples[index].num_tokens for index in self.indices)
        return self.shared + len(self.indices) * (longest - self.shared)


def shared_length(samples: Sequence[TrainSample]) -> int:
    """K, the leading tokens the samples can run once: the longest common prefix of their ids, cut so that
    every row keeps at least one token, tokens 0..K-1 are trained (loss mask 1) in at most one sample, the
    prefix's owner (a tree's root or parent branch; the others hold those ids as copied context), and token
    K, which starts each suffix row and gets no log-prob there, is trained in none. In a flat group every
    member trains its first completion, so K ends before it, at the first prompt. 0: nothing to share."""
    if not samples:
        return 0
    common = _common_prefix_length(samples)
    masks = torch.stack([sample.loss_mask[: common + 1] > 0 for sample in samples])  # [N, common + 1]
    bound = min(common, _one_owner_length(masks))
    untrained = (~masks[:, : bound + 1].any(dim=0)).nonzero()
    return int(untrained[-1, 0]) if untrained.numel() else 0


def _common_prefix_length(samples: Sequence[TrainSample]) -> int:
    """How many leading ids all samples have in common, at most the shortest sample's length - 1."""
    limit = min(sample.num_tokens for sample in samples) - 1
    if limit <= 0:
        return 0
    first = samples[0].input_ids[:limit]
    same = torch.ones(limit, dtype=torch.bool)
    for sample in samples[1:]:
        same &= sample.input_ids[:limit] == first
    return limit if bool(same.all()) else int(same.to(torch.int8).argmin())


def _one_owner_length(masks: torch.Tensor) -> int:
    """[N, P] trained flags -> the first position trained by a sample other than the one that trains the
    first trained position (the owner), or P when every trained position is the owner's."""
    trained = masks.any(dim=0).nonzero()
    if not trained.numel():
        return int(masks.shape[1])
    owner = int(masks[:, int(trained[0, 0])].to(torch.int8).argmax())
    others = torch.cat([masks[:owner], masks[owner + 1 :]]).any(dim=0).nonzero()
    return int(others[0, 0]) if others.numel() else int(masks.shape[1])


def plan_packs(samples: Sequence[TrainSample], micro_batch_size: int, min_shared_tokens: int) -> list[Pack]:
    """The shared-prefix packs of `samples`: the members of each group (same `group_key`) in packs that share
    at least `min_shared_tokens` leading tokens, each pack running no more padded tokens than an unshared
    micro batch of `micro_batch_size` of the group's longest member would (the memory the user sized).

    Samples left out (no group, a group alone, members that diverge early, a pack that would hold one
    member) are not in any pack; the caller batches them as before. Packs come in order of first member.

    Trees (a group whose members branch from each other, `copied_turns`): a pack shares the longest prefix
    all its members share (`shared_length`), up to the branch turn's prompt when it holds siblings of one
    branch point, the owner's turns before it trained from the prefix's logits. Members are packed in the
    order given, and a tree's leaves come depth first (`agentrl/agent/tree.py`), so a pack of neighbouring
    leaves shares their deepest common branch point. Nested trees: a pack that spans sub-trees shares only
    the prefix common to all of them (the shallower branch point); a deeper prefix that only some of its
    members share runs once per member. Packs are cut by the memory budget, not at sub-tree boundaries.
    Several trees per group (`rollout.tree.trees`): their members share no more than the first prompt
    (each tree's root trains its own turn 0), so each tree is packed on its own (`TrainSample.tree_key`),
    its root prefix run once per pack, and the group's prompt once per tree instead of once per group.
    """
    groups: dict[tuple[str, str | None], list[int]] = {}
    for index, sample in enumerate(samples):
        if sample.group_key is not None:
            groups.setdefault((sample.group_key, sample.tree_key), []).append(index)
    packs: list[Pack] = []
    for members in groups.values():
        if shared_length([samples[i] for i in members]) < max(min_shared_tokens, 1):
            continue
        budget = micro_batch_size * max(samples[i].num_tokens for i in members)
        current: list[int] = []
        for index in members:
            grown = [*current, index]
            shared = shared_length([samples[i] for i in grown])
            if Pack(tuple(grown), shared).padded_tokens(samples) <= budget or not current:
                current = grown
                continue
            packs.append(Pack(tuple(current), shared_length([samples[i] for i in current])))
            current = [index]
        packs.append(Pack(tuple(current), shared_length([samples[i] for i in current])))
    return sorted((pack for pack in packs if len(pack.indices) > 1), key=lambda pack: pack.indices[0])


def collate_shared(samples: Sequence[TrainSample], shared: int, pad_id: int) -> dict[str, torch.Tensor]:
    """One pack as tensors: `prefix_ids` [1, K] (the K = `shared` tokens every sample starts with) and the
    suffix rows from token K on, right-padded as `collate` pads: input_ids and attention_mask (suffix tokens
    only), each [G, S]. The loss columns (loss_mask, old_logprobs and advantages) are the suffix rows'
    ([G, S]) when no sample trains a prefix token, and the whole sequences' ([G, K + S], as `collate` gives
    them) when one does, a tree's prefix owner (module docstring; `trains_prefix` tells which)."""
    if shared < 1 or any(
        not torch.equal(s.input_ids[:shared], samples[0].input_ids[:shared]) for s in samples
    ):
        raise ValueError(f"the samples do not share their first {shared} tokens")
    suffixes = [_suffix(sample, shared) for sample in samples]
    batch = {"prefix_ids": samples[0].input_ids[None, :shared], **collate(suffixes, pad_id)}
    if any(bool(sample.loss_mask[:shared].any()) for sample in samples):
        whole = collate(samples, pad_id)
        batch.update({name: whole[name] for name in SHARED_COLUMNS})
    return batch


def _suffix(sample: TrainSample, shared: int) -> TrainSample:
    columns = {name: getattr(sample, name)[shared:] for name in ("input_ids", *SHARED_COLUMNS)}
    return TrainSample(**columns, group_key=sample.group_key, tree_key=sample.tree_key)


def trains_prefix(batch: Mapping[str, torch.Tensor]) -> bool:
    """Whether a collated batch is a pack whose loss columns cover its prefix (a member trains prefix
    tokens: `collate_shared`), so that they are [G, K + S] while its input rows are [G, S]."""
    return "prefix_ids" in batch and batch["loss_mask"].shape[1] > batch["input_ids"].shape[1]


def columns_start(batch: Mapping[str, torch.Tensor]) -> int:
    """The token a collated batch's loss columns start at: K for a pack whose columns are its suffix rows',
    0 for a plain batch and for a pack that trains its prefix."""
    if "prefix_ids" not in batch or trains_prefix(batch):
        return 0
    return int(batch["prefix_ids"].shape[1])


def along_columns(rows: torch.Tensor, prefix: torch.Tensor | None) -> torch.Tensor:
    """[B, S] per-token values of a batch's input rows and, for a pack that trains its prefix, [1, K] (or
    [B, K]) values of the prefix -> the values at the positions of the batch's loss columns: the rows' as
    they are when `prefix` is None, else [B, K + S] with the prefix's values in every row (every member
    has the prefix's tokens; the loss mask keeps the owner's)."""
    if prefix is None:
        return rows
    return torch.cat([prefix.expand(rows.shape[0], -1), rows], dim=1)


def column_ids(batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """The token ids at the positions of a collated batch's loss columns ([B, T])."""
    prefix = batch["prefix_ids"] if trains_prefix(batch) else None
    return along_columns(batch["input_ids"], prefix)


def to_sample_layout(row: torch.Tensor, sample: TrainSample, shared: int) -> torch.Tensor:
    """[S] values of a collated row (padded; a row of loss columns from token `shared` on, `columns_start`)
    -> [L] at the sample's own positions, 0 on the tokens before `shared` (never trained there)."""
    values = row[: sample.num_tokens - shared]
    return torch.nn.functional.pad(values, (shared, 0), value=0.0) if shared else values
