"""A small synthetic run recorded through the real store writer, for demos, docs and tests of the viewer.

What this is: `record_sample_run(store)` writes a three-step run of a calculator-like task (two task groups
of three episodes per step, plus held-out evaluations at steps 0 and 3) with hand-made but well-formed
Episodes: tool calls in the Hermes format, observations, state keys that form anchor groups, one invalid
turn and one infrastructure failure per step. Advantages come from the real GiGPO estimator and the credit
metrics from `agentrl.credit.metrics`; reward and success metrics are computed from the episodes. Each
training step also records its task draws (reason "uniform", with the group's outcome) as the uniform
sampler does. The saved config holds the keys the viewer's runs list reads (model, estimator, group size,
eval temperature), with placeholder values. Each completion is "tokenised" into pieces of four characters
and an end-of-turn token (`sample_tokens`), with made-up sampler log-probs (digits are less likely, a turn
without a tool call starts unlikely), and stored with their pieces (`sample_pieces`), so the episode page
shows its token strips; the training episodes that carry a signal also get made-up trainer log-probs
(`sample_trainer_logprobs`: within a few thousandths of the sampler's, and far above it on the first token
of a turn with no tool call, outside the clip range), as the update records them. One episode (step 1,
the first task's second member, the one with an invalid turn) is recorded as a `mask` context policy
would record it (`masked_context`: each turn's prompt view, and a second token segment at turn 2), so the
episode page shows its per-turn prompt lines; the run's config names no context policy.

What this is not: a model's output. No model is loaded; the episodes are deterministic functions of the
step and episode index. KL and entropy are synthetic numbers (so the plot has every panel).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from agentrl.credit import episodes_to_batch, estimate, split_by_episode
from agentrl.credit.metrics import credit_metrics
from agentrl.env.core import tool_spec
from agentrl.env.toolcall import TOOL_CALL_OPEN, render_tool_call
from agentrl.store.repository import Store, create_run, finish_run
from agentrl.store.writer import StoreWriter
from agentrl.types import Action, Episode, ToolCall, Turn

SAMPLE_TASKS = (("calc-17", 12, 30), ("calc-42", 7, 8))  # (task id, a, b): "what is a + b?"
GROUP_SIZE = 3
STEPS = 3
ENV_ID = "agentrl/Calc-v0"
SAMPLE_PROMPT = {
    "tools": [
        tool_spec("python", "Run Python code and return what it prints.", {"code": {"type": "string"}}),
        tool_spec("submit", "Submit your final answer.", {"answer": {"type": "string"}}),
    ],
    "examples": [],
}
"""The first-prompt inputs every sample episode shares (stored once, in the prompts table)."""


END_OF_TURN = "<|im_end|>"
_VOCABULARY: dict[str, int] = {END_OF_TURN: 0}  # piece -> the sample's made-up token id


def sample_tokens(text: str, called: bool) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """The sample's token ids of a completion (four-character pieces, then the end of turn) and their
    made-up sampler log-probs: -0.03, less 0.8 per digit, less 2.5 on the first token of a turn with no
    tool call; the end of turn -0.01."""
    pieces = [text[start : start + 4] for start in range(0, len(text), 4)]
    ids = tuple(_VOCABULARY.setdefault(piece, len(_VOCABULARY)) for piece in [*pieces, END_OF_TURN])
    logprobs = [-0.03 - 0.8 * sum(c.isdigit() for c in piece) for piece in pieces]
    if logprobs and not called:
        logprobs[0] -= 2.5
    return ids, (*logprobs, -0.01)


def sample_trainer_logprobs(
    episodes: Sequence[Episode], advantages: Sequence[Sequence[float]]
) -> list[list[list[float] | None]]:
    """Per episode and turn, made-up trainer log-probs of its sampled tokens: the sampler's plus
    0.002 x (position mod 5 - 2), and +0.4 (a ratio of about 1.5) on the first token of a turn with no tool
    call; None for an episode whose advantages are all 0 (the update leaves it out)."""
    out: list[list[list[float] | None]] = []
    for episode, values in zip(episodes, advantages, strict=True):
        trained = any(value != 0.0 for value in values)
        out.append([_trainer_logprobs(turn) if trained else None for turn in episode.turns])
    return out


def _trainer_logprobs(turn: Turn) -> list[float]:
    shifted = [lp + 0.002 * (position % 5 - 2) for position, lp in enumerate(turn.completion_logprobs)]
    if shifted and not turn.action.tool_calls:
        shifted[0] += 0.4
    return shifted


def sample_pieces(ids: Sequence[int]) -> list[str]:
    """The `TokenPieces` of `sample_tokens`' ids."""
    pieces = {token: piece for piece, token in _VOCABULARY.items()}
    return [pieces[token] for token in ids]


