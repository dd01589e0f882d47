"""SearchEnv: answer a question by searching a passage corpus (Search-R1 style), scored by EM or F1.

What this is: the interaction protocol of the search suites. Each turn is a search (answered with the top
`top_k` passages of a BM25 retriever that runs in a Docker sandbox, see `agentrl_search.sandboxed`) or an
answer, which ends the episode with reward EM or token F1 (`reward`) against the task's gold answers, the
best over them. The format is Search-R1's tags or structured tool calls (`format`, see
`agentrl_search.formats`). A turn with no usable move gets an error observation showing the format, reward
`-format_penalty` and `info["invalid"] = True` (the trainer's estimators may add their own penalty for
invalid turns on top; set one of the two to 0 to count it once). After `max_steps` turns without an answer
the episode is truncated with reward 0. `info["success"]` is exact match, so `agentrl eval` reports EM.

Tasks are `{"id", "question", "answers": [...]}` or `{"id", "question", "answer"}` records (tasks/search-*/,
or `agentrl_search.qa` for NQ/HotpotQA-style files); IGPO reads `"answer"`.

State key: `text_state_key` of (task id, the sorted set of passage ids retrieved so far, and the normalised
answer once given). What an agent knows in this env is exactly the passages it has been shown; two episodes
that saw the same passages — through different queries, in a different order — can act on the same
information, so they share a state (GiGPO/HGPO anchors), while the wording of queries that retrieved
nothing new does not split them. The history of queries is deliberately not part of it.

What this is not: a retriever (`agentrl_search.retriever`) or a question generator (`make_tasks`).
Retriever failures raise `SandboxError`s: infrastructure failures, never a reward of 0.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, NamedTuple

from agentrl.env import Env, StepResult, text_state_key
from agentrl.errors import ConfigError, EnvError
from agentrl.sandbox.limits import SandboxConfig
from agentrl.types import Action
from agentrl_search.formats import (
    FORMATS,
    TOOLS,
    Format,
    Move,
    few_shot_examples,
    format_help,
    parse_move,
    question_observation,
    results_text,
)
from agentrl_search.sandboxed import SandboxRetriever, sandbox_config, shared_retriever
from agentrl_search.scoring import REWARD_KINDS, RewardKind, best_score, normalize_answer
from agentrl_search.scripted import scripted_policy

ENV_ID = "agentrl/Search-v0"


def gold_answers(task: Mapping[str, Any]) -> list[str]:
    """The task's acceptable answers: its "answers" list, else its "answer"."""
    answers = task.get("answers")
    if answers is None and "answer" in task:
        answers = [task["answer"]]
    return [str(answer) for answer in answers or () if str(answer).strip()]


def validate_task(task: Any) -> dict[str, Any]:
    """The task record, checked; `EnvError` says which field is wrong."""
    if not isinstance(task, Mapping):
        raise EnvError(f"options['task'] must be a task record (a dict), got {type(task).__name__}")
    for key in ("id", "question"):
        if not isinstance(task.get(key), str) or not task[key]:
            raise EnvError(f"search task is missing {key!r} (a non-empty string); see tasks/search-pydoc")
    if not gold_answers(task):
        raise EnvError(f"search task {task['id']!r} needs 'answers' (a list of strings) or 'answer'")
    return dict(task)


def state_key(task_id: str, seen: frozenset[str], answer: str | None) -> str:
    parts = [task_id, *sorted(seen)] + (
        [f"answered:{normalize_answer(answer)}"] if answer is not None else []
    )
    return text_state_key("\0".join(parts))


@functools.lru_cache(maxsize=1)
def builtin_train_tasks() -> tuple[dict[str, Any], ...]:
    """Train questions of the built-in generator, for resets without a task (about a second, once)."""
    from agentrl_search.corpus import stdlib_passages
    from agentrl_search.make_tasks import generate_questions

    return tuple(task for task in generate_questions(stdlib_passages()) if task["split"] == "train")


class _Outcome(NamedTuple):
    observation: str
    reward: float
    terminated: bool
    info: dict[str, Any]


