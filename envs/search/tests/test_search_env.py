"""SearchEnv without Docker: the Env contract, both formats, scoring, penalties, state keys, the runner's
validity rule. Every path here ends before a search would reach the retriever sandboxes."""

from __future__ import annotations

from pathlib import Path

import pytest
from agentrl_search.env import SearchEnv, gold_answers, state_key
from agentrl_search.formats import (
    ANSWER_TOOL,
    Move,
    answer_prefix,
    few_shot_examples,
    parse_tags,
    parse_tool_call,
    results_text,
)
from agentrl_search.scoring import best_score, contains_answer, exact_match, normalize_answer, token_f1

from agentrl.agent.parsing import parse_turn
from agentrl.agent.rollout import is_invalid
from agentrl.config import load_config
from agentrl.env import check_env, make
from agentrl.errors import ConfigError, EnvError, EpisodeOver
from agentrl.types import Action, ToolCall

TASK = {
    "id": "t-1",
    "question": "What is the default value of the width parameter of textwrap.wrap?",
    "answer": "70",
    "answers": ["70"],
}
LOOKUP = {"id": "t-2", "question": "Which function ...?", "answers": ["wrap", "textwrap.wrap"]}


@pytest.fixture
def repo_root_cwd(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(Path(__file__).resolve().parents[3])  # configs/ is read relative to the checkout


def call(name: str, **arguments: object) -> Action:
    return Action(text="", tool_calls=(ToolCall(name=name, arguments=arguments),))


def started(task: dict[str, object] = TASK, **kwargs: object) -> SearchEnv:
    env = SearchEnv(**kwargs)  # type: ignore[arg-type]
    env.reset(seed=0, options={"task": task})
    return env


# --- scoring: SQuAD normalisation, EM and F1, checked against hand-computed values ---


@pytest.mark.parametrize(
    ("text", "normal"),
    [
        ("The Answer!", "answer"),
        ("  an  apple,  a day ", "apple day"),
        ("utf-8", "utf8"),
        ("Theory of everything", "theory of everything"),  # "the" only as a whole word
        ("A.B", "ab"),
        ("", ""),
    ],
)
def test_normalize_answer(text: str, normal: str) -> None:
    assert normalize_answer(text) == normal


def test_exact_match_ignores_case_punctuation_and_articles() -> None:
    assert exact_match("The 'UTF-8'.", "utf-8") == 1.0
    assert exact_match("utf 8", "utf-8") == 0.0  # punctuation is removed, not turned into a space
    assert exact_match("70", "seventy") == 0.0


def test_token_f1_by_hand() -> None:
    # prediction tokens {default, width, 70}, gold {70}: precision 1/3, recall 1 -> F1 = 0.5
    assert token_f1("the default width 70", "70") == pytest.approx(0.5)
    # "new york city" vs "york city hall": 2 common, P = R = 2/3
    assert token_f1("New York City", "York City Hall") == pytest.approx(2 / 3)
    assert token_f1("paris", "london") == 0.0
    assert token_f1("", "") == 1.0 and token_f1("a", "x") == 0.0  # "a" normalises to nothing


def test_best_score_takes_the_best_gold_answer() -> None:
    assert best_score("textwrap.wrap", ["wrap", "textwrap.wrap"], "em") == 1.0
    assert best_score("wrap text", ["wrap", "textwrap.wrap"], "f1") == pytest.approx(2 / 3)
    assert best_score("x", [], "em") == 0.0


def test_contains_answer_needs_whole_words() -> None:
    assert contains_answer("the default width is 70 columns", "70")
    assert not contains_answer("width 700", "70")


# --- parsing the two formats ---


def test_tags_first_complete_block_decides_and_the_last_answer_is_scored() -> None:
    assert parse_tags("think <search> json dumps </search> <answer>x</answer>") == Move(
        "search", "json dumps"
    )
    assert parse_tags("<answer>71</answer> no wait <answer>70</answer>") == Move("answer", "70")
    assert parse_tags("<search>unterminated").kind == "invalid"
    assert parse_tags("<answer>  </answer>").kind == "invalid"
    assert parse_tags("plain prose").kind == "invalid"


def test_tool_calls_parse_with_their_argument() -> None:
    assert parse_tool_call(call("search", query="json dumps")) == Move("search", "json dumps")
    assert parse_tool_call(call("answer", text=70)) == Move("answer", "70")
    for bad in (call("answer"), call("search", q="x"), call("lookup", query="x"), call("answer", text="")):
        assert parse_tool_call(bad).kind == "invalid"
    assert parse_tool_call(Action(text="<tool_call>{", parse_error="unterminated")).text == "unterminated"


def test_results_text_shows_titles_clipped_passages_and_information_tags() -> None:
    hits = [{"title": "json.dumps", "text": "x" * 50}, {"title": "json.dump", "text": "short"}]
    tags = results_text(hits, "tags", 20)
    assert tags.startswith("<information>Doc 1 (Title: json.dumps) " + "x" * 17 + "...\nDoc 2")
    assert tags.endswith("</information>") and "<information>" not in results_text(hits, "tools", 20)
    assert "No results" in results_text([], "tags", 20)


def test_answer_prefix_is_how_a_final_turn_begins() -> None:
    assert answer_prefix("tags") == "<answer>"
    final_call = '<tool_call>\n{"name": "answer", "arguments": {"text": "70"}}\n</tool_call>'
    assert final_call.startswith(answer_prefix("tools"))
    assert parse_turn(final_call).tool_calls[0] == ToolCall("answer", {"text": "70"})


@pytest.mark.parametrize("format", ["tags", "tools"])
def test_examples_are_two_solved_episodes_ending_on_an_answer(format: str) -> None:
    examples = few_shot_examples(format, 300)  # type: ignore[arg-type]
    assert [m["role"] for m in examples] == ["user", "assistant", "tool", "assistant"] * 2
    last = examples[-1]
    if format == "tags":
        assert parse_tags(last["content"]) == Move("answer", "getuser")
        assert examples[2]["content"].startswith("<information>Doc 1 (Title: webbrowser.open)")
    else:
        assert last["tool_calls"] == [{"name": "answer", "arguments": {"text": "getuser"}}]


# --- the env ---


@pytest.mark.parametrize("format", ["tags", "tools"])
def test_check_env_passes(format: str) -> None:
    check_env(SearchEnv(format=format), options={"task": TASK})  # type: ignore[arg-type]


def test_registered_id_makes_a_search_env_with_per_format_tools() -> None:
    tags = make("agentrl/Search-v0", top_k=5)
    assert isinstance(tags, SearchEnv) and tags.top_k == 5 and tags.tools == ()
    tools = make("agentrl/Search-v0", format="tools")
    assert [spec["function"]["name"] for spec in tools.tools] == ["search", "answer"]
    assert ANSWER_TOOL in tools.tools


def test_bad_kwargs_are_config_errors() -> None:
    for kwargs in ({"format": "xml"}, {"reward": "bleu"}, {"top_k": 0}, {"sandbox": {"imagee": "x"}}):
        with pytest.raises(ConfigError):
            SearchEnv(**kwargs)  # type: ignore[arg-type]


def test_reset_shows_the_question_and_draws_a_builtin_task_without_one() -> None:
    observation, info = started().reset(options={"task": TASK})
    assert observation.startswith("Question: What is the default value of the width parameter")
    assert "<search>" in observation and info["task_id"] == "t-1"
    first, second = SearchEnv(), SearchEnv()
    assert first.reset(seed=3)[0] == second.reset(seed=3)[0] != first.reset(seed=4)[0]


@pytest.mark.parametrize(
    ("answer", "em", "f1"), [("70", 1.0, 1.0), ("width 70", 0.0, 2 / 3), ("80", 0.0, 0.0)]
)
def test_an_answer_ends_the_episode_with_em_or_f1(answer: str, em: float, f1: float) -> None:
    for reward, expected in (("em", em), ("f1", f1)):
        result = started(reward=reward).step(Action(text=f"<answer>{answer}</answer>"))
        assert result.terminated and result.reward == pytest.approx(expected)
        assert result.info["em"] == em and result.info["f1"] == pytest.approx(f1)
        assert result.info["success"] is (em == 1.0) and result.info["invalid"] is False


def test_any_gold_answer_counts() -> None:
    assert started(LOOKUP).step(Action(text="<answer>textwrap.wrap</answer>")).reward == 1.0
    assert gold_answers({"answer": "x"}) == ["x"] and gold_answers({"answers": ["a", " "]}) == ["a"]


def test_the_tools_format_answers_with_a_call() -> None:
    env = started(format="tools")
    assert env.step(call("answer", text="70")).reward == 1.0


def test_format_errors_are_penalised_invalid_and_show_the_format() -> None:
    env = started(format_penalty=0.25)
    result = env.step(Action(text="The answer is 70."))
    assert result.reward == -0.25 and result.info["invalid"] is True and not result.terminated
    assert "<search>keywords</search>" in result.observation
    tools = started(format="tools").step(Action(text="70"))
    assert tools.info["invalid"] is True and '"name": "search"' in tools.observation


def test_the_step_budget_truncates() -> None:
    env = started(max_steps=3)
    results = [env.step(Action(text="hmm")) for _ in range(3)]
    assert [r.truncated for r in results] == [False, False, True]
    with pytest.raises(EpisodeOver, match="call reset"):
        env.step(Action(text="hmm"))


def test_invalid_tasks_are_rejected() -> None:
    with pytest.raises(EnvError, match="'question'"):
        SearchEnv().reset(options={"task": {"id": "x", "answer": "1"}})
    with pytest.raises(EnvError, match="'answers'"):
        SearchEnv().reset(options={"task": {"id": "x", "question": "q?", "answers": []}})


def test_state_key_is_the_set_of_passages_seen() -> None:
    seen = frozenset({"py:a", "py:b"})
    assert state_key("t", seen, None) == state_key("t", frozenset(["py:b", "py:a"]), None)
    assert state_key("t", seen, None) != state_key("t", frozenset({"py:a"}), None)
    assert state_key("t", seen, None) != state_key("u", seen, None)
    assert state_key("t", seen, "The 70.") == state_key("t", seen, "70") != state_key("t", seen, None)
    env = started()
    before = env.reset(options={"task": TASK})[1]["state_key"]
    assert env.step(Action(text="nonsense")).info["state_key"] == before  # nothing new was seen


def test_the_runner_counts_a_good_tag_turn_as_valid() -> None:
    env = started()
    text = "<answer>70</answer>"
    action = parse_turn(text)
    assert not action.tool_calls  # the tag format has no tool call ...
    assert not is_invalid(action, env.step(action).info)  # ... and is valid because the env says so
    assert is_invalid(Action(text="x"), {})  # envs that give no verdict keep the old rule


def test_the_search_config_builds_its_env_and_measures_igpo_after_the_answer_tag(repo_root_cwd: None) -> None:
    config = load_config("search", ["credit.estimator=igpo"])
    env = make(config.env.id, **dict(config.env.kwargs))
    assert isinstance(env, SearchEnv) and env.format == "tags" and env.reward_kind == "em"
    assert config.credit.answer.answer_format.prefix == answer_prefix("tags")
    assert "</search>" in config.sampling.stop and "</answer>" in config.sampling.stop
    assert config.tasks.suite == "search-pydoc"
