"""The shared-prefix update equals the unshared one: loss, every gradient and every metric, in fp32, on a tiny
random Llama with two groups of three multi-turn episodes whose suffixes differ in length."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedModel

from agentrl.model_config import LoraSettings
from agentrl.models import with_lora
from agentrl.trainer import shared_prefix as shared_prefix_module
from agentrl.trainer.configs import LossConfig, OptimConfig, UpdateConfig
from agentrl.trainer.losses import sampled_token_logprobs
from agentrl.trainer.optim import make_optimizer
from agentrl.trainer.parallel import SINGLE_PROCESS
from agentrl.trainer.recompute import recompute_mlps
from agentrl.trainer.samples import (
    TrainSample,
    collate,
    collate_shared,
    episode_to_sample,
    episode_to_samples,
    plan_packs,
    shared_length,
    trains_prefix,
)
from agentrl.trainer.sft_update import nll_loss
from agentrl.trainer.shared_prefix import (
    collate_pack,
    forward_logits,
    local_packs,
    pack_logits,
    pack_token_logprobs,
    shared_prefix_unsupported,
)
from agentrl.trainer.update import loss_step, ppo_update, ppo_update_and_logprobs, with_tis_weights
from agentrl.types import Action, Episode, Turn

PAD_ID = 0
VOCAB = 64
FIRST_PROMPT = 40  # tokens of the first prompt every member of a group starts with


def tiny_model(seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        pad_token_id=PAD_ID,
    )
    return LlamaForCausalLM(config).eval()


def episode(group: str, first_prompt: Sequence[int], member: int, turns: int) -> Episode:
    """`turns` turns after `first_prompt`: completions and observations of lengths that vary by member."""
    generator = torch.Generator().manual_seed(1000 * len(group) + 17 * member + turns)

    def tokens(count: int) -> tuple[int, ...]:
        return tuple(int(t) for t in torch.randint(1, VOCAB, (count,), generator=generator))

    built = []
    for index in range(turns):
        prompt = tuple(first_prompt) if index == 0 else tokens(3 + member)
        completion = tokens(4 + 2 * member + index)
        logprobs = tuple(float(v) for v in -3.0 - torch.rand(len(completion), generator=generator))
        built.append(Turn(index, prompt, completion, logprobs, "t", Action("t"), "o", 0.0, False, None))
    return Episode(f"{group}-{member}", "env", "task", group, member, tuple(built), "terminated")


def group_samples(group: str, seed: int, first_prompt: int = FIRST_PROMPT) -> list[TrainSample]:
    prompt = torch.randint(1, VOCAB, (first_prompt,), generator=torch.Generator().manual_seed(seed)).tolist()
    advantages = (1.0, -0.5, 0.25)
    out = []
    for member in range(3):
        turns = 2 + member % 2
        played = episode(group, prompt, member, turns)
        out.append(episode_to_sample(played, [advantages[member] * (k + 1) for k in range(turns)], 500))
    return out


def two_groups() -> list[TrainSample]:
    return group_samples("a", seed=1) + group_samples("bb", seed=2)


def run(
    samples: list[TrainSample],
    update: UpdateConfig,
    loss: LossConfig | None = None,
    lora: bool = False,
    recompute: bool = False,
) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
    """Metrics and every parameter's gradient of one update with lr 0 (the gradients stay readable);
    `recompute`: the MLPs recomputed in the backward pass (`update.recompute_mlp`)."""
    loss = loss or LossConfig()
    model: PreTrainedModel = tiny_model()
    if lora:
        model = with_lora(model, LoraSettings(rank=4, alpha=8, targets=("q_proj", "v_proj")))
    if recompute:
        recompute_mlps(model)
    reference = tiny_model(seed=3) if loss.kl_coef > 0 else None
    assert shared_prefix_unsupported(model) is None
    optim = OptimConfig(lr=0.0, grad_clip=0.0)
    optimizer, scheduler = make_optimizer(model, optim)
    metrics = ppo_update(
        model, optimizer, scheduler, samples, PAD_ID, loss, update, ref_model=reference, optim_cfg=optim
    )
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return metrics, grads


def assert_equal_updates(
    shared: tuple[dict[str, float], dict[str, torch.Tensor]],
    plain: tuple[dict[str, float], dict[str, torch.Tensor]],
) -> None:
    (shared_metrics, shared_grads), (plain_metrics, plain_grads) = shared, plain
    assert set(shared_metrics) == set(plain_metrics)
    for name, value in plain_metrics.items():
        assert shared_metrics[name] == pytest.approx(value, rel=1e-4, abs=1e-6), name
    assert set(shared_grads) == set(plain_grads) and plain_grads
    for name, grad in plain_grads.items():
        assert torch.allclose(shared_grads[name], grad, rtol=1e-4, atol=1e-6), name


def test_the_layout_shares_the_first_prompt_and_never_a_sampled_token() -> None:
    samples = two_groups()
    packs = plan_packs(samples, micro_batch_size=3, min_shared_tokens=8)
    assert [pack.indices for pack in packs] == [(0, 1, 2), (3, 4, 5)]
    assert all(pack.shared == FIRST_PROMPT - 1 for pack in packs)  # token K starts each row, unsampled
    batch = collate_shared(samples[:3], packs[0].shared, PAD_ID)
    assert batch["prefix_ids"].shape == (1, FIRST_PROMPT - 1)
    longest = max(sample.num_tokens for sample in samples[:3])
    assert batch["input_ids"].shape == (3, longest - FIRST_PROMPT + 1)
    assert batch["loss_mask"][:, 0].sum() == 0
    for row, sample in enumerate(samples[:3]):
        assert batch["loss_mask"][row].sum() == sample.loss_mask.sum()


def test_shared_logits_equal_the_full_sequences_logits() -> None:
    model = tiny_model()
    samples = group_samples("a", seed=1)
    shared = plan_packs(samples, micro_batch_size=3, min_shared_tokens=8)[0].shared
    with torch.no_grad():
        batch = collate(samples, PAD_ID)
        full = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        rows = forward_logits(model, collate_shared(samples, shared, PAD_ID))
    for row, sample in enumerate(samples):
        length = sample.num_tokens - shared
        assert torch.allclose(rows[row, :length], full[row, shared : sample.num_tokens], atol=1e-5)


@pytest.mark.parametrize(
    ("loss", "micro_batch_size"),
    [
        (LossConfig(), 4),
        (LossConfig(kl_coef=0.1, entropy_coef=0.01), 4),
        (LossConfig(entropy_coef=0.01, aggregation="seq_mean_token_mean"), 2),
        (LossConfig(kl_coef=0.1, aggregation="constant", constant_normaliser=16.0), 1),
    ],
)
def test_the_shared_update_equals_the_unshared_one(loss: LossConfig, micro_batch_size: int) -> None:
    samples = two_groups()
    update = UpdateConfig(micro_batch_size=micro_batch_size, min_shared_tokens=8, mini_batches=2)
    assert any(pack.shared for pack in local_packs(samples, update, SINGLE_PROCESS)) == (micro_batch_size > 1)
    plain = run(samples, dataclasses.replace(update, shared_prefix=False), loss)
    assert_equal_updates(run(samples, update, loss), plain)


def test_a_group_that_diverges_early_shares_only_its_common_start() -> None:
    diverging = [
        dataclasses.replace(
            sample, input_ids=torch.cat([sample.input_ids[:10], (sample.input_ids[10:] + 7 * k) % VOCAB])
        )
        for k, sample in enumerate(group_samples("a", seed=1))
    ]
    samples = diverging + group_samples("bb", seed=2)
    assert [pack.shared for pack in plan_packs(samples, 4, min_shared_tokens=8)] == [10, FIRST_PROMPT - 1]
    assert [pack.shared for pack in plan_packs(samples, 4, min_shared_tokens=16)] == [FIRST_PROMPT - 1]
    update = UpdateConfig(micro_batch_size=4, min_shared_tokens=8)
    loss = LossConfig(kl_coef=0.1)
    assert_equal_updates(
        run(samples, update, loss), run(samples, dataclasses.replace(update, shared_prefix=False), loss)
    )


def test_epochs_of_shared_updates_end_at_the_same_weights() -> None:
    samples = two_groups()
    final = []
    for shared in (True, False):
        model = tiny_model()
        optimizer, scheduler = make_optimizer(model, OptimConfig(lr=1e-2))
        update = UpdateConfig(ppo_epochs=2, micro_batch_size=3, mini_batches=2, shared_prefix=shared)
        ppo_update(model, optimizer, scheduler, samples, PAD_ID, LossConfig(), update)
        final.append(dict(model.named_parameters()))
    for name, param in final[0].items():
        assert torch.allclose(param, final[1][name], atol=1e-5), name


def test_truncated_importance_weights_are_those_of_the_unshared_pass() -> None:
    model = tiny_model()
    samples = two_groups()
    shared, shared_metrics = with_tis_weights(
        model, samples, PAD_ID, LossConfig(tis_cap=1.5), UpdateConfig(min_shared_tokens=8), 1.0
    )
    plain, plain_metrics = with_tis_weights(
        model, samples, PAD_ID, LossConfig(tis_cap=1.5), UpdateConfig(shared_prefix=False), 1.0
    )
    for with_prefix, without in zip(shared, plain, strict=True):
        assert torch.allclose(with_prefix.old_logprobs, without.old_logprobs, atol=1e-5)
        assert torch.allclose(with_prefix.advantages, without.advantages, atol=1e-5)
    for name, value in plain_metrics.items():
        assert shared_metrics[name] == pytest.approx(value, rel=1e-4, abs=1e-6), name
    update = UpdateConfig(min_shared_tokens=8)
    loss = LossConfig(tis_cap=1.5)
    assert_equal_updates(
        run(samples, update, loss), run(samples, dataclasses.replace(update, shared_prefix=False), loss)
    )


def test_lora_adapters_get_the_same_gradients() -> None:
    samples = two_groups()
    update = UpdateConfig(min_shared_tokens=8)
    assert_equal_updates(
        run(samples, update, lora=True),
        run(samples, dataclasses.replace(update, shared_prefix=False), lora=True),
    )


def test_the_update_runs_the_prefix_once_per_pack(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, ...]] = []
    original = shared_prefix_module.shared_prefix_logits

    def counted(model: torch.nn.Module, prefix: torch.Tensor, *rest: torch.Tensor) -> torch.Tensor:
        calls.append(tuple(prefix.shape))
        return original(model, prefix, *rest)

    monkeypatch.setattr(shared_prefix_module, "shared_prefix_logits", counted)
    run(two_groups(), UpdateConfig(micro_batch_size=4, min_shared_tokens=8), LossConfig(kl_coef=0.1))
    assert calls == [(1, FIRST_PROMPT - 1)] * 4  # two packs, each for the policy and the reference


def test_models_it_is_not_made_for_run_unshared(caplog: pytest.LogCaptureFixture) -> None:
    samples = two_groups()
    model = tiny_model()
    setattr(model.config, "model_type", "mystery")  # noqa: B010 (a class attribute, shadowed on the instance)
    optimizer, scheduler = make_optimizer(model, OptimConfig(lr=0.0))
    with caplog.at_level(logging.WARNING):
        ppo_update(
            model, optimizer, scheduler, samples, PAD_ID, LossConfig(), UpdateConfig(min_shared_tokens=8)
        )
    assert "running every episode unshared" in caplog.text and "mystery" in caplog.text


def branch_of(parent: Episode, other: Episode, branch_turn: int) -> Episode:
    """A tree branch of `parent` at `branch_turn`: the parent's turns before it (copied), then `other`'s
    turns from it on, the first of them prompted by the parent's observation (the forked state's)."""
    first = dataclasses.replace(other.turns[branch_turn], prompt_ids=parent.turns[branch_turn].prompt_ids)
    turns = (*parent.turns[:branch_turn], first, *other.turns[branch_turn + 1 :])
    return dataclasses.replace(other, turns=turns, parent_id=parent.episode_id, branch_turn=branch_turn)


def tree_samples(group: str, seed: int) -> list[TrainSample]:
    """A nested tree of 5 turns, leaves depth first: the root R, A branched from R at turn 1, A1 from A at
    turn 3, B from R at turn 1; every turn with its own advantage."""
    prompt = torch.randint(1, VOCAB, (FIRST_PROMPT,), generator=torch.Generator().manual_seed(seed)).tolist()
    root = episode(group, prompt, 0, 5)
    a = branch_of(root, episode(group, prompt, 1, 5), 1)
    a1 = branch_of(a, episode(group, prompt, 2, 5), 3)
    b = branch_of(root, episode(group, prompt, 3, 5), 1)
    leaves = [root, a, a1, b]
    return [
        episode_to_sample(leaf, [(-1.0) ** k * (0.5 + k + member) for k in range(5)], 500)
        for member, leaf in enumerate(leaves)
    ]


def test_a_tree_pack_shares_the_prefix_up_to_its_branch_point() -> None:
    samples = tree_samples("t", seed=4)
    root, a, a1, b = samples
    # R, A and B share R's turn 0 and turn 1's prompt: R trained turn 0, the branches hold its copy
    first_completion = FIRST_PROMPT + 4
    assert shared_length([root, a, b]) == first_completion + 3 - 1  # turn 1's prompt: 3 tokens
    assert shared_length([a, a1]) > shared_length([root, a, a1, b])  # A1 shares A's turns 1-2 too
    packs = plan_packs(samples, micro_batch_size=4, min_shared_tokens=8)
    assert [pack.indices for pack in packs] == [(0, 1, 2, 3)]
    assert trains_prefix(collate_shared(samples, packs[0].shared, PAD_ID))


def test_tree_logprobs_equal_the_full_sequences() -> None:
    model = tiny_model()
    samples = tree_samples("t", seed=4)
    shared = shared_length(samples)
    batch = collate_shared(samples, shared, PAD_ID)
    with torch.no_grad():
        plain = collate(samples, PAD_ID)
        full = model(input_ids=plain["input_ids"], attention_mask=plain["attention_mask"]).logits
        expected, expected_entropy = sampled_token_logprobs(full, plain["input_ids"], 0.7)
        logprobs, entropy = pack_token_logprobs(pack_logits(model, batch), batch, 0.7)
    mask = plain["loss_mask"].bool()
    assert torch.equal(batch["loss_mask"], plain["loss_mask"]) and bool(mask[0, :shared].any())
    assert torch.allclose(logprobs[mask], expected[mask], atol=1e-5)
    assert torch.allclose(entropy[mask], expected_entropy[mask], atol=1e-5)


def tree_and_flat() -> list[TrainSample]:
    return tree_samples("t", seed=4) + group_samples("a", seed=1) + tree_samples("uu", seed=5)


@pytest.mark.parametrize(
    ("loss", "micro_batch_size"),
    [
        (LossConfig(), 4),
        (LossConfig(kl_coef=0.1, entropy_coef=0.01), 4),
        (LossConfig(entropy_coef=0.01, aggregation="seq_mean_token_mean"), 2),
        (LossConfig(kl_coef=0.1, aggregation="constant", constant_normaliser=16.0), 3),
    ],
)
def test_the_shared_update_of_trees_equals_the_unshared_one(loss: LossConfig, micro_batch_size: int) -> None:
    samples = tree_and_flat()
    update = UpdateConfig(micro_batch_size=micro_batch_size, min_shared_tokens=8, mini_batches=2)
    packs = local_packs(samples, update, SINGLE_PROCESS)
    assert any(trains_prefix(collate_pack(samples, pack, PAD_ID)) for pack in packs if pack.shared)
    plain = run(samples, dataclasses.replace(update, shared_prefix=False), loss)
    assert_equal_updates(run(samples, update, loss), plain)


def test_truncated_importance_weights_of_a_tree_are_those_of_the_unshared_pass() -> None:
    model = tiny_model()
    samples = tree_and_flat()
    loss = LossConfig(tis_cap=1.02)
    shared, shared_metrics = with_tis_weights(
        model, samples, PAD_ID, loss, UpdateConfig(min_shared_tokens=8), 1.0
    )
    plain, plain_metrics = with_tis_weights(
        model, samples, PAD_ID, loss, UpdateConfig(shared_prefix=False), 1.0
    )
    for with_prefix, without in zip(shared, plain, strict=True):
        assert torch.allclose(with_prefix.old_logprobs, without.old_logprobs, atol=1e-5)
        assert torch.allclose(with_prefix.advantages, without.advantages, atol=1e-5)
    assert plain_metrics["tis_capped_frac"] > 0
    for name, value in plain_metrics.items():
        assert shared_metrics[name] == pytest.approx(value, rel=1e-4, abs=1e-6), name


def test_sft_on_a_tree_equals_the_unshared_step() -> None:
    samples = tree_and_flat()
    results = []
    for shared in (True, False):
        model = tiny_model()
        optimizer, scheduler = make_optimizer(model, OptimConfig(lr=0.0))
        update = UpdateConfig(micro_batch_size=4, min_shared_tokens=8, shared_prefix=shared)
        metrics = loss_step(model, optimizer, scheduler, samples, PAD_ID, update, nll_loss, grad_clip=0.0)
        grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
        results.append((metrics, grads))
    assert_equal_updates(results[0], results[1])


def test_a_tree_pack_runs_its_prefix_once_with_its_logits(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, ...]] = []
    original = shared_prefix_module.prefix_and_row_logits

    def counted(
        model: torch.nn.Module, prefix: torch.Tensor, *rest: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        logits = original(model, prefix, *rest)
        calls.append(tuple(logits[0].shape[:2]))
        return logits

    monkeypatch.setattr(shared_prefix_module, "prefix_and_row_logits", counted)
    samples = tree_samples("t", seed=4)
    run(samples, UpdateConfig(micro_batch_size=4, min_shared_tokens=8))
    assert calls == [(1, shared_length(samples))]


def test_a_branch_owns_the_deeper_prefix_of_its_own_branches() -> None:
    # A played turns 1-2 and A1 holds them as copies: a pack of the two shares up to A1's branch turn
    _, a, a1, _ = tree_samples("t", seed=4)
    samples = [a, a1, *group_samples("a", seed=1)]
    packs = plan_packs(samples, micro_batch_size=4, min_shared_tokens=8)
    assert packs[0].indices == (0, 1) and packs[0].shared == shared_length([a, a1])
    batch = collate_shared([a, a1], packs[0].shared, PAD_ID)
    assert trains_prefix(batch) and not bool(batch["loss_mask"][1, : packs[0].shared].any())
    update = UpdateConfig(micro_batch_size=4, min_shared_tokens=8)
    loss = LossConfig(kl_coef=0.1, entropy_coef=0.01, aggregation="seq_mean_token_mean")
    plain = run(samples, dataclasses.replace(update, shared_prefix=False), loss)
    assert_equal_updates(run(samples, update, loss), plain)


def plain_logprobs(
    model: torch.nn.Module, samples: Sequence[TrainSample], temperature: float
) -> list[torch.Tensor]:
    """Each sample's log-probs from a forward of it alone, 0 where its loss mask is 0."""
    out = []
    with torch.no_grad():
        for sample in samples:
            logits = model(input_ids=sample.input_ids[None]).logits
            logprobs, _ = sampled_token_logprobs(logits, sample.input_ids[None], temperature)
            out.append(logprobs[0] * sample.loss_mask)
    return out


