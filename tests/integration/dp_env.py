"""A pure-Python env for the multi-rank training tests, registered on import as `test/ByteSum-v0`: its reward
depends on the text a turn says, so a tiny random model's groups are sometimes informative (returns that
differ, GRPO advantages that are not zero) and sometimes not (the filtered sampler then plays extra rounds).
The env service loads it with `--preload dp_env`. Not a test itself."""

from __future__ import annotations

from typing import Any

from agentrl.env import Env, StepResult, register, tool_spec
from agentrl.types import Action

BYTE_SUM_ID = "test/ByteSum-v0"


class ByteSumEnv(Env):
    """A turn scores 1 when the sum of its bytes is a multiple of 3, else 0; the episode ends after `turns`
    turns and succeeds when its last turn scored."""

    tools = (tool_spec("say", "Say something.", {"text": {"type": "string"}}),)
    examples = ()
    blocking = False

    def __init__(self, turns: int = 2) -> None:
        super().__init__()
        self.turns = turns
        self._done = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        task = (options or {}).get("task") or {}
        self._done = 0
        return f"Say something about {task.get('topic', 'anything')}.", {"state_key": "0"}

    def step(self, action: Action) -> StepResult:
        self._done += 1
        reward = float(sum(action.text.encode()) % 3 == 0)
        over = self._done >= self.turns
        info = {"state_key": str(self._done), "invalid": False, "success": reward > 0.5}
        return StepResult(f"score {reward:g}", reward, over, False, info)


register(BYTE_SUM_ID, entry_point=ByteSumEnv)
