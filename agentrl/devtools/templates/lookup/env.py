"""EnvnameEnv: find a value in a file by running shell commands in a sandbox, then `submit` it.

What this is: the game of the agentrl-env-envname plugin. A task is {"id", "file", "content", "key",
"answer"}: the question asks for the value of `key` in /work/<file>, whose text is `content`. Two tools:
`shell(command)` runs a command in the episode's Docker sandbox and shows its exit code and output;
`submit(answer)` ends the episode, with reward 1 and `info["success"]` when the answer is right. A turn
without a usable call is invalid (`info["invalid"]`). After `max_steps` turns the episode is truncated.

The sandbox: taken from the process-wide warm pool on the episode's first command (an episode that submits
at once costs no container), given the task's file, and discarded at the next reset or at close, never
reused. A step waits on it, so the env keeps `blocking = True` (the default): the service steps it in a
worker thread. Sandbox failures raise `SandboxError`: infrastructure, so the runner re-plays the episode
instead of scoring it 0.

State key: the task and the last observation. Commands only read, so what tells two states apart is what
the agent has seen: episodes whose last command printed the same text are in the same state.

What this is not: the task generator (`agentrl_envname.make_tasks`) or the scripted policy
(`agentrl_envname.policy`).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from agentrl.env import Env, StepResult, render_tool_call, text_state_key, tool_spec
from agentrl.errors import EnvError
from agentrl.sandbox.base import ExecResult
from agentrl.sandbox.docker import DockerSandbox
from agentrl.sandbox.limits import SandboxConfig
from agentrl.sandbox.pool import acquire_sandbox, discard_sandbox
from agentrl.types import Action, ToolCall

from agentrl_envname.make_tasks import make_task, split_of
from agentrl_envname.policy import scripted_policy

ENV_ID = "envname/Envname-v0"

SHELL = tool_spec(
    "shell",
    "Run a shell command in /work and see its output",
    {"command": {"type": "string", "description": "e.g. cat notes.txt"}},
)
SUBMIT = tool_spec(
    "submit",
    "Submit your final answer; this ends the episode",
    {"answer": {"type": "string", "description": "the value only"}},
)
ARGUMENT = {"shell": "command", "submit": "answer"}  # each tool's one argument
FORMAT_HELP = (
    "Call one tool per turn, e.g. "
    + render_tool_call("shell", {"command": "cat notes.txt"})
    + " or "
    + render_tool_call("submit", {"answer": "blue"})
)


def question(task: Mapping[str, Any]) -> str:
    return f"What is the value of {task['key']} in /work/{task['file']}? Submit the value only."


def command_observation(result: ExecResult) -> str:
    """The exit code, a note when the command was killed, then its output."""
    header = f"exit code {result.exit_code}" + (" (killed: time limit)" if result.timed_out else "")
    return f"{header}\n{result.stdout + result.stderr or '(no output)'}"


def state_key(task_id: str, observation: str) -> str:
    return text_state_key(f"{task_id}\0{observation}")


def solved_example(file: str, content: str, key: str, answer: str) -> list[dict[str, Any]]:
    """One solved episode as chat messages, in the env's own words, ending on the submit."""
    shell = {"name": "shell", "arguments": {"command": f"cat {file}"}}
    submit = {"name": "submit", "arguments": {"answer": answer}}
    return [
        {"role": "user", "content": question({"file": file, "key": key})},
        {"role": "assistant", "content": "", "tool_calls": [shell]},
        {"role": "tool", "content": f"exit code 0\n{content}"},
        {"role": "assistant", "content": "", "tool_calls": [submit]},
    ]


def validate_task(task: Any) -> dict[str, Any]:
    """The task record, checked; the `EnvError` names the field that is wrong."""
    if not isinstance(task, Mapping):
        raise EnvError(f"options['task'] must be a task record (a dict), got {type(task).__name__}")
    for field in ("id", "file", "content", "key", "answer"):
        if not isinstance(task.get(field), str) or not task[field]:
            raise EnvError(f"envname task is missing {field!r} (a non-empty string)")
    if "/" in task["file"]:
        raise EnvError(f"envname task {task['id']!r}: 'file' must be a plain file name, got {task['file']!r}")
    return dict(task)