@pytest.mark.parametrize(
    ("update", "loss"),
    [
        (UpdateConfig(micro_batch_size=4, min_shared_tokens=8), LossConfig()),  # shared-prefix packs
        (UpdateConfig(micro_batch_size=3, min_shared_tokens=8), LossConfig(kl_coef=0.1)),
        (UpdateConfig(micro_batch_size=1, shared_prefix=False), LossConfig()),  # one sample a micro batch
        (UpdateConfig(micro_batch_size=4, min_shared_tokens=8, ppo_epochs=2), LossConfig()),
        (UpdateConfig(micro_batch_size=4, min_shared_tokens=8, mini_batches=3), LossConfig(tis_cap=2.0)),
    ],
)
def test_the_trainer_log_probs_the_update_keeps_are_those_of_the_weights_it_started_from(
    update: UpdateConfig, loss: LossConfig
) -> None:
    """Whatever the packing (shared-prefix packs of trees and flat groups, plain micro batches), the
    log-probs the update hands back are a plain forward's of each sample under the starting weights (lr is
    not 0: the weights move during the update), at the sampling temperature, 0 where nothing is trained."""
    samples = tree_and_flat()
    model = tiny_model()
    expected = plain_logprobs(model, samples, 0.7)
    reference = tiny_model(seed=3) if loss.kl_coef > 0 else None
    optimizer, scheduler = make_optimizer(model, OptimConfig(lr=1e-2))
    result = ppo_update_and_logprobs(
        model, optimizer, scheduler, samples, PAD_ID, loss, update, ref_model=reference, temperature=0.7
    )
    assert result.metrics["tokens"] > 0 and len(result.logprobs) == len(samples)
    for index, (kept, plain) in enumerate(zip(result.logprobs, expected, strict=True)):
        assert kept is not None and kept.shape == plain.shape, index
        assert torch.allclose(kept, plain, atol=1e-5), index
    moved = plain_logprobs(model, samples, 0.7)
    assert not torch.allclose(moved[0], expected[0], atol=1e-3)  # the update did move the weights


