"""The Env API: the base class, the registry (`register`, `make`, `list_envs`) and the checker.

What this is: the public face of `agentrl/env/`; import from here. What this is not: the env plugins
themselves (those live in `envs/<name>/` as installable packages) or the HTTP service.
"""

from agentrl.env.checker import check_env, check_tool_specs
from agentrl.env.core import Env, FullText, StepResult, TurnSpace, tool_spec
from agentrl.env.registration import EnvInfo, list_envs, load_plugins, make, register, tools_of

__all__ = [
    "Env",
    "EnvInfo",
    "FullText",
    "StepResult",
    "TurnSpace",
    "check_env",
    "check_tool_specs",
    "list_envs",
    "load_plugins",
    "make",
    "register",
    "tool_spec",
    "tools_of",
]
