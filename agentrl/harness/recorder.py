"""One harness episode's record: its model calls (token-in/token-out), its env steps, and the `Episode`.

What this is: `EpisodeRecorder`, which the endpoint hands every chat request and env step of one episode.
- `chat(request)` renders the request's prompt, samples with the engine, and records the call: its full
  prompt ids, the tokens this call appended to its sequence, the sampled ids and the sampler's log-probs.
  A call whose messages extend a previous call's (its messages, the reply it got, then new ones) continues
  that call's token sequence: its prompt is the previous prompt and sampled tokens, then only the appended
  text's tokens (`chat.continuation_text`). A call whose fully rendered prompt starts with a previous call's
  tokens continues it too. Any other call (the harness summarised, dropped or edited turns) starts a new
  segment with its whole prompt. Sampled tokens are never re-tokenised.
- `step(action)` steps the env session and records the result.
- `episode()` makes the `Episode`: one `Turn` per call, in call order, with `Turn.segment` set. Env steps
  are credited to the latest call made before them (steps before the first call to the first call, steps
  after the last call, such as the final grading, to the last one): a turn's reward is the sum of its steps'
  rewards, its state key the state after its last step (else the state before it), its observation the
  steps' observations, and it is invalid when one of its steps says so or its tool call did not parse.
  `stop_reason` is the env's when it ended the episode, else the budget the endpoint enforced, else
  `stopped`.

Budgets (`RolloutConfig`): `max_turns` calls per episode, `max_context_tokens` for a call's prompt plus
its `max_tokens`; refusals are `ChatError`s the endpoint answers as OpenAI errors, and they set the stop
reason. The endpoint enforces rate and concurrency with `admit`.

What this is not: HTTP (`endpoint`) or the harness's process (`runner`).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from agentrl.agent.engines.base import Completion, Engine, SamplingParams
from agentrl.agent.rollout import derive_seed, is_invalid
from agentrl.agent.rollout_config import HarnessConfig, RolloutConfig
from agentrl.agent.session import SessionClient, build_episode
from agentrl.env.core import StepResult
from agentrl.errors import INFRA_ERRORS, ChatError, EpisodeClosed
from agentrl.harness.chat import (
    ChatFormat,
    ChatRequest,
    Reply,
    continuation_text,
    make_reply,
)
from agentrl.types import Action, Episode, SessionStart, StopReason, Turn

TOOL_STOP = "</tool_call>"


@dataclass(frozen=True)
class RecordedCall:
    """One chat completion the harness asked for.

    prompt_ids: [P] the whole prompt the engine was fed
    new_ids:    [N] the tokens this call appended to its segment before sampling (the whole prompt when it
                starts a segment): what the turn's `prompt_ids` are
    """

    index: int
    segment: int
    continued: bool
    request: ChatRequest
    prompt_ids: tuple[int, ...]
    new_ids: tuple[int, ...]
    completion: Completion
    reply: Reply
    temperature: float
    seconds: float

    @property
    def tokens(self) -> tuple[int, ...]:
        """The segment's tokens after this call: its prompt and what was sampled."""
        return (*self.prompt_ids, *self.completion.token_ids)


@dataclass(frozen=True)
class RecordedStep:
    """One env step the harness took; `after_calls` calls had been recorded when it returned."""

    after_calls: int
    action: Action
    result: StepResult


