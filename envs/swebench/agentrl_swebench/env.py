"""SWEBenchEnv: fix a real repository until its failing tests pass, graded like SWE-bench.

What this is: the interaction protocol. `reset(options={"task": record})` takes an official-schema record
(`agentrl_swebench.records`; without one, a train record of `tasks_dir` drawn from the seed), starts a
hardened sandbox from the record's image and builds the instance there. With `images="local"` (default)
that is the record's project image (`projects.image_of`), and the per-instance layer is made at episode
start by reverse-applying the gold patch to the image's pristine tree and committing the result as the only
commit (`workspace.setup_workspace`), which is cheaper than an image per instance and leaves no history that
reveals the fix. With `images="official"` it is the record's official SWE-bench instance image (named under
`image_namespace` if given) with the repository in /testbed, re-committed the same way
(`agentrl_swebench.official`); its records come from `agentrl swebench export`.

Tools (`agentrl_swebench.tools`): `bash(command)` through the sandbox's exec channel with a timeout and
truncated output, `view(path, start, end)`, `str_replace(path, old, new)` and `submit()`. Only the first
tool call of a turn runs; a turn without a usable call gets an error observation showing the call format
and `info["invalid"] = True`.

After `submit` (or on the last of `max_steps` turns) the env takes the diff of the workspace against the
base commit, discards the agent's sandbox and grades the diff in a fresh one (`grading.grade`, with the
image source's test harness: pytest for local images, the record's eval script for official ones).
Reward: 1.0 if resolved, else 0.0; with `partial_credit=True`, the fraction of FAIL_TO_PASS tests that
pass when every PASS_TO_PASS test still does. The final step's info carries the official per-instance report.

State key: `workspace_state_key` of the workdir (`.git` and caches ignored), after reset and every step.

Fork: "sandbox": `fork()` copies the episode's state and forks the sandbox (the workdir, `.git` included,
into a sandbox of the same image); processes and files outside the workdir are not copied.

What this is not: a sandbox or a grader of its own. Sandbox failures raise `SandboxError` subclasses: they
are infrastructure failures, never a reward of 0.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

from agentrl.env import Env, StepResult, copy_env
from agentrl.errors import EnvError
from agentrl.sandbox.docker import DockerSandbox
from agentrl.sandbox.limits import SandboxConfig
from agentrl.sandbox.pool import acquire_sandbox, discard_sandbox
from agentrl.sandbox.state import WorkspaceKeyConfig, workspace_state_key
from agentrl.tasks import load_tasks
from agentrl.types import Action, ToolCall
from agentrl_swebench import tools
from agentrl_swebench.grading import Grade, LocalTests, grade
from agentrl_swebench.projects import IMAGE_TEMPLATE
from agentrl_swebench.records import validate_record
from agentrl_swebench.scripted import scripted_policy
from agentrl_swebench.sources import ImageSource, Instance, instance_of
from agentrl_swebench.workspace import extract_diff

ENV_ID = "agentrl/SWEBench-v0"
DEFAULT_TASKS_DIR = str(Path(__file__).resolve().parents[3] / "tasks")
DEFAULT_SUITE = "swebench-local"


class _Outcome(NamedTuple):
    observation: str
    submitted: bool
    info: dict[str, Any]


class SWEBenchEnv(Env):
    """Repository repair with bash/view/str_replace/submit tools; see the module docstring."""

    tools = tools.TOOLS
    fork_capability = "sandbox"
    scripted_policy = staticmethod(scripted_policy)  # demonstrations (agentrl demos)
    examples = (
        {"role": "user", "content": "<issue>\ntest_add fails: assert add(2, 2) == 4\n</issue>"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"name": "bash", "arguments": {"command": "grep -n 'def add' -r ."}}],
        },
        {
            "role": "tool",
            "content": "<returncode>0</returncode>\n<output>\n./calc.py:1:def add(a, b): return a - b\n"
            "</output>",
        },
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "name": "str_replace",
                    "arguments": {"path": "calc.py", "old": "return a - b", "new": "return a + b"},
                }
            ],
        },
        {
            "role": "tool",
            "content": "<returncode>0</returncode>\n<output>\n     1\tdef add(a, b): return a + b\n</output>",
        },
        {"role": "assistant", "content": "", "tool_calls": [{"name": "submit", "arguments": {}}]},
    )

    def __init__(
        self,
        max_steps: int = 30,
        command_timeout_s: float = 30.0,
        observation_limit_bytes: int = 10_000,
        test_timeout_s: float = 300.0,
        partial_credit: bool = False,
        image_template: str = IMAGE_TEMPLATE,
        images: str = "local",
        image_namespace: str | None = None,
        pool_size: int = 0,
        tasks_dir: str = DEFAULT_TASKS_DIR,
        suite: str = DEFAULT_SUITE,
        sandbox: SandboxConfig | None = None,
        sandbox_labels: Mapping[str, str] | None = None,
    ) -> None:
        """images: "local" (the project images) or "official" (SWE-bench's instance images; image_namespace
        names them in your registry's mirror); pool_size: warm sandboxes per image kept in the process-wide
        pool (0: fresh containers)."""
        super().__init__()
        self.max_steps = max_steps
        self.command_timeout_s = command_timeout_s
        self.observation_limit_bytes = observation_limit_bytes
        self.test_timeout_s = test_timeout_s
        self.partial_credit = partial_credit
        self.source = ImageSource(images, image_namespace, image_template)
        self.pool_size = pool_size
        self.tasks_dir, self.suite = tasks_dir, suite
        self.sandbox_config = self.source.sandbox(sandbox)
        self.sandbox_labels = {"agentrl.env": ENV_ID, **(sandbox_labels or {})}
        self._sandbox: DockerSandbox | None = None
        self._record: dict[str, Any] | None = None
        self._instance: Instance | None = None
        self._base_commit = ""
        self._steps = 0

    # --- the Env API ---

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Start an episode on `options["task"]`, or on a train record drawn from `seed` if none is given."""
        super().reset(seed=seed)
        self._close_sandbox()
        task = (options or {}).get("task")
        record = validate_record(task if task is not None else self._draw_train_record())
        self._record, self._steps = record, 0
        self._instance = instance_of(record, self.source, self.sandbox_config, self.test_timeout_s)
        self._sandbox = self._acquire(self._instance)
        self._base_commit = self._instance.tests.base_tree(self._sandbox, record, for_agent=True)
        local = isinstance(self._instance.tests, LocalTests)  # official trees get a new commit id
        if local and record.get("base_commit") and record["base_commit"] != self._base_commit:
            raise EnvError(
                f"{record['instance_id']}: the workspace's base commit {self._base_commit[:12]} is not the "
                f"record's {str(record['base_commit'])[:12]}; the image and the task set disagree "
                "(rebuild with scripts/build_swebench_images.sh, or regenerate the tasks)"
            )
        observation = tools.task_observation(record["problem_statement"], self.sandbox_config.workdir)
        return observation, {"state_key": self._state_key(), "task_id": record["id"]}

    def step(self, action: Action) -> StepResult:
        record = self._record
        assert record is not None  # Env's guard: step() runs only after a successful reset()
        self._steps += 1
        outcome = self._dispatch(action)
        truncated = not outcome.submitted and self._steps >= self.max_steps
        info = {"task_id": record["id"], "invalid": False, **outcome.info, "state_key": self._state_key()}
        reward = 0.0
        if outcome.submitted or truncated:
            result = self._finish(record)
            reward = self._reward(result)
            info.update(resolved=result.resolved, report=result.report, grading_seconds=result.seconds)
            info["success"] = result.resolved  # the runner's success flag (agentrl eval, agentrl demos)
        return StepResult(outcome.observation, reward, outcome.submitted, truncated, info)

    def close(self) -> None:
        self._close_sandbox()
        super().close()

    def fork(self) -> SWEBenchEnv:
        """A copy of this episode whose sandbox is a fork of this one's: the workdir, `.git` included, copied
        into a sandbox of the same image (whose workdir is emptied first when it is not the empty tmpfs of a
        local image: an official image's /testbed holds the repository)."""
        parent, instance = self._require_sandbox(), self._require_instance()
        child = copy_env(self, reopened=("_sandbox",))
        assert isinstance(child, SWEBenchEnv)
        target = self._acquire(instance)
        try:
            if not isinstance(instance.tests, LocalTests):
                emptying = ["find", self.sandbox_config.workdir, "-mindepth", "1", "-delete"]
                target.exec(emptying, timeout=self.command_timeout_s)
            child._sandbox = parent.fork(target=target)
        except BaseException:
            self._discard(target)
            raise
        return child

    # --- tools ---

    def _dispatch(self, action: Action) -> _Outcome:
        if not action.tool_calls:
            problem = action.parse_error or "your turn has no tool call"
            return _invalid(f"Error: {problem}. {tools.FORMAT_HELP}")
        call = action.tool_calls[0]
        handler = {"bash": self._bash, "view": self._view, "str_replace": self._str_replace}.get(call.name)
        if call.name == "submit":
            return _Outcome("Submitted; grading your changes.", True, {})
        if handler is None:
            return _invalid(f"Error: unknown tool {call.name!r}. {tools.FORMAT_HELP}")
        return handler(call)

    def _bash(self, call: ToolCall) -> _Outcome:
        command = _arguments(call, {"command": str})
        if command is None:
            return _bad_arguments(call, "command (a string)")
        result = self._require_sandbox().exec(
            ["bash", "-c", command["command"]], timeout=self.command_timeout_s
        )
        observation = tools.command_observation(result, self.observation_limit_bytes)
        return _Outcome(observation, False, {"exit_code": result.exit_code, "timed_out": result.timed_out})

    def _view(self, call: ToolCall) -> _Outcome:
        arguments = _arguments(call, {"path": str, "start": int, "end": int})
        if arguments is None:
            return _bad_arguments(call, "path (a string), start and end (integers)")
        argv = ["python3", "-I", "-S", "-c", tools.VIEW_SCRIPT]
        argv += [arguments["path"], str(arguments["start"]), str(arguments["end"])]
        result = self._require_sandbox().exec(argv, timeout=self.command_timeout_s)
        return _Outcome(tools.command_observation(result, self.observation_limit_bytes), False, {})

    def _str_replace(self, call: ToolCall) -> _Outcome:
        arguments = _arguments(call, {"path": str, "old": str, "new": str})
        if arguments is None:
            return _bad_arguments(call, "path, old and new (strings)")
        argv = ["python3", "-I", "-S", "-c", tools.STR_REPLACE_SCRIPT]
        result = self._require_sandbox().exec(argv, timeout=self.command_timeout_s, stdin=_json(arguments))
        return _Outcome(tools.command_observation(result, self.observation_limit_bytes), False, {})

    # --- grading and sandboxes ---

    def _finish(self, record: Mapping[str, Any]) -> Grade:
        """The agent's diff, then its grade in a fresh sandbox (the agent's sandbox is gone by then)."""
        patch = extract_diff(self._require_sandbox(), self.sandbox_config.workdir, self._base_commit)
        self._close_sandbox()
        instance = self._require_instance()
        return grade(record, patch, lambda: self._fresh_sandbox(instance), instance.tests)

    def _reward(self, result: Grade) -> float:
        if result.resolved:
            return 1.0
        if not self.partial_credit:
            return 0.0
        status = result.report[result.instance_id].get("tests_status") or {}
        maintained = not status.get("PASS_TO_PASS", {}).get("failure", [True])
        return result.fail_to_pass_fraction if maintained else 0.0

    def _acquire(self, instance: Instance) -> DockerSandbox:
        task = str(self._record["instance_id"]) if self._record else None
        return acquire_sandbox(instance.sandbox, self.sandbox_labels, self.pool_size, task)

    @contextmanager
    def _fresh_sandbox(self, instance: Instance) -> Iterator[DockerSandbox]:
        sandbox = self._acquire(instance)
        try:
            yield sandbox
        finally:
            self._discard(sandbox)

    def _discard(self, sandbox: DockerSandbox) -> None:
        if self._instance is None:  # no episode, so no pool it could have come from
            sandbox.close()
            return
        discard_sandbox(sandbox, self._instance.sandbox, self.sandbox_labels, self.pool_size)

    def _close_sandbox(self) -> None:
        sandbox, self._sandbox = self._sandbox, None
        if sandbox is not None:
            self._discard(sandbox)

    def _state_key(self) -> str | None:
        if self._sandbox is None:
            return None
        return workspace_state_key(self._sandbox, WorkspaceKeyConfig(root=self.sandbox_config.workdir))

    def _require_sandbox(self) -> DockerSandbox:
        if self._sandbox is None:
            raise EnvError("the episode's sandbox is gone; call reset() first")
        return self._sandbox

    def _require_instance(self) -> Instance:
        if self._instance is None:
            raise EnvError("no episode; call reset() first")
        return self._instance

    def _draw_train_record(self) -> Mapping[str, Any]:
        records = load_tasks(self.tasks_dir, self.suite, "train")
        return records[int(self.np_random.integers(len(records)))]


def _arguments(call: ToolCall, schema: Mapping[str, type]) -> dict[str, Any] | None:
    """The arguments if they are exactly `schema`'s keys with those types (ints may be numeric text)."""
    if set(call.arguments) != set(schema):
        return None
    values: dict[str, Any] = {}
    for key, kind in schema.items():
        value = call.arguments[key]
        if kind is int and isinstance(value, str) and value.strip().lstrip("-").isdigit():
            value = int(value)
        if not isinstance(value, kind) or isinstance(value, bool):
            return None
        values[key] = value
    return values


def _json(arguments: Mapping[str, Any]) -> str:
    return json.dumps(dict(arguments))


def _invalid(message: str) -> _Outcome:
    return _Outcome(message, False, {"invalid": True})


def _bad_arguments(call: ToolCall, expected: str) -> _Outcome:
    got = sorted(call.arguments) or "none"
    return _invalid(f"Error: {call.name} takes {expected}; got {got}. {tools.FORMAT_HELP}")
