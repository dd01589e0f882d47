"""What a sandbox is and returns: the `Sandbox` protocol, `ExecResult`, the per-exec log record, and pure
output truncation.

What this is: plain data, a structural protocol and pure functions shared by every sandbox backend. What this
is not: a backend (see `agentrl/sandbox/docker.py`); nothing here touches Docker.

Output is capped at both ends: `OutputCapture` keeps at most `limit` head bytes and `limit` tail bytes of a
stream while it arrives (so a command printing gigabytes costs the host a few KiB), and `truncate_output`
turns what was kept into text of at most `limit` bytes plus a marker naming how many bytes were dropped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol, Self


@dataclass(frozen=True)
class ExecResult:
    """The outcome of one command in a sandbox; `stdout`/`stderr` are already truncated."""

    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool
    oom: bool
    duration_s: float
    truncated: bool


class Sandbox(Protocol):
    """What every sandbox backend offers; expected failures of a command are fields of `ExecResult`."""

    def exec(
        self,
        cmd: list[str] | str,
        timeout: float | None = None,
        stdin: str | None = None,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> ExecResult: ...

    def write_file(self, path: str, content: str | bytes) -> None: ...

    def read_file(self, path: str) -> str: ...

    def fork(self) -> Sandbox: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class ExecLogEntry:
    """One line of a sandbox's exec log (docs/sandbox.md item 15)."""

    command: tuple[str, ...]
    exit_code: int
    duration_s: float
    truncated_bytes: int
    timed_out: bool
    oom: bool


def truncation_marker(dropped_bytes: int) -> str:
    return f"\n[... {dropped_bytes} bytes truncated ...]\n"


def truncate_output(text: str, limit: int) -> tuple[str, bool]:
    """Keep the first and last `limit // 2` bytes (UTF-8) of `text`, with a marker between; pure."""
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text, False
    head, tail = _split(data, limit, len(data))
    return _join(head, tail, len(data) - len(head) - len(tail)), True


def _split(data: bytes, limit: int, total: int) -> tuple[bytes, bytes]:
    head_size = limit // 2
    tail_size = limit - head_size
    return data[:head_size], (data[total - tail_size :] if tail_size else b"")


def _join(head: bytes, tail: bytes, dropped: int) -> str:
    # errors="replace": a cut may fall inside a multi-byte character
    return head.decode("utf-8", "replace") + truncation_marker(dropped) + tail.decode("utf-8", "replace")


class OutputCapture:
    """Accumulates one output stream while keeping only a bounded head and tail."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.total = 0
        self._head = bytearray()
        self._tail = bytearray()

    @classmethod
    def from_parts(cls, limit: int, head: bytes, tail: bytes, total: int) -> OutputCapture:
        """A capture that saw `total` bytes and kept `head` and `tail` (as another capture of the same
        `limit` would have, e.g. the exec channel's server inside the container)."""
        capture = cls(limit)
        capture.total = total
        capture._head = bytearray(head[:limit])
        capture._tail = bytearray(tail[-limit:] if limit else b"")
        return capture

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.limit - len(self._head)
        if room > 0:
            self._head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self._tail += chunk
            del self._tail[: max(0, len(self._tail) - self.limit)]

    def result(self) -> tuple[str, int]:
        """(text of at most `limit` bytes plus marker, number of bytes dropped)."""
        head = bytes(self._head[: self.limit // 2])
        if self.total <= self.limit:
            return bytes(self._head).decode("utf-8", "replace"), 0
        # the last bytes of the stream: `_tail` alone once anything was dropped, else head and tail touch
        end = (
            bytes(self._tail)
            if self.total > len(self._head) + len(self._tail)
            else bytes(self._head + self._tail)
        )
        tail_size = self.limit - len(head)
        tail = end[len(end) - tail_size :] if tail_size else b""
        dropped = self.total - len(head) - len(tail)
        return _join(head, tail, dropped), dropped


class StartClose:
    """`with` / `async with` over blocking `start()` and `close()` (the async forms run them in a thread)."""

    def start(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        await asyncio.to_thread(self.start)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.to_thread(self.close)
