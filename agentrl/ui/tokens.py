"""A turn's sampled tokens for the episode page: a strip of its token pieces coloured by the sampler's
probability, and its least likely tokens.

What this is: `token_strip(tokens)`, a pure function from what the store keeps per turn since revision 0008
(`repository.turn_tokens`: each completion token's text and the sampler's log-prob of it, at the sampling
temperature) to what the template draws, and `TOKENS`, the template. A token's shade is one of five
probability bands (`BANDS`), its exact log-prob and probability are its hover title.

What this is not: the importance ratio. The trainer computes its own log-probs per micro batch inside the
update and does not map them back to turns, so the store has no trainer log-prob and the strip shows the
sampler's only (the run page charts the step's sampler-vs-trainer mismatch: `sampler_abs_log_ratio`,
`sampler_kl`, `ess`).
"""

# ruff: noqa: E501 (HTML lines are kept whole)
from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup, escape

BANDS = (0.9, 0.5, 0.2, 0.05)
"""Lower bounds of the probability bands p0 (p >= 0.9, unshaded) .. p3; below the last bound is p4."""
LOWEST = 5  # least likely tokens listed per turn (those below BANDS[0] only)


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
class TokenStrip:
    """What the page shows of a turn's tokens: `spans`, the strip's HTML (one span a token, built in one
    pass: a Jinja loop over 10k tokens takes ~10x longer); `missing` says what the store lacks ("" when
    complete)."""

    count: int
    spans: Markup
    lowest: tuple[Token, ...]
    mean_logprob: float | None
    unlikely: int  # tokens with p < 0.5
    missing: str
    likely: float = BANDS[0]  # the least likely list leaves out tokens at or above this probability

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


def span(position: int, piece: str, logprob: float) -> str:
    """One token of the strip: shaded by its band (none for the likeliest), its log-prob and p as title."""
    prob = math.exp(logprob)
    shade = band(prob)
    attribute = f' class="p{shade}"' if shade else ""
    title = f"#{position} log-prob {logprob:.3f} p {prob:.3f}"
    return f'<span{attribute} title="{title}">{escape(shown(piece))}</span>'


def token_strip(tokens: Mapping[str, Any] | None, lowest: int = LOWEST) -> TokenStrip:
    """The strip of a turn's stored tokens ({"pieces", "logprobs"}, either None when not recorded)."""
    pieces = (tokens or {}).get("pieces")
    logprobs = (tokens or {}).get("logprobs")
    if logprobs is None:
        missing = "not recorded: stored before revision 0008, or a turn with no sampled tokens"
        return TokenStrip(0, Markup(""), (), None, 0, missing)
    texts: Sequence[str] = pieces if pieces is not None else [f"#{i}" for i in range(len(logprobs))]
    pairs = list(zip(texts, logprobs, strict=False))
    spans = Markup("".join(span(position, text, lp) for position, (text, lp) in enumerate(pairs)))
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
    return TokenStrip(len(pairs), spans, ranked, mean, unlikely, missing)


TOKENS_CSS = """.tokens { white-space: pre-wrap; font-family: ui-monospace, monospace; font-size: 12.5px; line-height: 1.7; }
.tokens span { border-right: 1px solid #ddd; } .tokens .p1 { background: #fff1c2; } .tokens .p2 { background: #ffd6a3; }
.tokens .p3 { background: #ffb199; } .tokens .p4 { background: #f07a6e; color: #fff; }
table.lowest-tokens code { white-space: pre; background: #f4f4f4; }
details.token-strip { margin: 4px 0; } details.token-strip summary { font-size: 12.5px; color: #444; cursor: pointer; }
"""

TOKENS = """{% with s = strips[t.index] %}<details class="token-strip" id="tokens-{{ t.index }}"><summary>sampled tokens{% if s.count %}: {{ s.count }}, mean log-prob {{ "%.3f"|format(s.mean_logprob) }}, {{ s.unlikely }} with p &lt; 0.5 · sampler log-probs only (no trainer log-probs stored, so no importance ratio){% else %}: {{ s.missing }}{% endif %}</summary>
{% if s.count %}{% if s.missing %}<p class="note">{{ s.missing }}</p>{% endif %}
<div class="meta token-legend">shade by the sampler's probability: <span class="tokens">{% for shade, label in s.legend %}<span class="p{{ shade }}">{{ label }}</span> {% endfor %}</span>· hover a token for its log-prob</div>
<div class="tokens">{{ s.spans }}</div>
{% if s.lowest %}<table class="lowest-tokens"><tr><th>least likely</th><th>position</th><th>log-prob</th><th>p</th></tr>
{% for k in s.lowest %}<tr><td><code>{{ k.piece }}</code></td><td class="num">{{ k.position }}</td><td class="num">{{ "%.3f"|format(k.logprob) }}</td><td class="num">{{ "%.3f"|format(k.prob) }}</td></tr>{% endfor %}</table>
{% else %}<p class="meta">every token had p ≥ {{ s.likely }}</p>{% endif %}{% endif %}
</details>{% endwith %}
"""
