"""Each turn's sampled tokens (store revision 0008) and the trainer's log-probs of them (0009): the packed
log-probs, the strip the episode page draws from them (with the importance ratios against the run's clip
range, or why there are none), the real store writer storing a real tokenizer's pieces and the reader
returning them, the migrations' downgrade and upgrade (old rows read as "not recorded"), and the episode
page's strips over the synthetic sample run."""

from __future__ import annotations

import math
import re
import sqlite3
from pathlib import Path

import pytest
from alembic import command
from fastapi.testclient import TestClient
from tiny_tokenizers import byte_tokenizer

from agentrl.store import pages
from agentrl.store.migrations import alembic_config, current, head
from agentrl.store.repository import (
    close_store,
    create_run,
    load_episodes,
    open_store,
    pack_logprobs,
    unpack_logprobs,
)
from agentrl.store.writer import StoreWriter, tokenizer_pieces
from agentrl.types import Action, Episode, Turn
from agentrl.ui.app import create_app
from agentrl.ui.sample import record_sample_run
from agentrl.ui.tokens import band, clip_range, no_trainer_reason, token_strip


def test_log_probs_pack_to_four_bytes_each_and_back() -> None:
    values = [-0.5, -0.03125, -12.0, 0.0]  # exact in float32
    blob = pack_logprobs(values)
    assert len(blob) == 16 and unpack_logprobs(blob) == values
    assert unpack_logprobs(pack_logprobs([-0.1]))[0] == pytest.approx(-0.1, abs=1e-7)


def test_the_strip_bands_tokens_and_lists_the_least_likely() -> None:
    assert [band(p) for p in (1.0, 0.9, 0.6, 0.3, 0.1, 0.01)] == [0, 0, 1, 2, 3, 4]
    logprobs = [math.log(p) for p in (0.99, 0.4, 0.02, 0.95, 0.4)]
    strip = token_strip({"pieces": ["a", "\n", "", "<b>", "c"], "logprobs": logprobs}, lowest=2)
    spans = re.findall(r'<span( class="p\d")? title="([^"]+)">([^<]*)</span>', strip.spans)
    assert [(shade, text) for shade, _, text in spans] == [
        ("", "a"),  # the likeliest band is not shaded
        (' class="p2"', "↵\n"),
        (' class="p4"', "∅"),
        ("", "&lt;b&gt;"),  # pieces are escaped
        (' class="p2"', "c"),
    ]
    assert spans[1][1] == "#1 log-prob -0.916 p 0.400"
    assert [(t.position, t.piece, t.band) for t in strip.lowest] == [
        (2, "∅", 4),
        (1, "↵\n", 2),
    ]  # ties: first
    assert strip.count == 5 and strip.unlikely == 3 and strip.mean_logprob == pytest.approx(sum(logprobs) / 5)
    assert strip.missing == ""
    likely = token_strip({"pieces": ["x"], "logprobs": [-0.01]})
    assert likely.lowest == ()  # a token at p >= 0.9 is never listed as unlikely


def test_the_strip_says_what_the_store_lacks() -> None:
    assert token_strip(None).count == 0 and "not recorded" in token_strip(None).missing
    no_text = token_strip({"pieces": None, "logprobs": [-1.0, -2.0]})
    assert re.findall(r">(#\d)</span>", no_text.spans) == ["#0", "#1"]
    assert "without a tokenizer" in no_text.missing
    short = token_strip({"pieces": ["a"], "logprobs": [-1.0, -2.0]})
    assert short.count == 1 and short.missing == "1 token texts for 2 log-probs: the first 1 shown"


def test_the_strip_shows_each_tokens_ratio_and_boxes_those_outside_the_clip_range() -> None:
    sampler = [-0.1, -0.5, -1.0, -0.3]
    trainer = [-0.1, -0.5 + math.log(1.3), -1.0 + math.log(0.7), -0.3 + math.log(1.1)]
    strip = token_strip(
        {"pieces": ["a", "b", "c", "d"], "logprobs": sampler, "trainer": trainer}, clip=(0.8, 1.28)
    )
    titles = re.findall(r'<span(?: class="([^"]+)")? title="([^"]+)">', strip.spans)
    title = "#1 sampler log-prob -0.500 p 0.607 · trainer log-prob -0.238 · ratio 1.300"
    assert titles[1] == ("p1 clip", title)
    assert [classes for classes, _ in titles] == ["", "p1 clip", "p2 clip", "p1"]
    ratios = strip.ratios
    assert ratios is not None and strip.no_trainer == ""
    assert ratios.outside == 2 and ratios.count == 4 and ratios.share_outside == 0.5
    assert ratios.max_ratio == pytest.approx(1.3)
    assert ratios.mean_abs_log_ratio == pytest.approx((math.log(1.3) - math.log(0.7) + math.log(1.1)) / 4)
    assert [(k.position, k.piece, round(k.ratio, 3)) for k in ratios.clipped] == [
        (2, "c", 0.7),
        (1, "b", 1.3),
    ]
    wider = token_strip({"pieces": None, "logprobs": sampler, "trainer": trainer}, clip=(0.5, 1.5))
    assert wider.ratios is not None and wider.ratios.outside == 0 and "clip" not in wider.spans


