"""The text of a tool call: the Hermes tags and `render_tool_call`, the one way to write a call as text.

What this is: the format shared by both ends of the wire. Envs show the model how to call their tools (in
error observations and format help), the UI and tests build sample turns, and the runner's parser
(`agentrl.agent.parsing`) reads what the model wrote; all of them take the tags from here, so a call
rendered here always parses back to the same name and arguments.

What this is not: the parser (`agentrl.agent.parsing.parse_turn`) or the chat-template rendering of a
whole assistant message (`agentrl.agent.prompting`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"


def render_tool_call(name: str, arguments: Mapping[str, Any], *, multiline: bool = False) -> str:
    """`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, as the model must write it.

    Inline (the default) is the form envs quote in their observations. `multiline=True` puts the JSON on a
    line of its own, the layout of Hermes chat templates and of the prompts the runner renders.
    """
    payload = json.dumps({"name": name, "arguments": dict(arguments)}, ensure_ascii=False)
    if multiline:
        return f"{TOOL_CALL_OPEN}\n{payload}\n{TOOL_CALL_CLOSE}"
    return f"{TOOL_CALL_OPEN}{payload}{TOOL_CALL_CLOSE}"
