"""State keys: the pure text key (`agentrl.env.state`), and the workspace digest script
(`agentrl.sandbox.state`) run on the host through a local stand-in for a sandbox's exec (the real sandbox is
exercised in tests/integration/test_state_keys_docker.py)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

import pytest

from agentrl.env import TextKeyConfig, normalise_text, text_state_key
from agentrl.errors import ConfigError, SandboxError, StateKeyError
from agentrl.sandbox.base import ExecResult
from agentrl.sandbox.state import WorkspaceKeyConfig, parse_digest, workspace_state_key

# --- text observations ---


def test_whitespace_and_timings_do_not_change_the_key() -> None:
    first = "===== 3 passed in 0.03s =====\nexit code 0"
    second = "=====  3 passed in 1.27s =====\n\nexit code 0  "
    assert text_state_key(first) == text_state_key(second)
    assert normalise_text(first) == "===== 3 passed in # ===== exit code 0"


def test_counts_and_words_still_matter() -> None:
    assert text_state_key("3 passed in 0.1s") != text_state_key("2 passed in 0.1s")
    assert text_state_key("exit code 0") != text_state_key("exit code 1")


def test_addresses_clock_times_and_timestamps_are_volatile() -> None:
    text = "<obj at 0x7f3a12> at 12:01:02 on 2026-11-23T16:28:37.123Z took 12 ms"
    assert normalise_text(text) == "<obj at #> at # on # took #"


def test_volatile_patterns_and_length_are_configurable() -> None:
    config = TextKeyConfig(volatile=(r"pid=\d+",), placeholder="<pid>", length=8)
    assert normalise_text("pid=123 took 1s", config) == "<pid> took 1s"
    key = text_state_key("pid=123", config)
    assert len(key) == 8 and key == text_state_key("pid=9", config)
    assert int(key, 16) >= 0


@pytest.mark.parametrize("bad", [{"length": 4}, {"volatile": ("(",)}])
def test_bad_text_config_is_refused(bad: dict) -> None:
    with pytest.raises(ConfigError):
        TextKeyConfig(**bad)


# --- workspace digest script, run locally ---


class LocalExec:
    """Runs argv on the host, as the sandbox would inside its container."""

    def exec(
        self,
        cmd: list[str] | str,
        timeout: float | None = None,
        stdin: str | None = None,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> ExecResult:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        return ExecResult(done.returncode, done.stdout, done.stderr, False, False, 0.0, False)


def key(root: Path, **options: object) -> str:
    return workspace_state_key(LocalExec(), WorkspaceKeyConfig(root=str(root), **options))  # type: ignore[arg-type]


def make_tree(root: Path) -> None:
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_text("x = 1\n")
    (root / "README").write_text("hello\n")


def test_same_files_same_key_and_content_path_mode_matter(tmp_path: Path) -> None:
    make_tree(tmp_path / "a")
    make_tree(tmp_path / "b")
    base = key(tmp_path / "a")
    assert len(base) == 16 and base == key(tmp_path / "b")
    (tmp_path / "b" / "pkg" / "mod.py").write_text("x = 2\n")
    changed = key(tmp_path / "b")
    assert changed != base
    (tmp_path / "b" / "pkg" / "mod.py").write_text("x = 1\n")
    assert key(tmp_path / "b") == base
    os.chmod(tmp_path / "b" / "README", 0o755)
    assert key(tmp_path / "b") != base
    os.chmod(tmp_path / "b" / "README", 0o644)
    (tmp_path / "b" / "README").rename(tmp_path / "b" / "README.md")
    assert key(tmp_path / "b") != base


def test_ignored_names_do_not_change_the_key(tmp_path: Path) -> None:
    make_tree(tmp_path)
    base = key(tmp_path)
    (tmp_path / "pkg" / "__pycache__").mkdir()
    (tmp_path / "pkg" / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"\x00\x01")
    (tmp_path / "stray.pyc").write_bytes(b"\x02")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "index").write_bytes(b"\x03")
    assert key(tmp_path) == base
    assert key(tmp_path, ignore=()) != base


def test_empty_folders_and_symlinks_count(tmp_path: Path) -> None:
    make_tree(tmp_path)
    base = key(tmp_path)
    (tmp_path / "empty").mkdir()
    with_folder = key(tmp_path)
    (tmp_path / "link").symlink_to("pkg/mod.py")
    assert len({base, with_folder, key(tmp_path)}) == 3


def test_a_missing_root_differs_from_an_empty_one(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    assert key(tmp_path / "empty") != key(tmp_path / "missing")


def test_a_failed_digest_raises_a_sandbox_error() -> None:
    config = WorkspaceKeyConfig()
    with pytest.raises(StateKeyError, match="python3") as caught:
        parse_digest(ExecResult(127, "", "python3: not found", False, False, 0.0, False), config)
    assert isinstance(caught.value, SandboxError)
    with pytest.raises(StateKeyError):
        parse_digest(ExecResult(0, "garbage\n", "", False, False, 0.0, False), config)
    assert parse_digest(ExecResult(0, "ab" * 32 + "\n", "", False, False, 0.0, False), config) == "ab" * 8
