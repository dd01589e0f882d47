"""Credit-assignment gym (issue 25, part 1): which estimator makes a small policy learn the maze faster?

    .venv/bin/python studies/scripts/credit_gym.py              # the full gym: 3 levels x 2 policies x
        # 5 estimators x 20 seeds + sweeps: ~16 CPU-min, ~8 min on 2 idle cores
    .venv/bin/python studies/scripts/credit_gym.py --quick      # level 3, mlp, grpo vs gigpo, seeds 0-15
        # (~50 CPU-s)
    .venv/bin/python studies/scripts/credit_gym.py --llm-shape  # level 1, mlp, grpo vs gigpo, 2 tasks x
        # 4 episodes per update (the LLM study's shape), 12k env steps
    .venv/bin/python studies/scripts/credit_gym.py --out x.json # where the JSON (and the PNG beside it) go
    .venv/bin/python studies/scripts/credit_gym.py --replot     # only redraw the PNG from the JSON

What this is: small policies that train in seconds, acting in the maze env's real dynamics
(`agentrl_maze.env.MazeEnv` on the task files `tasks/maze/level{1,2,3}`: walls, the door and key of
level 3, truncation after `max_steps` moves, invalid turns and the env's own state keys), trained by plain
REINFORCE whose per-step advantages come only from `agentrl.credit.estimate(name, batch)` on the
`StepBatch` that `agentrl.credit.episodes_to_batch` builds from the gym's `Episode`s, exactly as the trainer
does (`agentrl/trainer/step.py`, `compute_advantages`). Each update draws `tasks_per_step` distinct train
tasks with the trainer's uniform sampler (`agentrl.tasks.sample_tasks(tasks, count, seed, step)`) and plays
`group_size` episodes of each (one task group); like the trainer, episodes whose advantages are all 0 are
left out of the update, and the loss is the mean over the kept steps of -adv_t * log pi(a_t | s_t) (the
trainer's token_mean with one "token" per step). The optimiser is Adam, with the same learning rate for
every estimator.

Policies (one action = one turn: the four `move(direction)` tool calls, plus, with `invalid_action`, a fifth
turn "wait" that names no move, which the env answers as invalid and the estimators penalise):
    mlp      a tiny MLP (one tanh hidden layer) over simple features of the board the env shows, parsed from
             the observation text (`board_features`: the 3x3 cells around the agent as wall/door/key/goal
             planes, and the direction (signs of the row and column offsets) to the goal, the key and the
             door). It generalises across layouts, so it trains on the train split and is evaluated on the
             held-out split (60 layouts never trained on). (A 9x9 egocentric view without the direction
             features barely learned level 1 in 60k env steps; see docs/credit_gym.md.)
    tabular  a softmax table: env state key -> action logits. A state key names one layout's cell (and key
             state), so a table cannot generalise: it trains on a fixed pool of `tabular_pool` train tasks
             and is evaluated on that same pool. It is the purest credit-assignment test (credit lands
             exactly on the states GiGPO anchors on), not a generalisation test.

Evaluation: at `eval_points` evenly spaced env-step checkpoints (and at 0), held-out success is measured by
SAMPLING from the policy (temperature 1, the distribution it trains with), one episode per held-out task
(mlp: 60 held-out layouts; tabular: `tabular_eval_episodes` episodes per pool task), with an evaluation RNG
that depends only on (seed, checkpoint), so every estimator of one seed is evaluated with the same random
numbers and starts from the same initial weights (the comparison is paired by seed). An env step is one
turn, invalid ones included; every estimator gets the same budget of training env steps (the last update
may overshoot it by less than one update).

Summary per (policy, level, estimator), over seeds: the mean curve with 95% Student-t bands, the final
success and the area under the curve (AUC: the mean success over the budget, trapezoids over the
checkpoints) with bands, the per-seed paired difference to GRPO of both with bands, and
    threshold           = base + threshold_fraction * (GRPO's final mean success - base), where base is the
                          mean success at env step 0 (the untrained policy, the same for every estimator);
                          null when GRPO's final mean is not above base
    steps_to_threshold  = the env steps at which the estimator's MEAN curve first reaches the threshold,
                          linearly interpolated between checkpoints; null if it never does in the budget
    ratio_vs_grpo       = steps_to_threshold / GRPO's steps_to_threshold (< 1: faster than GRPO), with a
                          95% paired bootstrap band over seeds (`bootstrap` resamples; a resample in which
                          the estimator never reaches the threshold counts as an infinite ratio, and a band
                          end that is infinite is written as null)
and the means over updates of the credit metrics of `agentrl.credit.metrics.credit_metrics` (zero-variance
groups, anchor hit rate, anchor group size, advantage std), the invalid-turn rate, train success and episode
length. Sweeps (mlp, the long-horizon level): group size (grpo and gigpo), and GiGPO's `gamma` and
`step_weight` (0 is GRPO's episode term with GiGPO's `mean_norm`: it separates the step term from the
normalisation difference); the default value of each sweep is the main run (its first `sweep_seeds`
seeds), not re-run.

An identity to know when reading the results: both policies are Markov (pi(a | s) depends only on the
current board), and SALT gives every occurrence of a transition (s, a, s') the mean of their base (GRPO)
advantages, so sum_t adv_t * grad log pi(a_t | s_t) is unchanged: SALT's policy gradient here EQUALS GRPO's
(up to the normaliser when SALT zeroes an episode GRPO does not). SALT's curves differ from GRPO's only
through floating-point rounding, which the chaotic training amplifies; they measure the seed noise of GRPO
itself. (For an LLM the prompt holds the history, so occurrences of one transition have different gradients
and SALT is not GRPO.)

Writes `--out` (default studies/credit-gym/results/credit_gym.json) and the plot beside it (same stem, .png):
learning curves per policy and level, and the sweeps. Runs in at most `workers` (2) processes.

What this is not: an LLM study (that is studies/scripts/credit_study.py), a hyper-parameter search (every
estimator runs with its defaults, the learning rates were chosen once with GRPO only, see docs/credit_gym.md)
or a re-implementation of any estimator or of the env.
"""

from __future__ import annotations

import os

# one BLAS thread per process: the matrices are tiny, and OpenBLAS's threads (set up when numpy loads)
# made every forward pass ~3x slower on the shared 2-core machine. Must precede the numpy import.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import multiprocessing  # noqa: E402
import re  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Iterable, Mapping, Sequence  # noqa: E402
from dataclasses import asdict, dataclass, field, replace  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, NamedTuple, Protocol  # noqa: E402

import numpy as np  # noqa: E402
from agentrl_maze.env import ENV_ID, MazeEnv  # noqa: E402

