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

State key: `text_state_key` of (task id, last observation), and the part index when `parts > 1`. Nothing
the agent does changes the task, so what distinguishes its states is what it has seen last: two episodes
that ran code printing the same thing are in the same state, and the first state of part k is one state
for every episode of a task, whatever it answered before (the key holds the part index, not the answers).
Files the agent writes into the sandbox's /work are not part of the key (grading never reads them).

Repeats (`end_part_on_repeat=True`, off by default): a turn whose tool call is the same as the turn before it
in the same part (same tool, same arguments) is not run; it ends the part as not answered, with the
observation `REPEAT_ENDS_PART` (or the next part's question). The calc-chain failure count showed the base
model spending a part's budget on one broken call repeated word for word; this makes the first repeat cost
the part at once.

Context boundaries: the step that shows the next part's question sets `info["context_reset"] = True`: a
part needs nothing from the turns of the parts before it, so `rollout.context.policy=window` starts a fresh
window there (docs/context.md). No `state_text`: nothing of an earlier part must be remembered.

Fork: "sandbox": the episode's state is copied, and once python has run, the sandbox is forked (a copy of
its /work in a sandbox of the pool, `DockerSandbox.fork`), so a snippet that reads a file an earlier one
wrote reads the same in the fork.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any, NamedTuple

from agentrl.env import (
    INFO_CONTEXT_RESET,
    Env,
    StepResult,
    copy_env,
    render_tool_call,
    text_state_key,
    tool_spec,
)
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
ANSWER_RECORDED = "Answer recorded."  # the last part's submit, in a multi-part episode

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


def part_observation(question: str, part: int, parts: int, labels: bool = True) -> str:
    """The observation that asks part `part` (0-based) of `parts`: the same words whatever came before;
    without `labels` no "Part k of K:" (every part then reads alike, the question aside)."""
    if parts == 1 or not labels:
        return question_observation(question)
    return f"Part {part + 1} of {parts}: {question_observation(question)}"


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


def state_key(task_id: str, observation: str, part: int | None = None) -> str:
    """The key of (task, last observation), and of the part for a multi-part episode."""
    prefix = task_id if part is None else f"{task_id}\0part {part}"
    return text_state_key(f"{prefix}\0{observation}")


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


def validate_chain(task: Any, parts: int) -> dict[str, Any]:
    """A multi-part task record ("questions" and "answers", `parts` of each), checked."""
    if not isinstance(task, Mapping) or not isinstance(task.get("id"), str):
        raise EnvError(f"options['task'] must be a calc-chain record with an 'id', got {task!r:.80}")
    for key in ("questions", "answers"):
        values = task.get(key)
        if (
            not isinstance(values, list)
            or len(values) != parts
            or not all(isinstance(v, str) for v in values)
        ):
            raise EnvError(
                f"calc-chain task {task['id']!r} needs {key!r}: a list of {parts} strings (the env has "
                f"parts={parts}; see tasks/calc-chain/*.jsonl, or set env.kwargs.parts to the suite's)"
            )
    for question, answer in zip(task["questions"], task["answers"], strict=True):
        validate_task({"id": task["id"], "question": question, "answer": answer})
    return dict(task)


