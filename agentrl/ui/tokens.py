"""A turn's sampled tokens for the episode page: a strip of its token pieces coloured by the sampler's
probability, its least likely tokens, and, where the update computed them, the trainer's log-probs and the
importance ratio of each token.

What this is: `token_strip(tokens, clip)`, a pure function from what the store keeps per turn
(`repository.turn_tokens`: each completion token's text and the sampler's log-prob of it, at the sampling
temperature, since revision 0008; the trainer's log-prob of it under the weights the step's update started
from, since revision 0009) to what the template draws, and `TOKENS`, the template. A token's shade is one
of five probability bands (`BANDS`); its hover title gives the sampler's log-prob and probability, the
trainer's log-prob and the ratio r = exp(trainer - sampler); a token whose r is outside the run's PPO
clip range [1 - loss.clip_low, 1 + loss.clip_high] (`clip_range`) is boxed, and the farthest of them are
listed. The turn's summary: mean |log r|, max r, and the share of its tokens outside the clip range.
`no_trainer_reason` says why a turn has no trainer log-probs (an evaluation episode, an episode left out
of the update, a tree branch's copied turn, a store from before revision 0009, ...), so the page says so.

What this is not: the run page's per-step mismatch metrics (`sampler_abs_log_ratio`, `sampler_kl`, `ess`,
over every token of a step), or a replay: the trainer's log-probs are those its update computed, not
recomputed by the viewer.
"""

# ruff: noqa: E501 (HTML lines are kept whole)
from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup, escape

from agentrl.trainer.configs import LossConfig, UpdateConfig

BANDS = (0.9, 0.5, 0.2, 0.05)
"""Lower bounds of the probability bands p0 (p >= 0.9, unshaded) .. p3; below the last bound is p4."""
LOWEST = 5  # least likely tokens listed per turn (those below BANDS[0] only)
CLIPPED = 5  # tokens outside the clip range listed per turn (the farthest from a ratio of 1 first)
RATIO_LOG_LIMIT = 50.0  # a log ratio above this is shown as exp(50): a float, not an overflow


@dataclass(frozen=True)
class Token:
    """One of a turn's least likely tokens: its position in the completion, its text as shown, log-prob,
    probability and band (0: likely .. 4: unlikely)."""

    position: int
    piece: str
    logprob: float
    prob: float
    band: int


@dataclass(frozen=True)
class Ratio:
    """One of a turn's tokens whose importance ratio is outside the clip range: its position, its text as
    shown, the sampler's and the trainer's log-probs and the ratio exp(trainer - sampler)."""

    position: int
    piece: str
    sampler: float
    trainer: float
    ratio: float


@dataclass(frozen=True)
class RatioSummary:
    """The trainer-vs-sampler summary of a turn: mean |log r| and max r over its tokens, how many are
    outside the clip range [low, high], and the farthest of those (`CLIPPED` at most)."""

    mean_abs_log_ratio: float
    max_ratio: float
    outside: int
    count: int
    low: float
    high: float
    clipped: tuple[Ratio, ...]

    @property
    def share_outside(self) -> float:
        return self.outside / self.count if self.count else 0.0


@dataclass(frozen=True)
class TokenStrip:
    """What the page shows of a turn's tokens: `spans`, the strip's HTML (one span a token, built in one
    pass: a Jinja loop over 10k tokens takes ~10x longer); `missing` says what the store lacks ("" when
    complete); `ratios`, the trainer-vs-sampler summary, or None and `no_trainer`, why."""

    count: int
    spans: Markup
    lowest: tuple[Token, ...]
    mean_logprob: float | None
    unlikely: int  # tokens with p < 0.5
    missing: str
    likely: float = BANDS[0]  # the least likely list leaves out tokens at or above this probability
    ratios: RatioSummary | None = None
    no_trainer: str = ""

    @property
    def legend(self) -> tuple[tuple[int, str], ...]:
        """(band, label) of each probability band, for the strip's key."""
        return (
            *((index, f"p ≥ {bound:g}") for index, bound in enumerate(BANDS)),
            (len(BANDS), f"p < {BANDS[-1]:g}"),
        )


def band(prob: float) -> int:
    """The probability band of `prob`: 0 for p >= BANDS[0], ..., len(BANDS) below the last bound."""
    for index, bound in enumerate(BANDS):
        if prob >= bound:
            return index
    return len(BANDS)


def shown(piece: str) -> str:
    """A piece as the strip prints it: a newline marked (↵) before it breaks the line, an empty piece ∅."""
    return piece.replace("\n", "↵\n") if piece else "∅"


def clip_range(config: Mapping[str, Any]) -> tuple[float, float]:
    """The PPO ratio's clip range (1 - loss.clip_low, 1 + loss.clip_high) of a saved run config, with
    `LossConfig`'s defaults where it says nothing."""
    loss = _section(config, "loss")
    low = float(loss.get("clip_low", LossConfig.clip_low))
    high = float(loss.get("clip_high", LossConfig.clip_high))
    return 1.0 - low, 1.0 + high


