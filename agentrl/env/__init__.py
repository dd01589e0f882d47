"""The Env API: the base class, the registry (`register`, `make`, `list_envs`), the checker, state keys and
the text of a tool call.

What this is: the public face of `agentrl/env/`; import from here. docs/env_contract.md is the guide for
env authors. What this is not: the env plugins themselves (those live in `envs/<name>/` as installable
packages) or the HTTP service.
"""

from agentrl.env.checker import check_env, check_examples, check_tool_specs
from agentrl.env.core import (
    INFO_INVALID,
    INFO_STATE_KEY,
    INFO_SUCCESS,
    Env,
    FullText,
    StepResult,
    TurnSpace,
    tool_spec,
)
from agentrl.env.registration import EnvInfo, list_envs, load_plugins, make, register, tools_of
from agentrl.env.state import TextKeyConfig, normalise_text, text_state_key
from agentrl.env.toolcall import TOOL_CALL_CLOSE, TOOL_CALL_OPEN, render_tool_call

__all__ = [
    "INFO_INVALID",
    "INFO_STATE_KEY",
    "INFO_SUCCESS",
    "TOOL_CALL_CLOSE",
    "TOOL_CALL_OPEN",
    "Env",
    "EnvInfo",
    "FullText",
    "StepResult",
    "TextKeyConfig",
    "TurnSpace",
    "check_env",
    "check_examples",
    "check_tool_specs",
    "list_envs",
    "load_plugins",
    "make",
    "normalise_text",
    "register",
    "render_tool_call",
    "text_state_key",
    "tool_spec",
    "tools_of",
]