def chain_of(task: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """(questions, answers) of a one-part or multi-part task record."""
    if "questions" in task:
        return list(task["questions"]), list(task["answers"])
    return [task["question"]], [task["answer"]]


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


EXAMPLE_PARTS = (  # (question, the code's expression, its value)
    ("What is 4821 * 37 + 105?", "4821 * 37 + 105", 4821 * 37 + 105),
    ("What is 2306 * 78 - 419 * 13?", "2306 * 78 - 419 * 13", 2306 * 78 - 419 * 13),
    ("What is 5172 times 64 minus 388 times 21?", "5172 * 64 - 388 * 21", 5172 * 64 - 388 * 21),
    ("Subtract 617 * 45 from 3094 * 52. What is left?", "3094 * 52 - 617 * 45", 3094 * 52 - 617 * 45),
)


FORM_EXAMPLES = (  # level-3 expressions with four-digit first operands (no split holds them), by value
    ("2306 * 78 - 419 * 13", 2306 * 78 - 419 * 13),
    ("5172 * 64 - 388 * 21", 5172 * 64 - 388 * 21),
    ("3094 * 52 - 617 * 45", 3094 * 52 - 617 * 45),
    ("4407 * 29 - 512 * 36", 4407 * 29 - 512 * 36),
)


LONG_EXAMPLES = (  # level 4 ("a * b - c * d - e * f"), four-digit first operands like FORM_EXAMPLES
    ("2306 * 78 - 419 * 13 - 287 * 54", 2306 * 78 - 419 * 13 - 287 * 54),
    ("5172 * 64 - 388 * 21 - 913 * 17", 5172 * 64 - 388 * 21 - 913 * 17),
    ("3094 * 52 - 617 * 45 - 158 * 62", 3094 * 52 - 617 * 45 - 158 * 62),
    ("4407 * 29 - 512 * 36 - 745 * 11", 4407 * 29 - 512 * 36 - 745 * 11),
)


def example_parts_of(parts: int, form: str = "", levels: Sequence[int] = (3,)) -> list[tuple[str, str, int]]:
    """(question, expression, value) of each example part: cycling through `EXAMPLE_PARTS` (the chain suite's
    forms among them), or, with `form` ("reversed", or several: "words,reversed"), the parts written in those
    forms in turn (`agentrl_calc.chain.phrase`), of `levels` in turn (3: two products, 4: three)."""
    if not form:
        return [EXAMPLE_PARTS[part % len(EXAMPLE_PARTS)] for part in range(parts)]
    from agentrl_calc.chain import phrase

    forms = [name.strip() for name in form.split(",")]
    pools = [LONG_EXAMPLES if levels[part % len(levels)] == 4 else FORM_EXAMPLES for part in range(parts)]
    chosen = [pool[part % len(pool)] for part, pool in enumerate(pools)]
    return [
        (phrase(expression, forms[part % len(forms)]), expression, value)
        for part, (expression, value) in enumerate(chosen)
    ]


def few_shot_examples(
    parts: int = 1, form: str = "", levels: Sequence[int] = (3,), labels: bool = True
) -> tuple[dict[str, Any], ...]:
    """Solved episodes. Their first operands have four digits, so no question is in any split.

    One part (and no `form`): two episodes, not one, and ending on the assistant's submit: after a single
    example a small model copies the last assistant action it saw and submits at once. K parts: one K-part
    episode, which repeats the python-then-submit exchange K times and shows the next part's question after
    each submit, worded as the env words it; its parts cycle through `EXAMPLE_PARTS`, or are all in `form`
    (a task of one wording with a matching example: `CalcEnv(example_form=...)`).
    """
    if parts == 1 and not form:
        return tuple(message for example in EXAMPLE_PARTS[:2] for message in _example_exchange(*example))
    messages: list[dict[str, Any]] = []
    for part, (question, expression, value) in enumerate(example_parts_of(parts, form, levels)):
        exchange = list(_example_exchange(question, expression, value))
        role = "user" if part == 0 else "tool"  # later questions answer the submit call, as the env's do
        exchange[0] = {"role": role, "content": part_observation(question, part, parts, labels)}
        messages.extend(exchange)
    return tuple(messages)


REPEAT_ENDS_PART = "The same call as your last one: this part is over, unanswered."


def call_signature(action: Action) -> tuple[tuple[str, str], ...] | str:
    """What makes two turns the same call: each tool call's name and canonical JSON arguments, or the
    stripped text of a turn with no call; pure."""
    if not action.tool_calls:
        return action.text.strip()
    return tuple((call.name, json.dumps(dict(call.arguments), sort_keys=True)) for call in action.tool_calls)


class _Outcome(NamedTuple):
    observation: str
    reward: float
    terminated: bool
    info: dict[str, Any]


class CalcEnv(Env):
    """Arithmetic with a sandboxed python tool and a submit tool; see the module docstring."""

    tools = (PYTHON_TOOL, SUBMIT_TOOL)
    examples = few_shot_examples()  # one part; an instance with parts=K has its own (see __init__)
    fork_capability = "sandbox"
    scripted_policy = staticmethod(scripted_policy)  # demonstrations (agentrl demos)

    def __init__(
        self,
        sandbox: SandboxConfig | None = None,
        max_steps: int = 6,
        sandbox_labels: Mapping[str, str] | None = None,
        pool_size: int = 8,
        parts: int = 1,
        end_part_on_repeat: bool = False,
        example_form: str = "",
        example_parts: int = 0,
        example_levels: Sequence[int] = (3,),
        part_labels: bool = True,
    ) -> None:
        """max_steps: the turn budget of each part. pool_size: warm sandboxes kept in the process-wide pool
        (0: a fresh container per episode). parts: questions per episode (a calc-chain task has this many).
        end_part_on_repeat: a call repeating the part's last call ends the part unanswered (module
        docstring). example_form: the few-shot parts' wording ("plain", "words", "reversed", "taken", or
        several comma-separated, taken in turn; "" cycles through `EXAMPLE_PARTS`). example_parts: parts of
        the few-shot episode (0: as many as `parts`). example_levels: the example parts' problem levels in
        turn, 3 (two products) or 4 (three), when `example_form` is given. part_labels: "Part k of K:" before
        each question (the examples' too); without them every part's window reads alike."""
        super().__init__()
        if parts < 1 or max_steps < 1:
            raise EnvError(f"parts and max_steps must be >= 1, got parts={parts} max_steps={max_steps}")
        from agentrl_calc.chain import FORMS

        unknown = [name for name in example_form.split(",") if example_form and name.strip() not in FORMS]
        if unknown:
            raise EnvError(
                f"example_form must be one of {', '.join(FORMS)}, several comma-separated, or empty; got "
                f"{example_form!r}"
            )
        if example_parts < 0:
            raise EnvError(f"example_parts must be >= 0 (0: as many as parts), got {example_parts}")
        self.sandbox_config = sandbox or SandboxConfig()
        self.sandbox_labels = {"agentrl.env": ENV_ID, **(sandbox_labels or {})}
        self.max_steps = max_steps
        self.pool_size = pool_size
        self.parts = parts
        self.end_part_on_repeat = end_part_on_repeat
        example_levels = (
            tuple(example_levels) if isinstance(example_levels, list | tuple) else (example_levels,)
        )
        if not example_levels or any(level not in (3, 4) for level in example_levels):
            raise EnvError(f"example_levels must be 3s and 4s, got {example_levels}")
        self.part_labels = part_labels
        self.examples = few_shot_examples(example_parts or parts, example_form, example_levels, part_labels)
        self._sandbox: DockerSandbox | None = None
        self._task: dict[str, Any] | None = None
        self._questions: list[str] = []
        self._answers: list[str] = []
        self._part = 0
        self._steps = 0  # turns taken in the current part
        self._correct: list[bool] = []
        self._last_call: tuple[tuple[str, str], ...] | str | None = None  # the part's last call

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Start an episode on `options["task"]`, or on a train task drawn from `seed` when none is given."""
        super().reset(seed=seed)
        self._close_sandbox()  # a fresh sandbox per episode: files from the last one must not leak
        task = (options or {}).get("task")
        if task is None:
            self._task = self._draw_train_task()
        else:
            self._task = validate_task(task) if self.parts == 1 else validate_chain(task, self.parts)
        self._questions, self._answers = chain_of(self._task)
        self._part, self._steps, self._correct, self._last_call = 0, 0, [], None
        observation = part_observation(self._questions[0], 0, self.parts, self.part_labels)
        return observation, {"state_key": self._key(observation), "task_id": self._task["id"]}

    def step(self, action: Action) -> StepResult:
        task = self._task
        assert task is not None  # Env's guard: step() runs only after a successful reset()
        self._steps += 1
        part = self._part
        repeated = False
        if self.end_part_on_repeat:  # off by default: no signature work on the ordinary path
            previous, self._last_call = self._last_call, call_signature(action)
            repeated = self._steps > 1 and self._last_call == previous
        outcome = (
            _Outcome(REPEAT_ENDS_PART, 0.0, False, {"repeated_call": True})
            if repeated
            else self._dispatch(action, self._answers[part])
        )
        part_over = repeated or outcome.terminated or self._steps >= self.max_steps
        if part_over and "success" not in outcome.info:
            self._correct.append(False)  # the part's budget ran out without a submit
        episode_over = part_over and part + 1 == self.parts
        observation, terminated = outcome.observation, outcome.terminated and episode_over
        next_part = part_over and not episode_over
        if next_part:
            self._part, self._steps, self._last_call = part + 1, 0, None
            observation = part_observation(self._questions[part + 1], part + 1, self.parts, self.part_labels)
        info = {
            "state_key": self._key(observation),
            "task_id": task["id"],
            "invalid": False,
            **outcome.info,
        }
        if next_part:
            info[INFO_CONTEXT_RESET] = (
                True  # the next part needs nothing of this one's turns (rollout.context)
            )
        if self.parts > 1:
            info.pop("success", None)
            info.update(part=part, part_correct=outcome.info.get("success"))
            if episode_over:
                info.update(success=all(self._correct), parts_correct=sum(self._correct))
        truncated = episode_over and not terminated
        return StepResult(observation, outcome.reward, terminated, truncated, info)

    def fork(self) -> CalcEnv:
        """A copy of this episode; its sandbox (when python has run) a fork of this one's workdir."""
        child = copy_env(self, reopened=("_sandbox",))
        assert isinstance(child, CalcEnv)
        if self._sandbox is not None:
            task_id = self._task["id"] if self._task else None
            target = acquire_sandbox(self.sandbox_config, self.sandbox_labels, self.pool_size, task_id)
            try:
                child._sandbox = self._sandbox.fork(target=target)
            except BaseException:
                discard_sandbox(target, self.sandbox_config, self.sandbox_labels, self.pool_size)
                raise
        return child

    def _key(self, observation: str) -> str:
        assert self._task is not None
        return state_key(self._task["id"], observation, None if self.parts == 1 else self._part)

    def close(self) -> None:
        self._close_sandbox()
        super().close()

    def _dispatch(self, action: Action, expected: str) -> _Outcome:
        if not action.tool_calls:
            problem = action.parse_error or "your turn has no tool call"
            return _invalid(f"Error: {problem}. {FORMAT_HELP}")
        call = action.tool_calls[0]
        if call.name == "python":
            code = _string_argument(call, "code")
            return _invalid_arguments(call) if code is None else self._run_python(code)
        if call.name == "submit":
            answer = _string_argument(call, "answer")
            if answer is None:
                return _invalid_arguments(call)
            outcome = _submit(answer, expected)
            self._correct.append(bool(outcome.info["success"]))
            # a multi-part episode never says whether a part was right (the module docstring)
            return outcome if self.parts == 1 else outcome._replace(observation=ANSWER_RECORDED)
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
        """One train task (parts == 1), or a chain of `parts` train tasks' questions."""
        drawn: list[dict[str, Any]] = []
        while len(drawn) < self.parts:
            task = make_task(self.np_random)
            if task["split"] == "train":
                drawn.append(task)
        if self.parts == 1:
            return drawn[0]
        return {
            "id": "calc-chain-" + "-".join(task["id"].removeprefix("calc-") for task in drawn),
            "questions": [task["question"] for task in drawn],
            "answers": [task["answer"] for task in drawn],
        }


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
