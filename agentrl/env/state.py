"""Text state keys: a short hex digest of a text (an observation, a rendered board) for `info["state_key"]`.

What this is: `text_state_key(text)`. Volatile substrings (timestamps, clock times, durations, memory
addresses, by a configurable list of regexes in `TextKeyConfig`) become a placeholder, whitespace runs
collapse to one space, then the text is hashed. Envs whose state is best described as text build that text
(typically the task id plus what the agent can see) and key it here, so equal states get equal keys across
the episodes of a group (what step-level credit needs, see `agentrl.env.core.Env`).

What this is not: a workspace digest. Sandboxed envs whose state is a file tree use
`agentrl.sandbox.state.workspace_state_key`. Nothing is stored: two texts with the same key are assumed to
be the same state.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import lru_cache

from agentrl.errors import ConfigError


@lru_cache(maxsize=64)
def _compiled(patterns: tuple[str, ...]) -> tuple[re.Pattern[str], ...]:
    try:
        return tuple(re.compile(pattern) for pattern in patterns)
    except re.error as exc:
        raise ConfigError(
            f"a volatile-text regex does not compile ({exc}); fix TextKeyConfig.volatile"
        ) from exc


@dataclass(frozen=True)
class TextKeyConfig:
    """What `text_state_key` treats as noise.

    volatile:    regexes whose matches are replaced by `placeholder` before hashing.
    placeholder: the replacement text.
    length:      hex characters of the returned key.
    """

    volatile: tuple[str, ...] = (
        r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?",  # ISO timestamps
        r"(?<![\w.])\d{1,2}:\d{2}:\d{2}(?:\.\d+)?\b",  # clock times
        r"(?<![\w.])\d+(?:\.\d+)?\s?(?:ns|us|µs|ms|s|sec|secs|seconds?|mins?|minutes?)\b",  # durations
        r"\b0x[0-9a-fA-F]+\b",  # memory addresses
    )
    placeholder: str = "#"
    length: int = 16

    def __post_init__(self) -> None:
        if not 8 <= self.length <= 64:
            raise ConfigError(f"state key length must be between 8 and 64 hex characters, got {self.length}")
        _compiled(self.volatile)


def normalise_text(text: str, config: TextKeyConfig = TextKeyConfig()) -> str:
    """Volatile substrings -> placeholder, then whitespace runs -> one space, stripped."""
    for pattern in _compiled(config.volatile):
        text = pattern.sub(config.placeholder, text)
    return " ".join(text.split())


def text_state_key(text: str, config: TextKeyConfig = TextKeyConfig()) -> str:
    """A short hex key of a text after `normalise_text`."""
    return hashlib.sha256(normalise_text(text, config).encode("utf-8")).hexdigest()[: config.length]
