"""Helpers of the multi-rank training tests (test_dp_rollouts.py, test_multinode.py): a tiny run on disk (a
random 2-layer Llama over the byte tokenizer, task files, a run config for `test/ByteSum-v0` with the HF
engine in fp32 and seeded sampling), the env service that serves it, and readers of what a run left behind
(per-step metrics, stored episodes and their trainer log-probs, final weights). Not a test itself."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch
import yaml
from safetensors.torch import load_file
from tiny_models import tiny_llama
from tiny_tokenizers import byte_tokenizer

from agentrl.service.embedded import EmbeddedService
from agentrl.store.repository import unpack_logprobs

AGENTRL = [sys.executable, "-m", "agentrl.cli.main"]
TIMINGS = ("_s", "_mb")  # wall-clock seconds and process memory peaks differ between runs by nature
RUN_TIMEOUT_S = 900


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def tiny_run_config(
    root: Path, service_url: str, top: dict[str, Any] | None = None, **sections: dict[str, Any]
) -> Path:
    """Write the model, the tasks and the run config `root`/configs/bytesum.yaml (so that `--task bytesum`
    finds it from `root`); its path. `top` sets top-level keys (e.g. `name`), `sections` update the
    config's sections (e.g. `train={"steps": 3}`)."""
    model_dir = root / "model"
    if not (model_dir / "config.json").is_file():
        tiny_llama(hidden=32, seed=0).save_pretrained(model_dir)
        byte_tokenizer().save_pretrained(model_dir)
    suite = root / "tasks" / "bytesum"
    suite.mkdir(parents=True, exist_ok=True)
    topics = ["cats", "rivers", "ships", "bread", "wind", "clocks", "salt", "maps", "owls", "glass"]
    for split, names in (("train", topics), ("heldout", ["stones", "trees", "bells"])):
        (suite / f"{split}.jsonl").write_text(
            "".join(json.dumps({"id": f"{split}-{name}", "topic": name}) + "\n" for name in names)
        )
    config: dict[str, Any] = {
        "env": {"id": "test/ByteSum-v0"},
        "tasks": {"root": str(root / "tasks"), "suite": "bytesum", "sampler": "filtered"},
        "model": {"name": str(model_dir), "dtype": "float32", "device": "cpu"},
        # the HF engine samples each seeded request alone, in fp32: what a rank samples cannot depend on
        # what else it samples, so the ranks' shares add up to the single process's episodes exactly
        "engine": {"kind": "hf", "hf": {"autocast_bf16": False}},
        "sampling": {"temperature": 1.0, "max_new_tokens": 10},
        "rollout": {"max_turns": 2, "max_context_tokens": 4096, "seeded_sampling": True},
        "train": {"steps": 2, "tasks_per_step": 3, "group_size": 2, "seed": 7},
        "optim": {"lr": 1.0e-3},
        "update": {"micro_batch_size": 2},
        "eval": {"num_tasks": 3, "before": True, "after": True, "temperature": 1.0},
        "trainer": {"dp_rollouts": True},  # with trainer.nproc > 1 every rank plays its share
        "service": {"url": service_url, "client": {"transport": "ws"}},
    }
    for section, values in sections.items():
        config.setdefault(section, {}).update(values)
    config.update(top or {})
    path = root / "configs" / "bytesum.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def byte_sum_service(log: Path) -> EmbeddedService:
    """An embedded env service (127.0.0.1) that serves `test/ByteSum-v0`; use it with `with`."""
    return EmbeddedService(log, preload=["dp_env"])


def run_env() -> dict[str, str]:
    """The environment every run of a comparison gets: one thread per rank (what torchrun gives each of
    several local ranks), so single- and multi-node runs reduce floats alike; no store from the caller."""
    return {**os.environ, "AGENTRL_DB_URL": "", "OMP_NUM_THREADS": "1"}


def train_args(config: Path, runs: Path, db: Path, name: str, *overrides: str) -> list[str]:
    return [
        "train",
        "--config",
        str(config),
        f"name={name}",
        f"runs_dir={runs}",
        f"store.url=sqlite:///{db}",
        *overrides,
    ]


def run_train(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        AGENTRL + args, cwd=cwd, env=run_env(), capture_output=True, text=True, timeout=RUN_TIMEOUT_S
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return result


def step_metrics(run_dir: Path) -> dict[int, dict[str, float]]:
    """Every logged line of metrics.jsonl by step (training and evaluation lines of a step merged),
    without the wall-clock timings."""
    merged: dict[int, dict[str, float]] = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        values = {k: v for k, v in row.items() if k != "step" and not k.endswith(TIMINGS)}
        merged.setdefault(row["step"], {}).update(values)
    return merged


def stored_episodes(db: Path, name: str) -> list[tuple[Any, ...]]:
    """(step, split, task id, env seed, reward, attempts, turn texts, turn advantages) of every episode the
    run `name` stored, sorted (group ids and episode uids differ between runs by nature)."""
    with sqlite3.connect(db) as conn:
        (run_id,) = conn.execute("select id from runs where name = ?", (name,)).fetchone()
        episodes = conn.execute(
            "select id, step, split, task_id, seed, reward, attempts from episodes where run_id = ?",
            (run_id,),
        ).fetchall()
        rows = []
        for episode_id, *fields in episodes:
            turns = conn.execute(
                'select text, advantage from turns where episode_id = ? order by "index"', (episode_id,)
            ).fetchall()
            rows.append((*fields, tuple(t for t, _ in turns), tuple(a for _, a in turns)))
    return sorted(rows, key=lambda row: tuple(map(str, row[:7])))


def stored_trainer_logprobs(db: Path, name: str) -> dict[tuple[Any, ...], tuple[list[float] | None, ...]]:
    """Per episode of run `name`, keyed by (step, split, task id, env seed, turn texts), the trainer's
    log-probs of each turn's sampled tokens as stored (None where the update computed none)."""
    with sqlite3.connect(db) as conn:
        (run_id,) = conn.execute("select id from runs where name = ?", (name,)).fetchone()
        episodes = conn.execute(
            "select id, step, split, task_id, seed from episodes where run_id = ?", (run_id,)
        ).fetchall()
        out = {}
        for episode_id, *fields in episodes:
            turns = conn.execute(
                'select text, trainer_logprobs from turns where episode_id = ? order by "index"',
                (episode_id,),
            ).fetchall()
            key = (*fields, tuple(text for text, _ in turns))
            out[key] = tuple(None if blob is None else unpack_logprobs(blob) for _, blob in turns)
    return out


def final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(str(run_dir / "final" / "model.safetensors"))


def nonces_per_round(db: Path, name: str) -> set[int]:
    """How many distinct group-id nonces the first round of each training step has (one per rank that
    played a block of it)."""
    with sqlite3.connect(db) as conn:
        (run_id,) = conn.execute("select id from runs where name = ?", (name,)).fetchone()
        rows = conn.execute(
            "select step, group_id from task_draws where run_id = ? and round = 0", (run_id,)
        ).fetchall()
    nonces: dict[int, set[str]] = {}
    for step, group_id in rows:
        nonces.setdefault(step, set()).add(group_id.rsplit("-", 1)[1])
    return {len(found) for found in nonces.values()}
