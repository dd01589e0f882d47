"""The credit a run's estimator saw, made visible: its effective options, each episode's and turn's return as
the estimator used it, each task group's summary, and the anchor groups of a step side by side.

What this is: pure functions over a run's saved config and the episode dicts of `repository.load_episodes`.

- `credit_settings(config)`: the estimator and its *effective* options, i.e. its typed config's defaults
  merged with the run's `credit.options` (built by `agentrl.credit.make_config`, the trainer's own builder),
  with the options the run set marked.
- `episode_return(episode, settings)`: the return as used. The store keeps each turn's raw env reward and
  its invalid flag; the trainer feeds the estimator `reward - invalid_penalty * invalid` per turn
  (`agentrl.credit.common.apply_invalid_penalty`, which this calls) and sums it into the episode return;
  GiGPO and HGPO also discount it into per-turn step returns R_t = r_t + gamma * R_{t+1}. So the value is
  *recomputed* from stored fields with the trainer's formula, not stored. Infrastructure failures are not
  training signal and get no return.
- `group_summary(returns)`: n, mean, std (N-1, as GRPO) and "no signal" when every return is equal.
- `anchor_sets(episodes)`: the anchor groups (turns of one task group taken in the same state) of two or
  more turns, each member with its step return and stored advantage.

What this is not: an estimator. Advantages are shown as the trainer stored them; nothing here re-runs credit
assignment. IGPO's answer probabilities are not stored, so its returns are the raw rewards (it has no
invalid-turn penalty; its format-error outcome is an option shown with the others).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from agentrl.credit import make_config
from agentrl.credit.common import apply_invalid_penalty
from agentrl.errors import ConfigError
from agentrl.ui import views

STEP_RETURN_DISCOUNT = {"gigpo": "gamma", "hgpo": "gamma"}
"""Estimators whose step term uses discounted per-turn returns R_t, and the option holding the discount."""


@dataclass(frozen=True)
class CreditSettings:
    """A run's estimator and its effective options (`given`: the ones the run set itself); `problem` says
    why they could not be resolved (no estimator in the saved config, or options this version rejects)."""

    estimator: str | None
    options: dict[str, Any]
    given: frozenset[str]
    problem: str | None = None

    @property
    def invalid_penalty(self) -> float:
        return float(self.options.get("invalid_penalty", 0.0))

    @property
    def gamma(self) -> float | None:
        """The discount of the per-turn step returns, for estimators that have step returns."""
        key = STEP_RETURN_DISCOUNT.get(self.estimator or "")
        return None if key is None else float(self.options[key])


@dataclass(frozen=True)
class EpisodeReturn:
    """An episode's raw reward and its return as the estimator used it, with the per-turn values: the
    reward after the penalty, and (estimators with step returns) the discounted return from that turn."""

    raw: float
    used: float
    penalty: float
    turn_rewards: list[float]
    turn_returns: list[float] | None


@dataclass(frozen=True)
class GroupSummary:
    """A task group's returns as used: how many, their mean and std (N-1), and whether they are all equal
    (then GRPO-style estimators give the whole group a zero advantage: no signal)."""

    n: int
    mean: float
    std: float
    no_signal: bool


@dataclass(frozen=True)
class AnchorMember:
    """One turn of an anchor group: its episode (row id and uid), turn index, whether it was invalid (so
    penalised), its step return and its stored advantage."""

    episode: int
    uid: str
    turn: int
    invalid: bool
    step_return: float | None
    advantage: float | None


def credit_settings(config: Mapping[str, Any]) -> CreditSettings:
    """The estimator and effective options of a run's saved config (see the module docstring)."""
    credit = config.get("credit")
    if not isinstance(credit, Mapping) or not credit.get("estimator"):
        return CreditSettings(None, {}, frozenset(), "this run's saved config names no credit estimator")
    estimator = str(credit["estimator"])
    given = {k: v for k, v in credit.items() if k not in ("estimator", "options", "answer")}
    given.update(credit.get("options") or {})
    try:
        typed = make_config(estimator, **given)
    except ConfigError as error:
        return CreditSettings(
            estimator, dict(given), frozenset(given), f"cannot rebuild its options: {error}"
        )
    return CreditSettings(estimator, dataclasses.asdict(typed), frozenset(given))


