"""A background writer for the run store, so the rollout loop never waits on the database for long.

What this is: one daemon thread draining a bounded queue of writes; each queued batch (one call to
`record_episodes`, `record_metrics` or `record_task_draws`) is committed in its own transaction, so a crash
loses at most what is still in flight. A failed write is never dropped silently: the first failure is
raised as `StoreError` from the next call to the writer (`record_*`, `flush` or `close`). `flush()` waits
until everything queued so far is committed; `close()` flushes and stops the thread. Use it as a context
manager. With `token_pieces` (`tokenizer_pieces(engine.tokenizer)`), each turn is stored with the text of its
completion tokens, decoded on this thread so the rollout loop does not pay for it.

What this is not: a buffer that survives a crash, or a way to read (readers go to `repository.py`
directly; under SQLite WAL they do not block this writer).
"""

from __future__ import annotations

import copy
import queue
import threading
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any

from agentrl.errors import StoreError
from agentrl.store.repository import (
    Split,
    Store,
    TokenPieces,
    TurnLogprobs,
    record_episodes,
    record_metrics,
    record_task_draws,
)
from agentrl.types import Episode

QUEUE_SIZE = 64  # batches, not rows; a full queue makes the caller wait, which bounds memory

Job = Callable[[], None]


def tokenizer_pieces(tokenizer: Any) -> TokenPieces:
    """The `TokenPieces` of a Hugging Face tokenizer: each token decoded on its own, special tokens kept. A
    character split across tokens shows as U+FFFD in each piece, and a SentencePiece tokenizer may drop the
    leading space of a lone token; joined, the pieces are close to, not always equal to, the turn's text.
    The writer's thread decodes with its own copy: a fast tokenizer used from two threads at once can fail
    with "Already borrowed" while the engine's thread encodes."""
    own = copy.deepcopy(tokenizer)

    def pieces(ids: Sequence[int]) -> list[str]:
        return list(
            own.batch_decode(
                [[token] for token in ids], skip_special_tokens=False, clean_up_tokenization_spaces=False
            )
        )

    return pieces


class StoreWriter:
    """Queue store writes and commit them on a background thread. `token_pieces` (settable once the engine
    and its tokenizer exist) decodes each turn's completion tokens for the store."""

    def __init__(
        self, store: Store, queue_size: int = QUEUE_SIZE, token_pieces: TokenPieces | None = None
    ) -> None:
        self.store = store
        self.token_pieces = token_pieces
        self._jobs: queue.Queue[Job | None] = queue.Queue(maxsize=queue_size)
        self._failures: list[str] = []
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._drain, name="agentrl-store-writer", daemon=True)
        self._thread.start()

    def record_episodes(
        self,
        run_id: str,
        step: int,
        split: Split,
        episodes: Sequence[Episode],
        advantages: Sequence[Sequence[float]] | None = None,
        trainer_logprobs: Sequence[TurnLogprobs] | None = None,
    ) -> None:
        """Queue `repository.record_episodes` for these episodes (one transaction), with the trainer's
        log-probs of their turns where given."""
        if not episodes:
            return
        frozen = list(advantages) if advantages is not None else None
        trainer = list(trainer_logprobs) if trainer_logprobs is not None else None
        played, pieces = list(episodes), self.token_pieces
        self._submit(
            lambda: record_episodes(self.store, run_id, step, split, played, frozen, pieces, trainer)
        )

    def record_metrics(self, run_id: str, step: int, metrics: Mapping[str, float]) -> None:
        """Queue `repository.record_metrics` (one transaction)."""
        snapshot = dict(metrics)
        self._submit(lambda: record_metrics(self.store, run_id, step, snapshot))

    def record_task_draws(self, run_id: str, draws: Sequence[Mapping[str, object]]) -> None:
        """Queue `repository.record_task_draws` (one transaction)."""
        if not draws:
            return
        snapshot = [dict(draw) for draw in draws]
        self._submit(lambda: record_task_draws(self.store, run_id, snapshot))

    def flush(self) -> None:
        """Block until every write queued so far is committed; raise the first failure if any."""
        self._jobs.join()
        self._raise_failures()

    def close(self) -> None:
        """Flush, stop the thread, and raise the first failure if any. Closing twice is harmless."""
        if not self._closed:
            self._closed = True
            self._jobs.put(None)
            self._thread.join()
        self._raise_failures()

    def __enter__(self) -> StoreWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if exc is None:
            self.close()
            return
        try:
            self.close()
        except StoreError as store_error:
            # Do not mask the error already propagating; attach the store's failure to it instead.
            exc.add_note(f"also, the run store writer failed: {store_error}")

    def _submit(self, job: Job) -> None:
        if self._closed:
            raise StoreError("this StoreWriter is closed; open a new one to keep writing")
        self._raise_failures()
        self._jobs.put(job)

    def _drain(self) -> None:
        while True:
            job = self._jobs.get()
            try:
                if job is None:
                    return
                job()
            except Exception as exc:  # noqa: BLE001 — every failure is reported to the caller, never dropped
                with self._lock:
                    self._failures.append(f"{type(exc).__name__}: {exc}")
            finally:
                self._jobs.task_done()

    def _raise_failures(self) -> None:
        with self._lock:
            failures, self._failures = self._failures, []
        if failures:
            more = f" (and {len(failures) - 1} more failed writes)" if len(failures) > 1 else ""
            raise StoreError(f"a background store write failed: {failures[0]}{more}")