class EpisodeRecorder:
    """Calls and env steps of one episode; see the module docstring."""

    def __init__(
        self,
        engine: Engine,
        chat: ChatFormat,
        client: SessionClient,
        start: SessionStart,
        task: Mapping[str, Any],
        sampling: SamplingParams,
        rollout: RolloutConfig,
        harness: HarnessConfig,
        sampler_seed: int | None = None,
    ) -> None:
        self.engine, self.chat, self.client, self.start, self.task = engine, chat, client, start, task
        self.sampling, self.rollout, self.harness, self.sampler_seed = (
            sampling,
            rollout,
            harness,
            sampler_seed,
        )
        self.calls: list[RecordedCall] = []
        self.steps: list[RecordedStep] = []
        self.budget_stop: StopReason | None = None
        self.infra_error: str | None = None
        self.closed = False
        self._in_flight = 0
        self._issued = 0
        self._tails: dict[int, RecordedCall] = {}  # segment -> its last call
        self._segments = 0  # segments started so far
        self._busy: set[int] = set()  # segments with a call being sampled
        self._tokens = float(harness.rate_burst)
        self._refilled = time.monotonic()
        self._step_lock = asyncio.Lock()

    # ---- env ---------------------------------------------------------------------------------------

    @property
    def env_done(self) -> bool:
        return any(s.result.terminated or s.result.truncated for s in self.steps)

    async def step(self, action: Action) -> StepResult:
        """Step the env session with `action` and record it. Infrastructure failures are remembered (the
        episode becomes `infra_error`) and raised; a step after the env ended is an `EpisodeOver` from the
        service, raised as is; a step after the harness's time is up, `EpisodeClosed`."""
        if self.closed:
            raise EpisodeClosed("this episode is over", code="episode_over", status=409)
        return await self.record_step(action)

    async def record_step(self, action: Action) -> StepResult:
        """`step` without the closed check: the runner's own finishing step."""
        async with self._step_lock:  # env sessions take one step at a time
            try:
                result = await self.client.step(self.start.session_id, action)
            except INFRA_ERRORS as exc:
                self.infra_error = self.infra_error or f"{type(exc).__name__}: {exc}"
                raise
            self.steps.append(RecordedStep(len(self.calls), action, result))
            return result

    # ---- model calls -------------------------------------------------------------------------------

    def admit(self) -> None:
        """Rate and concurrency limits of this episode; `ChatError` 429 when over."""
        if self.closed:
            raise EpisodeClosed("this episode is over", code="episode_over", status=409)
        now = time.monotonic()
        self._tokens = min(
            self.harness.rate_burst, self._tokens + (now - self._refilled) * self.harness.rate_per_s
        )
        self._refilled = now
        if self._in_flight >= self.harness.max_concurrent:
            raise ChatError(
                f"at most {self.harness.max_concurrent} calls of one episode may run at once",
                code="rate_limit_exceeded",
                status=429,
                kind="rate_limit_error",
            )
        if self._tokens < 1:
            raise ChatError(
                f"rate limit: {self.harness.rate_per_s:g} calls per second per episode",
                code="rate_limit_exceeded",
                status=429,
                kind="rate_limit_error",
            )
        self._tokens -= 1

    async def chat_completion(self, request: ChatRequest) -> RecordedCall:
        """Sample the reply to `request` and record the call (see the module docstring)."""
        self.admit()
        if self._issued >= self.rollout.max_turns:
            self.budget_stop = self.budget_stop or "max_turns"
            raise ChatError(
                f"this episode's budget of {self.rollout.max_turns} model calls is spent",
                code="call_budget_exhausted",
            )
        segment, base, new_ids = self._place(request)
        prompt_ids = (*base, *new_ids)
        params = self._params(request, len(self.calls))
        if len(prompt_ids) + params.max_new_tokens > self.rollout.max_context_tokens:
            self.budget_stop = self.budget_stop or "max_tokens"
            raise ChatError(
                f"This model's maximum context length is {self.rollout.max_context_tokens} tokens; the "
                f"messages take {len(prompt_ids)} and max_tokens is {params.max_new_tokens}",
                "messages",
                "context_length_exceeded",
            )
        self._issued += 1
        self._in_flight += 1
        claimed = segment in self._tails
        if claimed:
            self._busy.add(segment)
        started = time.perf_counter()
        try:
            completion = await self.engine.generate(prompt_ids, params)
        except BaseException:
            self._issued -= 1
            raise
        finally:
            self._in_flight -= 1
            self._busy.discard(segment)
        call_ids = [f"call_{uuid.uuid4().hex[:24]}" for _ in range(16)]
        reply = make_reply(completion.text, completion.finish_reason == "length", request, call_ids)
        call = RecordedCall(
            index=len(self.calls),
            segment=segment,
            continued=claimed,
            request=request,
            prompt_ids=prompt_ids,
            new_ids=tuple(new_ids),
            completion=completion,
            reply=reply,
            temperature=params.temperature,
            seconds=time.perf_counter() - started,
        )
        self.calls.append(call)
        self._tails[segment] = call
        return call

    def _place(self, request: ChatRequest) -> tuple[int, tuple[int, ...], list[int]]:
        """(segment, tokens it already holds, tokens to append) for a new call: the segment whose last
        call this request continues (most recent first, skipping segments with a call in flight), else a
        new segment with the whole rendered prompt."""
        tails = [call for segment, call in self._tails.items() if segment not in self._busy]
        tails.sort(key=lambda call: call.index, reverse=True)
        for tail in tails:
            if tail.request.tools_key != request.tools_key:
                continue
            text = continuation_text(
                self.chat, tail.request.messages, tail.reply.message, request, tail.completion.ended_turn
            )
            if text is not None:
                return tail.segment, tail.tokens, self.chat.encode(text)
        full = self.chat.encode(self.chat.render(request.messages, request.shown_tools, True))
        for tail in tails:
            tokens = tail.tokens
            if len(full) > len(tokens) and tuple(full[: len(tokens)]) == tokens:
                return tail.segment, tokens, full[len(tokens) :]
        self._segments += 1
        return self._segments - 1, (), full

    def _params(self, request: ChatRequest, index: int) -> SamplingParams:
        """The run's sampling (the request's temperature, top_p and seed only with `honour_sampling`), the
        request's `max_tokens`, its stop strings plus the tool-call stop when tools are shown."""
        params = self.sampling
        if self.harness.honour_sampling:
            params = replace(
                params,
                temperature=params.temperature if request.temperature is None else request.temperature,
                top_p=params.top_p if request.top_p is None else request.top_p,
                seed=request.seed,
            )
        if self.sampler_seed is not None and params.seed is None:
            params = replace(params, seed=derive_seed(self.sampler_seed, index))
        stops = tuple(dict.fromkeys([*request.stop, *((TOOL_STOP,) if request.shown_tools else ())]))
        return replace(params, max_new_tokens=request.max_tokens or params.max_new_tokens, stop=stops)

    # ---- the episode -------------------------------------------------------------------------------

    def episode(
        self,
        env_id: str,
        task: Mapping[str, Any],
        seed: int,
        group_id: str,
        error: str | None = None,
    ) -> Episode:
        """The recorded episode; `error` (the harness failed) makes it an `infra_error`, as does an
        infrastructure failure of the env."""
        last_info = self.steps[-1].result.info if self.steps else {}
        success = bool(last_info.get("success", False))
        failure = self.infra_error or error
        stop = self.stop_reason()
        return build_episode(env_id, task, seed, group_id, self._turns(), stop, self.start, success, failure)

    def stop_reason(self) -> StopReason:
        for step in self.steps:
            if step.result.terminated or step.result.truncated:
                return "terminated" if step.result.terminated else "truncated"
        return self.budget_stop or "stopped"

    def _turns(self) -> list[Turn]:
        if not self.calls:
            return []
        owned: list[list[RecordedStep]] = [[] for _ in self.calls]
        for step in self.steps:
            owned[min(max(step.after_calls - 1, 0), len(self.calls) - 1)].append(step)
        turns: list[Turn] = []
        state = self.start.info.get("state_key")
        for call, steps in zip(self.calls, owned, strict=True):
            info: dict[str, Any] = dict(steps[-1].result.info) if steps else {}
            state = info.get("state_key", state) if steps else state
            info.update(
                harness_steps=len(steps),
                segment=call.segment,
                continued=call.continued,
                temperature=call.temperature,
                call_seconds=round(call.seconds, 4),
            )
            invalid = call.reply.action.parse_error is not None or any(
                is_invalid(s.action, s.result.info) for s in steps
            )
            turns.append(
                Turn(
                    index=call.index,
                    prompt_ids=call.new_ids,
                    completion_ids=call.completion.token_ids,
                    completion_logprobs=call.completion.logprobs,
                    text=call.completion.text,
                    action=call.reply.action,
                    observation="\n".join(s.result.observation for s in steps),
                    reward=float(sum(s.result.reward for s in steps)),
                    invalid=invalid,
                    state_key=state,
                    terminated=any(s.result.terminated for s in steps),
                    truncated=any(s.result.truncated for s in steps),
                    info=info,
                    segment=call.segment,
                    finish_reason=call.completion.finish_reason,
                )
            )
        return turns

    def record(self) -> dict[str, Any]:
        """What `GET /agentrl/record` shows the episode's own harness: its calls and steps (JSON)."""
        return {
            "calls": [
                {
                    "index": c.index,
                    "segment": c.segment,
                    "continued": c.continued,
                    "prompt_tokens": len(c.prompt_ids),
                    "new_prompt_ids": list(c.new_ids),
                    "completion_ids": list(c.completion.token_ids),
                    "logprobs": list(c.completion.logprobs),
                    "text": c.completion.text,
                }
                for c in self.calls
            ],
            "steps": [
                {
                    "after_calls": s.after_calls,
                    "reward": s.result.reward,
                    "terminated": s.result.terminated,
                    "truncated": s.result.truncated,
                    "observation": s.result.observation,
                }
                for s in self.steps
            ],
        }