def no_trainer_reason(
    episode: Mapping[str, Any], turn_index: int, advantages: Sequence[float | None], config: Mapping[str, Any]
) -> str:
    """Why the store has no trainer log-probs for turn `turn_index` of `episode` (its split, tree fields and
    every turn's advantage, in order), as the page says it; the run's saved config tells which episodes the
    update left out and which log-probs it kept."""
    if episode.get("split") != "train":
        return "an evaluation episode: no update ran on it"
    if turn_index >= len(advantages) or advantages[turn_index] is None:
        return "not trained on (an infrastructure failure, or stored without advantages)"
    branch = episode.get("branch_turn")
    copied = branch if episode.get("parent_uid") is not None and branch is not None else 0
    if turn_index < copied:
        return "a copy of its parent's turn (a tree branch): the parent episode trained it and holds its trainer log-probs"
    loss = _section(config, "loss")
    keeps_all = float(loss.get("kl_coef", 0.0) or 0.0) > 0 or float(loss.get("entropy_coef", 0.0) or 0.0) > 0
    if not keeps_all and all(value == 0.0 for value in advantages[copied:]):
        return "left out of the update: every advantage of the episode is 0, so it carries no signal"
    reasons = [
        "recorded before store revision 0009 (an older agentrl)",
        "cut at the max context (rollout.max_context_tokens)",
    ]
    mini_batches = int(_section(config, "update").get("mini_batches", UpdateConfig.mini_batches))
    if mini_batches > 1 and not float(loss.get("tis_cap", 0.0) or 0.0) > 0:
        reasons.append(
            f"outside the update's first mini batch (update.mini_batches={mini_batches}: the later ones run after an optimiser step)"
        )
    return "none in the store: " + ", or ".join(reasons)


def span(
    position: int,
    piece: str,
    logprob: float,
    trainer: float | None = None,
    clip: tuple[float, float] = (0.0, math.inf),
) -> str:
    """One token of the strip: shaded by its band (none for the likeliest), boxed when its ratio is outside
    `clip`; its log-prob and p, and with the trainer's log-prob that and the ratio, as title."""
    prob = math.exp(logprob)
    shade = band(prob)
    classes = [f"p{shade}"] if shade else []
    title = f"#{position} log-prob {logprob:.3f} p {prob:.3f}"
    if trainer is not None:
        ratio = math.exp(min(trainer - logprob, RATIO_LOG_LIMIT))
        title = f"#{position} sampler log-prob {logprob:.3f} p {prob:.3f} · trainer log-prob {trainer:.3f} · ratio {ratio:.3f}"
        if not clip[0] <= ratio <= clip[1]:
            classes.append("clip")
    attribute = f' class="{" ".join(classes)}"' if classes else ""
    return f'<span{attribute} title="{title}">{escape(shown(piece))}</span>'


def ratio_summary(
    pieces: Sequence[str],
    sampler: Sequence[float],
    trainer: Sequence[float],
    clip: tuple[float, float],
    listed: int = CLIPPED,
) -> RatioSummary:
    """The trainer-vs-sampler summary of a turn's tokens (the three lists of equal length)."""
    logs = [min(t - s, RATIO_LOG_LIMIT) for s, t in zip(sampler, trainer, strict=True)]
    low, high = clip
    outside = [(abs(log), position) for position, log in enumerate(logs) if not low <= math.exp(log) <= high]
    clipped = tuple(
        Ratio(
            position, shown(pieces[position]), sampler[position], trainer[position], math.exp(logs[position])
        )
        for _, position in heapq.nlargest(listed, outside, key=lambda item: (item[0], -item[1]))
    )
    count = len(logs)
    mean = sum(abs(log) for log in logs) / count if count else 0.0
    biggest = math.exp(max(logs)) if logs else 1.0
    return RatioSummary(mean, biggest, len(outside), count, low, high, clipped)


def token_strip(
    tokens: Mapping[str, Any] | None,
    lowest: int = LOWEST,
    clip: tuple[float, float] | None = None,
    no_trainer: str = "not stored",
) -> TokenStrip:
    """The strip of a turn's stored tokens ({"pieces", "logprobs", "trainer"}, each None when not recorded),
    the ratios boxed against `clip` (default: `LossConfig`'s); `no_trainer` says why there are no trainer
    log-probs when there are none."""
    pieces = (tokens or {}).get("pieces")
    logprobs = (tokens or {}).get("logprobs")
    if logprobs is None:
        missing = "not recorded: stored before revision 0008, or a turn with no sampled tokens"
        return TokenStrip(
            0, Markup(""), (), None, 0, missing, no_trainer="no sampler log-probs to compare with"
        )
    clip = clip or clip_range({})
    texts: Sequence[str] = pieces if pieces is not None else [f"#{i}" for i in range(len(logprobs))]
    trainer = (tokens or {}).get("trainer")
    if trainer is not None and len(trainer) != len(logprobs):
        no_trainer = f"{len(trainer)} trainer log-probs for {len(logprobs)} sampled tokens: not shown"
        trainer = None
    pairs = list(zip(texts, logprobs, strict=False))
    if trainer is None:
        spans = Markup("".join(span(position, text, lp) for position, (text, lp) in enumerate(pairs)))
        ratios = None
    else:
        spans = Markup(
            "".join(
                span(position, text, lp, trainer[position], clip) for position, (text, lp) in enumerate(pairs)
            )
        )
        ratios = ratio_summary(
            [text for text, _ in pairs], logprobs[: len(pairs)], trainer[: len(pairs)], clip
        )
        no_trainer = ""
    missing = ""
    if pieces is None:
        missing = "token texts not recorded (written without a tokenizer): tokens shown by position"
    elif len(pieces) != len(logprobs):
        missing = f"{len(pieces)} token texts for {len(logprobs)} log-probs: the first {len(pairs)} shown"
    below = [(lp, position) for position, (_, lp) in enumerate(pairs) if lp < math.log(BANDS[0])]
    ranked = tuple(
        Token(position, shown(pairs[position][0]), lp, math.exp(lp), band(math.exp(lp)))
        for lp, position in heapq.nsmallest(lowest, below)
    )
    mean = sum(logprobs) / len(logprobs) if logprobs else None
    unlikely = sum(1 for _, lp in pairs if lp < math.log(0.5))
    return TokenStrip(
        len(pairs), spans, ranked, mean, unlikely, missing, ratios=ratios, no_trainer=no_trainer
    )