def tool_argument(call: ToolCall) -> str | None:
    """The call's one argument as a non-empty string (a number counts), or None."""
    value = call.arguments.get(ARGUMENT.get(call.name, ""))
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = str(value)
    return value if isinstance(value, str) and value.strip() and len(call.arguments) == 1 else None


class EnvnameEnv(Env):
    """Find a value with shell commands in a sandbox; see the module docstring."""

    tools = (SHELL, SUBMIT)
    # two solved episodes on files no task uses: a small model copies their format
    examples = (
        *solved_example("example.txt", "size = 7\ncolor = teal\n", "color", "teal"),
        *solved_example("demo.cfg", "mode = fast\nlevel = 3\n", "level", "3"),
    )
    scripted_policy = staticmethod(scripted_policy)  # demonstrations (agentrl demos) and checks

    def __init__(self, max_steps: int = 4, pool_size: int = 4, sandbox: SandboxConfig | None = None) -> None:
        """pool_size: warm sandboxes kept in the process-wide pool (0: a fresh container per episode)."""
        super().__init__()
        self.max_steps = max_steps
        self.pool_size = pool_size
        self.sandbox_config = sandbox or SandboxConfig()
        self.sandbox_labels = {"agentrl.env": ENV_ID}
        self._sandbox: DockerSandbox | None = None
        self._task: dict[str, Any] | None = None
        self._steps = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)  # seeds self.np_random
        self._close_sandbox()  # a fresh sandbox per episode: nothing leaks from the last one
        task = (options or {}).get("task")
        self._task = validate_task(task) if task is not None else self._draw_task()
        self._steps = 0
        observation = question(self._task)
        return observation, {"state_key": state_key(self._task["id"], observation)}

    def step(self, action: Action) -> StepResult:
        task = self._task
        assert task is not None  # Env's guard: step() runs only after a successful reset()
        self._steps += 1
        observation, reward, terminated, outcome = self._dispatch(action, task)
        truncated = not terminated and self._steps >= self.max_steps
        info = {"state_key": state_key(task["id"], observation), "invalid": False, "success": False}
        return StepResult(observation, reward, terminated, truncated, {**info, **outcome})

    def close(self) -> None:
        self._close_sandbox()
        super().close()

    def _dispatch(self, action: Action, task: Mapping[str, Any]) -> tuple[str, float, bool, dict[str, Any]]:
        call = action.tool_calls[0] if action.tool_calls else None
        argument = tool_argument(call) if call is not None else None
        if call is None or argument is None:
            problem = action.parse_error or "your turn has no usable shell or submit call"
            return f"Error: {problem}. {FORMAT_HELP}", 0.0, False, {"invalid": True}
        if call.name == "submit":
            success = argument.strip() == task["answer"]
            return ("Correct." if success else "Incorrect."), float(success), True, {"success": success}
        return command_observation(self._ensure_sandbox().exec(argument)), 0.0, False, {}

    def _ensure_sandbox(self) -> DockerSandbox:
        if self._sandbox is None:
            assert self._task is not None
            self._sandbox = acquire_sandbox(self.sandbox_config, self.sandbox_labels, self.pool_size)
            path = f"{self.sandbox_config.workdir}/{self._task['file']}"
            self._sandbox.write_file(path, self._task["content"])
        return self._sandbox

    def _close_sandbox(self) -> None:
        sandbox, self._sandbox = self._sandbox, None
        if sandbox is not None:
            discard_sandbox(sandbox, self.sandbox_config, self.sandbox_labels, self.pool_size)

    def _draw_task(self) -> dict[str, Any]:
        """A train task drawn from the seed: Gymnasium's env checker resets without one."""
        while True:
            task = make_task(random.Random(int(self.np_random.integers(1 << 30))))
            if split_of(task["id"]) == "train":
                return task
