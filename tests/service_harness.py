"""Test helpers for the env service on a real loopback port, and an agent that only guesses numbers.

What this is: `serving(settings)`, the real app under uvicorn on a free 127.0.0.1 port in a thread of the
test process (so a test can look at its sessions and metrics, and envs a test module registers are served),
and `GuessingEngine`, an `Engine` over the byte tokenizer whose every turn guesses one fixed number, with an
optional hook run before each generation (e.g. to stop a replica mid-episode). What this is not: a test file.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence

import uvicorn
from fastapi import FastAPI
from tiny_tokenizers import byte_tokenizer

from agentrl.agent.engines.base import Completion, SamplingParams
from agentrl.agent.parsing import format_tool_call
from agentrl.service import ServiceSettings, create_app
from agentrl.service.embedded import LOOPBACK, free_loopback_port
from agentrl.types import ToolCall


@contextlib.contextmanager
def serving(settings: ServiceSettings) -> Iterator[tuple[str, FastAPI]]:
    """The service's base URL and app, served until the block ends."""
    app = create_app(settings)
    port = free_loopback_port()
    server = uvicorn.Server(uvicorn.Config(app, host=LOOPBACK, port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    try:
        yield f"http://{LOOPBACK}:{port}", app
    finally:
        server.should_exit = True
        thread.join(timeout=10)


class GuessingEngine:
    """Every completion is one `guess` tool call of `number`; `before_generate` runs first when given."""

    def __init__(self, number: int, before_generate: Callable[[], None] | None = None) -> None:
        self.tokenizer = byte_tokenizer(pad=False)
        self.text = format_tool_call(ToolCall("guess", {"number": number}))
        self.before_generate = before_generate
        self.calls = 0

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> Completion:
        self.calls += 1
        if self.before_generate is not None:
            self.before_generate()
        ids = self.tokenizer.encode(self.text, add_special_tokens=False) + [self.tokenizer.eos_token_id]
        return Completion(tuple(ids), tuple(-0.5 for _ in ids), self.text, "stop", True)
