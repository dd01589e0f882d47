"""Workspace state keys: a short hex digest of a sandbox's files, for `info["state_key"]` (GiGPO, SALT, ...).

What this is: `workspace_state_key(sandbox)`: one exec inside the sandbox (through its exec channel, a
socket round trip plus a Python start) that walks a workdir and hashes, in a fixed order, every entry's
relative path, its mode (file type and permission bits) and its content (regular files), link target
(symlinks) or nothing (directories). Entries whose name matches an ignore glob are skipped with everything
under them. Tracked and untracked files count alike; for a git checkout the working tree is what is hashed.

What this is not: a snapshot (nothing is stored, two states with the same key are assumed equal) or a key
of a text observation (that is `agentrl.env.text_state_key`, which web envs feed their page text to).
Not hashed, on purpose: modification times, owners, empty-file vs missing-file of ignored names, and — with
the default ignore list — `.git` itself, so commits, branch switches and index refreshes that leave the
working tree unchanged keep the key (they are noise far more often than progress). Files unreadable by the
sandbox user count by path and mode only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agentrl.errors import ConfigError, StateKeyError
from agentrl.sandbox.base import ExecResult, Sandbox


@dataclass(frozen=True)
class WorkspaceKeyConfig:
    """What `workspace_state_key` hashes.

    root:      the folder to digest inside the sandbox (the sandbox workdir by default).
    ignore:    fnmatch globs on entry names; a matching file or folder is skipped with all it contains.
    length:    hex characters of the returned key.
    timeout_s: wall clock of the digest exec.
    python:    the interpreter inside the sandbox image.
    """

    root: str = "/work"
    ignore: tuple[str, ...] = ("__pycache__", "*.pyc", "*.pyo", ".pytest_cache", ".mypy_cache", ".git")
    length: int = 16
    timeout_s: float = 10.0
    python: str = "python3"

    def __post_init__(self) -> None:
        if not 8 <= self.length <= 64:
            raise ConfigError(f"state key length must be between 8 and 64 hex characters, got {self.length}")


# Runs inside the sandbox as `python3 -I -S -c DIGEST_SCRIPT ROOT GLOB...`; prints one sha256 hex digest.
# Records are NUL-separated (paths cannot contain NUL), in os.walk order with names sorted.
DIGEST_SCRIPT = r"""
import fnmatch, hashlib, os, stat, sys
root, globs = sys.argv[1], sys.argv[2:]
total = hashlib.sha256(b"root\0" if os.path.isdir(root) else b"missing\0")
for folder, dirs, files in os.walk(root):
    dirs[:] = sorted(d for d in dirs if not any(fnmatch.fnmatchcase(d, g) for g in globs))
    for name in sorted(dirs + [f for f in files if not any(fnmatch.fnmatchcase(f, g) for g in globs)]):
        path = os.path.join(folder, name)
        try:
            info = os.lstat(path)
        except OSError:
            continue
        total.update(b"%s\0%o\0" % (os.fsencode(os.path.relpath(path, root)), info.st_mode))
        try:
            if stat.S_ISLNK(info.st_mode):
                total.update(os.fsencode(os.readlink(path)))
            elif stat.S_ISREG(info.st_mode):
                content = hashlib.sha256()
                with open(path, "rb") as handle:
                    for chunk in iter(lambda: handle.read(1 << 20), b""):
                        content.update(chunk)
                total.update(content.digest())
        except OSError:
            total.update(b"unreadable")
        total.update(b"\0")
print(total.hexdigest())
"""

_DIGEST = re.compile(r"[0-9a-f]{64}")


def digest_command(config: WorkspaceKeyConfig) -> list[str]:
    """The argv of the digest exec."""
    return [config.python, "-I", "-S", "-c", DIGEST_SCRIPT, config.root, *config.ignore]


def parse_digest(result: ExecResult, config: WorkspaceKeyConfig) -> str:
    """The key from the digest exec's result; `StateKeyError` if it failed."""
    digest = result.stdout.strip()
    if result.exit_code != 0 or result.timed_out or not _DIGEST.fullmatch(digest):
        raise StateKeyError(
            f"workspace digest of {config.root} failed (exit {result.exit_code}, timed out "
            f"{result.timed_out}): {result.stderr.strip()[-300:] or digest[:100]!r}; check that "
            f"{config.python!r} exists in the sandbox image"
        )
    return digest[: config.length]


def workspace_state_key(sandbox: Sandbox, config: WorkspaceKeyConfig = WorkspaceKeyConfig()) -> str:
    """A short hex key of everything under `config.root` in `sandbox` (see the module docstring)."""
    return parse_digest(sandbox.exec(digest_command(config), timeout=config.timeout_s), config)