def test_later_mini_batches_keep_no_trainer_log_probs() -> None:
    """Without TIS, the samples of mini batches after the first run their first forward after an optimiser
    step: the update keeps nothing for them rather than log-probs of other weights."""
    samples = tree_and_flat()
    model = tiny_model()
    expected = plain_logprobs(model, samples, 1.0)
    optimizer, scheduler = make_optimizer(model, OptimConfig(lr=1e-2))
    update = UpdateConfig(micro_batch_size=4, min_shared_tokens=8, mini_batches=2)
    result = ppo_update_and_logprobs(model, optimizer, scheduler, samples, PAD_ID, LossConfig(), update)
    first = (len(samples) + 1) // 2
    assert all(kept is None for kept in result.logprobs[first:])
    for kept, plain in zip(result.logprobs[:first], expected[:first], strict=True):
        assert kept is not None and torch.allclose(kept, plain, atol=1e-5)


def windowed_samples(group: str, seed: int) -> list[TrainSample]:
    """A group of three episodes as a context window plays them (`rollout.context`): turns 0-1 one segment,
    then each later turn a segment of its own whose whole prompt starts with the group's first prompt."""
    prompt = torch.randint(1, VOCAB, (FIRST_PROMPT,), generator=torch.Generator().manual_seed(seed)).tolist()
    out = []
    for member in range(3):
        played = episode(group, prompt, member, 4)
        turns = list(played.turns)
        for index in (2, 3):  # a new segment: the first prompt, then the window's shown turns, re-sent
            shown = (*turns[index - 1].completion_ids, *turns[index].prompt_ids)
            turns[index] = dataclasses.replace(turns[index], prompt_ids=(*prompt, *shown), segment=index - 1)
        windowed = dataclasses.replace(played, turns=tuple(turns))
        out.extend(episode_to_samples(windowed, [0.5 - member, 1.0, -0.25 * member, 0.75], 500))
    return out


