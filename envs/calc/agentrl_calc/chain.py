"""Deterministic multi-part calc tasks (the `calc-chain` suite), and the script that writes them.

What this is: a pure generator. A chain task asks `parts` independent arithmetic questions, one after the
other, in one episode (`CalcEnv(parts=K)`). Each question is one calc problem (`agentrl_calc.tasks.
make_problem`, of the chosen levels: by default level 3 only; level 4, "a * b - c * d - e * f", is this
module's own) written in one of these forms:
    plain:    "What is 673 * 56 - 342 * 37?"                    (the calc suite's form)
    words:    "What is 673 times 56 minus 342 times 37?"         (the operators spelled out)
    reversed: "Subtract 342 * 37 from 673 * 56. What is left?"   (the operands in the other order; levels 2
              and 3 only: a level-1 part drawn as reversed is written, and recorded, as words)
    taken:    "Take 342 * 37 away from 673 * 56. What remains?" (the reversed order in other words: the
              out-of-distribution wording of a study trained on `reversed`; level-1 parts as words too)
    story:    "A depot had 673 * 56 boxes in 9 rooms and shipped 342 * 37 of them. How many boxes are
              left?" (the order reversed in a sentence, with a number that does not enter the answer: the
              rooms, a function of the expression; level-1 parts as words too)
The plain form is what SmolLM2-135M copies into `print()` almost always (47 of 48 held-out calc tasks at
temperature 0.3, issue 41); the other two need the question rewritten before it runs. Chain i of a seed
comes from `numpy.random.default_rng((seed, i))`; its split is a stable hash of its questions, so train and
heldout are disjoint by construction. `--heldout-seed` draws the held-out chains from a seed of their own
(a fresh held-out set whose generator seed made no training chain).

What this is not: the env (`agentrl_calc.env`, which plays a chain part by part) or a task sampler.

    python -m agentrl_calc.chain --out tasks/calc-chain
"""

from __future__ import annotations

import argparse
import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agentrl_calc.tasks import HELDOUT_PERCENT, SPLITS, make_problem, write_suite

GENERATOR_VERSION = 1
FORMS = ("plain", "words", "reversed", "taken", "story")
ORDERED = ("reversed", "taken", "story")  # the forms that name the operands in the other order
DEFAULT_PARTS = 3
DEFAULT_FORMS = ("words", "reversed")
DEFAULT_LEVELS = (3,)  # a * b - c * d: the level whose reversed form changes the sign of a careless answer
MAX_CANDIDATES_PER_TASK = 100
_WORDS = {"*": "times", "+": "plus", "-": "minus"}


def phrase(expression: str, form: str) -> str:
    """The question asking for `expression` ("a * b", "a * b + c" or "a * b - c * d") in `form`."""
    if form not in FORMS:
        raise ValueError(f"form must be one of {FORMS}, got {form!r}")
    if form == "reversed" and " - " in expression:
        left, right = expression.split(" - ")
        return f"Subtract {right} from {left}. What is left?"
    if form == "reversed" and " + " in expression:
        left, right = expression.split(" + ")
        return f"Add {left} to {right}. What is the sum?"
    if form == "taken" and " - " in expression:
        left, right = expression.split(" - ")
        return f"Take {right} away from {left}. What remains?"
    if form == "taken" and " + " in expression:
        left, right = expression.split(" + ")
        return f"To {right}, add {left}. What is the total?"
    if form == "story" and expression.count(" - ") == 2:
        rooms = 3 + sum(int(char) for char in expression if char.isdigit()) % 7  # enters no answer
        first, shipped, lost = expression.split(" - ")
        return (
            f"A depot had {first} boxes in {rooms} rooms, shipped {shipped} of them and lost {lost}. "
            "How many boxes are left?"
        )
    if form == "story" and (" - " in expression or " + " in expression):
        rooms = 3 + sum(int(char) for char in expression if char.isdigit()) % 7  # enters no answer
        if " - " in expression:
            left, right = expression.split(" - ")
            return (
                f"A depot had {left} boxes in {rooms} rooms and shipped {right} of them. "
                "How many boxes are left?"
            )
        left, right = expression.split(" + ")
        return (
            f"A depot had {right} boxes in {rooms} rooms and got {left} more. How many boxes are there now?"
        )
    if form == "plain":
        return f"What is {expression}?"
    words = " ".join(_WORDS.get(token, token) for token in expression.split())
    return f"What is {words}?"


LONG_LEVEL = 4


def long_problem(rng: np.random.Generator) -> tuple[int, str, int]:
    """A level-4 problem: two products taken from a third ("a * b - c * d - e * f")."""
    a, c, e = (int(rng.integers(100, 1000)) for _ in range(3))
    b, d, f = (int(rng.integers(10, 100)) for _ in range(3))
    return LONG_LEVEL, f"{a} * {b} - {c} * {d} - {e} * {f}", a * b - c * d - e * f


