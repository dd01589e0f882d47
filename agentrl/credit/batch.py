"""Flattening episodes (typed, or as plain records) into a `StepBatch`, and splitting results back.

What this is: the two ways into credit assignment — `episodes_to_batch` for the runner's `Episode`s and
`records_to_batch` for the plain-dict record API of docs/credit.md — plus `split_by_episode` for the way out.
Group labels are mapped to ints 0..G-1 once, in order of first appearance.

What this is not: an estimator, and not a filter. Episodes that ended in an infrastructure failure must be
left out by the caller; they are not training signal.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import numpy as np

from agentrl.errors import ConfigError
from agentrl.types import Episode, StepBatch, Turn, copy_origins

CONTEXT_RESET = "context_reset"  # `agentrl.env.core.INFO_CONTEXT_RESET`: credit does not import the env layer


def episodes_to_batch(episodes: Sequence[Episode]) -> StepBatch:
    """One row per turn; group = episode.group_id, states = episode.state_keys, valid = not turn.invalid,
    boundaries = the turns whose info has `context_reset` True (the env's part boundaries).

    answer_probs = the turns' `answer_prob` (IGPO) when every turn of every episode has one, else None.
    Tree links: an episode whose `parent_id` names another episode of the batch becomes a record with
    "parent" (that episode's index) and "branch_turn"; a parent that is not in the batch (e.g. left out as
    an infrastructure failure) leaves the episode a root, so its copied prefix is trained with it.
    """
    with_probs = _all_turns_have_answer_probs(episodes)
    index_of = {episode.episode_id: index for index, episode in enumerate(episodes)}
    records = [
        {
            "group": episode.group_id,
            "states": episode.state_keys,
            "rewards": [turn.reward for turn in episode.turns],
            "valid": [not turn.invalid for turn in episode.turns],
            "actions": [action_key(turn) for turn in episode.turns],
            "boundaries": [bool(turn.info.get(CONTEXT_RESET, False)) for turn in episode.turns],
            **({"answer_probs": [turn.answer_prob for turn in episode.turns]} if with_probs else {}),
            **(
                {"parent": index_of[episode.parent_id], "branch_turn": episode.branch_turn or 0}
                if episode.parent_id in index_of
                else {}
            ),
        }
        for episode in episodes
    ]
    return records_to_batch(records)


def _all_turns_have_answer_probs(episodes: Sequence[Episode]) -> bool:
    probs = [turn.answer_prob for episode in episodes for turn in episode.turns]
    return bool(probs) and None not in probs


def action_key(turn: Turn) -> Hashable:
    """A hashable identity of a turn's action: its tool calls when it made any, else its stripped text.

    Two turns that call the same tool with the same arguments take the same action even if their prose
    differs, which is what transition-merging estimators (SALT) need.
    """
    calls = turn.action.tool_calls
    if not calls:
        return turn.text.strip()
    return tuple((call.name, json.dumps(dict(call.arguments), sort_keys=True, default=str)) for call in calls)


def records_to_batch(records: Sequence[Mapping[str, Any]]) -> StepBatch:
    """The record API's input (docs/credit.md, "The record API") as a StepBatch; bad ones -> ConfigError."""
    for index, record in enumerate(records):
        _check_record(index, record)
    labels: dict[Hashable, int] = {}
    group = np.array([labels.setdefault(r["group"], len(labels)) for r in records], dtype=np.int64)
    lengths = np.array([len(r["rewards"]) for r in records], dtype=np.int64)
    episode = np.repeat(np.arange(len(records), dtype=np.int64), lengths)
    parent, branch_step = _tree_links(records, group, lengths)
    return StepBatch(
        group=group,
        episode=episode,
        step=np.arange(episode.size, dtype=np.int64) - np.repeat(np.cumsum(lengths) - lengths, lengths),
        rewards=np.array(_concat(records, "rewards"), dtype=np.float64),
        valid=np.array(_concat(records, "valid", default=True), dtype=bool),
        states=tuple(state for r in records for state in r["states"]),
        actions=_optional_tuple(records, "actions"),
        answer_probs=_optional_array(records, "answer_probs"),
        outcome=np.array([r["outcome"] for r in records], dtype=np.float64)
        if _all_have(records, "outcome")
        else None,
        reward_components=_optional_array(records, "reward_components"),
        parent=parent,
        branch_step=branch_step,
        boundary=np.array(_concat(records, "boundaries"), dtype=bool)
        if _all_have(records, "boundaries")
        else None,
    )


def split_by_episode(values: np.ndarray, batch: StepBatch) -> list[list[float]]:
    """[S] values -> one list per episode, in batch order."""
    if batch.num_episodes == 0:
        return []
    bounds = np.cumsum(batch.lengths)[:-1]
    return [chunk.tolist() for chunk in np.split(np.asarray(values, dtype=np.float64), bounds)]


def copies_by_episode(batch: StepBatch) -> list[list[bool]]:
    """`batch.shared_copy` per episode, in batch order: True on a branch's copied prefix turns, which the
    trainer keeps as context but gives loss mask 0 (they are trained once, in their original)."""
    if batch.num_episodes == 0:
        return []
    return [chunk.tolist() for chunk in np.split(batch.shared_copy, np.cumsum(batch.lengths)[:-1])]


def _check_record(index: int, record: Mapping[str, Any]) -> None:
    missing = [key for key in ("group", "states", "rewards") if key not in record]
    if missing:
        raise ConfigError(f"record {index} lacks {missing}; each record needs group, states and rewards")
    steps = len(record["rewards"])
    if len(record["states"]) != steps + 1:
        raise ConfigError(
            f"record {index}: states must have len(rewards) + 1 = {steps + 1} entries "
            f"(the state before each step, then the final one), got {len(record['states'])}"
        )
    for key in ("valid", "actions", "answer_probs", "reward_components", "boundaries"):
        if key in record and len(record[key]) != steps:
            raise ConfigError(
                f"record {index}: {key} must have one entry per step ({steps}), got {len(record[key])}"
            )


def _tree_links(
    records: Sequence[Mapping[str, Any]], group: np.ndarray, lengths: np.ndarray
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """([E] parent index or -1, [E] branch step) from the records' optional "parent" (the index of the record
    this one branched from, or None) and "branch_turn"; (None, None) when no record has a parent."""
    parents = [record.get("parent") for record in records]
    if all(up is None for up in parents):
        return None, None
    parent = np.array([-1 if up is None else up for up in parents], dtype=np.int64)
    branch = np.array([0 if up is None else record.get("branch_turn", -1) for up, record in
                       zip(parents, records, strict=True)], dtype=np.int64)  # fmt: skip
    for index in np.flatnonzero(parent >= 0).tolist():
        _check_link(index, int(parent[index]), int(branch[index]), records, group, lengths)
    try:
        copy_origins(lengths, parent, branch)
    except ValueError as error:
        raise ConfigError(f"records' parent links are not a tree: {error}") from None
    return parent, branch


def _check_link(
    index: int,
    up: int,
    branch: int,
    records: Sequence[Mapping[str, Any]],
    group: np.ndarray,
    lengths: np.ndarray,
) -> None:
    """A branch must name another record of its own group and share a prefix that both records have."""
    if not 0 <= up < len(records) or up == index:
        raise ConfigError(f"record {index}: parent must be the index of another record, got {up}")
    if group[up] != group[index]:
        raise ConfigError(f"record {index}: a branch must be in its parent's group (record {up})")
    if not 0 <= branch <= min(lengths[index], lengths[up]):
        raise ConfigError(
            f"record {index}: branch_turn must be in 0..{min(lengths[index], lengths[up])} "
            f"(the turns it shares with record {up}), got {branch}"
        )
    mine, theirs = records[index], records[up]
    if list(mine["states"][: branch + 1]) != list(theirs["states"][: branch + 1]) or list(
        mine["rewards"][:branch]
    ) != list(theirs["rewards"][:branch]):
        raise ConfigError(
            f"record {index}: its first {branch} turns must be copies of record {up}'s "
            "(same states and rewards)"
        )


def _concat(records: Sequence[Mapping[str, Any]], key: str, default: Any = None) -> list[Any]:
    return [item for r in records for item in (r[key] if key in r else [default] * len(r["rewards"]))]


def _all_have(records: Sequence[Mapping[str, Any]], key: str) -> bool:
    present = [key in r for r in records]
    if any(present) and not all(present):
        raise ConfigError(
            f"records must all carry {key!r} or none of them; {sum(present)} of {len(present)} do"
        )
    return bool(records) and all(present)


def _optional_tuple(records: Sequence[Mapping[str, Any]], key: str) -> tuple[Hashable, ...] | None:
    return tuple(_concat(records, key)) if _all_have(records, key) else None


def _optional_array(records: Sequence[Mapping[str, Any]], key: str) -> np.ndarray | None:
    return np.array(_concat(records, key), dtype=np.float64) if _all_have(records, key) else None
