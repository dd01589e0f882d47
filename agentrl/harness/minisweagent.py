"""mini-swe-agent (PyPI `mini-swe-agent`) as an agentrl harness, its commands run in the env's sandbox.

    agentrl train --task swebench rollout.harness.target=agentrl.harness.minisweagent:run \\
        rollout.harness.finish_tool=submit

What this is: `run(context)`, a harness that plays one episode with mini-swe-agent's own `DefaultAgent`, its
SWE-bench benchmark config (`config/benchmarks/swebench.yaml`: system and instance templates, observation
template) and its tool-calling model class (`OpenRouterModel`: its query, retry, tool-call parsing and
observation formatting; no litellm needed), pointed at the episode's endpoint with the episode's key. Only
its HTTP request is replaced (`EndpointModel._query`): the same body, without OpenRouter's 60-second
request timeout, which a CPU engine's first call (a long prompt's prefill under load) can exceed;
`rollout.harness.timeout_s` bounds the episode instead.
Its environment is `SessionEnvironment`, an adapter to mini-swe-agent's `Environment` protocol that runs
each command as the env's `bash` tool in the episode's env session, so it executes in agentrl's hardened
sandbox, and reads the return code and output back from the observation (`<returncode>N</returncode>`,
`<output>...</output>`, the format the SWE-bench env shares with mini-swe-agent). mini-swe-agent's
submission command (`echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT ...`) calls the env's `submit` tool, which
grades the workspace; the env ending the episode (its `max_steps`) stops the agent too.

Bounds: the agent's `step_limit` is the episode's call budget (`rollout.max_turns`), its cost limit is off
(the endpoint reports no cost), and mini-swe-agent's model retries are set to one attempt
(MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT, process-wide) so an endpoint refusal (the context budget) ends the
episode at once instead of after minutes of back-off.

What this is not: a dependency. mini-swe-agent is imported when `run` is called (`pip install
mini-swe-agent`; `--no-deps` is enough for this adapter: its core dependencies are agentrl's own, litellm,
textual and prompt_toolkit are not used).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

import yaml

from agentrl.harness.runner import HarnessContext

SUBMIT_MARKER = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
_RETURNCODE = re.compile(r"<returncode>(-?\d+)</returncode>")
_OUTPUT = re.compile(r"<output>\n(.*)</output>", re.DOTALL)
_WARNING = re.compile(r"<warning>(.*?)</warning>", re.DOTALL)
_WORKDIR = re.compile(r"The repository is in (\S+) ")


def parse_observation(observation: str) -> dict[str, Any]:
    """mini-swe-agent's command result from a bash observation: output, returncode and, for a timeout or a
    cut output, the env's warning as `exception_info`. An observation in no known form (an env error
    message) is the output of a failed command."""
    code = _RETURNCODE.search(observation)
    output = _OUTPUT.search(observation)
    if code is None or output is None:
        return {"output": observation, "returncode": -1, "exception_info": ""}
    warnings = " ".join(w.strip() for w in _WARNING.findall(observation[: output.start()]))
    return {"output": output.group(1), "returncode": int(code.group(1)), "exception_info": warnings}


class SessionEnvironment:
    """mini-swe-agent's `Environment` over an agentrl env session (see the module docstring)."""

    def __init__(self, context: HarnessContext, tool: str = "bash", submit_tool: str = "submit") -> None:
        self.context, self.tool, self.submit_tool = context, tool, submit_tool
        found = _WORKDIR.search(context.observation)
        self.config = {"cwd": found.group(1) if found else "", "tool": tool, "submit_tool": submit_tool}

    def execute(self, action: dict[str, Any], cwd: str = "", *, timeout: int | None = None) -> dict[str, Any]:
        """Run `action["command"]` as the env's bash tool; `cwd` and `timeout` are the env's own."""
        from minisweagent.exceptions import LimitsExceeded, Submitted

        result = self.context.call_tool(self.tool, {"command": str(action.get("command", ""))})
        output = parse_observation(result.observation)
        lines = output["output"].lstrip().splitlines(keepends=True)
        if lines and lines[0].strip() == SUBMIT_MARKER and output["returncode"] == 0:
            submission = "".join(lines[1:])
            if not self.context.env_done:
                self.context.call_tool(self.submit_tool)  # the env grades the workspace
            raise Submitted(_exit("Submitted", submission))
        if result.terminated or result.truncated:  # the env ended the episode (graded on its last step)
            raise LimitsExceeded(_exit("EnvEnded", ""))
        return output

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        return {**self.config, **kwargs}

    def serialize(self) -> dict[str, Any]:
        return {
            "info": {"config": {"environment": dict(self.config), "environment_type": type(self).__name__}}
        }


def _exit(status: str, submission: str) -> dict[str, Any]:
    return {
        "role": "exit",
        "content": submission or status,
        "extra": {"exit_status": status, "submission": submission},
    }


def run(context: HarnessContext, benchmark: str = "swebench.yaml", **agent_options: Any) -> dict[str, Any]:
    """Play the episode with mini-swe-agent's `DefaultAgent`; its exit info (`exit_status`, `submission`)."""
    os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
    os.environ["MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT"] = "1"
    from minisweagent import package_dir
    from minisweagent.agents.default import DefaultAgent

    config = yaml.safe_load((package_dir / "config" / "benchmarks" / benchmark).read_text())
    model_options = {k: v for k, v in config.get("model", {}).items() if k in _MODEL_KEYS}
    model = endpoint_model(context, cost_tracking="ignore_errors", **model_options)
    environment = SessionEnvironment(context)
    agent_config = _agent_config(config.get("agent", {}), environment.config["cwd"], context.max_calls)
    agent = DefaultAgent(model, environment, **{**agent_config, **agent_options})  # type: ignore[arg-type]
    task = context.task.get("problem_statement") or context.observation
    return dict(agent.run(task=str(task)))


_MODEL_KEYS = ("observation_template", "format_error_template", "multimodal_regex")


def endpoint_model(context: HarnessContext, **options: Any) -> Any:
    """mini-swe-agent's `OpenRouterModel` against the episode's endpoint (see the module docstring)."""
    import requests
    from minisweagent.models.openrouter_model import OpenRouterAPIError, OpenRouterModel
    from minisweagent.models.utils.actions_toolcall import BASH_TOOL

    class EndpointModel(OpenRouterModel):  # type: ignore[misc]
        def _query(self, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
            payload = {
                "model": self.config.model_name,
                "messages": messages,
                "tools": [BASH_TOOL],
                **(self.config.model_kwargs | kwargs),
            }
            headers = {"Authorization": f"Bearer {self._api_key}"}
            try:
                response = requests.post(self._api_url, json=payload, headers=headers, timeout=None)
            except requests.exceptions.RequestException as exc:
                raise OpenRouterAPIError(f"Request failed: {exc}") from exc
            if response.status_code != 200:
                raise OpenRouterAPIError(f"HTTP {response.status_code}: {response.text}")
            return response.json()

    model = EndpointModel(model_name=context.model, **options)
    model._api_url = f"{context.base_url}/chat/completions"
    model._api_key = context.api_key
    return model


def _agent_config(agent: Mapping[str, Any], workdir: str, max_calls: int) -> dict[str, Any]:
    """The benchmark's agent settings with the episode's workdir in its templates, its call budget as the
    step limit, and no cost limit (the endpoint reports no cost)."""
    templates = {
        key: value.replace("/testbed", workdir) if workdir else value
        for key, value in agent.items()
        if key.endswith("_template") and isinstance(value, str)
    }
    return {**dict(agent), **templates, "step_limit": max_calls, "cost_limit": 0.0, "output_path": None}