class SearchEnv(Env):
    """Question answering with a sandboxed retriever; see the module docstring."""

    fork_capability = "copy"  # the episode's state is the task and the passages seen; the corpus is shared
    fork_reopened = ("_leased",)  # the fork leases the process-wide retriever itself on its first search
    scripted_policy = staticmethod(scripted_policy)  # demonstrations (agentrl demos)

    def __init__(
        self,
        format: Format = "tags",
        reward: RewardKind = "em",
        top_k: int = 3,
        max_steps: int = 4,
        format_penalty: float = 0.1,
        passage_chars: int = 300,
        sandbox: SandboxConfig | Mapping[str, Any] | None = None,
        sandbox_labels: Mapping[str, str] | None = None,
    ) -> None:
        """format: "tags" or "tools"; reward: "em" or "f1"; top_k: passages per search; passage_chars:
        characters of each passage shown; sandbox: the retriever's SandboxConfig (or its fields)."""
        if format not in FORMATS or reward not in REWARD_KINDS:
            raise ConfigError(f"format must be one of {FORMATS} and reward one of {REWARD_KINDS}")
        if top_k < 1 or max_steps < 1 or passage_chars < 20:
            raise ConfigError("top_k and max_steps must be >= 1 and passage_chars >= 20")
        self.tools = TOOLS if format == "tools" else ()
        super().__init__()
        self.format: Format = format
        self.reward_kind: RewardKind = reward
        self.top_k, self.max_steps, self.format_penalty = top_k, max_steps, format_penalty
        self.passage_chars = passage_chars
        self.examples = few_shot_examples(format, passage_chars)
        self.sandbox_config = sandbox_config(sandbox)
        self.sandbox_labels = {"agentrl.env": ENV_ID, **(sandbox_labels or {})}
        self._task: dict[str, Any] | None = None
        self._leased: SandboxRetriever | None = None
        self._seen: frozenset[str] = frozenset()
        self._steps = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Start on `options["task"]`, or on a built-in train question drawn from `seed` if none is given."""
        super().reset(seed=seed)
        task = (options or {}).get("task")
        if task is None:
            tasks = builtin_train_tasks()
            task = tasks[int(self.np_random.integers(len(tasks)))]
        self._task = validate_task(task)
        self._seen, self._steps = frozenset(), 0
        return question_observation(self._task["question"], self.format), {
            "state_key": state_key(self._task["id"], self._seen, None),
            "task_id": self._task["id"],
        }

    def step(self, action: Action) -> StepResult:
        task = self._task
        assert task is not None  # Env's guard: step() runs only after a successful reset()
        self._steps += 1
        move = parse_move(action, self.format)
        outcome = self._dispatch(move, task)
        truncated = not outcome.terminated and self._steps >= self.max_steps
        answer = move.text if move.kind == "answer" else None
        info = {
            "state_key": state_key(task["id"], self._seen, answer),
            "task_id": task["id"],
            "invalid": move.kind == "invalid",
            **outcome.info,
        }
        return StepResult(outcome.observation, outcome.reward, outcome.terminated, truncated, info)

    def retriever(self) -> SandboxRetriever:
        """The process-wide retriever, leased by this env from its first search until `close()`."""
        if self._leased is None:
            self._leased = shared_retriever(self.sandbox_config, self.sandbox_labels)
            self._leased.acquire()
        return self._leased

    def close(self) -> None:
        leased, self._leased = self._leased, None
        if leased is not None:
            leased.release()
        super().close()

    def _dispatch(self, move: Move, task: Mapping[str, Any]) -> _Outcome:
        if move.kind == "search":
            hits = self.retriever().search(move.text, self.top_k)
            doc_ids = [str(hit["id"]) for hit in hits]
            self._seen = self._seen | frozenset(doc_ids)
            observation = results_text(hits, self.format, self.passage_chars)
            return _Outcome(observation, 0.0, False, {"query": move.text, "doc_ids": doc_ids})
        if move.kind == "answer":
            golds = gold_answers(task)
            em, f1 = best_score(move.text, golds, "em"), best_score(move.text, golds, "f1")
            reward = em if self.reward_kind == "em" else f1
            verdict = "Correct." if em == 1.0 else "Incorrect."
            return _Outcome(
                verdict, reward, True, {"answer": move.text, "em": em, "f1": f1, "success": em == 1.0}
            )
        message = f"Error: {move.text}. {format_help(self.format)}"
        return _Outcome(message, -self.format_penalty, False, {"error": move.text})