def test_segments_of_a_context_window_share_the_first_prompt_and_update_as_unshared() -> None:
    samples = windowed_samples("a", seed=1) + windowed_samples("bb", seed=2)
    assert len(samples) == 18  # 2 groups x 3 episodes x 3 segments
    update = UpdateConfig(micro_batch_size=3, min_shared_tokens=8)
    packs = local_packs(samples, update, SINGLE_PROCESS)
    assert any(pack.shared == FIRST_PROMPT - 1 and len(pack.indices) > 1 for pack in packs)
    plain = run(samples, dataclasses.replace(update, shared_prefix=False))
    assert_equal_updates(run(samples, update), plain)


@pytest.mark.parametrize(
    ("loss", "micro_batch_size", "shared"),
    [
        (LossConfig(), 4, True),
        (LossConfig(kl_coef=0.1, entropy_coef=0.01), 4, True),
        (LossConfig(entropy_coef=0.01, aggregation="seq_mean_token_mean"), 2, False),
        (LossConfig(tis_cap=1.5), 3, True),
    ],
)
def test_the_fused_head_update_equals_the_whole_logits_one(
    loss: LossConfig, micro_batch_size: int, shared: bool
) -> None:
    """`update.fused_head` (no [B, L, vocab] logits) on flat groups and trees, the prefix's own logits
    included: the same loss metrics and gradients as projecting whole logits."""
    samples = tree_and_flat()
    update = UpdateConfig(micro_batch_size=micro_batch_size, min_shared_tokens=8, shared_prefix=shared)
    whole = run(samples, update, loss)
    assert_equal_updates(run(samples, dataclasses.replace(update, fused_head=True), loss), whole)


