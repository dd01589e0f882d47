"""Where the credit gym's MLP level-3 gap (GiGPO - GRPO final success) comes from, seed by seed.

    .venv/bin/python studies/scripts/credit_gym_gap.py
        # reads studies/credit-gym/results/credit_gym.json, writes credit_gym_gap.json beside it

What this is: a split of the paired (same seed) final-success gap over the seeds in which GRPO collapsed
(final held-out success <= `COLLAPSED`, the doc's cut) and the others: the mean gap over all seeds is the
sum of the two parts' contributions (each part's summed per-seed gap over the number of seeds). What this
is not: a causal measurement of the invalid action's role. That would need the gym run without the
invalid "wait" action (`invalid_action: false`), which has not been run; docs/credit_gym.md measured how
the collapse goes through the invalid-turn penalties in three replayed GRPO seeds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "studies" / "credit-gym" / "results" / "credit_gym.json"
OUT = SOURCE.with_name("credit_gym_gap.json")
COLLAPSED = 0.03


def gap_split(grpo: list[float], gigpo: list[float], cut: float = COLLAPSED) -> dict[str, Any]:
    """The mean paired gap and each part's contribution (collapsed GRPO seeds vs the rest)."""
    seeds = len(grpo)
    collapsed = [i for i, value in enumerate(grpo) if value <= cut]
    rest = [i for i in range(seeds) if i not in collapsed]
    return {
        "seeds": seeds,
        "grpo_collapsed_seeds": len(collapsed),
        "gigpo_at_or_below_cut": sum(value <= cut for value in gigpo),
        "mean_gap": sum(b - a for a, b in zip(grpo, gigpo, strict=True)) / seeds,
        "from_collapsed_seeds": sum(gigpo[i] - grpo[i] for i in collapsed) / seeds,
        "from_other_seeds": sum(gigpo[i] - grpo[i] for i in rest) / seeds,
        "grpo_mean_without_collapsed": sum(grpo[i] for i in rest) / len(rest) if rest else None,
        "gigpo_mean_on_grpos_collapsed_seeds": sum(gigpo[i] for i in collapsed) / len(collapsed)
        if collapsed
        else None,
    }


def main() -> int:
    results = json.loads(SOURCE.read_text())["results"]["mlp"]["3"]
    finals = {name: [curve[-1] for curve in results[name]["per_seed_success"]] for name in ("grpo", "gigpo")}
    report = {
        "source": str(SOURCE.relative_to(ROOT)),
        "cut": COLLAPSED,
        **gap_split(finals["grpo"], finals["gigpo"]),
    }
    OUT.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