from agentrl.credit import episodes_to_batch, estimate, make_config  # noqa: E402
from agentrl.credit.metrics import credit_metrics  # noqa: E402
from agentrl.tasks import Task, load_tasks, sample_tasks  # noqa: E402
from agentrl.types import Action, Episode, ToolCall, Turn  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "studies" / "credit-gym" / "results"
DIRECTIONS = ("up", "down", "left", "right")
INVALID_TEXT = "wait"  # names no move: the env answers it as an invalid turn
BOARD_CHARS = frozenset(".#@GkD")
VIEW = 3  # the window of cells around the agent that `board_features` shows
PLANES = "#DkG"
TARGETS = "GkD"  # things whose direction from the agent is a feature
# two-sided 95% Student-t quantiles by degrees of freedom (no scipy in the venv); 1.96 beyond the table
T95 = {
    1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
    11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093,
    20: 2.086, 21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064, 25: 2.060, 29: 2.045, 39: 2.023, 49: 2.010,
}  # fmt: skip
CREDIT_KEYS = ("zero_variance_groups", "anchor_hit_rate", "anchor_group_size", "advantage_std")
COLORS = {
    "grpo": "C0",
    "rloo": "C1",
    "gigpo": "C2",
    "hgpo": "C3",
    "salt": "C4",
}  # salt dashed: it is grpo here
RUN_KEYS = (*CREDIT_KEYS, "invalid_turn_rate", "train_success", "episode_length", "updates")


@dataclass(frozen=True)
class GymConfig:
    """Everything the gym runs; every default lives here."""

    levels: tuple[int, ...] = (1, 2, 3)
    long_level: int = 3  # the long-horizon level (7-12 optimal moves, key and door): the sweeps run here
    policies: tuple[str, ...] = ("mlp", "tabular")
    estimators: tuple[str, ...] = ("grpo", "rloo", "gigpo", "hgpo", "salt")
    seeds: int = 20
    tasks_per_step: int = 4
    group_size: int = 8
    invalid_action: bool = True
    max_steps: Mapping[int, int] = field(default_factory=lambda: {1: 10, 2: 24, 3: 40})
    env_steps: Mapping[int, int] = field(default_factory=lambda: {1: 15000, 2: 25000, 3: 40000})
    eval_points: int = 5
    lr: Mapping[str, float] = field(default_factory=lambda: {"mlp": 3e-2, "tabular": 0.3})
    hidden: int = 64
    tabular_pool: int = 16
    tabular_eval_episodes: int = 4
    threshold_fraction: float = 0.8
    bootstrap: int = 1000
    sweep_policy: str = "mlp"
    sweep_seeds: int = 10
    sweep_group_sizes: tuple[int, ...] = (4, 8, 16)
    sweep_group_size_estimators: tuple[str, ...] = ("grpo", "gigpo")
    sweep_gammas: tuple[float, ...] = (0.8, 0.95, 1.0)
    sweep_step_weights: tuple[float, ...] = (0.0, 0.5, 1.0, 2.0)
    workers: int = 2
    tasks_root: Path = ROOT / "tasks"
    out: Path = RESULTS / "credit_gym.json"
    tree: bool = False  # run the tree comparison (`tree_arms`) instead of the estimators and sweeps
    tree_arms: tuple[tuple[str, str], ...] = (
        ("flat", "grpo"),
        ("flat", "gigpo"),
        ("tree", "gigpo"),
        ("tree", "tree_grpo"),
    )
    tree_roots: int = 2  # per task group: episodes played from the start ...
    tree_branches: int = 3  # ... and branches of each (roots x (1 + branches) = group_size trajectories)


QUICK = GymConfig(  # the full gym's mlp level-3 grpo and gigpo runs of seeds 0-15: the same numbers
    levels=(3,),
    policies=("mlp",),
    estimators=("grpo", "gigpo"),
    seeds=16,
    sweep_group_sizes=(),
    sweep_gammas=(),
    sweep_step_weights=(),
    out=RESULTS / "credit_gym_quick.json",
)

LLM_SHAPE = GymConfig(  # the LLM study's update shape (2 tasks x 4 episodes) on level 1: its budget question
    levels=(1,),
    policies=("mlp",),
    estimators=("grpo", "gigpo"),
    tasks_per_step=2,
    group_size=4,
    env_steps={1: 12000},
    sweep_group_sizes=(),
    sweep_gammas=(),
    sweep_step_weights=(),
    out=RESULTS / "credit_gym_llm_shape.json",
)


TREE = GymConfig(  # issue 42 part 8: flat GRPO, flat GiGPO, tree GiGPO, Tree-GRPO at equal env steps
    tree=True,
    sweep_group_sizes=(),
    sweep_gammas=(),
    sweep_step_weights=(),
    out=RESULTS / "credit_gym_tree.json",
)

QUICK_TREE = replace(  # the pre-registered tree check (docs/credit_gym.md): tabular level 1, 16 seeds
    TREE,
    levels=(1,),
    policies=("tabular",),
    tree_arms=(("flat", "gigpo"), ("tree", "gigpo")),
    seeds=16,
    out=RESULTS / "credit_gym_tree_quick.json",
)


@dataclass(frozen=True)
class RunSpec:
    """One training run: a policy on a level with one estimator (and options), one seed."""

    policy: str
    level: int
    estimator: str
    seed: int
    group_size: int
    options: tuple[tuple[str, float], ...] = ()
    variant: str = "main"  # "main", or "<swept option>=<value>"
    rollout: str = "flat"  # "flat": group_size episodes per task; "tree": roots and their branches


class View(NamedTuple):
    """What a policy sees before a turn: the env's observation text and its state key."""

    observation: str
    state_key: str | None


# ---- policies --------------------------------------------------------------------------------------------


class Policy(Protocol):
    def probs(self, views: Sequence[View]) -> np.ndarray: ...

    def update(self, views: Sequence[View], actions: np.ndarray, advantages: np.ndarray) -> None: ...


class Adam:
    """Adam over a list of arrays, updated in place."""

    def __init__(self, params: list[np.ndarray], lr: float, betas: tuple[float, float] = (0.9, 0.999)):
        self.params, self.lr, self.betas, self.steps = params, lr, betas, 0
        self.m = [np.zeros_like(p) for p in params]
        self.v = [np.zeros_like(p) for p in params]

    def step(self, grads: Sequence[np.ndarray]) -> None:
        self.steps += 1
        b1, b2 = self.betas
        for p, g, m, v in zip(self.params, grads, self.m, self.v, strict=True):
            m *= b1
            m += (1 - b1) * g
            v *= b2
            v += (1 - b2) * g * g
            m_hat, v_hat = m / (1 - b1**self.steps), v / (1 - b2**self.steps)
            p -= self.lr * m_hat / (np.sqrt(v_hat) + 1e-8)

    def grow(self, index: int, rows: int) -> None:
        """Parameter `index` gained rows at its end (a table's new states): give them zero moments."""
        for moments in (self.m, self.v):
            extra = np.zeros((rows, *moments[index].shape[1:]), dtype=moments[index].dtype)
            moments[index] = np.concatenate([moments[index], extra])


