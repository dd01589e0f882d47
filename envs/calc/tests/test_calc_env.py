"""CalcEnv: the Env contract, grading and malformed turns without Docker; the python tool with Docker."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import docker
import pytest
from agentrl_calc.env import FORMAT_HELP, CalcEnv

from agentrl.env import check_env, make
from agentrl.errors import EnvError, EpisodeOver, SandboxUnavailable
from agentrl.sandbox.docker import SESSION_LABEL, docker_client
from agentrl.sandbox.limits import SandboxConfig
from agentrl.types import Action, ToolCall

TASK = {"id": "t-1", "question": "What is 347 * 29 + 18?", "answer": "10081", "split": "train", "level": 2}


def call(name: str, **arguments: object) -> Action:
    return Action(text="", tool_calls=(ToolCall(name=name, arguments=arguments),))


@pytest.fixture
def env() -> Iterator[CalcEnv]:
    calc = CalcEnv()
    calc.reset(seed=0, options={"task": TASK})
    yield calc
    calc.close()


# --- without Docker: every path here ends before a sandbox would start ---


def test_check_env_passes() -> None:
    check_env(CalcEnv(), options={"task": TASK})


def test_registered_id_makes_a_calc_env() -> None:
    made = make("agentrl/Calc-v0", max_steps=3)
    assert isinstance(made, CalcEnv) and made.max_steps == 3


def test_reset_shows_the_question_and_a_state_key(env: CalcEnv) -> None:
    observation, info = env.reset(options={"task": TASK})
    assert observation.startswith("What is 347 * 29 + 18?") and "submit" in observation
    assert info["task_id"] == "t-1" and isinstance(info["state_key"], str)


def test_reset_without_a_task_draws_one_from_the_seed() -> None:
    first, second = CalcEnv(), CalcEnv()
    assert first.reset(seed=5)[0] == second.reset(seed=5)[0]
    assert first.reset(seed=5)[0] != first.reset(seed=6)[0]


def test_submitting_the_right_answer_ends_with_reward_one(env: CalcEnv) -> None:
    result = env.step(call("submit", answer="10,081"))
    assert result.observation == "Correct." and result.reward == 1.0
    assert result.terminated and not result.truncated and result.info["success"] is True


def test_submitting_a_wrong_answer_ends_with_reward_zero(env: CalcEnv) -> None:
    result = env.step(call("submit", answer="10080"))
    assert result.observation == "Incorrect." and result.reward == 0.0
    assert result.terminated and result.info["success"] is False and result.info["invalid"] is False


def test_a_numeric_json_answer_is_accepted(env: CalcEnv) -> None:
    assert env.step(call("submit", answer=10081)).reward == 1.0


def test_a_turn_without_a_tool_call_gets_the_format(env: CalcEnv) -> None:
    result = env.step(Action(text="The answer is 10081."))
    assert result.info["invalid"] is True and result.reward == 0.0 and not result.terminated
    assert FORMAT_HELP in result.observation and '<tool_call>{"name": "submit"' in result.observation


def test_a_parse_error_is_shown_to_the_model(env: CalcEnv) -> None:
    result = env.step(Action(text="<tool_call>{", parse_error="unterminated <tool_call>"))
    assert result.info["invalid"] is True and "unterminated <tool_call>" in result.observation


@pytest.mark.parametrize(
    "action",
    [
        call("calculator", expression="1+1"),
        call("submit"),
        call("submit", answer="1", note="x"),
        call("python", source="print(1)"),
        call("python", code=["print(1)"]),
    ],
)
def test_unknown_tools_and_bad_arguments_are_invalid(env: CalcEnv, action: Action) -> None:
    result = env.step(action)
    assert result.info["invalid"] is True and result.reward == 0.0 and not result.terminated
    assert "Error:" in result.observation


def test_only_the_first_tool_call_runs(env: CalcEnv) -> None:
    action = Action(
        text="", tool_calls=(ToolCall("submit", {"answer": "1"}), ToolCall("submit", {"answer": "10081"}))
    )
    assert env.step(action).reward == 0.0


def test_the_step_budget_truncates(env: CalcEnv) -> None:
    results = [env.step(Action(text="hmm")) for _ in range(env.max_steps)]
    assert [result.truncated for result in results] == [False] * (env.max_steps - 1) + [True]
    with pytest.raises(EpisodeOver, match="call reset"):
        env.step(Action(text="hmm"))


def test_the_same_observation_gives_the_same_state_key(env: CalcEnv) -> None:
    first = env.step(Action(text="a")).info["state_key"]
    assert env.step(Action(text="b")).info["state_key"] == first
    assert env.step(call("nope")).info["state_key"] != first


def test_invalid_tasks_are_rejected() -> None:
    with pytest.raises(EnvError, match="'answer'"):
        CalcEnv().reset(options={"task": {"id": "x", "question": "What is 1 + 1?"}})
    with pytest.raises(EnvError, match="non-numeric"):
        CalcEnv().reset(options={"task": {**TASK, "answer": "ten"}})


def test_the_examples_are_correct_exchanges_ending_on_submit() -> None:
    examples = CalcEnv.examples
    assert [message["role"] for message in examples] == ["user", "assistant", "tool", "assistant"] * 2
    for start in (0, 4):
        code = examples[start + 1]["tool_calls"][0]["arguments"]["code"]
        answer = examples[start + 3]["tool_calls"][0]["arguments"]["answer"]
        assert str(eval(code.removeprefix("print(").removesuffix(")"))) == answer  # our own arithmetic
        assert examples[start + 2]["content"] == f"exit code 0\n{answer}\n"


# --- with Docker: the python tool in a real sandbox ---


SESSION = f"calc-test-{uuid.uuid4().hex[:8]}"  # one label, so every test here draws from one warm pool


@pytest.fixture
def sandboxed() -> Iterator[CalcEnv]:
    try:
        docker_client()
    except SandboxUnavailable as error:
        pytest.skip(str(error))
    calc = CalcEnv(
        sandbox=SandboxConfig(command_timeout_s=3.0), sandbox_labels={SESSION_LABEL: SESSION}, pool_size=2
    )
    calc.reset(options={"task": TASK})
    yield calc
    calc.close()


def _exists(container_id: str) -> bool:
    try:
        docker.from_env().containers.get(container_id)
    except docker.errors.NotFound:
        return False
    return True


def _gone_within(container_id: str, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while _exists(container_id):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@pytest.mark.docker
def test_python_prints_the_product(sandboxed: CalcEnv) -> None:
    result = sandboxed.step(call("python", code="print(347 * 29 + 18)"))
    assert result.observation == "exit code 0\n10081\n" and result.info["invalid"] is False
    assert sandboxed.step(call("submit", answer="10081")).reward == 1.0


@pytest.mark.docker
def test_an_endless_loop_times_out_and_the_env_survives(sandboxed: CalcEnv) -> None:
    result = sandboxed.step(call("python", code="while True: pass"))
    assert result.info["timed_out"] is True and "time limit" in result.observation
    assert sandboxed.step(call("python", code="print('alive')")).observation.endswith("alive\n")


@pytest.mark.docker
def test_a_memory_bomb_is_killed_and_the_sandbox_survives(sandboxed: CalcEnv) -> None:
    result = sandboxed.step(call("python", code="x = bytearray(10**9)\nprint('allocated')"))
    assert result.info["exit_code"] != 0 and "allocated" not in result.observation
    assert result.info["oom"] or "MemoryError" in result.observation
    assert sandboxed.step(call("python", code="print('alive')")).observation.endswith("alive\n")


@pytest.mark.docker
def test_a_fork_bomb_is_contained(sandboxed: CalcEnv) -> None:
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    result = sandboxed.step(call("python", code=bomb))
    assert result.info["timed_out"] is True
    assert sandboxed.step(call("python", code="print('alive')")).observation.endswith("alive\n")


@pytest.mark.docker
def test_no_network_and_not_root(sandboxed: CalcEnv) -> None:
    # read-only checks: nothing is sent, so even a broken sandbox would put no traffic off the host
    code = (
        "import os\n"
        "print('uid', os.getuid())\n"
        "print(sorted(line.split(':')[0].strip() for line in open('/proc/net/dev').readlines()[2:]))\n"
        "print('routes', len(open('/proc/net/route').readlines()) - 1)"
    )
    observation = sandboxed.step(call("python", code=code)).observation
    assert "uid 1000" in observation and "['lo']" in observation and "routes 0" in observation


@pytest.mark.docker
def test_close_discards_the_pooled_sandbox(sandboxed: CalcEnv) -> None:
    sandboxed.step(call("python", code="print(1)"))
    container_id = sandboxed._sandbox.container_id if sandboxed._sandbox else ""
    assert _exists(container_id)
    sandboxed.close()
    assert _gone_within(container_id, 15.0)  # removed in the background: reset by discard


@pytest.mark.docker
def test_each_episode_gets_a_fresh_sandbox(sandboxed: CalcEnv) -> None:
    sandboxed.step(call("python", code="open('/work/note', 'w').write('x')"))
    first = sandboxed._sandbox.container_id if sandboxed._sandbox else ""
    sandboxed.reset(options={"task": TASK})
    result = sandboxed.step(call("python", code="import os; print(os.path.exists('/work/note'))"))
    assert result.observation.endswith("False\n")
    assert sandboxed._sandbox is not None and sandboxed._sandbox.container_id != first
    assert _gone_within(first, 15.0)


@pytest.mark.docker
def test_without_a_pool_each_episode_starts_and_removes_its_own_container() -> None:
    label = f"calc-test-{uuid.uuid4().hex[:8]}"
    calc = CalcEnv(sandbox_labels={SESSION_LABEL: label}, pool_size=0)
    calc.reset(options={"task": TASK})
    assert calc.step(call("python", code="print(6 * 7)")).observation == "exit code 0\n42\n"
    listed = docker.from_env().containers.list(all=True, filters={"label": f"{SESSION_LABEL}={label}"})
    assert len(listed) == 1
    calc.close()
    assert not docker.from_env().containers.list(all=True, filters={"label": f"{SESSION_LABEL}={label}"})
