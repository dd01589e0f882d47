"""Pydantic models of the HTTP contract: requests, responses and the one error body.

What this is: the only place pydantic is used; every model forbids unknown fields so a typo in a client
is a 422, not a silently ignored key. What this is not: the core types (`agentrl/types.py`); the
handlers convert at the boundary (`ActionModel.to_action`). The error body and the action's JSON are
defined once for client and service in `agentrl.wire`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agentrl.types import Action
from agentrl.wire import action_from_json


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ToolCallModel(_Strict):
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class ActionModel(_Strict):
    text: str
    tool_calls: list[ToolCallModel] = Field(default_factory=list)
    parse_error: str | None = None

    def to_action(self) -> Action:
        return action_from_json(self.model_dump())


class CreateSessionRequest(_Strict):
    env_id: str
    task: dict[str, Any]
    seed: int = Field(ge=0, lt=2**63)
    """Non-negative, as Gymnasium and NumPy seeding require; a 64-bit range keeps it storable."""


class CreateSessionResponse(_Strict):
    session_id: str
    observation: str
    info: dict[str, Any]
    tools: list[dict[str, Any]]
    examples: list[dict[str, Any]]


class StepRequest(_Strict):
    action: ActionModel


class StepResponse(_Strict):
    observation: str
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]


class ForkRequest(_Strict):
    n: int = Field(default=1, ge=1)
    """Copies to make; at most the service's `max_forks` (a larger n is a 422)."""


class ForkedSessionModel(_Strict):
    """One fork: a new session in its parent's state, ready to step (see `agentrl.types.ForkedSession`)."""

    session_id: str
    state_key: Any
    turn_index: int


class ForkResponse(_Strict):
    sessions: list[ForkedSessionModel]


class EnvInfoModel(_Strict):
    id: str
    entry_point: str
    tools: list[dict[str, Any]]
    plugin: str | None


class EnvListResponse(_Strict):
    envs: list[EnvInfoModel]


class HealthResponse(_Strict):
    status: str
    sessions: int


class WsRequest(_Strict):
    """One request inside a frame of the WebSocket wire (`/v1/ws`); see `agentrl.service.routers.ws`.

    `body` is a `CreateSessionRequest` for "create", a `StepRequest` for "step" and a `ForkRequest` for
    "fork"; "step", "fork" and "close" name their `session_id`. The reply carries the same `id`."""

    id: int = Field(ge=0)
    op: Literal["create", "step", "fork", "close"]
    session_id: str | None = None
    body: dict[str, Any] | None = None


def describe_problems(errors: Sequence[Any]) -> str:
    """pydantic's validation errors as one line, `where: what; where: what`, for an InvalidRequest message."""
    return "; ".join(describe_problem(error) for error in errors)


def describe_problem(error: Any) -> str:
    where = ".".join(str(part) for part in error.get("loc", ()))
    return f"{where}: {error.get('msg', 'invalid')}"