def test_without_trainer_log_probs_the_strip_says_why() -> None:
    sampler_only = token_strip({"pieces": ["a"], "logprobs": [-0.1], "trainer": None}, no_trainer="because")
    assert sampler_only.ratios is None and sampler_only.no_trainer == "because"
    assert "trainer" not in sampler_only.spans
    wrong = token_strip({"pieces": ["a"], "logprobs": [-0.1], "trainer": [-0.1, -0.2]})
    assert wrong.ratios is None and wrong.no_trainer == "2 trainer log-probs for 1 sampled tokens: not shown"
    assert token_strip(None).no_trainer == "no sampler log-probs to compare with"


def test_the_clip_range_and_the_reason_come_from_the_runs_config() -> None:
    assert clip_range({}) == pytest.approx((0.8, 1.28))  # LossConfig's defaults
    assert clip_range({"loss": {"clip_low": 0.1, "clip_high": 0.1}}) == pytest.approx((0.9, 1.1))
    train = {"split": "train", "parent_uid": None, "branch_turn": None}
    assert no_trainer_reason({**train, "split": "eval"}, 0, [None], {}).startswith("an evaluation episode")
    assert no_trainer_reason(train, 0, [None], {}).startswith("not trained on")
    branch = {**train, "parent_uid": "p", "branch_turn": 1}
    assert no_trainer_reason(branch, 0, [0.5, 0.5], {}).startswith("a copy of its parent's turn")
    assert no_trainer_reason(branch, 1, [0.5, 0.0], {}).startswith("left out of the update")  # own turns: 0
    assert no_trainer_reason(train, 1, [0.0, 0.0], {}).startswith("left out of the update")
    other = no_trainer_reason(train, 1, [0.0, 0.0], {"loss": {"kl_coef": 0.1}})  # a KL term trains them all
    assert other.startswith("none in the store: recorded before store revision 0009")
    assert "mini batch" not in other
    later = no_trainer_reason(train, 0, [1.0], {"update": {"mini_batches": 2}})
    assert "outside the update's first mini batch (update.mini_batches=2" in later
    assert "mini batch" not in no_trainer_reason(
        train, 0, [1.0], {"update": {"mini_batches": 2}, "loss": {"tis_cap": 2.0}}
    )


def played_turn(index: int, text: str, tokenizer: object) -> Turn:
    ids = tuple(tokenizer.encode(text, add_special_tokens=False))  # type: ignore[attr-defined]
    logprobs = tuple(-0.25 * (position + 1) for position in range(len(ids)))
    return Turn(index, (1, 2), ids, logprobs, text, Action(text), "obs", 0.0, False, f"s{index + 1}")


def test_the_writer_stores_pieces_and_log_probs_and_the_reader_returns_them(tmp_path: Path) -> None:
    """Through the real background writer with a real (byte-level) tokenizer; a turn with no sampled
    tokens stores NULL, and only `pages.load_episode` reads the token columns."""
    tokenizer = byte_tokenizer()
    store = open_store(f"sqlite:///{tmp_path}/runs.db")
    run_id = create_run(store, "tokens", "t", {})
    turns = (played_turn(0, "hi <x>", tokenizer), Turn(1, (3,), (), (), "", Action(""), "o", 0.0, True, "s2"))
    episode = Episode("e", "env", "t", "g", 0, turns, "terminated", "s0")
    with StoreWriter(store, token_pieces=tokenizer_pieces(tokenizer)) as writer:
        writer.record_episodes(run_id, 1, "train", [episode], [[0.5, -0.5]])
    [stored] = load_episodes(store, run_id)
    assert "tokens" not in stored["turns"][0]  # the whole-run reader (and the export) leave them out
    loaded = pages.load_episode(store, run_id, stored["id"])
    assert loaded is not None
    first, second = (turn["tokens"] for turn in loaded["turns"])
    assert first["pieces"] == ["h", "i", " ", "<", "x", ">"]
    assert first["logprobs"] == [-0.25, -0.5, -0.75, -1.0, -1.25, -1.5]
    assert second == {"pieces": None, "logprobs": None, "trainer": None}
    assert first["trainer"] is None  # recorded without the trainer's
    page = pages.load_episode(store, run_id, stored["id"], first_turn=1, turn_limit=1)
    assert page is not None and [t["index"] for t in page["turns"]] == [1]
    close_store(store)


