"""CalcEnv: answer an arithmetic question, optionally running Python in a sandbox, then `submit`.

What this is: the interaction protocol of the calc suite. Two tools: `python(code)` runs the code as a file
in a per-episode Docker sandbox (taken lazily from the process-wide warm pool, `agentrl.sandbox.pool.
shared_pool`, so the first call costs a dequeue rather than a container start, and an episode that submits
at once costs nothing; `pool_size=0` starts a fresh container per episode instead) and
returns "exit code N" plus its truncated output; `submit(answer)` ends the episode with reward 1.0 for the
right number, else 0.0. Only the first tool call of a turn is executed. A turn without a usable call gets an
error observation showing the exact call format, reward 0 and `info["invalid"] = True`.

What this is not: a task generator (`agentrl_calc.tasks`) or a sandbox (`agentrl.sandbox`). Sandbox
failures raise `SandboxError` subclasses; they are infrastructure failures, never a reward of 0.

State key: `text_state_key` of (task id, last observation). Nothing the agent does changes the task, so what
distinguishes its states is what it has seen last: two episodes that ran code printing the same thing are
in the same state. Files the agent writes into the sandbox's /work are not part of the key (grading never
reads them).
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any, NamedTuple

from agentrl.env import Env, StepResult, render_tool_call, text_state_key, tool_spec
from agentrl.errors import EnvError
from agentrl.sandbox.base import ExecResult
from agentrl.sandbox.docker import DockerSandbox
from agentrl.sandbox.limits import SandboxConfig
from agentrl.sandbox.pool import acquire_sandbox, discard_sandbox
from agentrl.types import Action, ToolCall
from agentrl_calc.scripted import scripted_policy
from agentrl_calc.tasks import make_task

ENV_ID = "agentrl/Calc-v0"
SNIPPET_PATH = "/work/snippet.py"
RUN_SNIPPET = ["sh", "-c", 'cat > "$1" && exec python3 "$1"', "sh", SNIPPET_PATH]
INSTRUCTION = "Use the python tool if useful, then call submit with the number."
NO_OUTPUT = "(no output; print() what you want to see)"

PYTHON_TOOL = tool_spec(
    "python",
    "Run Python 3 code in a sandbox and return its stdout/stderr",
    {"code": {"type": "string", "description": "Python 3 source code; print() the values you need"}},
)
SUBMIT_TOOL = tool_spec(
    "submit",
    "Submit your final answer; this ends the episode",
    {"answer": {"type": "string", "description": "the number, digits only, e.g. 1234"}},
)


FORMAT_HELP = (
    "Call exactly one tool per turn, written like this: "
    + render_tool_call("python", {"code": "print(12 * 34)"})
    + " or "
    + render_tool_call("submit", {"answer": "408"})
)


def question_observation(question: str) -> str:
    return f"{question} {INSTRUCTION}"


def python_observation(result: ExecResult) -> str:
    """What the model sees after a python call: exit code, why it was killed if it was, then the output."""
    header = [f"exit code {result.exit_code}"]
    if result.timed_out:
        header.append("(killed: the time limit ran out)")
    elif result.oom:
        header.append("(killed: out of memory)")
    output = result.stdout + result.stderr
    return "\n".join(header) + "\n" + (output or NO_OUTPUT)


def normalize_answer(text: str) -> Decimal | None:
    """The number in an answer ("1,234", " 1234.0 " and "1234" agree); None if it is not a number."""
    cleaned = text.strip().replace(",", "").replace(" ", "")
    try:
        value = Decimal(cleaned)
    except InvalidOperation:
        return None
    return value if value.is_finite() else None


def is_correct(answer: str, expected: str) -> bool:
    value = normalize_answer(answer)
    return value is not None and value == normalize_answer(expected)


def state_key(task_id: str, observation: str) -> str:
    return text_state_key(f"{task_id}\0{observation}")


def validate_task(task: Any) -> dict[str, Any]:
    """The task record, checked; `EnvError` says which field is wrong."""
    if not isinstance(task, Mapping):
        raise EnvError(f"options['task'] must be a task record (a dict), got {type(task).__name__}")
    for key in ("id", "question", "answer"):
        if not isinstance(task.get(key), str) or not task[key]:
            raise EnvError(f"calc task is missing {key!r} (a non-empty string); see tasks/calc/*.jsonl")
    if normalize_answer(task["answer"]) is None:
        raise EnvError(f"calc task {task['id']!r} has a non-numeric answer {task['answer']!r}")
    return dict(task)


def _example_exchange(question: str, expression: str, value: int) -> tuple[dict[str, Any], ...]:
    """One solved episode: question, python call, its output, submit call."""
    return (
        {"role": "user", "content": question_observation(question)},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"name": "python", "arguments": {"code": f"print({expression})"}}],
        },
        {"role": "tool", "content": f"exit code 0\n{value}\n"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"name": "submit", "arguments": {"answer": str(value)}}],
        },
    )


def few_shot_examples() -> tuple[dict[str, Any], ...]:
    """Two solved episodes. Their first operands have four digits, so neither question is in any split.

    Two, not one, and ending on the assistant's submit: after a single example a small model copies the
    last assistant action it saw and submits at once.
    """
    return (
        *_example_exchange("What is 4821 * 37 + 105?", "4821 * 37 + 105", 4821 * 37 + 105),
        *_example_exchange("What is 2306 * 78 - 419 * 13?", "2306 * 78 - 419 * 13", 2306 * 78 - 419 * 13),
    )


class _Outcome(NamedTuple):
    observation: str
    reward: float
    terminated: bool
    info: dict[str, Any]


class CalcEnv(Env):
    """Arithmetic with a sandboxed python tool and a submit tool; see the module docstring."""

    tools = (PYTHON_TOOL, SUBMIT_TOOL)
    examples = few_shot_examples()
    scripted_policy = staticmethod(scripted_policy)  # demonstrations (agentrl demos)

    def __init__(
        self,
        sandbox: SandboxConfig | None = None,
        max_steps: int = 6,
        sandbox_labels: Mapping[str, str] | None = None,
        pool_size: int = 8,
    ) -> None:
        """pool_size: warm sandboxes kept in the process-wide pool (0: a fresh container per episode)."""
        super().__init__()
        self.sandbox_config = sandbox or SandboxConfig()
        self.sandbox_labels = {"agentrl.env": ENV_ID, **(sandbox_labels or {})}
        self.max_steps = max_steps
        self.pool_size = pool_size
        self._sandbox: DockerSandbox | None = None
        self._task: dict[str, Any] | None = None
        self._steps = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Start an episode on `options["task"]`, or on a train task drawn from `seed` when none is given."""
        super().reset(seed=seed)
        self._close_sandbox()  # a fresh sandbox per episode: files from the last one must not leak
        task = (options or {}).get("task")
        self._task = validate_task(task) if task is not None else self._draw_train_task()
        self._steps = 0
        observation = question_observation(self._task["question"])
        return observation, {
            "state_key": state_key(self._task["id"], observation),
            "task_id": self._task["id"],
        }

    def step(self, action: Action) -> StepResult:
        task = self._task
        assert task is not None  # Env's guard: step() runs only after a successful reset()
        self._steps += 1
        outcome = self._dispatch(action, task)
        truncated = not outcome.terminated and self._steps >= self.max_steps
        info = {
            "state_key": state_key(task["id"], outcome.observation),
            "task_id": task["id"],
            "invalid": False,
            **outcome.info,
        }
        return StepResult(outcome.observation, outcome.reward, outcome.terminated, truncated, info)

    def close(self) -> None:
        self._close_sandbox()
        super().close()

    def _dispatch(self, action: Action, task: Mapping[str, Any]) -> _Outcome:
        if not action.tool_calls:
            problem = action.parse_error or "your turn has no tool call"
            return _invalid(f"Error: {problem}. {FORMAT_HELP}")
        call = action.tool_calls[0]
        if call.name == "python":
            code = _string_argument(call, "code")
            return _invalid_arguments(call) if code is None else self._run_python(code)
        if call.name == "submit":
            answer = _string_argument(call, "answer")
            return _invalid_arguments(call) if answer is None else _submit(answer, task["answer"])
        return _invalid(f"Error: unknown tool {call.name!r}; the tools are python and submit. {FORMAT_HELP}")

    def _run_python(self, code: str) -> _Outcome:
        # one exec writes the file and runs it; a failed write (the agent filled /work) is then the
        # agent's own error in the observation, not an infrastructure failure
        result = self._ensure_sandbox().exec(RUN_SNIPPET, stdin=code)
        info = {
            "exit_code": result.exit_code,
            "timed_out": result.timed_out,
            "oom": result.oom,
            "duration_s": round(result.duration_s, 4),
            "truncated": result.truncated,
        }
        return _Outcome(python_observation(result), 0.0, False, info)

    def _ensure_sandbox(self) -> DockerSandbox:
        if self._sandbox is None:
            task_id = self._task["id"] if self._task else None
            self._sandbox = acquire_sandbox(self.sandbox_config, self.sandbox_labels, self.pool_size, task_id)
        return self._sandbox

    def _close_sandbox(self) -> None:
        sandbox, self._sandbox = self._sandbox, None
        if sandbox is not None:
            discard_sandbox(sandbox, self.sandbox_config, self.sandbox_labels, self.pool_size)

    def _draw_train_task(self) -> dict[str, Any]:
        while True:
            task = make_task(self.np_random)
            if task["split"] == "train":
                return task


def _string_argument(call: ToolCall, key: str) -> str | None:
    """The call's only argument `key` as a string (a JSON number is accepted too); None if malformed."""
    if set(call.arguments) != {key}:
        return None
    value = call.arguments[key]
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return value if isinstance(value, str) else None


def _submit(answer: str, expected: str) -> _Outcome:
    success = is_correct(answer, expected)
    return _Outcome(
        "Correct." if success else "Incorrect.", 1.0 if success else 0.0, True, {"success": success}
    )


def _invalid(message: str) -> _Outcome:
    return _Outcome(message, 0.0, False, {"invalid": True})


def _invalid_arguments(call: ToolCall) -> _Outcome:
    expected = "code" if call.name == "python" else "answer"
    got = sorted(call.arguments) or "none"
    return _invalid(
        f"Error: {call.name} takes exactly one argument, {expected!r} (a string); got {got}. {FORMAT_HELP}"
    )
