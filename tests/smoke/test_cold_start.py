"""The cold-start recipe end to end through the CLI, on the maze (pure Python, no Docker) with a tiny random
Llama saved as a model folder: `agentrl demos` (scripted, then rejection sampling from that run), `agentrl
sft` (a few steps, held-out eval before and after), `agentrl train model.name=<sft>/final` (one RL step from
the SFT model; `slow`: about a minute), and `agentrl sft` refusing demonstrations of held-out tasks. `slow`
variants run SFT with two FSDP2 ranks, with LoRA, and with the real SmolLM2-135M (its own tokens, bounded
memory)."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

AGENTRL = [sys.executable, "-m", "agentrl.cli.main"]


def run_cli(args: list[str], cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AGENTRL_DB_URL": ""}
    return subprocess.run(AGENTRL + args, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


# runs a command and prints its process tree's largest peak RSS (KB) last on stderr: this test's own
# children, where `getrusage(RUSAGE_CHILDREN)` in the test process would count every earlier test's too
PEAK_RSS = (
    "import resource, subprocess, sys; code = subprocess.run(sys.argv[1:]).returncode; "
    "print('peak_rss_kb', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); "
    "sys.exit(code)"
)


def peak_rss_kb(stderr: str) -> int:
    return int(stderr.strip().splitlines()[-1].split()[-1])


def common(tmp_path: Path, model: Path) -> list[str]:
    """One byte per token: the maze's prompts need a larger budget than SmolLM2's tokens do."""
    return [
        f"runs_dir={tmp_path / 'runs'}",
        f"store.url=sqlite:///{tmp_path / 'store.db'}",
        f"model.name={model}",
        "rollout.max_context_tokens=4096",
        "sampling.max_new_tokens=80",
        "rollout.max_turns=2",
        "eval.num_tasks=2",
    ]


def write_demos(repo_root: Path, tmp_path: Path, model: Path, name: str, policy: str, n: int) -> Path:
    args = ["demos", "--task", "maze", "--policy", policy, "--n", str(n), f"name={name}"]
    result = run_cli([*args, *common(tmp_path, model), "rollout.max_turns=10"], repo_root)
    assert result.returncode == 0, result.stderr[-3000:]
    path = tmp_path / "runs" / name / "demos.jsonl"
    assert f"next: agentrl sft --task maze --demos {path}" in result.stdout
    return path


@pytest.fixture(scope="module")
def scripted_demos(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Path:
    """Six scripted maze demonstrations, written once by `agentrl demos` for the tests below that only read
    them (each takes its own copy: `demos_copy`); the recipe's test writes and replays its own."""
    folder = tmp_path_factory.mktemp("scripted-demos")
    return write_demos(Path(__file__).resolve().parents[2], folder, tiny_model, "demos", "scripted", 6)


def demos_copy(demos: Path, tmp_path: Path, count: int) -> Path:
    """The first `count` of the shared demonstrations, with their manifest, in this test's own folder."""
    folder = tmp_path / "runs" / "demos"
    folder.mkdir(parents=True)
    lines = demos.read_text().splitlines()[:count]
    (folder / "demos.jsonl").write_text("\n".join(lines) + "\n")
    shutil.copy(demos.parent / "demos.json", folder / "demos.json")
    return folder / "demos.jsonl"


@pytest.mark.slow  # four CLI runs: 76 s on the shared 2-core CPU
def test_demos_then_sft_then_rl_from_the_sft_model(repo_root: Path, tmp_path: Path, tiny_model: Path) -> None:
    demos = write_demos(repo_root, tmp_path, tiny_model, "demos", "scripted", 6)
    episodes = [json.loads(line) for line in demos.read_text().splitlines()]
    manifest = json.loads((demos.parent / "demos.json").read_text())
    heldout = {json.loads(line)["id"] for line in (repo_root / "tasks/maze/level1/heldout.jsonl").open()}
    assert len(episodes) == 6 and all(episode["success"] for episode in episodes)
    assert manifest["episodes"] == 6 and not set(manifest["task_ids"]) & heldout
    assert all(turn["completion_ids"] and turn["prompt_ids"] for e in episodes for turn in e["turns"])

    replayed = write_demos(repo_root, tmp_path, tiny_model, "replayed", "run:demos", 3)
    again = [json.loads(line) for line in replayed.read_text().splitlines()]
    assert len(again) == 3 and {e["task_id"] for e in again} <= {e["task_id"] for e in episodes}

    args = ["sft", "--task", "maze", "--demos", str(demos), "name=sft", "sft.epochs=2", "sft.batch_size=4"]
    result = run_cli([*args, "sft.lr=1e-3", *common(tmp_path, tiny_model)], repo_root)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "held-out before: success" in result.stdout and "held-out after : success" in result.stdout
    final = tmp_path / "runs" / "sft" / "final"
    assert f"next: agentrl train --task maze model.name={final}" in result.stdout
    rows = [json.loads(line) for line in (tmp_path / "runs/sft/metrics.jsonl").read_text().splitlines()]
    steps = [row for row in rows if "nll" in row]
    assert [row["step"] for row in steps] == [1, 2, 3, 4] and steps[-1]["nll"] < steps[0]["nll"]
    evals = [row for row in rows if "eval/invalid_turn_rate" in row]
    assert [row["step"] for row in evals] == [0, 4]
    saved = yaml_of(tmp_path / "runs/sft/config.yaml")
    assert saved["optim"]["lr"] == 1e-3 and saved["sft"]["demos"] == str(demos)

    train = ["train", "--task", "maze", "name=rl", "train.steps=1", "train.tasks_per_step=1"]
    rl = [*train, "train.group_size=2", "eval.before=false", *common(tmp_path, tiny_model)]
    result = run_cli([*rl, f"model.name={final}"], repo_root)
    assert result.returncode == 0, result.stderr[-3000:]
    with sqlite3.connect(tmp_path / "store.db") as db:
        kinds = dict(db.execute("select name, status from runs").fetchall())
    assert kinds == {"demos": "finished", "replayed": "finished", "sft": "finished", "rl": "finished"}