def _section(config: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    section = config.get(name)
    return section if isinstance(section, Mapping) else {}


TOKENS_CSS = """.tokens { white-space: pre-wrap; font-family: ui-monospace, monospace; font-size: 12.5px; line-height: 1.7; }
.tokens span { border-right: 1px solid #ddd; } .tokens .p1 { background: #fff1c2; } .tokens .p2 { background: #ffd6a3; }
.tokens .p3 { background: #ffb199; } .tokens .p4 { background: #f07a6e; color: #fff; }
.tokens .clip { outline: 2px solid #6a1b9a; outline-offset: -1px; }
table.lowest-tokens code, table.clipped-tokens code { white-space: pre; background: #f4f4f4; }
details.token-strip { margin: 4px 0; } details.token-strip summary { font-size: 12.5px; color: #444; cursor: pointer; }
"""

TOKENS = """{% with s = strips[t.index] %}<details class="token-strip" id="tokens-{{ t.index }}"><summary>sampled tokens{% if s.count %}: {{ s.count }}, mean log-prob {{ "%.3f"|format(s.mean_logprob) }}, {{ s.unlikely }} with p &lt; 0.5 · {% if s.ratios %}<span class="ratio-summary">trainer vs sampler: mean |log ratio| {{ "%.4f"|format(s.ratios.mean_abs_log_ratio) }}, max ratio {{ "%.3f"|format(s.ratios.max_ratio) }}, {{ "%.1f"|format(100 * s.ratios.share_outside) }}% outside the clip range [{{ "%.2f"|format(s.ratios.low) }}, {{ "%.2f"|format(s.ratios.high) }}]</span>{% else %}<span class="no-trainer">no trainer log-probs, so no importance ratio: {{ s.no_trainer }}</span>{% endif %}{% else %}: {{ s.missing }}{% endif %}</summary>
{% if s.count %}{% if s.missing %}<p class="note">{{ s.missing }}</p>{% endif %}
<div class="meta token-legend">shade by the sampler's probability: <span class="tokens">{% for shade, label in s.legend %}<span class="p{{ shade }}">{{ label }}</span> {% endfor %}</span>{% if s.ratios %}· <span class="tokens"><span class="clip">boxed</span></span>: importance ratio exp(trainer − sampler) outside [{{ "%.2f"|format(s.ratios.low) }}, {{ "%.2f"|format(s.ratios.high) }}] {% endif %}· hover a token for its log-prob{% if s.ratios %}s and ratio{% endif %}</div>
<div class="tokens">{{ s.spans }}</div>
{% if s.lowest %}<table class="lowest-tokens"><tr><th>least likely</th><th>position</th><th>log-prob</th><th>p</th></tr>
{% for k in s.lowest %}<tr><td><code>{{ k.piece }}</code></td><td class="num">{{ k.position }}</td><td class="num">{{ "%.3f"|format(k.logprob) }}</td><td class="num">{{ "%.3f"|format(k.prob) }}</td></tr>{% endfor %}</table>
{% else %}<p class="meta">every token had p ≥ {{ s.likely }}</p>{% endif %}
{% if s.ratios and s.ratios.clipped %}<table class="clipped-tokens"><tr><th>outside the clip range</th><th>position</th><th>sampler log-prob</th><th>trainer log-prob</th><th>ratio</th></tr>
{% for k in s.ratios.clipped %}<tr><td><code>{{ k.piece }}</code></td><td class="num">{{ k.position }}</td><td class="num">{{ "%.3f"|format(k.sampler) }}</td><td class="num">{{ "%.3f"|format(k.trainer) }}</td><td class="num">{{ "%.3f"|format(k.ratio) }}</td></tr>{% endfor %}</table>
{% elif s.ratios %}<p class="meta">every token's importance ratio is inside the clip range</p>{% endif %}{% endif %}
</details>{% endwith %}
"""
