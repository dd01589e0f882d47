"""The Env API: the base class, the registry (`register`, `make`, `list_envs`), the checker, state keys,
the text of a tool call and the scripted-policy contract.

What this is: the public face of `agentrl/env/`; import from here. docs/env_contract.md is the guide for
env authors. What this is not: the env plugins themselves (those live in `envs/<name>/` as installable
packages), the HTTP service, or the tools for env authors (`agentrl.devtools`: `agentrl envs new` and
`agentrl envs check`); nothing here imports the service or the CLI (`tests/unit/test_layers.py`).
"""

from agentrl.env.checker import check_env, check_examples, check_tool_specs
from agentrl.env.core import (
    INFO_CONTEXT_RESET,
    INFO_INVALID,
    INFO_STATE_KEY,
    INFO_STATE_TEXT,
    INFO_SUCCESS,
    Env,
    ForkCapability,
    FullText,
    StepResult,
    TurnSpace,
    copy_env,
    tool_spec,
)
from agentrl.env.registration import EnvInfo, list_envs, load_plugins, make, register, tools_of
from agentrl.env.scripted import (
    ScriptedPolicy,
    ScriptedTurn,
    ScriptedTurns,
    scripted_policy_of,
    transcript_policy,
    turn_text,
)
from agentrl.env.state import TextKeyConfig, normalise_text, text_state_key
from agentrl.env.toolcall import TOOL_CALL_CLOSE, TOOL_CALL_OPEN, render_tool_call

__all__ = [
    "INFO_CONTEXT_RESET",
    "INFO_INVALID",
    "INFO_STATE_KEY",
    "INFO_STATE_TEXT",
    "INFO_SUCCESS",
    "TOOL_CALL_CLOSE",
    "TOOL_CALL_OPEN",
    "Env",
    "EnvInfo",
    "ForkCapability",
    "FullText",
    "ScriptedPolicy",
    "ScriptedTurn",
    "ScriptedTurns",
    "StepResult",
    "TextKeyConfig",
    "TurnSpace",
    "check_env",
    "check_examples",
    "check_tool_specs",
    "copy_env",
    "list_envs",
    "load_plugins",
    "make",
    "normalise_text",
    "register",
    "render_tool_call",
    "scripted_policy_of",
    "text_state_key",
    "tool_spec",
    "tools_of",
    "transcript_policy",
    "turn_text",
]