def softmax(logits: np.ndarray) -> np.ndarray:
    z = np.exp(logits - logits.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


def logit_grad(probs: np.ndarray, actions: np.ndarray, advantages: np.ndarray) -> np.ndarray:
    """d/dlogits of mean_t(-adv_t * log pi(a_t)) = adv_t * (pi - onehot(a_t)) / N."""
    grad = probs.copy()
    grad[np.arange(actions.size), actions] -= 1.0
    return grad * (advantages / actions.size)[:, None]


def board_features(observation: str) -> np.ndarray:
    """The board in an observation as simple features, seen from the agent `@`: egocentric planes (wall,
    door, key, goal; off the grid counts as wall) of a VIEW x VIEW window, then for the goal, the key and the
    door the one-hot of (sign of row offset, sign of column offset) from the agent (all 0 when the thing is
    not on the board; at level 3 the key vanishes once taken, so its block also says "holding the key")."""
    rows = [line for line in observation.split("\n") if line and set(line) <= BOARD_CHARS]
    grid = np.array([list(row) for row in rows])
    (r0,), (c0,) = np.nonzero(grid == "@")
    half = VIEW // 2
    view = np.pad(grid, half, constant_values="#")[r0 : r0 + VIEW, c0 : c0 + VIEW]
    planes = np.stack([view == ch for ch in PLANES]).ravel()
    directions = np.zeros((len(TARGETS), 3, 3), dtype=bool)
    for index, ch in enumerate(TARGETS):
        found = np.argwhere(grid == ch)
        if found.size:
            dr, dc = np.sign(found[0] - (r0, c0)) + 1
            directions[index, dr, dc] = True
    return np.concatenate([planes, directions.ravel()]).astype(np.float32)


FEATURES = len(PLANES) * VIEW * VIEW + len(TARGETS) * 9


class MLPPolicy:
    """Observation text -> `board_features` -> tanh hidden layer -> action logits."""

    def __init__(self, actions: int, hidden: int, lr: float, rng: np.random.Generator):
        self.w1 = (rng.standard_normal((FEATURES, hidden)) / math.sqrt(FEATURES)).astype(np.float64)
        self.b1 = np.zeros(hidden)
        self.w2 = rng.standard_normal((hidden, actions)) * 0.01
        self.b2 = np.zeros(actions)
        self.optimiser = Adam([self.w1, self.b1, self.w2, self.b2], lr)
        self._features: dict[str, np.ndarray] = {}

    def encode(self, views: Sequence[View]) -> np.ndarray:
        cache = self._features
        for view in views:
            if view.observation not in cache:
                cache[view.observation] = board_features(view.observation)
        return np.stack([cache[view.observation] for view in views])

    def probs(self, views: Sequence[View]) -> np.ndarray:
        return softmax(np.tanh(self.encode(views) @ self.w1 + self.b1) @ self.w2 + self.b2)

    def gradients(
        self, views: Sequence[View], actions: np.ndarray, advantages: np.ndarray
    ) -> list[np.ndarray]:
        """d/d(w1, b1, w2, b2) of mean_t(-adv_t * log pi(a_t | s_t))."""
        x = self.encode(views)
        h = np.tanh(x @ self.w1 + self.b1)
        d_logits = logit_grad(softmax(h @ self.w2 + self.b2), actions, advantages)
        d_h = (d_logits @ self.w2.T) * (1.0 - h * h)
        return [x.T @ d_h, d_h.sum(0), h.T @ d_logits, d_logits.sum(0)]

    def update(self, views: Sequence[View], actions: np.ndarray, advantages: np.ndarray) -> None:
        self.optimiser.step(self.gradients(views, actions, advantages))


class TablePolicy:
    """A softmax table: env state key -> action logits (new states start at 0: uniform)."""

    def __init__(self, actions: int, lr: float):
        self.rows: dict[str | None, int] = {}
        self.logits = np.zeros((0, actions))
        self.optimiser = Adam([self.logits], lr)

    def index(self, views: Sequence[View]) -> np.ndarray:
        rows = np.array([self.rows.setdefault(v.state_key, len(self.rows)) for v in views], dtype=np.int64)
        missing = len(self.rows) - self.logits.shape[0]
        if missing > 0:
            self.logits = np.concatenate([self.logits, np.zeros((missing, self.logits.shape[1]))])
            self.optimiser.params[0] = self.logits
            self.optimiser.grow(0, missing)
        return rows

    def probs(self, views: Sequence[View]) -> np.ndarray:
        rows = self.index(views)  # first: it may grow the table
        return softmax(self.logits[rows])

    def update(self, views: Sequence[View], actions: np.ndarray, advantages: np.ndarray) -> None:
        rows = self.index(views)
        grad = np.zeros_like(self.logits)
        np.add.at(grad, rows, logit_grad(softmax(self.logits[rows]), actions, advantages))
        self.optimiser.step([grad])


def make_policy(config: GymConfig, kind: str, seed: int) -> Policy:
    actions = len(action_set(config.invalid_action))
    if kind == "mlp":
        return MLPPolicy(actions, config.hidden, config.lr[kind], np.random.default_rng((seed, 0)))
    if kind == "tabular":
        return TablePolicy(actions, config.lr[kind])
    raise ValueError(f"unknown policy {kind!r}; use mlp or tabular")


# ---- playing episodes in the real env --------------------------------------------------------------------


def action_set(invalid_action: bool) -> tuple[Action, ...]:
    """The turns a policy can take: the four move tool calls, and "wait" (an invalid turn) if asked."""
    moves = tuple(Action(text="", tool_calls=(ToolCall("move", {"direction": d}),)) for d in DIRECTIONS)
    return (*moves, Action(text=INVALID_TEXT)) if invalid_action else moves


def sample_actions(probs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One action index per row of [B, A] probabilities (inverse CDF of one uniform draw per row)."""
    u = rng.random((probs.shape[0], 1))
    return np.minimum((probs.cumsum(axis=1) < u).sum(axis=1), probs.shape[1] - 1)


@dataclass
class Played:
    """Episodes played in lockstep, and per episode the views before each turn and the actions taken."""

    episodes: list[Episode]
    views: list[list[View]]
    actions: list[list[int]]


def play(
    envs: Sequence[MazeEnv],
    tasks: Sequence[Task],
    groups: Sequence[str],
    policy: Policy,
    actions: Sequence[Action],
    rng: np.random.Generator,
    starts: Sequence[View | None] | None = None,
) -> Played:
    """One episode of tasks[i] in envs[i] (group label groups[i]), all envs stepped together so that the
    policy sees one batch per turn; the episodes come back as the runner's `Episode`s. With `starts`, env i
    is already in the state starts[i] shows (a branch, `play_tree`) and is not reset."""
    n = len(tasks)
    views: list[list[View]] = [[] for _ in range(n)]
    chosen: list[list[int]] = [[] for _ in range(n)]
    turns: list[list[Turn]] = [[] for _ in range(n)]
    current: list[View] = []
    for i, (env, task) in enumerate(zip(envs[:n], tasks, strict=True)):
        start = starts[i] if starts is not None else None
        if start is None:
            observation, info = env.reset(options={"task": task})
            start = View(observation, info["state_key"])
        current.append(start)
    initial_keys = [view.state_key for view in current]
    active = list(range(n))
    while active:
        picks = sample_actions(policy.probs([current[i] for i in active]), rng)
        still = []
        for i, pick in zip(active, picks.tolist(), strict=True):
            views[i].append(current[i])
            chosen[i].append(pick)
            result = envs[i].step(actions[pick])
            info = result.info
            turns[i].append(
                Turn(
                    index=len(turns[i]),
                    prompt_ids=(),
                    completion_ids=(),
                    completion_logprobs=(),
                    text=actions[pick].text,
                    action=actions[pick],
                    observation=result.observation,
                    reward=float(result.reward),
                    invalid=bool(info["invalid"]),  # the env's verdict, as the runner reads it
                    state_key=info["state_key"],
                    terminated=result.terminated,
                    truncated=result.truncated,
                    info=info,
                )
            )
            current[i] = View(result.observation, info["state_key"])
            if not (result.terminated or result.truncated):
                still.append(i)
        active = still
    episodes = [
        Episode(
            episode_id=f"{groups[i]}-{i}",
            env_id=ENV_ID,
            task_id=str(tasks[i]["id"]),
            group_id=groups[i],
            seed=0,
            turns=tuple(turns[i]),
            stop_reason="terminated" if turns[i][-1].terminated else "truncated",
            initial_state_key=initial_keys[i],
            success=bool(turns[i][-1].info.get("success", False)),
        )
        for i in range(n)
    ]
    return Played(episodes, views, chosen)


def play_tree(
    envs: Sequence[MazeEnv],
    drawn: Sequence[Task],
    update: int,
    policy: Policy,
    actions: Sequence[Action],
    rng: np.random.Generator,
    config: GymConfig,
) -> tuple[Played, int]:
    """One tree per task: `tree_roots` episodes from the start, then `tree_branches` branches of each root,
    each from a turn b drawn uniformly in 1 .. T_root - 1 (0 for a one-turn root), all branches played in
    lockstep. A branch's first b turns are its root's, copied (`Episode.parent_id`, `branch_turn`); its env
    is a fresh one reset on the task and stepped through the root's first b actions, i.e. the pure env's
    state copied (the gym's fork: those replayed steps are not env steps of the run). (played, the env
    steps the tree cost: each env step once.)"""
    roots = [task for task in drawn for _ in range(config.tree_roots)]
    labels = [f"{task['id']}-{update}" for task in drawn for _ in range(config.tree_roots)]
    trunk = play(envs, roots, labels, policy, actions, rng)
    origins = [r for r in range(len(roots)) for _ in range(config.tree_branches)]
    turns = [int(rng.integers(1, len(trunk.actions[r]))) if len(trunk.actions[r]) > 1 else 0 for r in origins]
    starts = []
    for env, r, b in zip(envs, origins, turns, strict=False):
        env.reset(options={"task": roots[r]})
        for pick in trunk.actions[r][:b]:
            env.step(actions[pick])
        starts.append(trunk.views[r][b] if b < len(trunk.views[r]) else None)
    own = play(envs, [roots[r] for r in origins], [labels[r] for r in origins], policy, actions, rng, starts)
    episodes, views, chosen = list(trunk.episodes), list(trunk.views), list(trunk.actions)
    for k, (r, b) in enumerate(zip(origins, turns, strict=True)):
        root = trunk.episodes[r]
        mine = tuple(replace(turn, index=b + turn.index) for turn in own.episodes[k].turns)
        episodes.append(
            replace(
                own.episodes[k],
                episode_id=f"{root.episode_id}.{k}",
                turns=root.turns[:b] + mine,
                initial_state_key=root.initial_state_key,
                parent_id=root.episode_id,
                branch_turn=b,
            )
        )
        views.append(trunk.views[r][:b] + own.views[k])
        chosen.append(trunk.actions[r][:b] + own.actions[k])
    cost = sum(len(a) for a in trunk.actions) + sum(len(a) for a in own.actions)
    return Played(episodes, views, chosen), cost


# ---- one training run ------------------------------------------------------------------------------------


def checkpoints(env_steps: int, points: int) -> list[int]:
    """Env-step counts at which to evaluate: `points` evenly spaced, the last one the budget."""
    if env_steps < 1 or points < 1:
        raise ValueError(f"env_steps and eval_points must be >= 1, got {env_steps} and {points}")
    return [math.ceil(env_steps * (i + 1) / points) for i in range(points)]


def task_split(config: GymConfig, policy: str, level: int) -> tuple[list[Task], list[Task]]:
    """(train tasks, evaluation tasks): mlp trains on the train split and is evaluated on the held-out
    split; tabular trains on, and is evaluated on, the first `tabular_pool` train tasks."""
    train = load_tasks(config.tasks_root, f"maze/level{level}", "train")
    if policy == "tabular":
        pool = train[: config.tabular_pool]
        return pool, [task for task in pool for _ in range(config.tabular_eval_episodes)]
    return train, load_tasks(config.tasks_root, f"maze/level{level}", "heldout")


def evaluate(
    envs: Sequence[MazeEnv],
    tasks: Sequence[Task],
    policy: Policy,
    actions: Sequence[Action],
    seed: int,
    point: int,
) -> float:
    """Success rate of one sampled episode per evaluation task; the RNG depends only on (seed, point)."""
    rng = np.random.default_rng((seed, 2, point))
    played = play(envs, tasks, ["eval"] * len(tasks), policy, actions, rng)
    return float(np.mean([episode.success for episode in played.episodes]))


def reinforce(
    policy: Policy,
    played: Played,
    advantages: Sequence[np.ndarray],
    copies: Sequence[np.ndarray] | None = None,
) -> None:
    """One policy-gradient step on the episodes that carry a signal: like the trainer, an episode whose
    advantages are all 0 is left out, and the loss is the mean over the kept steps of -adv * log pi.
    copies[i] (tree rollouts, `StepBatch.shared_copy`): episode i's copied prefix steps, trained once, in
    their original, so they are left out here (and out of the mean's count)."""
    own = [np.ones(adv.size, dtype=bool) for adv in advantages] if copies is None else [~c for c in copies]
    keep = [bool(np.any(adv[mask] != 0.0)) for adv, mask in zip(advantages, own, strict=True)]
    if not any(keep):
        return
    kept = [i for i, k in enumerate(keep) if k]
    views = [view for i in kept for view, mine in zip(played.views[i], own[i], strict=True) if mine]
    actions = np.array([action for i in kept for action in np.asarray(played.actions[i])[own[i]].tolist()])
    policy.update(views, actions, np.concatenate([advantages[i][own[i]] for i in kept]))


def train_run(config: GymConfig, spec: RunSpec) -> dict[str, Any]:
    """Train one (policy, level, estimator, seed) until its env-step budget is spent; the learning curve
    and the means of the per-update measurements."""
    started = time.perf_counter()
    train_tasks, eval_tasks = task_split(config, spec.policy, spec.level)
    actions = action_set(config.invalid_action)
    policy = make_policy(config, spec.policy, spec.seed)
    settings = make_config(spec.estimator, **dict(spec.options))
    rng = np.random.default_rng((spec.seed, 1))
    slots = max(config.tasks_per_step * spec.group_size, len(eval_tasks))
    envs = [MazeEnv(max_steps=config.max_steps[spec.level], level=spec.level) for _ in range(slots)]
    pending = checkpoints(config.env_steps[spec.level], config.eval_points)
    success = evaluate(envs, eval_tasks, policy, actions, spec.seed, 0)
    curve = [{"checkpoint": 0, "env_steps": 0, "success": success}]
    measured: list[dict[str, float]] = []
    env_steps = update = 0
    while pending:
        update += 1
        drawn = sample_tasks(train_tasks, config.tasks_per_step, spec.seed, update)  # the trainer's draw
        if spec.rollout == "tree":
            played, cost = play_tree(envs, drawn, update, policy, actions, rng, config)
        else:
            tasks = [task for task in drawn for _ in range(spec.group_size)]
            played = play(envs, tasks, [f"{task['id']}-{update}" for task in tasks], policy, actions, rng)
        batch = episodes_to_batch(played.episodes)
        values = estimate(spec.estimator, batch, settings)
        bounds = np.cumsum(batch.lengths)[:-1]
        copies = np.split(batch.shared_copy, bounds) if batch.is_tree else None
        reinforce(policy, played, np.split(values, bounds), copies)
        env_steps += cost if spec.rollout == "tree" else batch.num_steps  # a tree's shared prefix counts once
        measured.append(update_measurements(batch, values, played.episodes))
        while pending and env_steps >= pending[0]:
            success = evaluate(envs, eval_tasks, policy, actions, spec.seed, len(curve))
            curve.append({"checkpoint": pending.pop(0), "env_steps": env_steps, "success": success})
    means = {key: float(np.mean([m[key] for m in measured])) for key in measured[0]}
    return {
        **asdict(spec),
        "curve": curve,
        **means,
        "updates": update,
        "env_steps": env_steps,
        "wall_s": time.perf_counter() - started,
    }


def update_measurements(batch: Any, values: np.ndarray, episodes: Sequence[Episode]) -> dict[str, float]:
    """The credit metrics of one update (without their `credit/` prefix) and what the episodes did."""
    metrics = {key.removeprefix("credit/"): value for key, value in credit_metrics(batch, values).items()}
    return {
        **{key: metrics[key] for key in CREDIT_KEYS},
        "invalid_turn_rate": float(1.0 - batch.valid.mean()),
        "train_success": float(np.mean([episode.success for episode in episodes])),
        "episode_length": float(batch.num_steps / batch.num_episodes),
    }


def _train_run_star(args: tuple[GymConfig, RunSpec]) -> dict[str, Any]:
    return train_run(*args)


# ---- statistics ------------------------------------------------------------------------------------------


def t95(df: int) -> float:
    """Two-sided 95% Student-t quantile: from the table, else that of the next smaller tabled df (a little
    wider, so conservative), and 1.96 beyond the table."""
    if df < 1:
        raise ValueError(f"need at least one degree of freedom, got {df}")
    known = [d for d in T95 if d <= df]
    return T95[max(known)] if df <= max(T95) else 1.96


def band(values: Sequence[float]) -> tuple[float, float, float]:
    """(mean, low, high) with a two-sided 95% Student-t interval; a single value has a zero-width band."""
    array = np.asarray(values, dtype=np.float64)
    mean = float(array.mean())
    if array.size < 2:
        return mean, mean, mean
    half = t95(array.size - 1) * float(array.std(ddof=1)) / math.sqrt(array.size)
    return mean, mean - half, mean + half


def auc(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Area under a curve by trapezoids, divided by its x range: the curve's mean value over the budget."""
    x, y = np.asarray(xs, dtype=np.float64), np.asarray(ys, dtype=np.float64)
    return float(np.sum((y[1:] + y[:-1]) * np.diff(x)) / 2.0 / (x[-1] - x[0]))


def steps_to_threshold(xs: Sequence[float], ys: Sequence[float], threshold: float) -> float | None:
    """The first x at which the curve reaches `threshold`, linearly interpolated between points; None if it
    never does."""
    for i, (x, y) in enumerate(zip(xs, ys, strict=True)):
        if y >= threshold:
            if i == 0:
                return float(x)
            x0, y0 = xs[i - 1], ys[i - 1]
            return float(x0 + (threshold - y0) / (y - y0) * (x - x0))
    return None


def threshold_of(base: float, grpo_final: float, fraction: float) -> float | None:
    """base + fraction * (GRPO's final mean - base); None when GRPO did not improve on the base."""
    return base + fraction * (grpo_final - base) if grpo_final > base else None


def ratio_vs_grpo(
    xs: Sequence[float], curves: np.ndarray, grpo: np.ndarray, fraction: float
) -> tuple[float | None, float | None, float | None]:
    """(steps_to_threshold of the mean curve, GRPO's, their ratio) for [seeds, points] success arrays."""
    grpo_mean = grpo.mean(axis=0)
    threshold = threshold_of(float(grpo_mean[0]), float(grpo_mean[-1]), fraction)
    if threshold is None:
        return None, None, None
    mine = steps_to_threshold(xs, curves.mean(axis=0).tolist(), threshold)
    reference = steps_to_threshold(xs, grpo_mean.tolist(), threshold)
    ratio = None if mine is None or not reference else mine / reference
    return mine, reference, ratio


def bootstrap_ratio_band(
    xs: Sequence[float], curves: np.ndarray, grpo: np.ndarray, fraction: float, resamples: int, seed: int = 0
) -> tuple[float | None, float | None]:
    """95% percentile band of `ratio_vs_grpo` over paired resamples of seeds (same seeds for both);
    never reaching the threshold counts as an infinite ratio; an infinite band end comes back as None."""
    rng = np.random.default_rng(seed)
    ratios = []
    for _ in range(resamples):
        pick = rng.integers(curves.shape[0], size=curves.shape[0])
        ratio = ratio_vs_grpo(xs, curves[pick], grpo[pick], fraction)[2]
        ratios.append(math.inf if ratio is None else ratio)
    low, high = percentile_band(ratios)
    return (low if math.isfinite(low) else None), (high if math.isfinite(high) else None)


def percentile_band(values: Sequence[float], level: float = 0.95) -> tuple[float, float]:
    """The (1 - level) / 2 and (1 + level) / 2 order statistics, no interpolation (values may be inf)."""
    ordered = sorted(values)
    tail = (1.0 - level) / 2.0
    return ordered[int(tail * len(ordered))], ordered[math.ceil((1.0 - tail) * len(ordered)) - 1]


def successes(runs: Sequence[Mapping[str, Any]]) -> tuple[list[float], np.ndarray]:
    """(checkpoint env steps, [seeds, points] held-out success) of runs sorted by seed."""
    ordered = sorted(runs, key=lambda run: run["seed"])
    xs = [float(point["checkpoint"]) for point in ordered[0]["curve"]]
    return xs, np.array([[point["success"] for point in run["curve"]] for run in ordered])


def summarise_cell(
    config: GymConfig, runs: Sequence[Mapping[str, Any]], grpo_runs: Sequence[Mapping[str, Any]] | None
) -> dict[str, Any]:
    """One (policy, level, estimator[, variant]) over its seeds; paired with GRPO's runs when given."""
    xs, curves = successes(runs)
    aucs = [auc(xs, row) for row in curves]
    summary: dict[str, Any] = {
        "seeds": len(runs),
        "curve": [
            dict(zip(("checkpoint", "mean", "low", "high"), (x, *band(curves[:, i].tolist())), strict=True))
            for i, x in enumerate(xs)
        ],
        "final": _band_dict(curves[:, -1]),
        "auc": _band_dict(aucs),
        "per_seed_success": curves.tolist(),  # [seed][checkpoint], seeds 0.. in order
        **{key: float(np.mean([run[key] for run in runs])) for key in RUN_KEYS},
        "mean_env_steps": float(np.mean([run["env_steps"] for run in runs])),
        "mean_wall_s": float(np.mean([run["wall_s"] for run in runs])),
    }
    if grpo_runs is not None:
        _, grpo = successes(grpo_runs)
        mine, reference, ratio = ratio_vs_grpo(xs, curves, grpo, config.threshold_fraction)
        grpo_mean = grpo.mean(axis=0)
        low, high = bootstrap_ratio_band(xs, curves, grpo, config.threshold_fraction, config.bootstrap)
        summary.update(
            threshold=threshold_of(float(grpo_mean[0]), float(grpo_mean[-1]), config.threshold_fraction),
            steps_to_threshold=mine,
            grpo_steps_to_threshold=reference,
            ratio_vs_grpo=ratio,
            ratio_band=[low, high],
            final_minus_grpo=_band_dict(curves[:, -1] - grpo[:, -1]),
            auc_minus_grpo=_band_dict(np.array(aucs) - np.array([auc(xs, row) for row in grpo])),
        )
    return summary


def _band_dict(values: Iterable[float]) -> dict[str, float]:
    mean, low, high = band(list(values))
    return {"mean": mean, "low": low, "high": high}


# ---- the plan, the runs, the summary ---------------------------------------------------------------------


def main_specs(config: GymConfig) -> list[RunSpec]:
    return [
        RunSpec(policy, level, estimator, seed, config.group_size)
        for policy in config.policies
        for level in config.levels
        for estimator in config.estimators
        for seed in range(config.seeds)
    ]


def tree_specs(config: GymConfig) -> list[RunSpec]:
    """The tree comparison: every (rollout, estimator) arm on every policy, level and seed."""
    return [
        RunSpec(policy, level, estimator, seed, config.group_size, rollout=rollout)
        for policy in config.policies
        for level in config.levels
        for rollout, estimator in config.tree_arms
        for seed in range(config.seeds)
    ]


def arm_name(run: Mapping[str, Any]) -> str:
    return f"{run['rollout']}_{run['estimator']}"


def summarise_tree(config: GymConfig, runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """results[policy][level][arm] (arm = "<rollout>_<estimator>"), each paired by seed with the first arm
    (flat GRPO in the full comparison: its threshold and ratios), plus, per cell, the paired difference of
    tree GiGPO minus flat GiGPO (`tree_vs_flat_gigpo`) when both ran."""
    cells: dict[tuple[str, int, str], list[Mapping[str, Any]]] = {}
    for run in runs:
        cells.setdefault((run["policy"], run["level"], arm_name(run)), []).append(run)
    reference = "_".join(config.tree_arms[0])
    results: dict[str, dict[str, dict[str, Any]]] = {}
    for (policy, level, arm), cell in cells.items():
        baseline = cells[(policy, level, reference)]
        results.setdefault(policy, {}).setdefault(str(level), {})[arm] = summarise_cell(
            config, cell, baseline
        )
    for policy, levels in results.items():
        for level_name, arms in levels.items():
            if "tree_gigpo" in arms and "flat_gigpo" in arms:
                flat = cells[(policy, int(level_name), "flat_gigpo")]
                arms["tree_vs_flat_gigpo"] = summarise_cell(
                    config, cells[(policy, int(level_name), "tree_gigpo")], flat
                )
    return {"results": results, "sweeps": {}}


def runs_from_tree_summary(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per-seed pseudo-runs rebuilt from a tree JSON (its per-seed curves; each run carries its cell's means
    of the per-update measurements), so `summarise_tree` can be re-run on a finished comparison."""
    runs = []
    for policy, levels in report["results"].items():
        for level, arms in levels.items():
            for arm, cell in arms.items():
                if arm == "tree_vs_flat_gigpo":
                    continue
                rollout, estimator = arm.split("_", 1)
                xs = [point["checkpoint"] for point in cell["curve"]]
                for seed, row in enumerate(cell["per_seed_success"]):
                    runs.append(
                        {
                            "policy": policy,
                            "level": int(level),
                            "estimator": estimator,
                            "rollout": rollout,
                            "seed": seed,
                            "curve": [{"checkpoint": x, "success": y} for x, y in zip(xs, row, strict=True)],
                            **{key: cell[key] for key in RUN_KEYS},
                            "env_steps": cell["mean_env_steps"],
                            "wall_s": cell["mean_wall_s"],
                        }
                    )
    return runs


class Sweep(NamedTuple):
    """One sensitivity sweep: an option, its values, the estimators swept and the default (= the main run)."""

    option: str
    values: tuple[float, ...]
    estimators: tuple[str, ...]
    default: float


def sweeps_of(config: GymConfig) -> list[Sweep]:
    gigpo = make_config("gigpo")
    return [
        Sweep("group_size", config.sweep_group_sizes, config.sweep_group_size_estimators, config.group_size),
        Sweep("gamma", config.sweep_gammas, ("gigpo",), gigpo.gamma),
        Sweep("step_weight", config.sweep_step_weights, ("gigpo",), gigpo.step_weight),
    ]


def variant_spec(config: GymConfig, sweep: Sweep, value: float, estimator: str, seed: int) -> RunSpec:
    """The run of one sweep point (the main run's spec at the default value)."""
    level, policy = config.long_level, config.sweep_policy
    if value == sweep.default:
        return RunSpec(policy, level, estimator, seed, config.group_size)
    if sweep.option == "group_size":
        return RunSpec(policy, level, estimator, seed, int(value), variant=f"group_size={value}")
    return RunSpec(
        policy, level, estimator, seed, config.group_size, ((sweep.option, value),), f"{sweep.option}={value}"
    )


def sweep_specs(config: GymConfig) -> list[RunSpec]:
    """The sweeps' runs on the long-horizon level (`sweep_seeds` seeds), without the main runs they reuse."""
    return [
        variant_spec(config, sweep, value, name, seed)
        for sweep in sweeps_of(config)
        for value in sweep.values
        if value != sweep.default
        for name in sweep.estimators
        for seed in range(config.sweep_seeds)
    ]


def run_all(
    config: GymConfig, specs: Sequence[RunSpec], progress: Callable[[int], None]
) -> list[dict[str, Any]]:
    """Every run, in at most `config.workers` processes; results in the order of `specs`."""
    jobs = [(config, spec) for spec in specs]
    results: list[dict[str, Any]] = []
    if config.workers <= 1:
        for job in jobs:
            results.append(_train_run_star(job))
            progress(len(results))
        return results
    with multiprocessing.get_context("fork").Pool(min(2, config.workers)) as pool:
        for result in pool.imap(_train_run_star, jobs, chunksize=2):
            results.append(result)
            progress(len(results))
    return results


SPEC_KEYS = tuple(RunSpec.__dataclass_fields__)


def group_runs(runs: Iterable[Mapping[str, Any]]) -> dict[tuple[str, int, str, str], list[Mapping[str, Any]]]:
    cells: dict[tuple[str, int, str, str], list[Mapping[str, Any]]] = {}
    for run in runs:
        cells.setdefault((run["policy"], run["level"], run["estimator"], run["variant"]), []).append(run)
    return cells


def summarise(config: GymConfig, runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """results[policy][level][estimator] for the main runs; sweeps[option][value][estimator] (each paired
    with GRPO on the same seeds: GRPO at the same group size, else the main GRPO runs)."""
    by_spec = {RunSpec(**{key: run[key] for key in SPEC_KEYS}): run for run in runs}
    cells = group_runs(runs)
    results: dict[str, dict[str, dict[str, Any]]] = {}
    for (policy, level, estimator, variant), cell in cells.items():
        if variant == "main":
            grpo = cells.get((policy, level, "grpo", "main"))
            results.setdefault(policy, {}).setdefault(str(level), {})[estimator] = summarise_cell(
                config, cell, grpo
            )
    sweeps: dict[str, dict[str, dict[str, Any]]] = {}
    seeds = range(config.sweep_seeds)
    for sweep in sweeps_of(config):
        for value in sweep.values:
            reference = "grpo" if sweep.option == "group_size" else None
            grpo = [
                by_spec[variant_spec(config, sweep, value if reference else sweep.default, "grpo", s)]
                for s in seeds
            ]
            sweeps.setdefault(sweep.option, {})[str(value)] = {
                name: summarise_cell(
                    config, [by_spec[variant_spec(config, sweep, value, name, s)] for s in seeds], grpo
                )
                for name in sweep.estimators
            }
    return {"results": results, "sweeps": sweeps}


def plot(config: GymConfig, summary: Mapping[str, Any], path: Path) -> None:
    """Learning curves (rows: policies, columns: levels) and, when swept, one row of sweeps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sweeps = summary["sweeps"]
    rows = len(config.policies) + (1 if sweeps else 0)
    columns = max(len(config.levels), len(sweeps), 1)
    figure, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.3 * rows), squeeze=False)
    for r, policy in enumerate(config.policies):
        for c, level in enumerate(config.levels):
            ax = axes[r][c]
            for name, cell in summary["results"][policy][str(level)].items():
                x = [p["checkpoint"] for p in cell["curve"]]
                style = {"color": COLORS.get(name), "linestyle": "--" if name == "salt" else "-"}
                ax.plot(x, [p["mean"] for p in cell["curve"]], marker=".", label=name, **style)
                low, high = [p["low"] for p in cell["curve"]], [p["high"] for p in cell["curve"]]
                ax.fill_between(x, low, high, alpha=0.15, color=COLORS.get(name))
            where = "held-out" if policy == "mlp" else "train-pool"
            ax.set_title(f"{policy}, level {level} ({where} success)", fontsize=9)
            ax.set_xlabel("training env steps", fontsize=8)
            ax.set_ylim(-0.02, 1.02)
            ax.legend(fontsize=7)
    for c, (option, values) in enumerate(sorted(sweeps.items())):
        ax = axes[rows - 1][c]
        names = sorted({name for cells in values.values() for name in cells})
        for name in names:
            points = sorted((float(v), cells[name]["final"]) for v, cells in values.items() if name in cells)
            x = [v for v, _ in points]
            mean = np.array([f["mean"] for _, f in points])
            err = [mean - [f["low"] for _, f in points], [f["high"] for _, f in points] - mean]
            ax.errorbar(x, mean, yerr=err, marker="o", capsize=3, label=name, color=COLORS.get(name))
        where = f"{config.sweep_policy}, level {config.long_level}, {config.sweep_seeds} seeds"
        ax.set_title(f"sweep {option} ({where}): final success", fontsize=9)
        ax.set_xlabel(option, fontsize=8)
        ax.set_ylim(-0.02, 1.02)
        ax.legend(fontsize=7)
    for ax in axes.ravel()[len(config.policies) * columns :]:
        if not ax.has_data():
            ax.set_visible(False)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=80)
    plt.close(figure)


def run_gym(config: GymConfig) -> dict[str, Any]:
    """Run every spec, summarise, write the JSON and the plot; the summary."""
    started = time.perf_counter()
    specs = tree_specs(config) if config.tree else main_specs(config) + sweep_specs(config)

    def progress(done: int) -> None:
        if done % 20 == 0 or done == len(specs):
            print(f"  {done}/{len(specs)} runs, {time.perf_counter() - started:.0f} s", flush=True)

    runs = run_all(config, specs, progress)
    summary = summarise_tree(config, runs) if config.tree else summarise(config, runs)
    report = {
        "config": _jsonable(asdict(config)),
        "wall_s": round(time.perf_counter() - started, 1),
        "runs": len(runs),
        **summary,
    }
    config.out.parent.mkdir(parents=True, exist_ok=True)
    config.out.write_text(compact_json(report))
    plot(config, summary, config.out.with_suffix(".png"))
    return report


def compact_json(value: Any) -> str:
    """Indented JSON with floats rounded to 4 decimals and every list of numbers on one line."""
    text = json.dumps(_rounded(value), indent=1)
    return (
        re.sub(r"\[\s+([-0-9.,\se]+?)\s+\]", lambda m: "[" + " ".join(m.group(1).split()) + "]", text) + "\n"
    )


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, Mapping):
        return {key: _rounded(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_rounded(item) for item in value]
    return value


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return str(value) if isinstance(value, Path) else value


def print_table(report: Mapping[str, Any]) -> None:
    """One line per (policy, level, estimator): final success with band, AUC, steps to threshold, ratio."""
    for policy, levels in report["results"].items():
        for level, cells in levels.items():
            for name, cell in cells.items():
                final, area, ratio = cell["final"], cell["auc"], cell.get("ratio_vs_grpo")
                steps = cell.get("steps_to_threshold")
                print(
                    f"{policy:8s} L{level} {name:18s} final {final['mean']:.3f} "
                    f"[{final['low']:.3f}, {final['high']:.3f}]  auc {area['mean']:.3f}  "
                    f"steps_to_threshold {'-' if steps is None else round(steps)}  "
                    f"ratio {'-' if ratio is None else round(ratio, 2)}  hit {cell['anchor_hit_rate']:.2f}"
                )


def tree_table(report: Mapping[str, Any]) -> str:
    """The tree comparison as a markdown table (docs/credit_gym.md): one row per (policy, level, arm), the
    paired differences and ratio against flat GRPO, and the tree GiGPO - flat GiGPO row."""

    def cell(value: Mapping[str, float] | None, digits: int = 2) -> str:
        if value is None:
            return "—"
        return f"{value['mean']:.{digits}f} [{value['low']:.{digits}f}, {value['high']:.{digits}f}]"

    def ratio(entry: Mapping[str, Any]) -> str:
        value, (low, high) = entry.get("ratio_vs_grpo"), entry.get("ratio_band", [None, None])
        if value is None:
            return "never" if entry.get("steps_to_threshold") is None else "—"
        return (
            f"{value:.2f} [{'∞' if low is None else f'{low:.2f}'}, {'∞' if high is None else f'{high:.2f}'}]"
        )

    lines = [
        "| policy | level | arm | final | AUC | Δ final vs ref | Δ AUC vs ref | steps | ratio | updates |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for policy, levels in report["results"].items():
        for level, arms in levels.items():
            for name, entry in arms.items():
                steps = entry.get("steps_to_threshold")
                reached = "never" if steps is None else round(steps)
                lines.append(
                    f"| {policy} | {level} | {name} | {cell(entry['final'])} | {cell(entry['auc'], 3)} | "
                    f"{cell(entry.get('final_minus_grpo'))} | {cell(entry.get('auc_minus_grpo'), 3)} | "
                    f"{reached} | {ratio(entry)} | {entry['updates']:.0f} |"
                )
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> tuple[GymConfig, bool]:
    """(the config, whether only to redraw the plot from an existing JSON)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="level 3, mlp, grpo vs gigpo, 16 seeds")
    parser.add_argument(
        "--llm-shape", action="store_true", help="level 1, mlp, grpo vs gigpo, the LLM study's 2x4 updates"
    )
    parser.add_argument(
        "--tree",
        action="store_true",
        help="flat GRPO and GiGPO, tree GiGPO and Tree-GRPO at equal env steps (--quick: the tree check)",
    )
    parser.add_argument("--out", type=Path, help="the JSON to write (the PNG goes beside it)")
    parser.add_argument("--seeds", type=int, help="seeds per estimator (default: 20, quick: 16)")
    parser.add_argument("--workers", type=int, help="processes (at most 2)")
    parser.add_argument("--replot", action="store_true", help="only redraw the PNG from the JSON at --out")
    parser.add_argument(
        "--table", action="store_true", help="with --tree: print the JSON at --out as markdown"
    )
    parser.add_argument(
        "--resummarise", action="store_true", help="redo a tree JSON's summaries from its curves"
    )
    args = parser.parse_args(argv)
    if args.table:
        config = replace(TREE, out=args.out or TREE.out)
        print(tree_table(json.loads(config.out.read_text())))
        raise SystemExit(0)
    if args.resummarise:  # rewrite a tree JSON's summaries from its per-seed curves (same runs)
        config = replace(TREE, out=args.out or TREE.out)
        report = json.loads(config.out.read_text())
        report.update(summarise_tree(config, runs_from_tree_summary(report)))
        config.out.write_text(compact_json(report))
        print(f"re-summarised {config.out}")
        raise SystemExit(0)
    if args.quick and args.llm_shape or args.tree and args.llm_shape:
        parser.error("--quick, --tree and --llm-shape: --llm-shape combines with neither")
    if args.tree:
        config = QUICK_TREE if args.quick else TREE
    else:
        config = QUICK if args.quick else LLM_SHAPE if args.llm_shape else GymConfig()
    changes = {"out": args.out, "seeds": args.seeds, "workers": args.workers}
    return replace(config, **{key: value for key, value in changes.items() if value is not None}), args.replot


def main(argv: Sequence[str] | None = None) -> int:
    config, replot = parse_args(argv)
    if replot:
        report = json.loads(config.out.read_text())
        plot(config, report, config.out.with_suffix(".png"))
        print(f"redrew {config.out.with_suffix('.png')}")
        return 0
    report = run_gym(config)
    print_table(report)
    print(f"wrote {config.out} and {config.out.with_suffix('.png')} in {report['wall_s']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