@pytest.mark.parametrize("lora", [False, True])
def test_recomputing_the_mlps_keeps_the_shared_update_and_its_gradients(lora: bool) -> None:
    """`update.recompute_mlp` on flat groups and trees, shared, with KL and entropy and the fused head: the
    same loss metrics and gradients as keeping the MLPs' activations."""
    samples = tree_and_flat()
    update = UpdateConfig(micro_batch_size=4, min_shared_tokens=8, fused_head=True)
    loss = LossConfig(kl_coef=0.1, entropy_coef=0.01)
    kept = run(samples, update, loss, lora=lora)
    assert_equal_updates(run(samples, update, loss, lora=lora, recompute=True), kept)


def test_the_fused_head_reaches_the_head_under_lora_and_puts_it_back() -> None:
    samples = two_groups()
    update = UpdateConfig(min_shared_tokens=8)
    assert_equal_updates(
        run(samples, dataclasses.replace(update, fused_head=True), lora=True), run(samples, update, lora=True)
    )
    model = tiny_model()
    head = model.get_output_embeddings()
    optimizer, scheduler = make_optimizer(model, OptimConfig(lr=1e-2))
    ppo_update(
        model,
        optimizer,
        scheduler,
        samples,
        PAD_ID,
        LossConfig(),
        dataclasses.replace(update, fused_head=True),
    )
    assert model.get_output_embeddings() is head