def penalised_rewards(rewards: Sequence[float], invalid: Sequence[bool], penalty: float) -> list[float]:
    """Each turn's reward as the estimator saw it: the raw reward minus `penalty` on an invalid turn."""
    valid = ~np.asarray(invalid, dtype=bool)
    return [float(r) for r in apply_invalid_penalty(np.asarray(rewards, dtype=float), valid, penalty)]


def returns_to_go(rewards: Sequence[float], gamma: float) -> list[float]:
    """R_t = r_t + gamma * R_{t+1} within one episode (as `agentrl.credit.common.discounted_returns`)."""
    out: list[float] = []
    running = 0.0
    for reward in reversed(rewards):
        running = reward + gamma * running
        out.append(running)
    return out[::-1]


def episode_return(episode: Mapping[str, Any], settings: CreditSettings) -> EpisodeReturn | None:
    """The episode's return as used (None for an infrastructure failure: never training signal)."""
    if views.is_infra_failure(episode):
        return None
    turns = episode["turns"]
    rewards = penalised_rewards(
        [t["reward"] for t in turns], [t["invalid"] for t in turns], settings.invalid_penalty
    )
    gamma = settings.gamma
    return EpisodeReturn(
        raw=float(episode["reward"]),
        used=sum(rewards),
        penalty=settings.invalid_penalty * views.invalid_turns(episode),
        turn_rewards=rewards,
        turn_returns=None if gamma is None else returns_to_go(rewards, gamma),
    )


def group_summary(returns: Sequence[float]) -> GroupSummary:
    """n, mean, std (N-1; 0 for a single return) and whether all returns are equal."""
    n = len(returns)
    if n == 0:
        return GroupSummary(0, 0.0, 0.0, True)
    mean = sum(returns) / n
    std = math.sqrt(sum((r - mean) ** 2 for r in returns) / (n - 1)) if n > 1 else 0.0
    return GroupSummary(n, mean, std, max(returns) - min(returns) < 1e-12)


def group_summaries(
    groups: Mapping[str, Sequence[Mapping[str, Any]]], returns: Mapping[int, EpisodeReturn | None]
) -> dict[str, GroupSummary]:
    """Per task group: the summary of its usable episodes' returns as used."""
    summaries = {}
    for group_id, episodes in groups.items():
        used = [returns[e["id"]] for e in episodes]
        summaries[group_id] = group_summary([r.used for r in used if r is not None])
    return summaries


def anchor_sets(
    episodes: Iterable[Mapping[str, Any]], returns: Mapping[int, EpisodeReturn | None]
) -> list[tuple[str, list[AnchorMember]]]:
    """(state key, members) of every anchor group of two or more turns, in first-seen order; a member's
    step return is R_t for estimators with step returns, else its episode's return as used."""
    rows = list(episodes)
    by_id = {int(e["id"]): e for e in rows}
    seen: set[tuple[int, int]] = set()
    sets = []
    for members in views.anchor_groups(rows).values():
        first = members[0]
        if len(members) < 2 or (first.episode, first.turn) in seen:
            continue
        seen.add((first.episode, first.turn))
        key = views.state_before(by_id[first.episode], first.turn)
        sets.append((str(key), [_member(by_id[m.episode], m.turn, returns) for m in members]))
    return sets


def _member(
    episode: Mapping[str, Any], turn: int, returns: Mapping[int, EpisodeReturn | None]
) -> AnchorMember:
    used = returns.get(int(episode["id"]))
    step_return = None
    if used is not None:
        step_return = used.used if used.turn_returns is None else used.turn_returns[turn]
    row = episode["turns"][turn]
    return AnchorMember(
        int(episode["id"]), str(episode["uid"]), turn, bool(row["invalid"]), step_return, row["advantage"]
    )