def test_sft_refuses_demonstrations_of_held_out_tasks(
    repo_root: Path, tmp_path: Path, tiny_model: Path, scripted_demos: Path
) -> None:
    demos = demos_copy(scripted_demos, tmp_path, 2)
    heldout = json.loads((repo_root / "tasks/maze/level1/heldout.jsonl").open().readline())["id"]
    lines = demos.read_text().splitlines()
    leaked = {**json.loads(lines[0]), "task_id": heldout}
    demos.write_text("\n".join([json.dumps(leaked), *lines[1:]]) + "\n")
    args = ["sft", "--task", "maze", "--demos", str(demos), *common(tmp_path, tiny_model)]
    result = run_cli(args, repo_root)
    assert result.returncode == 2
    assert "held-out task(s)" in result.stderr and heldout in result.stderr


@pytest.mark.slow
def test_sft_with_two_fsdp2_ranks(
    repo_root: Path, tmp_path: Path, tiny_model: Path, scripted_demos: Path
) -> None:
    demos = demos_copy(scripted_demos, tmp_path, 4)
    args = ["sft", "--task", "maze", "--demos", str(demos), "name=sft2", "sft.epochs=1", "sft.batch_size=4"]
    ranks = ["trainer.nproc=2", "trainer.checkpoint_every=1"]
    result = run_cli([*args, *ranks, *common(tmp_path, tiny_model)], repo_root)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "runs/sft2/final/config.json").is_file()
    assert (tmp_path / "runs/sft2/checkpoints/step-000001/state.json").is_file()


@pytest.mark.slow
def test_sft_with_lora_saves_the_adapters_merged(
    repo_root: Path, tmp_path: Path, tiny_model: Path, scripted_demos: Path
) -> None:
    from agentrl.model_config import ModelConfig
    from agentrl.models import has_adapters, load_model

    demos = demos_copy(scripted_demos, tmp_path, 2)
    args = ["sft", "--task", "maze", "--demos", str(demos), "name=lora", "sft.epochs=1", "model.lora.rank=4"]
    result = run_cli([*args, "eval.before=false", *common(tmp_path, tiny_model)], repo_root)
    assert result.returncode == 0, result.stderr[-3000:]
    final = tmp_path / "runs/lora/final"
    assert (final / "config.json").is_file() and not (final / "adapter_config.json").exists()
    model, _ = load_model(ModelConfig(name=str(final), device="cpu"))
    assert not has_adapters(model)


@pytest.mark.slow
def test_the_recipe_with_smollm2_in_its_own_tokens_and_bounded_memory(
    repo_root: Path, tmp_path: Path
) -> None:
    """The real model (the cached SmolLM2-135M of configs/maze.yaml) and its tokenizer: every demonstration's
    first prompt is what the runner renders for this env with that tokenizer, none is of a held-out task,
    and one SFT step with held-out evaluations before and after stays under 5 GB (the 49k-vocabulary
    logits of ~1k-token samples are what grows; `update.micro_batch_size` bounds them). About a minute."""
    from agentrl.agent.prompting import render_first_prompt
    from agentrl.env import make
    from agentrl.model_config import ModelConfig
    from agentrl.models import load_tokenizer

    base = [
        f"runs_dir={tmp_path / 'runs'}",
        f"store.url=sqlite:///{tmp_path / 'store.db'}",
        "eval.num_tasks=2",
    ]
    result = run_cli(["demos", "--task", "maze", "--n", "3", "name=demos", *base], repo_root)
    assert result.returncode == 0, result.stderr[-3000:]
    demos = tmp_path / "runs/demos/demos.jsonl"
    episodes = [json.loads(line) for line in demos.read_text().splitlines()]
    heldout = {json.loads(line)["id"] for line in (repo_root / "tasks/maze/level1/heldout.jsonl").open()}
    assert len(episodes) == 3 and not {episode["task_id"] for episode in episodes} & heldout
    tokenizer, env = load_tokenizer(ModelConfig()), make("agentrl/Maze-v0")
    for episode in episodes:
        first = render_first_prompt(
            tokenizer, list(env.tools), list(env.examples), episode["first_observation"]
        )
        assert episode["turns"][0]["prompt_ids"] == first

    args = ["sft", "--task", "maze", "--demos", str(demos), "name=sft", "sft.epochs=1", "sft.batch_size=3"]
    env = {**os.environ, "AGENTRL_DB_URL": ""}
    command = [sys.executable, "-c", PEAK_RSS, *AGENTRL, *args, "rollout.max_turns=2", *base]
    result = subprocess.run(command, cwd=repo_root, capture_output=True, text=True, timeout=900, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "held-out before: success" in result.stdout and "held-out after : success" in result.stdout
    rows = [json.loads(line) for line in (tmp_path / "runs/sft/metrics.jsonl").read_text().splitlines()]
    (step,) = [row for row in rows if "nll" in row]
    assert 0 < step["nll"] < 20 and step["tokens"] > 0
    assert (tmp_path / "runs/sft/final/config.json").is_file()
    peak_kb = peak_rss_kb(result.stderr)  # the largest process of `agentrl sft` (service included)
    assert peak_kb < 5 * 1024 * 1024, f"a child process peaked at {peak_kb / 1024**2:.1f} GB"


def yaml_of(path: Path) -> dict[str, object]:
    import yaml

    return dict(yaml.safe_load(path.read_text()))
