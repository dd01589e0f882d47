"""Harness episodes: an external agent plays one episode against its own endpoint and env session.

What this is: `HarnessPlayer` (an `agentrl.agent.session.EpisodePlayer`, like the built-in
`agentrl.agent.rollout.run_episode`) and `choose_player`, which the trainer and `agentrl eval` call to pick
the player `rollout.harness` asks for and pass it down to `collect_rollouts` / `play_member` (so the sync
and async trainers and `agentrl eval` play harness episodes with no other change, and infrastructure
failures are re-played the same way). `run_harness_episode` plays one episode; in order:
    1. open an env session (the env resets, as for any episode);
    2. start a `ChatEndpoint` on 127.0.0.1 for this episode and register its recorder under a fresh key;
    3. run the harness with a `HarnessContext` (base URL, key, the session's task, observation and tools,
       and `step`/`call_tool` to act in the env), within `rollout.harness.timeout_s`:
       - a plain function runs in a thread of its own (so it may block, e.g. on the sync `openai` client);
       - an `async def` runs on the event loop (it must not block: use `openai.AsyncOpenAI`);
       - `rollout.harness.command` runs as a subprocess with OPENAI_BASE_URL, OPENAI_API_KEY,
         AGENTRL_HARNESS_URL and AGENTRL_MODEL set; it acts in the env through `POST /agentrl/step`;
    4. when the harness returned and the env has not ended the episode, call `rollout.harness.finish_tool`
       (if set) so the env scores the final state;
    5. close the endpoint and the session; the recorder makes the `Episode`.

Failures: an infrastructure failure of the env is `infra_error` (re-played); a harness that raises or exits
non-zero is `infra_error` too, with its message as the episode's error (never trained on), unless it failed
on a budget the endpoint refused (then the episode stops with that budget: `max_turns`, `max_tokens`). A
harness that outlives `timeout_s` stops as `max_turns`; a thread cannot be killed, so a harness thread that
ignores the closed endpoint keeps running until its next call fails.

What this is not: the endpoint (`endpoint`) or the record (`recorder`).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import inspect
import logging
import os
import signal
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentrl.agent.engines.base import Engine, SamplingParams
from agentrl.agent.rollout import run_episode
from agentrl.agent.rollout_config import HarnessConfig, RolloutConfig
from agentrl.agent.session import EpisodePlayer, EpisodeSession, SessionClient, build_episode
from agentrl.env.core import StepResult
from agentrl.errors import ConfigError, HarnessFailed
from agentrl.harness.endpoint import ChatEndpoint, chat_format
from agentrl.harness.recorder import EpisodeRecorder
from agentrl.types import Action, Episode, ToolCall

OUTPUT_TAIL_CHARS = 4000
log = logging.getLogger(__name__)


@dataclass
class HarnessContext:
    """What a harness gets for one episode.

    base_url, api_key, model: for any OpenAI client (`OpenAI(base_url=..., api_key=...)`, model=`model`)
    harness_url:              the endpoint's root, for the `/agentrl/*` routes (subprocess harnesses)
    task, observation, tools, examples, info: the env session's task record, first observation, tool specs
                              (OpenAI function format), few-shot messages and reset info
    max_calls:                the episode's budget of model calls (`rollout.max_turns`); a harness with a
                              step limit of its own should stay within it
    """

    base_url: str
    api_key: str
    model: str
    harness_url: str
    task: Mapping[str, Any]
    observation: str
    tools: list[dict[str, Any]]
    examples: list[dict[str, Any]]
    info: dict[str, Any]
    max_calls: int
    recorder: EpisodeRecorder = field(repr=False)
    loop: asyncio.AbstractEventLoop = field(repr=False)

    async def astep(self, action: Action) -> StepResult:
        """One env step (from a coroutine on the episode's event loop)."""
        return await self.recorder.step(action)

    def step(self, action: Action) -> StepResult:
        """One env step, from the harness's own thread (a plain-function harness)."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            raise RuntimeError("HarnessContext.step blocks: from a coroutine on the event loop, await astep")
        return asyncio.run_coroutine_threadsafe(self.recorder.step(action), self.loop).result()

    def call_tool(self, name: str, arguments: Mapping[str, Any] | None = None, text: str = "") -> StepResult:
        """`step` with one tool call."""
        return self.step(Action(text, (ToolCall(name, dict(arguments or {})),)))

    @property
    def env_done(self) -> bool:
        """True once the env has ended the episode (terminated or truncated)."""
        return self.recorder.env_done


Harness = Callable[[HarnessContext], Any]


@dataclass(frozen=True)
class CommandHarness:
    """A harness run as a subprocess (`rollout.harness.command`); see the module docstring."""

    command: Sequence[str]

    async def __call__(self, context: HarnessContext) -> None:
        no_proxy = ",".join(filter(None, [os.environ.get("NO_PROXY", ""), "127.0.0.1", "localhost"]))
        env = {
            **os.environ,
            "OPENAI_BASE_URL": context.base_url,
            "OPENAI_API_KEY": context.api_key,
            "AGENTRL_HARNESS_URL": context.harness_url,
            "AGENTRL_MODEL": context.model,
            "NO_PROXY": no_proxy,
            "no_proxy": no_proxy,
        }
        process = await asyncio.create_subprocess_exec(
            *self.command,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            output, _ = await process.communicate()
        except BaseException:  # cancelled (timeout, or the group failed): the whole process group goes
            if process.returncode is None:
                os.killpg(process.pid, signal.SIGKILL)
                await process.wait()
            raise
        if process.returncode:
            tail = output.decode(errors="replace")[-OUTPUT_TAIL_CHARS:]
            raise HarnessFailed(f"{' '.join(self.command)} exited with {process.returncode}: {tail}")


def load_harness(config: HarnessConfig) -> Harness:
    """The harness `rollout.harness` names: the function `target` ("module:function", attributes dotted)
    or the subprocess `command`."""
    if config.command:
        return CommandHarness(tuple(config.command))
    module_name, _, attribute = config.target.partition(":")
    try:
        found: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"rollout.harness.target={config.target!r} cannot be loaded: {exc}") from exc
    if not callable(found):
        raise ConfigError(f"rollout.harness.target={config.target!r} is not callable")
    return found  # type: ignore[no-any-return]


@dataclass(frozen=True)
class HarnessPlayer:
    """The `EpisodePlayer` of an external harness: `run_harness_episode` with the harness loaded once."""

    harness: Harness

    async def __call__(
        self,
        client: SessionClient,
        engine: Engine,
        env_id: str,
        task: Mapping[str, Any],
        seed: int,
        group_id: str,
        sampling: SamplingParams,
        config: RolloutConfig,
        sampler_seed: int | None = None,
    ) -> Episode:
        return await run_harness_episode(
            client, engine, env_id, task, seed, group_id, sampling, config, sampler_seed, self.harness
        )


def choose_player(config: RolloutConfig) -> EpisodePlayer:
    """The player `rollout.harness` asks for: the harness's, or the built-in token runner."""
    if config.harness.enabled:
        return HarnessPlayer(load_harness(config.harness))
    return run_episode


async def run_harness_episode(
    client: SessionClient,
    engine: Engine,
    env_id: str,
    task: Mapping[str, Any],
    seed: int,
    group_id: str,
    sampling: SamplingParams,
    config: RolloutConfig,
    sampler_seed: int | None = None,
    harness: Harness | None = None,
) -> Episode:
    """Play one episode of `task` with the configured harness (or `harness`); see the module docstring."""
    settings = config.harness
    play = harness if harness is not None else load_harness(settings)
    recorder: EpisodeRecorder | None = None
    error: str | None = None
    async with EpisodeSession(client) as session:
        start = await session.open(env_id, task, seed)
        recorder = EpisodeRecorder(
            engine,
            chat_format(engine.tokenizer),
            client,
            start,
            task,
            sampling,
            config,
            settings,
            sampler_seed,
        )
        async with ChatEndpoint(settings) as endpoint:
            key = endpoint.register(recorder)
            context = HarnessContext(
                base_url=endpoint.base_url,
                api_key=key,
                model=settings.served_name,
                harness_url=endpoint.url,
                task=task,
                observation=start.observation,
                tools=list(start.tools),
                examples=list(start.examples),
                info=dict(start.info),
                max_calls=config.max_turns,
                recorder=recorder,
                loop=asyncio.get_running_loop(),
            )
            try:
                error = await _run(play, context, settings.timeout_s, recorder)
            finally:
                recorder.closed = True
                endpoint.unregister(key)
        if settings.finish_tool and error is None and not recorder.env_done and recorder.infra_error is None:
            await recorder.record_step(Action("", (ToolCall(settings.finish_tool, {}),)))
    if session.infra_error is not None:
        error = f"{type(session.infra_error).__name__}: {session.infra_error}"
    if recorder is None:
        return build_episode(env_id, task, seed, group_id, (), "infra_error", None, False, error)
    return recorder.episode(env_id, task, seed, group_id, error)


async def _run(
    play: Harness, context: HarnessContext, timeout_s: float, recorder: EpisodeRecorder
) -> str | None:
    """Run the harness; the error that makes the episode a failure, or None."""
    try:
        async with asyncio.timeout(timeout_s):
            if inspect.iscoroutinefunction(play) or isinstance(play, CommandHarness):
                await play(context)
            else:
                await _in_thread(play, context)
    except TimeoutError:
        recorder.budget_stop = recorder.budget_stop or "max_turns"
    except Exception as exc:
        log.warning("the harness failed: %s: %s", type(exc).__name__, exc)  # re-plays replace the episode
        if recorder.budget_stop is None and recorder.infra_error is None:
            return f"the harness failed: {type(exc).__name__}: {exc}"
    return None


def _in_thread(function: Harness, context: HarnessContext) -> Awaitable[Any]:
    """Run `function(context)` in a daemon thread of its own (not the default executor, whose few workers
    the engine needs: harness threads wait on the engine, and it must never wait on them)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def settle(outcome: Any, failed: bool) -> None:
        if not future.done():
            (future.set_exception if failed else future.set_result)(outcome)

    def body() -> None:
        try:
            outcome, failed = function(context), False
        except BaseException as exc:  # handed to the awaiting coroutine
            outcome, failed = exc, True
        with contextlib.suppress(RuntimeError):  # the loop closed while a timed-out harness ran on
            loop.call_soon_threadsafe(settle, outcome, failed)

    threading.Thread(target=body, name="agentrl-harness", daemon=True).start()
    return future
