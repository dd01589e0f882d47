"""Benchmark: the episode page with every turn's token strip; writes ONE JSON object.

    .venv/bin/python bench/viewer_tokens.py     # bench/results/viewer_tokens.json

The store: a fresh SQLite file holding one episode of 50 turns (one page of the episode page) of 256
sampled tokens each, written by the real `record_episodes` with token pieces from a small word list and
sampler log-probs drawn from an exponential (mean 0.125 nats: most tokens likely, a tail of unlikely
ones, as a sampled completion has). The measurement: the real app in-process through Starlette's
TestClient, the episode page requested `--repeats` times after one warm-up. Keys: `turns`,
`tokens_per_turn`, `tokens`, `page` ({"p50_ms", "p95_ms", "max_ms", "bytes"}, nearest-rank percentiles),
`bytes_per_token` (the page's bytes over its tokens, the rest of the page included), `cpu_flags`,
`load_avg_start` / `load_avg_end`, `command`.

What this is not: part of bench/viewer.py's 100k-episode store (whose turns carry no tokens), or a browser
measurement: it times the server's answer only.
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import harness
from fastapi.testclient import TestClient

from agentrl.cpu import speed_flags
from agentrl.store.repository import close_store, create_run, load_episodes, open_store, record_episodes
from agentrl.types import Action, Episode, Turn
from agentrl.ui.app import create_app

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
WORDS = ("the", " answer", "<tool_call>", '{"', "name", "\n", " print", "(", "12", " +", " is")


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(q * len(ordered) + 0.5)) - 1))]


def build(url: str, turns: int, tokens: int, seed: int = 0) -> tuple[str, int]:
    """(run id, episode id) of one episode of `turns` turns of `tokens` sampled tokens each."""
    rng = random.Random(seed)
    store = open_store(url)
    run_id = create_run(store, "tokens", "bench", {})
    played = tuple(
        Turn(
            index,
            (1,) * 12,
            tuple(range(tokens)),
            tuple(-rng.expovariate(8.0) for _ in range(tokens)),
            "x" * 600,
            Action("x"),
            "observation",
            0.0,
            False,
            f"s{index + 1}",
        )  # fmt: skip
        for index in range(turns)
    )
    episode = Episode("e", "env", "t", "g", 0, played, "terminated", "s0")

    def pieces(ids: Any) -> list[str]:
        return [rng.choice(WORDS) for _ in ids]

    record_episodes(store, run_id, 1, "train", [episode], None, token_pieces=pieces)
    episode_id = int(load_episodes(store, run_id)[0]["id"])
    close_store(store)
    return run_id, episode_id


def run_bench(turns: int, tokens: int, repeats: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="viewer-tokens-") as scratch:
        url = f"sqlite:///{scratch}/tokens.db"
        run_id, episode_id = build(url, turns, tokens)
        result: dict[str, Any] = {
            "turns": turns,
            "tokens_per_turn": tokens,
            "tokens": turns * tokens,
            "repeats": repeats,
            "load_avg_start": list(os.getloadavg()),
            "cpu_flags": speed_flags(),
        }
        times: list[float] = []
        with TestClient(create_app(url)) as client:
            for index in range(repeats + 1):  # the first warms up
                start = time.perf_counter()
                response = client.get(f"/runs/{run_id}/episodes/{episode_id}")
                if response.status_code != 200 or 'class="tokens"' not in response.text:
                    raise RuntimeError(f"the episode page answered {response.status_code} without strips")
                if index:
                    times.append((time.perf_counter() - start) * 1000)
        size = len(response.content)
    result["page"] = {
        "p50_ms": round(percentile(times, 0.5), 1),
        "p95_ms": round(percentile(times, 0.95), 1),
        "max_ms": round(max(times), 1),
        "bytes": size,
    }
    result["bytes_per_token"] = round(size / (turns * tokens), 1)
    result["load_avg_end"] = list(os.getloadavg())
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=50, help="turns of the episode (the page shows 50)")
    parser.add_argument("--tokens", type=int, default=256, help="sampled tokens per turn")
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--out", type=Path, default=RESULTS / "viewer_tokens.json")
    args = parser.parse_args()
    result = run_bench(args.turns, args.tokens, args.repeats)
    baseline = "the episode page without token strips, same run"
    harness.emit("viewer_tokens", result, baseline=baseline, out=args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