def make_turn(
    index: int, text: str, call: ToolCall | None, observation: str, reward: float, state: str
) -> Turn:
    ids, logprobs = sample_tokens(text, called=call is not None)
    return Turn(
        index=index,
        prompt_ids=tuple(range(40 if index == 0 else 12)),
        completion_ids=ids,
        completion_logprobs=logprobs,
        text=text,
        action=Action(text, (call,) if call else (), None if call else f"no {TOOL_CALL_OPEN} block"),
        observation=observation,
        reward=reward,
        invalid=call is None,
        state_key=state,
        finish_reason="stop",  # every sample completion ends with its tool call or the end of turn
        # what a sandboxed env reports about the command it ran (calc's python tool)
        info={"exit_code": 0, "timed_out": False, "oom": False, "duration_s": 0.021}
        if call is not None and call.name == "python"
        else {},
    )


MASK_STUB_TOKENS = 8  # the made-up length of a masked observation's one-line stub


def masked_context(turns: Sequence[Turn]) -> list[Turn]:
    """The turns as a `mask` context policy keeping the last turn's output (`keep_turns: 1`) records them:
    each with its prompt view; turn 2's prompt masks turn 0's output, so it is not turn 1's prompt plus
    turn 1 and starts token segment 1 with its whole prompt (the first prompt, both completions, the stub
    and turn 1's observation)."""
    views = [[], [0], [0, 1]]
    out = []
    for turn, shown in zip(turns, views, strict=True):
        masked = shown[:-1]
        segment = 1 if masked else 0
        prompt_ids = turn.prompt_ids
        if masked:
            whole = 40 + sum(len(t.completion_ids) for t in turns[:2]) + MASK_STUB_TOKENS + 12
            prompt_ids = tuple(range(whole))
        view = {"policy": "mask", "task_turn": None, "shown": shown, "masked": masked}
        out.append(replace(turn, prompt_ids=prompt_ids, segment=segment, prompt_view=view))
    return out


def sample_episode(step: int, task: tuple[str, int, int], member: int, split: str = "train") -> Episode:
    """Episode `member` of a task group at `step`: later steps and lower members succeed more often."""
    task_id, a, b = task
    group_id = f"{split}-{step}-{task_id}"
    episode_id = f"{group_id}-{member}"
    start = f"{task_id}:start"
    if split == "train" and member == GROUP_SIZE - 1 and task_id == SAMPLE_TASKS[1][0]:
        return Episode(
            episode_id, ENV_ID, task_id, group_id, member, (), "infra_error", start,
            error="SandboxLost: the sandbox container exited (OOM-killed) before the first turn",
        )  # fmt: skip
    good_code = member + step >= 2 if split == "train" else step > 0 or task_id == SAMPLE_TASKS[0][0]
    code = f"print({a} + {b})" if good_code else f"print({a} * {b})"
    value = a + b if good_code else a * b
    turns = [
        make_turn(0, "Let me compute it.\n" + render_tool_call("python", {"code": code}),
                  ToolCall("python", {"code": code}), f"{value}\n", 0.0, f"{task_id}:ran:{value}"),
    ]  # fmt: skip
    if split == "train" and member == 1 and step == 1:
        turns.append(make_turn(1, f"The answer is {value}.", None,
                               "error: no tool call found; call `submit` with your answer", 0.0,
                               f"{task_id}:ran:{value}"))  # fmt: skip
    correct = value == a + b
    turns.append(
        make_turn(len(turns), render_tool_call("submit", {"answer": str(value)}),
                  ToolCall("submit", {"answer": str(value)}), "correct" if correct else f"wrong: {value}",
                  1.0 if correct else 0.0, f"{task_id}:submitted:{value}"),
    )  # fmt: skip
    if split == "train" and member == 1 and step == 1 and task_id == SAMPLE_TASKS[0][0]:
        turns = masked_context(turns)
    return Episode(
        episode_id, ENV_ID, task_id, group_id, member, tuple(turns), "terminated", start, correct,
        first_observation=f"What is {a} + {b}? Use the python tool if you like, then call submit.",
        prompt_inputs=SAMPLE_PROMPT,
    )  # fmt: skip


