"""Why a turn's completion ended, for the viewer: the engine's record where the store has it, else inferred.

What this is: `turn_finishes(config, turns)`, one `Finish` per turn. Since store revision 0006 each turn
keeps the engine's finish reason ("stop": the end-of-turn token or a stop string; "length":
`max_new_tokens` reached); a "stop" is told apart as a stop string when the text ends with one, else the
end of turn. Turns stored before then have none, and the reason is inferred from what is stored: a
completion of `max_new_tokens` tokens (from the run's saved sampling config) hit the length limit; one
whose text ends with a stop string stopped there; any other ended with the end-of-turn token. A turn marked
invalid for a missing `</tool_call>` that hit the length limit is thereby explained.

What this is not: exact where inferred, and the page says which it is: a completion that ended with the
end-of-turn token exactly at the budget reads as "length", and a harness's turns (their own sampling
settings) may not follow the run's config.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentrl.agent.engines.base import SamplingParams


@dataclass(frozen=True)
class Finish:
    """A turn's finish reason ("length", "stop string <s>" or "end of turn") and whether the engine
    recorded it (`stored`) or the viewer inferred it."""

    reason: str
    stored: bool


def sampling_of(config: Mapping[str, Any]) -> tuple[int, tuple[str, ...]]:
    """(max_new_tokens, stop strings) of a saved run config, the engine's defaults where it says nothing."""
    sampling = config.get("sampling")
    sampling = sampling if isinstance(sampling, Mapping) else {}
    budget = int(sampling.get("max_new_tokens", SamplingParams.max_new_tokens))
    stops = sampling.get("stop", SamplingParams.stop)
    return budget, tuple(str(stop) for stop in (stops or ()))


def stopped_by(text: str, stops: Sequence[str]) -> str:
    """ "stop string <s>" when the text ends with stop string s, else "end of turn"."""
    ending = text.rstrip()
    for stop in stops:
        if stop and ending.endswith(stop):
            return f"stop string {stop}"
    return "end of turn"


def finish_reason(
    text: str, completion_tokens: int, max_new_tokens: int, stops: Sequence[str], engine: str | None = None
) -> Finish:
    """The engine's reason (`engine`: "stop" or "length") refined by the text, else the inferred one."""
    if engine == "length":
        return Finish("length", True)
    if engine == "stop":
        return Finish(stopped_by(text, stops), True)
    if completion_tokens >= max_new_tokens:
        return Finish("length", False)
    return Finish(stopped_by(text, stops), False)


def turn_finishes(config: Mapping[str, Any], turns: Sequence[Mapping[str, Any]]) -> dict[int, Finish]:
    """Per turn index, the finish of turns that carry their text and token count."""
    budget, stops = sampling_of(config)
    return {
        int(turn["index"]): finish_reason(
            str(turn["text"]), int(turn["completion_tokens"]), budget, stops, turn.get("finish_reason")
        )
        for turn in turns
        if "text" in turn and "completion_tokens" in turn
    }