def draw_problem(rng: np.random.Generator, levels: Sequence[int]) -> tuple[int, str, int]:
    """(level, expression, value) of one problem of `levels`: the calc suite's levels 1-3 by rejection;
    with level 4 among `levels`, first a level drawn uniformly from them, level 4 made by `long_problem`."""
    if LONG_LEVEL in levels:
        chosen = int(levels[int(rng.integers(len(levels)))])
        if chosen == LONG_LEVEL:
            return long_problem(rng)
        levels = (chosen,)
    level, expression, value = make_problem(rng)
    while level not in levels:  # rejection keeps each problem a function of the chain's rng alone
        level, expression, value = make_problem(rng)
    return level, expression, value


def make_chain(
    rng: np.random.Generator, parts: int, forms: Sequence[str], levels: Sequence[int] = DEFAULT_LEVELS
) -> dict[str, Any]:
    """One chain record: {"id", "questions", "answers", "expressions", "levels", "forms", "split"}; the env
    shows only the questions (the expressions are for the scripted policy and the analysis)."""
    questions, answers, expressions, drawn_levels, chosen = [], [], [], [], []
    for _ in range(parts):
        level, expression, value = draw_problem(rng, levels)
        form = str(forms[int(rng.integers(len(forms)))])
        form = "words" if form in ORDERED and level == 1 else form  # "a * b" has no other order
        questions.append(phrase(expression, form))
        answers.append(str(value))
        expressions.append(expression)
        drawn_levels.append(level)
        chosen.append(form)
    digest = hashlib.sha256("\n".join(questions).encode("utf-8")).hexdigest()
    return {
        "id": f"calc-chain-{digest[:12]}",
        "questions": questions,
        "answers": answers,
        "expressions": expressions,
        "levels": drawn_levels,
        "forms": chosen,
        "split": "heldout" if int(digest[:8], 16) % 100 < HELDOUT_PERCENT else "train",
    }


def generate_chains(
    split: str,
    count: int,
    parts: int = DEFAULT_PARTS,
    forms: Sequence[str] = DEFAULT_FORMS,
    seed: int = 0,
    levels: Sequence[int] = DEFAULT_LEVELS,
) -> list[dict[str, Any]]:
    """The first `count` distinct chains of `split` among the seed's candidates; deterministic."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    chains: list[dict[str, Any]] = []
    seen: set[str] = set()
    index = 0
    while len(chains) < count:
        if index > MAX_CANDIDATES_PER_TASK * (count + 10):
            raise RuntimeError(f"could not find {count} distinct {split} chains")
        chain = make_chain(np.random.default_rng((seed, index)), parts, forms, levels)
        index += 1
        if chain["split"] == split and chain["id"] not in seen:
            seen.add(chain["id"])
            chains.append(chain)
    return chains


def write_chain_files(
    out: Path,
    train_count: int,
    heldout_count: int,
    parts: int,
    forms: Sequence[str],
    seed: int,
    levels: Sequence[int] = DEFAULT_LEVELS,
    heldout_seed: int | None = None,
) -> dict[str, Any]:
    """Write train.jsonl, heldout.jsonl and manifest.json under `out`; returns the manifest. The held-out
    chains come from `heldout_seed` when given (else from `seed`, as the train chains)."""
    seeds = {"train": seed, "heldout": seed if heldout_seed is None else heldout_seed}
    header = {
        "suite": out.name,
        "env_id": "agentrl/Calc-v0",
        "env_kwargs": {"parts": parts},
        "generator": "agentrl_calc.chain",
        "generator_version": GENERATOR_VERSION,
        "parts": parts,
        "forms": list(forms),
        "levels": list(levels),
        "seed": seed,
        **({"heldout_seed": heldout_seed} if heldout_seed is not None else {}),
    }
    counts = {"train": train_count, "heldout": heldout_count}
    return write_suite(
        out, counts, lambda split, n: generate_chains(split, n, parts, forms, seeds[split], levels), header
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write calc-chain task files (train, heldout, manifest)")
    parser.add_argument("--out", type=Path, default=Path("tasks/calc-chain"), help="output directory")
    parser.add_argument("--train-count", type=int, default=1000)
    parser.add_argument("--heldout-count", type=int, default=100)
    parser.add_argument("--parts", type=int, default=DEFAULT_PARTS)
    parser.add_argument("--forms", default=",".join(DEFAULT_FORMS), help=f"comma-separated, of {FORMS}")
    parser.add_argument(
        "--levels", default=",".join(map(str, DEFAULT_LEVELS)), help="comma-separated, 1-3, or 4 alone"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--heldout-seed", type=int, default=None, help="the held-out chains' own seed")
    args = parser.parse_args(argv)
    forms = tuple(form.strip() for form in args.forms.split(",") if form.strip())
    levels = tuple(int(level) for level in args.levels.split(",") if level.strip())
    manifest = write_chain_files(
        args.out,
        args.train_count,
        args.heldout_count,
        args.parts,
        forms,
        args.seed,
        levels,
        args.heldout_seed,
    )
    print(f"wrote {manifest['counts']} chains of {args.parts} parts to {args.out}")


if __name__ == "__main__":
    main()