def step_metrics(episodes: Sequence[Episode], step: int) -> dict[str, float]:
    """Reward and success of the usable episodes, credit metrics, and synthetic KL and entropy."""
    usable = [episode for episode in episodes if not episode.is_infra_failure]
    return {
        "reward_mean": sum(episode.reward for episode in usable) / len(usable),
        "success_rate": sum(episode.success for episode in usable) / len(usable),
        "infra_failures": float(len(episodes) - len(usable)),
        "kl": 0.002 * step,
        "entropy": 1.2 - 0.15 * step,
        **credit_metrics(episodes_to_batch(usable), _flat(gigpo_advantages(usable))),
    }


def gigpo_advantages(episodes: Sequence[Episode]) -> list[list[float]]:
    batch = episodes_to_batch(episodes)
    return split_by_episode(estimate("gigpo", batch), batch)


def sample_config(eval_temperature: float = 0.0) -> dict[str, object]:
    """The sample run's saved config: a few sections of a real one, no model behind the name."""
    return {
        "task": "calc",
        "model": {"name": "sample (no model)"},
        "credit": {"estimator": "gigpo", "options": {}},
        "train": {"group_size": GROUP_SIZE, "steps": STEPS},
        "eval": {"temperature": eval_temperature},
        "sample": True,
    }


def task_draws(step: int, episodes: Sequence[Episode]) -> list[dict[str, object]]:
    """The uniform sampler's record of each group played at `step` (infrastructure failures not counted)."""
    draws = []
    for task_id, *_ in SAMPLE_TASKS:
        usable = [e for e in episodes if e.task_id == task_id and not e.is_infra_failure]
        wins = sum(e.success for e in usable)
        draws.append({
            "step": step, "round": 0, "task_id": task_id, "group_id": f"train-{step}-{task_id}",
            "reason": "uniform", "successes": wins, "failures": len(usable) - wins,
            "success_rate": wins / len(usable) if usable else None,
            "alpha": None, "beta": None, "score": None,
        })  # fmt: skip
    return draws


def record_sample_run(store: Store, name: str = "sample-calc", eval_temperature: float = 0.0) -> str:
    """Record the whole sample run; return its id."""
    run_id = create_run(store, name, "calc", sample_config(eval_temperature))
    with StoreWriter(store, token_pieces=sample_pieces) as writer:
        for step in (0, STEPS):
            evals = [sample_episode(step, task, 0, split="eval") for task in SAMPLE_TASKS]
            writer.record_episodes(run_id, step, "eval", evals, None)
            writer.record_metrics(run_id, step, {"eval/success_rate": 0.5 if step == 0 else 1.0})
        for step in range(1, STEPS + 1):
            episodes = [sample_episode(step, task, m) for task in SAMPLE_TASKS for m in range(GROUP_SIZE)]
            usable = [episode for episode in episodes if not episode.is_infra_failure]
            advantages = gigpo_advantages(usable)
            trainer = sample_trainer_logprobs(usable, advantages)
            writer.record_episodes(run_id, step, "train", usable, advantages, trainer_logprobs=trainer)
            writer.record_episodes(run_id, step, "train", [e for e in episodes if e.is_infra_failure], None)
            writer.record_metrics(run_id, step, step_metrics(episodes, step))
            writer.record_task_draws(run_id, task_draws(step, episodes))
    finish_run(store, run_id, "finished")
    return run_id


def _flat(values: Sequence[Sequence[float]]) -> np.ndarray:
    return np.asarray([value for row in values for value in row], dtype=np.float64)