def test_migration_0008_downgrades_and_upgrades_and_old_turns_read_as_not_recorded(tmp_path: Path) -> None:
    database = tmp_path / "runs.db"
    url = f"sqlite:///{database}"
    store = open_store(url)
    run_id = record_sample_run(store)
    with store.engine.begin() as connection:
        command.downgrade(alembic_config(connection), "0007")
    close_store(store)
    with sqlite3.connect(database) as conn:
        columns = [row[1] for row in conn.execute("pragma table_info(turns)")]
    assert "token_pieces" not in columns and "token_logprobs" not in columns
    store = open_store(url)  # upgrades to the head again: the columns come back empty
    assert current(store.engine) == head() == "0011"
    episode = next(e for e in load_episodes(store, run_id) if e["num_turns"])
    loaded = pages.load_episode(store, run_id, episode["id"])
    assert loaded is not None and all(
        t["tokens"] == {"pieces": None, "logprobs": None, "trainer": None} for t in loaded["turns"]
    )
    close_store(store)
    with TestClient(create_app(url)) as http:
        text = http.get(f"/runs/{run_id}/episodes/{episode['id']}").text
    assert "sampled tokens: not recorded: stored before revision 0008" in text
    assert 'class="tokens"' not in text


def test_migration_0009_downgrades_and_upgrades_and_old_turns_say_why_they_have_no_ratio(
    tmp_path: Path,
) -> None:
    database = tmp_path / "runs.db"
    url = f"sqlite:///{database}"
    store = open_store(url)
    run_id = record_sample_run(store)
    with store.engine.begin() as connection:
        command.downgrade(alembic_config(connection), "0008")
    close_store(store)
    with sqlite3.connect(database) as conn:
        columns = [row[1] for row in conn.execute("pragma table_info(turns)")]
    assert "trainer_logprobs" not in columns and "token_logprobs" in columns
    store = open_store(url)  # upgrades to the head again: the column comes back empty
    assert current(store.engine) == head() == "0011"
    trained = next(e for e in load_episodes(store, run_id) if e["num_turns"] == 3)  # had trainer log-probs
    loaded = pages.load_episode(store, run_id, trained["id"])
    assert loaded is not None
    assert all(t["tokens"]["trainer"] is None and t["tokens"]["logprobs"] for t in loaded["turns"])
    close_store(store)
    with TestClient(create_app(url)) as http:
        text = http.get(f"/runs/{run_id}/episodes/{trained['id']}").text
    assert (
        "no trainer log-probs, so no importance ratio: none in the store: recorded before store revision 0009"
        in text
    )
    assert "ratio-summary" not in text and "sampler log-prob" not in text


def test_the_episode_page_shows_each_turns_token_strip(tmp_path: Path) -> None:
    """The sample run's episode with an invalid turn: a foldable strip per turn on the page, each token
    with its log-prob and probability as its title, the least likely tokens listed (the invalid turn's
    first token, made unlikely by the sample); with the sample's made-up trainer log-probs, each token's
    ratio in its title, the one outside the clip range boxed and listed, and the turn's ratio summary."""
    url = f"sqlite:///{tmp_path}/runs.db"
    store = open_store(url)
    run_id = record_sample_run(store)
    episode = next(e for e in load_episodes(store, run_id) if e["num_turns"] == 3)
    close_store(store)
    with TestClient(create_app(url)) as http:
        text = http.get(f"/runs/{run_id}/episodes/{episode['id']}").text
        paged = http.get(f"/runs/{run_id}/episodes/{episode['id']}", params={"page": 2, "limit": 1}).text
    strips = re.findall(r'<details class="token-strip" id="tokens-(\d+)">', text)
    assert strips == ["0", "1", "2"]
    invalid = text[text.index('id="tokens-1"') :]
    invalid = invalid[: invalid.index("</details>")]
    assert "sampled tokens: 6, mean log-prob" in invalid and "no importance ratio" not in invalid
    assert (
        "trainer vs sampler: mean |log ratio| 0.0680, max ratio 1.486, 16.7% outside the clip range "
        "[0.80, 1.28]" in invalid  # the clip range: LossConfig's defaults (the sample's config has none)
    )
    assert (
        '<span class="p3 clip" title="#0 sampler log-prob -2.530 p 0.080 · trainer log-prob -2.134 · '
        'ratio 1.486">The </span>' in invalid
    )
    assert (
        '<span title="#1 sampler log-prob -0.030 p 0.970 · trainer log-prob -0.032 · ratio 0.998">' in invalid
    )
    clipped = invalid[invalid.index('<table class="clipped-tokens">') :]
    assert re.findall(r"<tr><td><code>([^<]*)</code></td><td class=\"num\">(\d+)</td>", clipped) == [
        ("The ", "0")
    ]
    assert "&lt;|im_end|&gt;</span>" in invalid
    table = invalid[invalid.index('<table class="lowest-tokens">') : invalid.index("clipped-tokens")]
    lowest = re.findall(r"<tr><td><code>([^<]*)</code></td><td class=\"num\">(\d+)</td>", table)
    assert lowest == [("The ", "0"), ("s 42", "3")]
    assert re.findall(r'id="tokens-(\d+)"', paged) == ["1"]  # only the page's turns carry token data
