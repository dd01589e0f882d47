"""Where a run finds its config and tasks: `--config PATH`, then ./configs/ and ./tasks/, then what installed
env plugins ship in their package's data/ folder; and the first-party plugins ship theirs."""

from __future__ import annotations

import argparse
import importlib.metadata
from pathlib import Path

import pytest
import yaml

from agentrl.cli.runconfig import config_arguments, task_name
from agentrl.config import load_config, resolve_config_path
from agentrl.env.plugin_data import PLUGIN_GROUP, installed_plugins, shipped_suite
from agentrl.errors import ConfigError
from agentrl.tasks import load_tasks, resolve_suite

REPO = Path(__file__).resolve().parents[2]
FIRST_PARTY = {  # plugin -> (configs, suites) it ships
    "calc": ({"calc", "calc-chain"}, {"calc", "calc-chain"}),
    "maze": ({"maze"}, {"maze/level1", "maze/level2", "maze/level3"}),
    "search": ({"search"}, {"search-pydoc"}),
    "swebench": ({"swebench"}, {"swebench-local"}),
    "web": ({"web-miniwob", "web-shop"}, {"web-miniwob", "web-shop"}),
}
CONFIG = {"env": {"id": "agentrl/Calc-v0"}, "tasks": {"suite": "fake"}, "train": {"steps": 7}}


def make_plugin(root: Path, package: str, configs: dict[str, dict], suites: dict[str, str]) -> None:
    """An importable package `package` under `root` with data/configs/*.yaml and data/tasks/<suite>/."""
    data = root / package / "data"
    (data / "configs").mkdir(parents=True)
    (root / package / "__init__.py").write_text("")
    for name, config in configs.items():
        (data / "configs" / f"{name}.yaml").write_text(yaml.safe_dump(config))
    for suite, line in suites.items():
        (data / "tasks" / suite).mkdir(parents=True)
        (data / "tasks" / suite / "train.jsonl").write_text(line + "\n")


