"""Why a turn's completion ended, inferred from what the store keeps: the viewer's finish-reason label.

What this is: `finish_reason(text, completion_tokens, sampling)`. The engine knows each completion's
finish reason ("stop": end of turn or a stop string; "length": `max_new_tokens` reached), but the store
does not keep it; it keeps the completion's text and token count, and the run's saved config keeps the
sampling parameters. From those: a completion of `max_new_tokens` tokens hit the length limit; one whose
text ends with a stop string stopped there; any other ended with the end-of-turn token. A turn marked
invalid for a missing `</tool_call>` that hit the length limit is thereby explained.

What this is not: the engine's own record. It is an inference and the page labels it so: a completion
that ended with the end-of-turn token exactly at the budget reads as "length", and a harness's turns (their
own sampling settings) may not follow the run's config.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentrl.agent.engines.base import SamplingParams


def sampling_of(config: Mapping[str, Any]) -> tuple[int, tuple[str, ...]]:
    """(max_new_tokens, stop strings) of a saved run config, the engine's defaults where it says nothing."""
    sampling = config.get("sampling")
    sampling = sampling if isinstance(sampling, Mapping) else {}
    budget = int(sampling.get("max_new_tokens", SamplingParams.max_new_tokens))
    stops = sampling.get("stop", SamplingParams.stop)
    return budget, tuple(str(stop) for stop in (stops or ()))


def finish_reason(text: str, completion_tokens: int, max_new_tokens: int, stops: Sequence[str]) -> str:
    """ "length", "stop string <s>" or "end of turn" (see the module docstring)."""
    if completion_tokens >= max_new_tokens:
        return "length"
    ending = text.rstrip()
    for stop in stops:
        if stop and ending.endswith(stop):
            return f"stop string {stop}"
    return "end of turn"


def turn_finishes(config: Mapping[str, Any], turns: Sequence[Mapping[str, Any]]) -> dict[int, str]:
    """Per turn index, the inferred finish reason of turns that carry their text and token count."""
    budget, stops = sampling_of(config)
    return {
        int(turn["index"]): finish_reason(str(turn["text"]), int(turn["completion_tokens"]), budget, stops)
        for turn in turns
        if "text" in turn and "completion_tokens" in turn
    }