@pytest.fixture
def fake_plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Two installed plugins (entry points faked) in tmp_path/site, and an empty working directory."""
    site = tmp_path / "site"
    make_plugin(
        site, "agentrl_fake", {"fake": CONFIG}, {"fake": '{"id": "from-plugin"}', "nested/one": '{"id": "n"}'}
    )
    make_plugin(site, "agentrl_other", {"other": {**CONFIG, "train": {"steps": 9}}}, {})
    monkeypatch.syspath_prepend(str(site))
    points = [
        importlib.metadata.EntryPoint("fake", "agentrl_fake", PLUGIN_GROUP),
        importlib.metadata.EntryPoint("other", "agentrl_other.sub", PLUGIN_GROUP),
    ]
    monkeypatch.setattr(
        importlib.metadata, "entry_points", lambda *, group: points if group == PLUGIN_GROUP else []
    )
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


def test_a_plugin_lists_what_it_ships_without_being_imported(fake_plugins: Path) -> None:
    import sys

    plugins = {plugin.name: plugin for plugin in installed_plugins()}
    assert set(plugins["fake"].configs()) == {"fake"} and plugins["fake"].suites() == ["fake", "nested/one"]
    assert set(plugins["other"].configs()) == {"other"} and plugins["other"].suites() == []
    assert "agentrl_fake" not in sys.modules and "agentrl_other" not in sys.modules


def test_from_an_empty_folder_the_plugins_config_and_tasks_are_used(fake_plugins: Path) -> None:
    config = load_config("fake")
    assert config.task == "fake" and config.train.steps == 7
    assert load_tasks(config.tasks.root, config.tasks.suite, "train") == [{"id": "from-plugin"}]
    assert load_tasks("tasks", "nested/one", "train") == [{"id": "n"}]


def test_the_working_directory_wins_over_the_plugin(fake_plugins: Path) -> None:
    (fake_plugins / "configs").mkdir()
    (fake_plugins / "configs" / "fake.yaml").write_text(yaml.safe_dump({**CONFIG, "train": {"steps": 3}}))
    (fake_plugins / "tasks" / "fake").mkdir(parents=True)
    (fake_plugins / "tasks" / "fake" / "train.jsonl").write_text('{"id": "local"}\n')
    assert resolve_config_path("fake") == Path("configs/fake.yaml")
    assert load_config("fake").train.steps == 3
    assert resolve_suite("tasks", "fake") == Path("tasks/fake")
    assert load_tasks("tasks", "fake", "train") == [{"id": "local"}]


def test_a_config_file_anywhere_wins_over_both(fake_plugins: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere" / "mine.yaml"
    elsewhere.parent.mkdir()
    elsewhere.write_text(yaml.safe_dump({**CONFIG, "train": {"steps": 5}}))
    (fake_plugins / "configs").mkdir()
    (fake_plugins / "configs" / "fake.yaml").write_text(yaml.safe_dump(CONFIG))
    assert load_config("fake", config_path=elsewhere).train.steps == 5
    assert load_config("mine", ["train.steps=6"], config_path=elsewhere).task == "mine"
    with pytest.raises(ConfigError, match="--config .*no such file"):
        load_config("fake", config_path=tmp_path / "missing.yaml")


def test_an_unknown_task_names_the_local_and_shipped_configs(fake_plugins: Path) -> None:
    (fake_plugins / "configs").mkdir()
    (fake_plugins / "configs" / "mine.yaml").write_text(yaml.safe_dump(CONFIG))
    with pytest.raises(ConfigError, match="no config for task 'nope'") as caught:
        load_config("nope")
    assert "fake, mine, other" in str(caught.value) and "--config PATH" in str(caught.value)
    with pytest.raises(ConfigError, match="task suite 'nope' not found"):
        load_tasks("tasks", "nope", "train")


def test_a_suite_name_cannot_leave_the_plugins_data_folder(fake_plugins: Path) -> None:
    assert shipped_suite("../configs") is None and shipped_suite("/etc") is None


def test_two_plugins_shipping_one_name_is_an_error_naming_both(
    fake_plugins: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_plugin(tmp_path / "site", "agentrl_twin", {"fake": CONFIG}, {"fake": '{"id": "twin"}'})
    points = [
        importlib.metadata.EntryPoint("fake", "agentrl_fake", PLUGIN_GROUP),
        importlib.metadata.EntryPoint("twin", "agentrl_twin", PLUGIN_GROUP),
    ]
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda *, group: points)
    with pytest.raises(ConfigError, match="several installed env plugins ship a config named 'fake'.*twin"):
        load_config("fake")
    with pytest.raises(ConfigError, match="ship the task suite 'fake'"):
        load_tasks("tasks", "fake", "train")


def test_train_and_eval_take_a_config_path_or_a_task_name() -> None:
    by_path = argparse.Namespace(task=None, config=Path("some/where/mine.yaml"))
    assert task_name(by_path) == "mine"
    assert config_arguments(by_path) == ["--task", "mine", "--config", "some/where/mine.yaml"]
    assert task_name(argparse.Namespace(task="calc", config=None)) == "calc"
    with pytest.raises(ConfigError, match="--task NAME .* or --config PATH"):
        task_name(argparse.Namespace(task=None, config=None))


def test_every_first_party_plugin_ships_its_configs_and_suites() -> None:
    plugins = {plugin.name: plugin for plugin in installed_plugins()}
    for name, (configs, suites) in FIRST_PARTY.items():
        plugin = plugins[name]
        assert set(plugin.configs()) == configs, name
        assert set(plugin.suites()) == suites, name
        assert plugin.distribution == f"agentrl-env-{name}" and plugin.version


def test_from_any_folder_a_first_party_task_trains_on_the_repositorys_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("calc", "maze", "web-shop"):
        shipped = resolve_config_path(name)
        assert shipped.read_text() == (REPO / "configs" / f"{name}.yaml").read_text()
        config = load_config(name)
        train = load_tasks(config.tasks.root, config.tasks.suite, config.tasks.train_split)
        assert train == load_tasks(REPO / "tasks", config.tasks.suite, config.tasks.train_split)
